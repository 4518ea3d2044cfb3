"""`llm-ocr extract` then `llm-ocr bench-quality OUT --bench DIR` on the generated bench, as
commands: the printed score is the saved one and the report holds every failure. The scorer
itself is tested in process in tests/quality/test_bench.py."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import run_cli
from tests.quality.cases import BENCH


def test_cli_scores_a_real_run_and_puts_the_failures_in_the_report(tmp_path: Path, bench_dir: Path) -> None:
    """Extract on the bench's PDFs (simulated model, answering from each page's text layer),
    then `llm-ocr bench-quality OUT --bench DIR`: the printed score is the saved one, and every
    failing test is in OUT/report.html with its explanation."""
    from llm_ocr.testing import SimulatedServer

    out = tmp_path / "out"
    with SimulatedServer(corpus=bench_dir / "pdfs") as server:
        done = run_cli("extract", str(bench_dir / "pdfs"), "--output", str(out), "--endpoint", server.base_url, "--workers", "0")
    assert done.returncode == 0, done.stderr
    done = run_cli("bench-quality", str(out), "--bench", str(bench_dir), timeout=300)
    assert done.returncode == 0, done.stderr
    saved = json.loads((out / "quality" / "bench.json").read_text())
    overall = saved["overall"]
    assert f"olmOCR-bench score {overall['score'] * 100:.1f}%" in done.stdout
    assert overall["tests"] + saved["not_scored"]["tests"] == len(saved["results"]) == 21
    assert {r["doc_id"] for r in saved["results"]} == set(BENCH)  # every PDF matched to its rows
    failed = [r for r in saved["results"] if r["passed"] is False]
    assert failed, "a text-layer reading fails at least the math and format tests"
    report = (out / "report.html").read_text()
    assert "olmOCR-bench tests" in report
    for record in failed:
        assert record["id"] in report
    code = run_cli("bench-quality", str(out), "--bench", str(bench_dir), "--fail-under", "99.9", "--no-report", timeout=300)
    assert code.returncode == 1
