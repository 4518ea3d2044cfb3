"""Hub datasets through the real ``datasets`` and ``HfFileSystem`` against the fake Hub.

``HF_ENDPOINT`` is read when huggingface_hub is imported, so the listing runs in a subprocess
pointed at the fake Hub (tests/fakes/fake_hub.py), which counts the file bytes it sends. The
numbering is checked against ``datasets``' own streaming reader, which is what assigned
``doc_id`` and ``doc_index`` before the ranged reader existed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from llm_ocr.bench.finevision import write_finevision
from llm_ocr.sources.parquet import FOOTER_GUESS
from tests.conftest import REPO
from tests.fakes.fake_hub import FakeHub
from tests.sources.sources_testdata import png

CARD = """---
configs:
- config_name: docs
  data_files:
  - split: train
    path: docs/*.parquet
- config_name: books
  data_files:
  - split: train
    path: books/*.parquet
---
"""

LIST = r"""
import hashlib, json, sys
from llm_ocr.options import DatasetOptions
from llm_ocr.sources import InputError, plan_inputs
for job in sys.argv[1:]:  # URL,CONFIG,NUM_SHARDS,SHARD
    url, config, num_shards, shard = job.split(",")
    try:
        plan = plan_inputs([url], dataset=DatasetOptions(config=config or None))
    except InputError as e:
        print(json.dumps({"error": str(e)}))
        continue
    docs = plan.documents(int(num_shards), int(shard))
    docs = [(d.doc_id, d.index, d.source, [hashlib.sha1(i).hexdigest() for i in d.images]) for d in docs]
    print(json.dumps({"docs": docs, "read": plan.stats.bytes}))
"""

# The reference is what `datasets` itself reads. Once it has printed, the process leaves without
# interpreter teardown: an Arrow pool thread still holding Python objects can abort a process at
# exit ("terminate called without an active exception", exit -6: seen once in a CI run; the cause
# is docs/results.md's note on status, apache/arrow#34314), and that is datasets' exit, not a read.
REFERENCE = r"""
import hashlib, json, os, sys, datasets
ds = datasets.load_dataset(sys.argv[1], sys.argv[2] or None, split="train", streaming=True)
ds = ds.cast_column("images", datasets.List(datasets.Image(decode=False)))
print(json.dumps([[hashlib.sha1(i["bytes"]).hexdigest() for i in row["images"]] for row in ds]), flush=True)
os._exit(0)
"""


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[FakeHub, int]]:
    root = tmp_path_factory.mktemp("hub")
    docs = write_finevision(root / "docs", files=6, rows=(3, 8), row_group_rows=2, image_side=(40, 90), seed=3)
    books = write_finevision(root / "books", files=2, rows=(2, 3), row_group_rows=2, image_side=(20, 30), seed=4)
    files = {f"{sub}/{p.name}": p.read_bytes() for sub, ds in (("docs", docs), ("books", books)) for p in ds.files}
    with FakeHub() as server:
        server.create("tester/fv", files={"README.md": CARD.encode(), **files}, private=False)
        server.create("tester/scans", files={"pages/a.png": png("red"), "pages/b.png": png("blue")}, private=False)
        yield server, docs.total_bytes


def run(hub: FakeHub, code: str, *args: str, home: Path) -> list:
    """One JSON value per line the code prints (one per job given)."""
    env = {**os.environ, "HF_ENDPOINT": hub.url, "HF_HOME": str(home), "PYTHONPATH": str(REPO)}
    env.pop("HF_TOKEN", None)  # public repos: no token needed
    command = [sys.executable, "-c", code, *args]
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=180, cwd=str(REPO))
    assert result.returncode == 0, result.stderr[-3000:]
    return [json.loads(line) for line in result.stdout.strip().splitlines()]


def test_a_hub_config_numbers_rows_as_datasets_streams_them_and_a_shard_reads_its_share(
    hub: tuple[FakeHub, int], tmp_path: Path
) -> None:
    server, dataset_bytes = hub
    (reference,) = run(server, REFERENCE, "tester/fv", "docs", home=tmp_path)
    server.served.clear()
    # One shard of 1, then the three shards of 3 in the plain OWNER/NAME form (with --config).
    jobs = ["hf://datasets/tester/fv,docs,1,0"] + [f"tester/fv,docs,3,{shard}" for shard in range(3)]
    everything, *shards = run(server, LIST, *jobs, home=tmp_path)
    docs = everything["docs"]
    assert [d[0] for d in docs] == [f"tester/fv/docs/train/{i:08d}" for i in range(len(reference))]
    assert [d[1] for d in docs] == list(range(len(reference)))
    assert [d[3] for d in docs] == reference
    assert {d[2] for d in docs} == {"hf://datasets/tester/fv"}
    assert [d for shard in shards for d in shard["docs"]] == docs  # each row once, in order
    # What the readers counted is what the Hub sent, and only the config's files were read.
    assert sum(job["read"] for job in [everything, *shards]) == sum(server.served.values())
    assert all(path.startswith("docs/") for path in server.served if path.endswith(".parquet"))
    assert everything["read"] <= 1.2 * dataset_bytes
    for shard in shards:
        assert shard["docs"] and shard["read"] <= 1.5 * dataset_bytes / 3 + 6 * FOOTER_GUESS, (shard["read"], dataset_bytes)


def test_a_hub_repo_that_is_not_parquet_is_streamed_and_a_missing_split_is_named(
    hub: tuple[FakeHub, int], tmp_path: Path
) -> None:
    server, _ = hub
    jobs = ["hf://datasets/tester/scans,,1,0", "hf://datasets/tester/scans,,2,1", "hf://datasets/tester/fv,nope,1,0"]
    listed, shard, missing = run(server, LIST, *jobs, home=tmp_path)
    assert [d[0] for d in listed["docs"]] == ["tester/scans/default/train/00000000", "tester/scans/default/train/00000001"]
    assert len({d[3][0] for d in listed["docs"]}) == 2  # the two images, as bytes
    assert [d[1] for d in shard["docs"]] == [1]  # streamed whole, every other row kept
    assert "nope" in missing["error"] and "tester/fv" in missing["error"]


ROW = r"""
import hashlib, json, sys
from llm_ocr.sources.listing import InputError, dataset_row
from llm_ocr.sources.rerender import SourcePages
for doc_id in sys.argv[2:]:
    try:
        images = [hashlib.sha1(i).hexdigest() for i in dataset_row(sys.argv[1], doc_id).images]
    except InputError as e:
        images = str(e)
    with SourcePages(doc_id, sys.argv[1]) as pages:  # as Fields (--from images) and the report do
        views = []
        while (view := pages.page(len(views) + 1)).data is not None:
            views.append(view)
        print(json.dumps({"images": images, "pages": len(views), "note": view.note}))
"""


def test_a_hub_row_is_read_again_by_its_doc_id_for_fields_and_the_report(hub: tuple[FakeHub, int], tmp_path: Path) -> None:
    server, _ = hub
    (reference,) = run(server, REFERENCE, "tester/fv", "docs", home=tmp_path)
    wanted = [i for i, images in enumerate(reference) if images][:2] + [len(reference)]
    *found, beyond = run(server, ROW, "hf://datasets/tester/fv", *(f"tester/fv/docs/train/{i:08d}" for i in wanted),
                         home=tmp_path)
    for number, row in zip(wanted, found):
        assert row["images"] == reference[number] and row["pages"] == len(reference[number]), row
    assert beyond["pages"] == 0 and "has no row" in beyond["images"] and "has no row" in beyond["note"], beyond
