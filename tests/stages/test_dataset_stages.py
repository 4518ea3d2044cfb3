"""A Parquet dataset served over HTTP through every stage, each with its own --num-shards.

Extract shards the rows by row groups (llm_ocr.sharding) and each shard downloads only its
share; Describe and Assemble, with other shard counts, still take every document exactly once;
``llm-ocr run`` assembles exactly the documents it extracted; and an output begun by an older
llm-ocr (round-robin rows, no rule recorded) keeps its rule, so resuming it duplicates nothing.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from llm_ocr.bench.file_server import CountingFileServer
from llm_ocr.bench.finevision import GeneratedDataset, write_finevision
from llm_ocr.sources.parquet import FOOTER_GUESS
from llm_ocr.testing import SimulatedServer
from tests.conftest import read_stage
from tests.docs import make_corpus
from tests.stages.common import stage

RULE = Path("_state") / "input-sharding.json"


@pytest.fixture(scope="module")
def fv(tmp_path_factory: pytest.TempPathFactory) -> GeneratedDataset:
    root = tmp_path_factory.mktemp("dataset-stages")
    return write_finevision(root / "fv", files=16, rows=(2, 6), row_group_rows=1, image_side=(60, 120), seed=5)


@pytest.fixture(scope="module")
def served(fv: GeneratedDataset) -> Iterator[CountingFileServer]:
    with CountingFileServer(fv.folder.parent) as server:
        yield server


@pytest.fixture(scope="module")
def server() -> Iterator[SimulatedServer]:
    with SimulatedServer("--instant") as sim:
        yield sim


def doc_ids(fv: GeneratedDataset) -> list[str]:
    return [f"fv/default/train/{i:08d}" for i in range(len(fv.images))]


def once(rows: list[dict]) -> Counter:
    return Counter(r["doc_id"] for r in rows)


def test_three_stages_with_three_shard_counts_take_every_document_once(
    fv: GeneratedDataset, served: CountingFileServer, server: SimulatedServer, tmp_path: Path
) -> None:
    out, url = tmp_path / "out", served.url + "fv/"
    footers = sum(min(FOOTER_GUESS, p.stat().st_size) for p in fv.files)
    for shard in range(3):
        served.reset()
        # Static shards: run alone, a shard would read the free groups of the shards not yet
        # started (work groups, docs/stragglers.md), and this test is of each shard's own share.
        assert stage("extract", out, server, url, "--num-shards", "3", "--shard-index", str(shard), "--no-steal").returncode == 0
        sent = served.counts().bytes
        assert sent <= 1.5 * fv.total_bytes / 3 + footers, (shard, sent, fv.total_bytes)
    pages = {(f"fv/default/train/{i:08d}", p + 1) for i, images in enumerate(fv.images) for p in range(len(images))}
    extracted = read_stage(out, "extract")
    assert sorted((r["doc_id"], r["page"]) for r in extracted) == sorted(pages)  # every page once
    # Extract shard s wrote one run of consecutive documents (whole row groups, not 1 row in 3).
    for shard in range(3):
        parts = (out / "extract").glob(f"part-{shard:05d}-of-00003-*.parquet")
        indexes = sorted({i for part in parts for i in pq.read_table(part, columns=["doc_index"])["doc_index"].to_pylist()})
        assert indexes and indexes == list(range(indexes[0], indexes[-1] + 1))
    for shard in range(2):
        assert stage("describe", out, server, "--num-shards", "2", "--shard-index", str(shard)).returncode == 0
    for shard in range(5):
        assert stage("assemble", out, None, "--num-shards", "5", "--shard-index", str(shard)).returncode == 0
    described = read_stage(out, "describe")
    assert sorted((r["doc_id"], r["page"]) for r in described) == sorted(pages)
    documents = read_stage(out, "assemble")
    assert sorted(once(documents).items()) == [(d, 1) for d in doc_ids(fv)]
    assert all(d["num_pages"] == len(fv.images[d["doc_index"]]) for d in documents)


def test_run_assembles_exactly_the_documents_it_extracted(
    fv: GeneratedDataset, served: CountingFileServer, server: SimulatedServer, tmp_path: Path
) -> None:
    out, url = tmp_path / "out", served.url + "fv/"
    for shard in range(2):
        # Static shards (run alone, shard 0 would also read shard 1's free groups).
        assert stage("run", out, server, url, "--num-shards", "2", "--shard-index", str(shard), "--no-steal").returncode == 0
        extracted = {r["doc_id"] for r in read_stage(out, "extract")}
        assembled = {r["doc_id"] for r in read_stage(out, "assemble")}
        # After shard 0 alone: the documents it extracted are all assembled, and no others.
        assert assembled == extracted
    assert sorted(once(read_stage(out, "assemble")).items()) == [(d, 1) for d in doc_ids(fv)]
    assert (out / RULE).read_text() == '{"datasets": "row-groups"}'


def test_an_output_begun_with_round_robin_rows_keeps_that_rule(
    fv: GeneratedDataset, served: CountingFileServer, server: SimulatedServer, tmp_path: Path
) -> None:
    out, url = tmp_path / "out", served.url + "fv/"
    # Shard 0 of 2 as an older llm-ocr wrote it: even rows, and no rule on record.
    (out / RULE).parent.mkdir(parents=True)
    (out / RULE).write_text('{"datasets": "rows"}')
    assert stage("extract", out, server, url, "--num-shards", "2", "--shard-index", "0", "--no-steal").returncode == 0
    assert {r["doc_index"] % 2 for r in read_stage(out, "extract")} == {0}
    (out / RULE).unlink()
    result = stage("extract", out, server, url, "--num-shards", "2", "--shard-index", "1")
    assert result.returncode == 0 and "begun by an older llm-ocr" in result.stderr
    pages = sorted((f"fv/default/train/{i:08d}", p + 1) for i, images in enumerate(fv.images) for p in range(len(images)))
    assert sorted((r["doc_id"], r["page"]) for r in read_stage(out, "extract")) == pages  # none twice, none lost
    assert (out / RULE).read_text() == '{"datasets": "rows"}'


def test_a_folder_of_files_shard_downloads_only_its_own_files(server: SimulatedServer, tmp_path: Path) -> None:
    names = sorted(make_corpus(tmp_path / "site" / "docs", documents=7, pages=1))
    with CountingFileServer(tmp_path / "site") as files:
        for shard in range(3):
            files.reset()
            out = tmp_path / "out"
            args = ("--num-shards", "3", "--shard-index", str(shard), "--no-steal")  # static shards
            assert stage("extract", out, server, files.url + "docs/", *args).returncode == 0
            read = {path for path, sent in files.counts().by_path.items() if sent and path != "docs/"}
            own = {"docs/" + name for name in names[shard::3]}  # round-robin, as always
            # Its own files, the one-byte access probe of the first file, and the look for a
            # manifest's index in the folder (docs/manifests.md: a folder holding _manifest.json
            # is a manifest), a file this folder does not have.
            assert own <= read <= own | {"docs/" + names[0], "docs/_manifest.json"}, (shard, read)
        assert sorted(r["doc_id"] for r in read_stage(out, "extract")) == names
