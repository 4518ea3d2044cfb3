"""Helpers of the Ray tests: the run's one-node Ray cluster, the launcher CLI against it, the
launch's Ray job (its events and log through the Jobs API), and the pages in the output."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.conftest import REPO, read_stage
from tests.fixtures.ray import cluster, session


@pytest.fixture(scope="session")
def ray_cluster() -> dict[str, str]:
    """The addresses of this run's Ray cluster (started by the first test that asks). Ray is in the
    test extra, so a cluster that does not start fails the test (never a skip)."""
    try:
        return session.cluster_addresses()
    except cluster.ClusterError as exc:
        pytest.fail(f"the test Ray cluster did not start: {exc}")


def launcher_env(tmp: Path, **extra: str) -> dict[str, str]:
    """The launching machine: no stray llm-ocr, Ray or cloud settings, its own launch cache."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "AWS_", "LLM_OCR_", "RAY_"))}
    env.update(cluster.LOOPBACK_ENV, XDG_CACHE_HOME=str(tmp / "cache"), PYTHONPATH=str(REPO), **extra)
    # A ray:// address is resolved through Ray Client, whose server starts a Python process for each
    # client: once, in a run of the Ray tests beside others (3 workers), that outlasted Ray's three
    # connection attempts (waits of 5, 10 and 20 s). A hang guard here, not a speed claim.
    env["RAY_CLIENT_INITIAL_CONNECTION_TIMEOUT_S"] = "120"
    env["RAY_CLIENT_MAX_CONNECTION_TIMEOUT_S"] = "120"
    return env


def llm_ocr(*args: str, env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """``llm-ocr ARGS`` on the launching machine (this one)."""
    return subprocess.run([str(Path(sys.executable).parent / "llm-ocr"), *args], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=str(REPO))


def launch_args(corpus: Path, out: Path, address: str, *extra: str, shards: int = 3, sim: str = "--instant") -> list[str]:
    """``launch ray CORPUS --output OUT --num-shards N --address A`` with CPU-only actors, the
    simulator playing DeepSeek-OCR from the corpus's text layer."""
    return ["launch", "ray", str(corpus), "--output", str(out), "--num-shards", str(shards), "--address", address,
            "--gpus-per-actor", "0", "--engine", "sim", "--server-args", f"--corpus {corpus} {sim}", *extra]


def pages(out: Path, stage: str = "extract") -> list[tuple[str, int]]:
    """Every (doc_id, page) row of a stage, sorted, duplicates kept."""
    return sorted((r["doc_id"], r["page"]) for r in read_stage(out, stage))


def expected(corpus: Path, per_document: int = 2) -> list[tuple[str, int]]:
    """Every (doc_id, page) of the corpus, sorted."""
    return sorted((p.name, n) for p in corpus.glob("*.pdf") for n in range(1, per_document + 1))


def job_id(stdout: str) -> str:
    """The Ray job id in ``llm-ocr launch ray``'s output (``shard 0: job llm-ocr-...``)."""
    for line in stdout.splitlines():
        if ": job " in line:
            return line.split(": job ")[1].split()[0]
    raise AssertionError(f"no job id in: {stdout}")


def job_log(addresses: dict[str, str], job: str) -> str:
    """The Ray job's whole log, from the Jobs API."""
    from ray.job_submission import JobSubmissionClient

    return JobSubmissionClient(addresses["dashboard"]).get_job_logs(job)


def job_info(addresses: dict[str, str], job: str) -> Any:
    """The Ray job's ``JobDetails`` (status, entrypoint, runtime_env, metadata...)."""
    from ray.job_submission import JobSubmissionClient

    return JobSubmissionClient(addresses["dashboard"]).get_job_info(job)


def events(addresses: dict[str, str], job: str, shard: int | None = None) -> list[dict[str, Any]]:
    """The driver's events in the job's log (one shard's, if given)."""
    from llm_ocr.launchers.ray.state import parse_events

    found = parse_events(job_log(addresses, job))
    return [e for e in found if shard is None or e.get("shard") == shard]


def shard_process(launch_id: str, shard: int) -> psutil.Process | None:
    """The ``llm-ocr STAGE`` process running ``shard`` of a launch (found by its own variables)."""
    for proc in psutil.process_iter(["cmdline"]):
        try:
            cmdline = proc.info["cmdline"] or []
            if "llm_ocr.cli" not in cmdline and not any(part.endswith("/llm-ocr") for part in cmdline[:2]):
                continue
            env = proc.environ()
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
        if env.get("LLM_OCR_LAUNCH_ID") == launch_id and env.get("LLM_OCR_SHARD_INDEX") == str(shard):
            return proc
    return None


def gone(pid: int) -> bool:
    """Whether process ``pid`` has ended (a zombie counts as ended)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True
