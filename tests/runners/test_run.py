"""``llm-ocr run``: all three stages in one process, equal to the stages run one at a time."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

from llm_ocr.testing import SimulatedServer
from tests.conftest import REPO, read_stage
from tests.docs import make_corpus
from tests.stages.common import DESCRIBE_PROMPT, bodies, documents_view, page_keys, prompt_of, stage
from tests.waiting import hold_request, wait_until, wait_until_held

PAGES = 9  # 3 documents x 3 pages
FIGURES = 6  # a chart on pages 1 and 3


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("run") / "docs"
    make_corpus(folder, documents=3, pages=3)
    return folder


@pytest.fixture(scope="module")
def server(corpus: Path) -> SimulatedServer:
    with SimulatedServer("--instant", corpus=corpus) as sim:
        yield sim


@pytest.fixture(scope="module")
def reference(corpus: Path, server: SimulatedServer) -> Path:
    """An uninterrupted ``llm-ocr run`` of the corpus."""
    out = corpus.parent / "reference"
    before = len(bodies(server))
    result = stage("run", out, server, str(corpus))
    assert result.returncode == 0, result.stderr
    # Both page stages account for every page and every document at the end of the run (pages
    # an earlier test of this module wrote count as "done earlier").
    for name in ("extract", "describe"):
        (line,) = [x for x in result.stderr.splitlines() if f"[{name} shard 1/1] pages seen" in x]
        m = re.search(r"pages seen (\d+) = ok (\d+) \+ truncated 0 \+ error 0 \+ quarantined 0 \+ done earlier (\d+); documents (\d+) ", line)
        assert m and int(m[1]) == int(m[2]) + int(m[3]) == PAGES and int(m[4]) == 3, line
    prompts = [prompt_of(b) for b in bodies(server)[before:]]
    assert prompts.count(DESCRIBE_PROMPT) == FIGURES and len(prompts) == PAGES + FIGURES
    return out


def stage_view(out: Path, name: str) -> list[tuple]:
    """Page rows as comparable tuples (one per page, so duplicates would show)."""
    return sorted(
        (r["doc_id"], r["page"], r["status"], r["markdown"], tuple((f["id"], f["description"]) for f in r["figures"]))
        for r in read_stage(out, name)
    )


def test_run_writes_three_stages_that_datasets_loads(reference: Path, server: SimulatedServer) -> None:
    extract_rows, describe_rows = read_stage(reference, "extract"), read_stage(reference, "describe")
    assert page_keys(extract_rows) == page_keys(describe_rows) and len(extract_rows) == PAGES
    # Extract rows are what Extract alone writes: no descriptions; Describe rows have them all.
    assert all(f["description"] is None for r in extract_rows for f in r["figures"])
    assert sum(1 for r in describe_rows for f in r["figures"] if f["description"]) == FIGURES
    import datasets  # here, not at collection: about a CPU-second every test worker would pay

    for name in ("extract", "describe", "assemble"):
        ds = datasets.load_dataset("parquet", data_files=str(reference / name / "*.parquet"), split="train")
        assert len(ds) == (3 if name == "assemble" else PAGES)
        images = [f["image"] for row in ds for f in row["figures"]]
        assert len(images) == FIGURES and all(isinstance(i, Image.Image) and i.size[0] > 100 for i in images)
    documents = read_stage(reference, "assemble")
    assert {(d["status"], d["num_pages"], len(d["figures"])) for d in documents} == {("ok", 3, 2)}
    markers = sorted(p.relative_to(reference / "_state").as_posix() for p in (reference / "_state").glob("*/done-*"))
    assert markers == [f"{s}/done-00000-of-00001.json" for s in ("assemble", "describe", "extract")]
    before = len(bodies(server))
    again = stage("run", reference, server, str(reference.parent / "docs"))
    assert again.returncode == 0 and len(bodies(server)) == before  # finished: nothing resent


def test_stages_one_at_a_time_on_other_shard_counts_equal_run(
    corpus: Path, server: SimulatedServer, reference: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    for shard in range(2):
        assert stage("extract", out, server, str(corpus), "--num-shards", "2", "--shard-index", str(shard)).returncode == 0
    for shard in range(3):
        # Describe shards take the documents of the Extract shards they overlap (llm_ocr.sharding).
        assert stage("describe", out, server, "--num-shards", "3", "--shard-index", str(shard)).returncode == 0
    for shard in range(2):
        # Assemble on a shard too, CPU only (no endpoint), from the pages the Describe shards wrote.
        assert stage("assemble", out, None, "--num-shards", "2", "--shard-index", str(shard)).returncode == 0
        assembled = sorted(r["doc_index"] for r in read_stage(out, "assemble"))
        assert assembled == [i for i in range(3) if i % 2 <= shard]  # shard 0: documents 0 and 2; then 1
    assert stage_view(out, "extract") == stage_view(reference, "extract")
    assert stage_view(out, "describe") == stage_view(reference, "describe")
    assert documents_view(read_stage(out, "assemble")) == documents_view(read_stage(reference, "assemble"))
    assert len(read_stage(out, "assemble")) == 3  # each document once, by exactly one shard
    describe_parts = sorted(p.name[:19] for p in (out / "describe").glob("*.parquet"))
    assert describe_parts == [f"part-{s:05d}-of-00003" for s in range(3)]
    assemble_parts = sorted(p.name[:19] for p in (out / "assemble").glob("*.parquet"))
    assert assemble_parts == [f"part-{s:05d}-of-00002" for s in range(2)]
    markers = sorted(p.name for p in (out / "_state" / "assemble").glob("done-*"))
    assert markers == [f"done-{s:05d}-of-00002.json" for s in range(2)]


def test_run_describes_what_an_earlier_extract_left(
    corpus: Path, server: SimulatedServer, reference: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    assert stage("extract", out, server, str(corpus)).returncode == 0
    before = len(bodies(server))
    result = stage("run", out, server, str(corpus))
    assert result.returncode == 0, result.stderr
    # Both page stages account for every page and every document at the end of the run (pages
    # an earlier test of this module wrote count as "done earlier").
    for name in ("extract", "describe"):
        (line,) = [x for x in result.stderr.splitlines() if f"[{name} shard 1/1] pages seen" in x]
        m = re.search(r"pages seen (\d+) = ok (\d+) \+ truncated 0 \+ error 0 \+ quarantined 0 \+ done earlier (\d+); documents (\d+) ", line)
        assert m and int(m[1]) == int(m[2]) + int(m[3]) == PAGES and int(m[4]) == 3, line
    prompts = [prompt_of(b) for b in bodies(server)[before:]]
    assert prompts == [DESCRIBE_PROMPT] * FIGURES  # no page is sent to OCR again
    for name in ("extract", "describe"):
        assert stage_view(out, name) == stage_view(reference, name)
    assert documents_view(read_stage(out, "assemble")) == documents_view(read_stage(reference, "assemble"))


def test_resume_after_a_kill_gives_every_page_once_and_the_same_documents(
    corpus: Path, server: SimulatedServer, reference: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    with SimulatedServer("--prefill-ms", "300", "--slots", "2", corpus=corpus) as held:
        # From the sixth request on, every request is held until the kill: by then the first page
        # (its OCR and its figure's description, the first four requests at the latest: a page
        # keeps its place in flight until described) is answered, and the run can neither finish
        # first nor get further, however slow the machine.
        held_at = hold_request(held, after=5, count=PAGES + FIGURES)
        command = [
            sys.executable, "-m", "llm_ocr.cli", "run", str(corpus), "--output", str(out), "--endpoint", held.base_url,
            "--workers", "0", "--progress", "off", "--flush-interval", "0.2", "--part-rows", "2", "--max-in-flight", "2",
        ]
        process = subprocess.Popen(command, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_until_held(held, held_at, process)
            # Kill once both stages have stored something, while the run is still going.
            wait_until(lambda: list((out / "extract").glob("*.parquet")) and list((out / "describe").glob("*.parquet")),
                       "both stages stored a part", process=process)
            os.kill(process.pid, signal.SIGKILL)
        finally:
            process.wait()
    assert not (out / "_state" / "assemble").exists()
    partial_extract, partial_describe = read_stage(out, "extract"), read_stage(out, "describe")
    assert 0 < len(partial_describe) < PAGES and len(partial_extract) < PAGES
    # The rerun goes to another server: its log holds the rerun's requests only (the killed
    # run's held request is logged whenever that server notices its client is gone).
    before = len(bodies(server))
    result = stage("run", out, server, str(corpus), "--max-in-flight", "8")
    assert result.returncode == 0, result.stderr
    resent = [prompt_of(b) for b in bodies(server)[before:]]
    # Only the unfinished work was done again: OCR of the pages without an extract row, and the
    # figures of the pages without a describe row (which pages finished first depends on the
    # order they were sent in: the longest first).
    described = sum(len(r["figures"]) for r in partial_describe)
    assert resent.count(DESCRIBE_PROMPT) == FIGURES - described
    assert len(resent) - resent.count(DESCRIBE_PROMPT) == PAGES - len(partial_extract)
    for name in ("extract", "describe"):
        rows = read_stage(out, name)
        assert len(rows) == PAGES == len(set(page_keys(rows)))
        assert stage_view(out, name) == stage_view(reference, name)
    assert documents_view(read_stage(out, "assemble")) == documents_view(read_stage(reference, "assemble"))
    assert not list(out.rglob("*.tmp"))  # a write cut by the kill leaves no litter after the rerun


def test_a_second_server_can_write_the_descriptions(corpus: Path, server: SimulatedServer, reference: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    before = len(bodies(server))
    with SimulatedServer("--instant", "--served-model-name", "acme/captioner") as captioner:
        result = stage(
            "run", out, server, str(corpus), "--describe-endpoint", captioner.base_url, "--describe-model", "acme/captioner"
        )
        captions = bodies(captioner)
    assert result.returncode == 0, result.stderr
    assert [prompt_of(b) for b in bodies(server)[before:]].count(DESCRIBE_PROMPT) == 0  # OCR only
    assert len(captions) == FIGURES
    for body in captions:
        assert body["model"] == "acme/captioner" and prompt_of(body) == DESCRIBE_PROMPT
        assert "vllm_xargs" not in body  # not DeepSeek-OCR: no DeepSeek-specific fields
    assert stage_view(out, "extract") == stage_view(reference, "extract")
    assert sum(1 for r in read_stage(out, "describe") for f in r["figures"] if f["description"]) == FIGURES
