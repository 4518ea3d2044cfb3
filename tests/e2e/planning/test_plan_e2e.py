"""``llm-ocr plan``, ``launch --dry-run`` and ``status`` as a user runs them: the estimate before a
run, the pages/s measured with bench-accuracy in it, and a finished run's pages/s beside it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from llm_ocr.testing import SimulatedServer
from tests.conftest import REPO, run_cli
from tests.docs import make_corpus

DEEPSEEK_A100_40 = 200_000 / 86_400


@pytest.fixture
def rates(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A measurements file of this test's own (never the user's)."""
    path = tmp_path / "rates.jsonl"
    monkeypatch.setenv("LLM_OCR_RATES_FILE", str(path))
    return path


def plan_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict:
    """``llm-ocr plan ARGS --json`` in this process: the command's text output runs as a subprocess
    below (one case per shape); the figures in the JSON need no interpreter of their own."""
    from llm_ocr.cli import main

    capsys.readouterr()  # what came before is not this command's
    code = main(["plan", *args, "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    return dict(json.loads(out))


def row(plan: dict, platform: str, machine: str) -> dict:
    return next(r for r in plan["rows"] if (r["platform"], r["hardware"]) == (platform, machine))


def test_plan_counts_the_pages_and_estimates_every_machine(tmp_path: Path, rates: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    make_corpus(tmp_path / "docs", documents=5, pages=3)
    plan = plan_json(capsys, str(tmp_path / "docs"), "--num-shards", "2")
    assert (plan["pages"], plan["documents"], plan["family"], plan["num_shards"]) == (15, 5, "deepseek-ocr", 2)
    a100 = row(plan, "slurm", "A100 40GB")
    assert a100["rate"]["kind"] == "published" and a100["rate"]["pages_per_s"] == pytest.approx(DEEPSEEK_A100_40, 1e-3)
    assert a100["wall_s"] == pytest.approx(1200 + 7.5 / DEEPSEEK_A100_40, abs=0.01) and a100["cost_usd"] is None
    l4 = row(plan, "hf-jobs", "l4x1")
    assert l4["rate"]["kind"] == "scaled" and l4["cost_usd"] == pytest.approx(2 * l4["wall_s"] / 3600 * 0.80, 1e-3)
    # A family nobody published a rate for gets no figure, and is told how to measure one.
    olmocr = plan_json(capsys, str(tmp_path / "docs"), "--model", "allenai/olmOCR-2-7B-1025-FP8", "--platform", "slurm")
    assert all(r["rate"] is None and r["wall_s"] is None for r in olmocr["rows"])
    from llm_ocr.cli import main

    assert main(["plan", str(tmp_path / "docs"), "--model", "allenai/olmOCR-2-7B-1025-FP8"]) == 0
    text = capsys.readouterr().out
    assert "no published figure for olmocr" in text and "bench-accuracy" in text
    text = run_cli("plan", str(tmp_path / "docs"), "--platform", "hf-jobs").stdout
    assert "15 pages in 5 documents (pdf 15)" in text and "published: 200k+ pages per day on one A100-40G" in text


def test_plan_writes_the_manifest_of_its_one_listing_and_counts_from_it(tmp_path: Path, rates: Path) -> None:
    from llm_ocr.sources import plan_inputs

    make_corpus(tmp_path / "docs", documents=3, pages=2)
    done = run_cli("plan", str(tmp_path / "docs"), "--write-manifest", str(tmp_path / "manifest"), "--json")
    assert done.returncode == 0, done.stderr
    assert (json.loads(done.stdout)["pages"], json.loads(done.stdout)["documents"]) == (6, 3)
    assert "wrote a manifest of 3 documents (1 file(s)" in done.stderr
    listed = [(r.doc_id, r.index, r.location) for r in plan_inputs([str(tmp_path / "docs")]).documents()]
    assert [(r.doc_id, r.index, r.location) for r in plan_inputs([str(tmp_path / "manifest")]).documents()] == listed


def test_a_rate_measured_with_bench_accuracy_is_used_by_plan(tmp_path: Path, rates: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    make_corpus(tmp_path / "docs", documents=2, pages=2)
    with SimulatedServer("--instant") as server:
        done = run_cli("bench-accuracy", "--engine-url", server.base_url, "--model", "deepseek-ai/DeepSeek-OCR",
                       "--gpu", "h100-80gb", "--concurrency", "4", timeout=600, env={"LLM_OCR_RATES_FILE": str(rates)})
    assert done.returncode == 0, done.stderr[-3000:]
    (record,) = [json.loads(line) for line in rates.read_text().splitlines()]
    assert (record["family"], record["gpu"], record["concurrency"]) == ("deepseek-ocr", "h100-80gb", 4)
    assert record["pages_per_s"] > 0 and "recorded" in done.stdout
    plan = plan_json(capsys, str(tmp_path / "docs"), "--platform", "slurm")
    h100 = row(plan, "slurm", "H100 80GB")
    assert h100["rate"]["kind"] == "measured" and h100["rate"]["pages_per_s"] == pytest.approx(record["pages_per_s"], abs=1e-4)
    # Carried to the other GPUs (scaled from yours, not from the paper), the A100 40GB keeps its own.
    assert "measured by you" in row(plan, "slurm", "L4 24GB")["rate"]["label"]
    assert row(plan, "slurm", "A100 40GB")["rate"]["kind"] == "published"


def test_a_dry_run_prints_the_plan_beside_the_unchanged_json(tmp_path: Path, rates: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SBATCH_"))}
    done = subprocess.run(
        [sys.executable, "-m", "llm_ocr.cli", "launch", "slurm", str(tmp_path / "scans"), "--output",
         str(tmp_path / "out"), "--num-shards", "4", "--dry-run", "--offline", "--pages", "40000", "--gpu-preset",
         "a100-40gb"], capture_output=True, text=True, env=env, cwd=REPO, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert set(json.loads(done.stdout)) == {"platform", "launch_id", "jobs", "requests"}
    plan = [line.split("plan: ", 1)[1] for line in done.stderr.splitlines() if "plan: " in line]
    assert plan[0] == "40,000 pages (given, not counted)"
    chosen = next(line for line in plan if line.startswith("*"))
    # The machine picked, first: 10,000 pages a shard at 2.31 pages/s after 20 min: 1.5 h.
    wall = (1200 + 10_000 / DEEPSEEK_A100_40) / 3600
    assert chosen.split()[1:5] == ["slurm", "1x", "GPU", "1"] and f"{wall:.1f} h" in chosen
    assert any("published: 200k+ pages per day on one A100-40G" in line for line in plan)


@pytest.mark.parametrize("platform", ["k8s", "ray"])
def test_a_cluster_dry_run_estimates_each_gpu_of_the_cluster(tmp_path: Path, rates: Path, platform: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "llm_ocr.cli", "launch", platform, "s3://scans/2024", "--output", "s3://ocr/2024",
         "--num-shards", "4", "--dry-run", "--offline", "--pages", "40000", "--gpu-preset", "a100-40gb"],
        capture_output=True, text=True, cwd=REPO, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["platform"] == platform
    plan = [line.split("plan: ", 1)[1] for line in done.stderr.splitlines() if "plan: " in line]
    rows = [line.split() for line in plan if line.split()[:1] in ([platform], ["*"])]
    # The GPUs picked first, then one row for each GPU preset the cluster could have.
    assert rows[0][:2] == ["*", platform] and f"{(1200 + 10_000 / DEEPSEEK_A100_40) / 3600:.1f}" in rows[0]
    machines = {" ".join(r[1:3]) for r in rows[1:]}
    assert {"L4 24GB", "A100 40GB", "H100 80GB"} <= machines, plan


def test_a_finished_runs_pages_per_s_shows_beside_its_estimate(tmp_path: Path, rates: Path) -> None:
    make_corpus(tmp_path / "docs", documents=2, pages=2)
    out = tmp_path / "out"
    with SimulatedServer("--instant") as server:
        done = run_cli("extract", str(tmp_path / "docs"), "--output", str(out), "--endpoint", server.base_url,
                       "--gpu-preset", "a100-40gb", "--workers", "0", "--progress", "off", timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    marker = json.loads((out / "_state/extract/done-00000-of-00001.json").read_text())
    assert marker["estimate"]["pages_per_s"] == pytest.approx(DEEPSEEK_A100_40, abs=1e-3)
    assert marker["estimate"]["kind"] == "published" and marker["pages_per_s"] > 0
    status = run_cli("status", str(out)).stdout
    (line,) = [s for s in status.splitlines() if s.strip().startswith("shard 00000-of-00001")]
    assert f"{marker['pages_per_s']:.2f} pages/s (estimate 2.31 [1])" in line, status
    assert "[1] published: 200k+ pages per day on one A100-40G" in status
