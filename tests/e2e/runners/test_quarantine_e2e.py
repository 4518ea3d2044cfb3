"""One bad page costs one page: a server that dies on a page, managed or behind a supervisor.

Real processes throughout: the fake ``vllm`` (tests/fakes/vllm) or a supervisor
(tests/fakes/supervise.py) runs the simulator, whose ``--crash-on-page`` makes it exit the
moment it is sent that page of its corpus, in every incarnation; ``--crash-ledger`` counts the
crashes from outside.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from llm_ocr.serving.command_lines import free_port
from tests.conftest import REPO, read_stage, run_cli
from tests.docs import make_corpus
from tests.e2e.runners.test_faults_e2e import corpus_keys, summary_lines
from tests.e2e.serving.test_managed_server_e2e import fake_env
from tests.stages.common import page_keys

FAKES = REPO / "tests" / "fakes"
POISON = ("doc002.pdf", 3)
QUARANTINED = re.compile(r"the model server crashed on this page (\d+) times; quarantined")


def crashes(ledger: Path) -> list[str]:
    return ledger.read_text().splitlines() if ledger.exists() else []


def managed_extract(docs: Path, out: Path, tmp_path: Path, sim_args: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return run_cli(
        "extract", str(docs), "--output", str(out), "--engine", "vllm", "--workers", "0", "--progress", "off", *extra,
        env=fake_env(tmp_path, FAKE_VLLM_SIM_ARGS=f"--corpus {docs} --prefill-ms 50 {sim_args}"), timeout=240,
    )


def test_a_page_that_kills_the_managed_server_is_quarantined_and_the_other_19_are_saved(tmp_path: Path) -> None:
    texts = make_corpus(tmp_path / "docs", documents=5, pages=4)  # 20 pages
    ledger, out = tmp_path / "crashes.txt", tmp_path / "out"
    # Poison for its first three sends: as good as forever for the first run, so that the
    # --retry-quarantined run at the end can show the page coming back.
    sim = f"--crash-on-page {POISON[0]}:{POISON[1]} --crash-times 3 --crash-ledger {ledger}"
    started = time.monotonic()
    first = managed_extract(tmp_path / "docs", out, tmp_path, sim)
    elapsed = time.monotonic() - started
    assert first.returncode == 1, first.stderr
    assert elapsed < 150, f"took {elapsed:.0f}s"
    rows = read_stage(out, "extract")
    assert page_keys(rows) == corpus_keys(5, 4)  # every page exactly once
    (bad,) = [r for r in rows if r["status"] != "ok"]
    assert (bad["doc_id"], bad["page"]) == POISON and bad["status"] == "error" and bad["quarantined"] is True
    match = QUARANTINED.fullmatch(bad["error"])
    assert match and int(match.group(1)) == len(crashes(ledger)) == 3 == bad["attempts"]
    assert not any(r["quarantined"] for r in rows if r is not bad)
    # The failed page is still searchable: its PDF text layer rides along, marked as such.
    assert all(line in bad["fallback_text"] for line in texts["doc002.pdf"][POISON[1] - 1])
    assert bad["fallback_note"].startswith("PDF text layer: ") and bad["markdown"] == ""
    assert "retrying page 3 of doc002.pdf alone" in first.stderr
    (line,) = summary_lines(first.stderr)
    assert (line["seen"], line["ok"], line["error"], line["quarantined"]) == (20, 19, 0, 1)
    status = {s["stage"]: s for s in json.loads(run_cli("status", str(out), "--json").stdout)}
    assert status["extract"]["by_status"] == {"ok": 19, "quarantined": 1}
    assert "quarantined 1" in run_cli("status", str(out)).stdout

    # A rerun keeps the quarantine (the row is its record): the page is not sent again, whether
    # the shard's completion marker says it is done or (an interrupted shard) it is scanned anew.
    for marker in ("kept", "removed"):
        if marker == "removed":
            (out / "_state/extract/done-00000-of-00001.json").unlink()
        again = managed_extract(tmp_path / "docs", out, tmp_path, sim)
        assert again.returncode == 1, again.stderr
        assert len(crashes(ledger)) == 3
        assert [(r["doc_id"], r["page"], r["quarantined"]) for r in read_stage(out, "extract")] == [
            (r["doc_id"], r["page"], r["quarantined"]) for r in rows
        ]
    assert "keeping 1 quarantined page(s) from earlier runs" in again.stderr
    (line,) = summary_lines(again.stderr)
    assert (line["seen"], line["earlier"], line["quarantined"]) == (20, 20, 0)

    # --retry-quarantined opts back in: the page (no longer poison) is read, and replaces its row.
    retry = managed_extract(tmp_path / "docs", out, tmp_path, sim, "--retry-quarantined")
    assert retry.returncode == 0, retry.stderr
    rows = read_stage(out, "extract")
    assert page_keys(rows) == corpus_keys(5, 4) and {r["status"] for r in rows} == {"ok"}
    assert len(crashes(ledger)) == 3


def test_two_pages_that_each_crash_the_server_once_are_retried_and_both_succeed(tmp_path: Path) -> None:
    make_corpus(tmp_path / "docs", documents=5, pages=4)
    ledger = tmp_path / "crashes.txt"
    sim = f"--crash-on-page doc001.pdf:2 --crash-on-page doc003.pdf:4 --crash-times 1 --crash-ledger {ledger}"
    result = managed_extract(tmp_path / "docs", tmp_path / "out", tmp_path, sim)
    assert result.returncode == 0, result.stderr
    assert sorted(crashes(ledger)) == ["doc001.pdf:2", "doc003.pdf:4"]  # two independent deaths
    assert result.stderr.count("restarting (") == 2
    rows = read_stage(tmp_path / "out", "extract")
    assert page_keys(rows) == corpus_keys(5, 4) and {r["status"] for r in rows} == {"ok"}
    assert not any(r["quarantined"] for r in rows)


@pytest.fixture
def supervised_sim(tmp_path: Path):
    """The simulator on a fixed port under a supervisor that restarts it 1 s after it exits."""
    docs, port = tmp_path / "docs", free_port()
    make_corpus(docs, documents=5, pages=4)
    supervisor = subprocess.Popen(
        [sys.executable, str(FAKES / "supervise.py"), "--restart-delay", "1", "--starts-file", str(tmp_path / "starts"),
         "--", sys.executable, "-m", "llm_ocr.engines.sim", "--host", "127.0.0.1", "--port", str(port),
         "--corpus", str(docs), "--prefill-ms", "50", "--crash-on-page", f"{POISON[0]}:{POISON[1]}",
         "--crash-ledger", str(tmp_path / "crashes.txt")],
        cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            assert time.monotonic() < deadline, "the supervised simulator never became healthy"
            time.sleep(0.2)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        supervisor.terminate()
        supervisor.wait(timeout=30)


def test_an_external_endpoint_restarted_by_its_supervisor_gets_the_same_isolation(
    tmp_path: Path, supervised_sim: str
) -> None:
    # `llm-ocr run` (all three stages) against an endpoint we do not manage: a Kubernetes-like
    # supervisor brings the server back after each crash.
    out = tmp_path / "out"
    started = time.monotonic()
    result = run_cli(
        "run", str(tmp_path / "docs"), "--output", str(out), "--endpoint", supervised_sim, "--workers", "0",
        "--progress", "off", "--dead-after", "60", timeout=240,
    )
    assert result.returncode == 1, result.stderr
    assert time.monotonic() - started < 150
    assert len(crashes(tmp_path / "crashes.txt")) == 3
    assert len((tmp_path / "starts").read_text().splitlines()) == 4  # the first start and three restarts
    assert result.stderr.count("is back (generation") == 3
    for stage in ("extract", "describe"):
        rows = read_stage(out, stage)
        assert page_keys(rows) == corpus_keys(5, 4)
        assert [(r["doc_id"], r["page"]) for r in rows if r["status"] != "ok"] == [POISON]
        (bad,) = [r for r in rows if r["quarantined"]]
        assert QUARANTINED.fullmatch(bad["error"]) and bad["fallback_text"]
    documents = {d["doc_id"]: d for d in read_stage(out, "assemble")}
    assert len(documents) == 5 and documents["doc002.pdf"]["failed_pages"] == [3]
    assert {d["status"] for name, d in documents.items() if name != "doc002.pdf"} == {"ok"}
    assert "**Fallback text (page 3):**" in documents["doc002.pdf"]["markdown"]
