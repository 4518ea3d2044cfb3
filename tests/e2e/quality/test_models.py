"""`llm-ocr bench-quality --models A,B`: the same sample read by each model behind one endpoint
list, each run scored, then compared."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llm_ocr.testing import SimulatedServer
from tests.conftest import run_cli

# The hang guard (pytest-timeout; 300 s by default): its subprocess's own timeout is 600 s.
pytestmark = pytest.mark.timeout(900)

A, B = "acme/deepseek-ocr-a", "acme/deepseek-ocr-b"


def test_two_models_read_the_same_sample_and_are_compared(tmp_path: Path, bench_dir: Path) -> None:
    """Model A answers from each page's text layer; model B, on another server, knows no page and
    answers with made-up text. Each is read only on the server that serves it, and the scores
    tell them apart. (Both names say DeepSeek-OCR, whose request the simulator answers with a
    page's text; the comparison itself assumes no family.)"""
    out = tmp_path / "out"
    with (
        SimulatedServer("--served-model-name", A, corpus=bench_dir / "pdfs") as a,
        SimulatedServer("--served-model-name", B) as b,
    ):
        done = run_cli(
            "bench-quality", str(out), "--bench", str(bench_dir), "--models", f"{A},{B}",
            "--endpoint", f"{a.base_url},{b.base_url}", "--sample", "3", "--extract-args", "--workers 0",
            timeout=600,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        served_a = {r.get("body", {}).get("model") for r in a.requests()}
        served_b = {r.get("body", {}).get("model") for r in b.requests()}
    assert served_a == {A} and served_b == {B}
    scores = {}
    for model in (A, B):
        result = json.loads((out / "runs" / model.replace("/", "--") / "quality" / "bench.json").read_text())
        # The sample: 3 PDFs, one from each of the first three pdfs/ sub-folders.
        assert {r["pdf"].split("/")[0] for r in result["results"]} == {"columns", "math", "tables"}
        assert result["models"] == [model]
        scores[model] = result["overall"]["score"]
    assert scores[A] > scores[B]
    lines = done.stdout.splitlines()
    assert f"== {A} ({out / 'runs' / A.replace('/', '--')})" in lines  # each run's own scores, then the table
    table = lines[lines.index("== 2 models side by side") + 1 :]
    assert table[0].split()[:2] == ["model", "score"]
    assert [line.split()[0] for line in table[2:4]] == [A, B]
    page = (out / "compare.html").read_text()
    assert f"<th>{A}</th>" in page and f"<th>{B}</th>" in page


def test_a_model_no_endpoint_serves_is_refused(tmp_path: Path, bench_dir: Path) -> None:
    with SimulatedServer("--served-model-name", "model-a") as a:
        done = run_cli("bench-quality", str(tmp_path / "out"), "--bench", str(bench_dir), "--models", "model-a,model-z",
                       "--endpoint", a.base_url)  # fmt: skip
    assert done.returncode == 2
    assert "no endpoint serves model-z; the endpoints serve model-a" in done.stderr
