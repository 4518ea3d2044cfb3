"""Repetition loops end to end: the CLI against a simulated server whose looping pages repeat a
table row longer than vLLM's n-gram window, as users meet them."""

from __future__ import annotations

from pathlib import Path

from llm_ocr.testing import SimulatedServer
from tests.conftest import read_stage, run_cli
from tests.docs import make_corpus

#: Half the pages loop; half of those loop again at temperature 0.2; 1 ms a token, so a loop
#: left to run would take seven seconds.
SERVER = ("--loop-rate", "0.5", "--loop-repeat-rate", "0.5", "--decode-ms-per-token", "1", "--load-slowdown", "0")


def extract(docs: Path, out: Path, server: SimulatedServer, *extra: str):
    return run_cli(
        "extract", str(docs), "--output", str(out), "--endpoint", server.base_url, "--workers", "0",
        "--progress", "off", *extra, timeout=180,
    )  # fmt: skip


def test_loops_are_cut_as_they_stream_retried_hotter_and_recorded_on_the_row(tmp_path: Path) -> None:
    make_corpus(tmp_path / "docs", documents=6, pages=2)
    with SimulatedServer(*SERVER, corpus=tmp_path / "docs") as server:
        result = extract(tmp_path / "docs", tmp_path / "out", server)
        requests = server.requests()
    assert result.returncode == 0, result.stderr
    rows = read_stage(tmp_path / "out", "extract")
    assert sorted((r["doc_id"], r["page"]) for r in rows) == [(f"doc{d:03d}.pdf", p) for d in range(6) for p in (1, 2)]

    looped = [r for r in requests if r.get("fault") == "loop"]
    finished = [r for r in requests if r.get("fault") != "loop"]
    assert looped and finished  # the seed gives both kinds
    # Every loop was cut by the client: the server saw it leave long before max_tokens.
    for request in looped:
        assert request["outcome"] == "disconnected" and request["finish_reason"] == "abort"
        assert request["completion_tokens"] < 2000, request["completion_tokens"]
    # No page that really finished was cut short.
    assert all(r["finish_reason"] == "stop" for r in finished)

    by_page = {(r["doc_id"], r["page"]): r for r in rows}
    for row in by_page.values():
        if row["cut_reason"] is None:
            assert row["status"] == "ok" and row["attempts"] == 1 and row["cut_tokens"] is None
            continue
        assert row["cut_tokens"] > 0 and "repeated a " in row["cut_reason"]
        if row["status"] == "ok":  # the hotter retry finished the page
            assert row["attempts"] == 2 and row["finish_reason"] == "stop"
            assert row["cut_reason"].startswith("attempt 1 (temperature 0)")
        else:  # looped again: the text up to the loop is kept, marked truncated
            assert row["status"] == "truncated" and row["finish_reason"] == "loop"
            assert "attempt 2 (temperature 0.2)" in row["cut_reason"]
            assert row["markdown"] and "repetition loop cut" in row["error"]
            # Only the first copy of the repeated row survives into the Markdown.
            assert row["raw"].count("<tr>") > row["markdown"].count("<tr>") >= 1
    assert {r["status"] for r in rows} == {"ok", "truncated"}


def test_without_cutting_loops_run_to_max_tokens(tmp_path: Path) -> None:
    make_corpus(tmp_path / "docs", documents=2, pages=1)
    with SimulatedServer("--loop-rate", "1", corpus=tmp_path / "docs") as server:
        result = extract(tmp_path / "docs", tmp_path / "out", server, "--no-cut-loops", "--max-tokens", "3000")
        requests = server.requests()
    assert result.returncode == 0, result.stderr
    assert len(requests) == 4 and all(r["completion_tokens"] == 3000 and "stream" not in r["body"] for r in requests)
    rows = read_stage(tmp_path / "out", "extract")
    assert {(r["status"], r["finish_reason"]) for r in rows} == {("truncated", "length")}
