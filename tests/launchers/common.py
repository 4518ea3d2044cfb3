"""Helpers of the launcher tests: a fake Hugging Face Jobs + Hub with the inputs uploaded, the
launcher CLI in a subprocess configured only by HF_* variables, and readers of the output repo."""

from __future__ import annotations

import io
import json
import os
import resource
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from tests.conftest import REPO
from tests.fakes.fake_jobs import FakeJobs
from tests.waiting import HANG_GUARD_S

#: A write token planted to be searched for: it must never show up outside the secrets channel.
PLANTED = "hf_PLANTEDsecret7c1d2e3f4a5b6c7d8e9f0a1b"
READER = "hf_test_reader_token"
INPUT = "hf://datasets/tester/scans/pdfs"
OUTPUT = "hf://datasets/tester/ocr"
OUTPUT_REPO = "tester/ocr"
CODE_REPO = "tester/llm-ocr-jobs-code"


@contextmanager
def fake_jobs(workdir: Path, corpus: Path, sim_args: str = "--instant", **job_env: str) -> Iterator[FakeJobs]:
    """Fake Jobs + Hub with ``corpus``'s PDFs in the private dataset ``tester/scans/pdfs``; the
    jobs' model server (the fake ``vllm``) answers from the corpus's text layer."""
    env = {"FAKE_VLLM_SIM_ARGS": f"--corpus {corpus} {sim_args}", **job_env}
    with FakeJobs(tokens={PLANTED: "write", READER: "read"}, workdir=workdir, job_env=env) as hub:
        hub.create("tester/scans", files={f"pdfs/{p.name}": p.read_bytes() for p in sorted(corpus.glob("*.pdf"))}, private=True)
        yield hub


def launcher_env(hub: FakeJobs, tmp: Path, token: str | None = PLANTED) -> dict[str, str]:
    """The launching machine: no stray credentials, the fake as the Hub, its own caches."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "AWS_", "LLM_OCR_", "HUGGING"))}
    env.update(HF_ENDPOINT=hub.url, HF_HOME=str(tmp / "hf-home"), XDG_CACHE_HOME=str(tmp / "cache"),
               HF_HUB_DISABLE_TELEMETRY="1", HF_HUB_DISABLE_XET="1", PYTHONPATH=str(REPO))
    if token:
        env["HF_TOKEN"] = token
    return env


def llm_ocr(*args: str, env: dict[str, str], timeout: float = HANG_GUARD_S) -> subprocess.CompletedProcess[str]:
    """``llm-ocr ARGS`` on the launching machine."""
    return subprocess.run([sys.executable, "-m", "llm_ocr.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=str(REPO))


def llm_ocr_batch(cases: list[tuple[list[str], dict[str, str]]], env: dict[str, str], timeout: float = HANG_GUARD_S) -> list[dict[str, Any]]:
    """Several ``llm-ocr`` command lines in one subprocess (tests/launchers/batch_cli.py): each
    ``(argv, env changes)``; a result ``{"code", "stdout", "stderr"}`` per case."""
    # Short of the guard, the subprocess writes every thread's stack to its stderr: a hang (r118:
    # the Cloud Run launch's six commands past 600 s at load 4, nothing written) says where it is.
    dump_after = max(1.0, timeout - 20)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "tests.launchers.batch_cli"],
            input=json.dumps([{"argv": a, "env": e} for a, e in cases]), capture_output=True, text=True,
            timeout=timeout, env={**env, "TESTS_DUMP_STACKS_AFTER_S": str(dump_after)}, cwd=str(REPO),
        )
    except subprocess.TimeoutExpired as exc:
        stacks = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else exc.stderr or ""
        raise AssertionError(f"{[a for a, _ in cases]} did not end within {timeout:g} s; the stacks at "
                             f"{dump_after:g} s:\n{stacks}") from None
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def measured(args: list[str], env: dict[str, str], settle: Callable[[], None]) -> dict[str, float]:
    """Run ``llm-ocr ARGS`` (a launch with ``--wait``), then ``settle()`` (wait until every job's
    processes have been waited for, so their CPU time is counted): its start and end times and the
    CPU seconds of the launcher and the jobs (this process's children). ``SystemExit`` if it failed."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.time()
    done = llm_ocr(*args, env=env, timeout=900)
    ended = time.time()
    settle()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"launch failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"started": started, "ended": ended, "launch_to_done_s": ended - started, "cpu_s": cpu}


def launch_args(*extra: str, shards: int = 4, inputs: tuple[str, ...] = (INPUT,)) -> list[str]:
    """``launch hf-jobs INPUT --output OUT --num-shards N --flavor l4x1 --workers 0 EXTRA``."""
    return ["launch", "hf-jobs", *inputs, "--output", OUTPUT, "--num-shards", str(shards), "--flavor", "l4x1",
            "--workers", "0", *extra]


def stage_rows(hub: FakeJobs, stage: str, repo: str = OUTPUT_REPO) -> list[dict[str, Any]]:
    """Every row of a stage folder of the output repo."""
    files = hub.files(repo)
    rows: list[dict[str, Any]] = []
    for name in sorted(files):
        if name.startswith(f"{stage}/") and name.endswith(".parquet"):
            rows += pq.read_table(io.BytesIO(files[name])).to_pylist()
    return rows


def expected_pages(corpus: Path, pages: int = 2) -> list[tuple[str, int]]:
    """Every (doc_id, page) of the corpus, sorted."""
    return sorted((p.name, n) for p in corpus.glob("*.pdf") for n in range(1, pages + 1))


@contextmanager
def launcher_here(hub: FakeJobs, tmp: Path, monkeypatch: Any) -> Iterator[dict[str, Any]]:
    """This process as the launching machine, for in-process calls of :mod:`llm_ocr.launchers.core.api`
    (quicker than a subprocess per poll). huggingface_hub may have been imported already with
    another HF_ENDPOINT, so the Hub filesystem gets the fake's URL and the token as storage
    options (yielded); the Jobs adapter reads HF_ENDPOINT when it is created."""
    from huggingface_hub import constants

    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    monkeypatch.setenv("HF_TOKEN", PLANTED)
    # The fake Hub has no Xet; huggingface_hub read the variable when it was imported.
    monkeypatch.setenv("HF_HUB_DISABLE_XET", "1")
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_XET", True)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp / "cache"))
    yield {"hf": {"endpoint": hub.url, "token": PLANTED}}


def wait_until(condition: Callable[[], Any], timeout: float = 90, period: float = 0.2) -> Any:
    """Poll ``condition`` until it returns something truthy; that value (AssertionError on timeout)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(period)
    raise AssertionError(f"condition not met within {timeout}s")


def execute_notebook(path: Path) -> str:
    """Run a notebook headlessly in a kernel that inherits this process's environment, from its own
    folder; the text of every code cell's outputs. A failing cell raises ``CellExecutionError``
    (with the cell and its traceback); an error output fails too."""
    import nbclient
    import nbformat

    notebook = nbformat.read(path, as_version=4)
    nbclient.NotebookClient(notebook, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}}).execute()
    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.get("outputs", [])]
    assert not any(o.get("output_type") == "error" for o in outputs)
    return "\n".join(json.dumps(o.get("data", {})) + o.get("text", "") for o in outputs)

