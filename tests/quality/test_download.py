"""`bench-quality --download`: olmOCR-bench fetched with huggingface_hub (from the fake Hub, which
serves the generated bench under the real dataset's name and layout), then scored."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import run_cli
from tests.fakes.fake_hub import FakeHub
from tests.quality.cases import BENCH
from tests.quality.conftest import write_run


def test_download_then_score(tmp_path: Path, bench_dir: Path) -> None:
    files = {f"bench_data/{p.relative_to(bench_dir).as_posix()}": p.read_bytes() for p in bench_dir.rglob("*") if p.is_file()}
    files["README.md"] = b"# olmOCR-bench\n"  # not fetched: only bench_data/ is
    pages = [{"doc_id": pdf, "source": f"pdfs/{pdf}", "markdown": spec["good"]} for pdf, spec in BENCH.items()]
    out = write_run(tmp_path / "out", pages)
    target = tmp_path / "olmOCR-bench"
    with FakeHub() as hub:
        hub.create("allenai/olmOCR-bench", "dataset", files=files)
        env = {"HF_ENDPOINT": hub.url, "HF_HUB_DISABLE_XET": "1", "HF_HOME": str(tmp_path / "hf-home"), "HF_TOKEN": ""}
        done = run_cli("bench-quality", str(out), "--bench", str(target), "--download", "--no-report", env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    fetched = {p.relative_to(target).as_posix(): p.read_bytes() for p in target.rglob("*") if p.is_file() and ".cache" not in p.parts}
    assert fetched == {k: v for k, v in files.items() if k.startswith("bench_data/")}
    saved = json.loads((out / "quality" / "bench.json").read_text())
    assert saved["bench"] == str(target / "bench_data")
    assert saved["not_in_run"]["tests"] == 0 and len(saved["results"]) == 21


def test_download_failure_is_explained(tmp_path: Path) -> None:
    out = write_run(tmp_path / "out", [{"doc_id": "a.pdf", "source": "a.pdf", "markdown": "x"}])
    with FakeHub() as hub:  # no such dataset there
        env = {"HF_ENDPOINT": hub.url, "HF_HUB_DISABLE_XET": "1", "HF_HOME": str(tmp_path / "hf-home"), "HF_TOKEN": ""}
        done = run_cli("bench-quality", str(out), "--bench", str(tmp_path / "b"), "--download", env=env, timeout=300)
    assert done.returncode == 2
    assert "could not download allenai/olmOCR-bench" in done.stderr
