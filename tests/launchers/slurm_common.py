"""Helpers of the Slurm tests: the run's one-node cluster, the launcher CLI against it, the tasks'
processes and records, and the pages in the output."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.conftest import REPO, read_stage
from tests.fixtures.slurm import cluster, session
from tests.waiting import HANG_GUARD_S


@pytest.fixture(scope="session")
def slurm() -> dict[str, str]:
    """The environment of this run's Slurm (started by the first test that asks). It skips only
    where Slurm cannot exist (not installed, or not root), which under CI=true fails the run
    (tests/skip_policy.py); a cluster that is installed but does not start fails the test."""
    missing = cluster.missing_programs()
    if missing:
        pytest.skip(f"Slurm is not installed (missing {', '.join(missing)}): scripts/test installs "
                    f"{cluster.APT_PACKAGES} on Debian as root")
    if os.geteuid() != 0:
        pytest.skip("a private one-node Slurm needs root")
    try:
        return session.cluster_env()
    except cluster.ClusterError as exc:
        pytest.fail(f"the test Slurm did not start: {exc}")


def launcher_env(slurm: dict[str, str], tmp: Path, **extra: str) -> dict[str, str]:
    """The login node: this environment without stray llm-ocr or cloud settings, the cluster's
    SLURM_CONF, its own launch cache."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "AWS_", "LLM_OCR_", "SLURM_", "SBATCH_"))}
    env.update(slurm, XDG_CACHE_HOME=str(tmp / "cache"), PYTHONPATH=str(REPO), **extra)
    return env


def llm_ocr(*args: str, env: dict[str, str], timeout: float = 300, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    """``llm-ocr ARGS`` on the login node (this machine)."""
    return subprocess.run([str(Path(sys.executable).parent / "llm-ocr"), *args], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=str(cwd))


def slurm_cmd(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """A Slurm client command (``squeue``...) against the test cluster."""
    return subprocess.run(list(args), capture_output=True, text=True, timeout=HANG_GUARD_S, env=env)


def launch_args(corpus: Path, out: Path, *extra: str, shards: int = 3, sim: str = "--instant") -> list[str]:
    """``launch slurm CORPUS --output OUT --num-shards N`` on CPU-only tasks, the simulator playing
    DeepSeek-OCR from the corpus's text layer."""
    return ["launch", "slurm", str(corpus), "--output", str(out), "--num-shards", str(shards), "--gpus-per-task", "0",
            "--engine", "sim", "--server-args", f"--corpus {corpus} {sim}", *extra]


def pages(out: Path, stage: str = "extract") -> list[tuple[str, int]]:
    """Every (doc_id, page) row of a stage, sorted, duplicates kept."""
    return sorted((r["doc_id"], r["page"]) for r in read_stage(out, stage))


def expected(corpus: Path, per_document: int = 2) -> list[tuple[str, int]]:
    """Every (doc_id, page) of the corpus, sorted."""
    return sorted((p.name, n) for p in corpus.glob("*.pdf") for n in range(1, per_document + 1))


def launch_folder(out: Path) -> Path:
    """The log folder of the latest launch to ``out`` (OUT/_state/slurm/LAUNCH_ID)."""
    return max((out / "_state" / "slurm").iterdir(), key=lambda p: p.name)


def records(out: Path, shard: int) -> list[dict[str, Any]]:
    """The task records of ``shard`` over every launch to ``out`` (oldest launch first)."""
    found = []
    for folder in sorted((out / "_state" / "slurm").iterdir()):
        path = folder / "tasks" / f"{shard}.jsonl"
        if path.exists():
            found += [json.loads(line) for line in path.read_text().splitlines()]
    return found


def array_id(stdout: str) -> str:
    """The array job id in ``llm-ocr launch slurm``'s output (``shard 0: job 12_0``)."""
    for line in stdout.splitlines():
        if ": job " in line:
            return line.split(": job ")[1].split("_")[0]
    raise AssertionError(f"no job id in: {stdout}")


def shard_run_process(array: str, shard: int, out: Path) -> psutil.Process | None:
    """The ``llm-ocr STAGE`` process of task ``ARRAY_SHARD`` writing to ``out`` (found by the job's
    own variables). ``out`` keeps it to this test's run: another test session's one-node cluster
    (a second checkout's suite on the same machine) numbers its jobs from 1 too, and its task 0
    of a job with the same number must not be the one killed."""
    for proc in psutil.process_iter(["cmdline"]):
        try:
            cmdline = proc.info["cmdline"] or []
            if not any(part.endswith("/llm-ocr") for part in cmdline[:2]):
                continue
            if not any(str(out) in part for part in cmdline):
                continue
            env = proc.environ()
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
        if env.get("SLURM_ARRAY_JOB_ID") == array and env.get("SLURM_ARRAY_TASK_ID") == str(shard):
            return proc
    return None
