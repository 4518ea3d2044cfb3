"""The Python API interrupted and resumed, in the processes a user runs it in: a Jupyter kernel
(its event loop running) stopped with the kernel's interrupt, and a script stopped with Ctrl-C.
Both start processes (a kernel, a script), so they are in the end-to-end tier (docs/testing.md#tiers);
tests/test_api.py has the rest of the Python API, in this process."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from llm_ocr.testing import SimulatedServer
from tests.conftest import REPO, read_stage
from tests.docs import make_corpus
from tests.waiting import HANG_GUARD_S, hold_request, wait_until, wait_until_held


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """2 PDFs x 3 pages, a chart on pages 1 and 3."""
    folder = tmp_path_factory.mktemp("api") / "docs"
    make_corpus(folder, documents=2, pages=3)
    return folder


def pages_of(out: Path, stage: str) -> list[tuple[str, int]]:
    return sorted((r["doc_id"], r["page"]) for r in read_stage(out, stage))


EXPECTED = sorted((f"doc{d:03d}.pdf", p) for d in range(2) for p in range(1, 4))


# -- interrupted inside Jupyter, resumed -----------------------------------------------------------


def test_interrupting_a_run_in_a_notebook_stops_it_cleanly_and_running_it_again_resumes(tmp_path: Path) -> None:
    """A real Jupyter kernel runs ``llm_ocr.run`` in a cell (its event loop is running), with
    a server the run launches itself; the kernel is interrupted mid-run, as the stop button does.
    The cell ends with KeyboardInterrupt once the parts are written and the server is stopped;
    running the cell again finishes the rest, and every page is in each stage exactly once."""
    jupyter_client = pytest.importorskip("jupyter_client")
    pytest.importorskip("ipykernel")
    corpus, out = tmp_path / "docs", tmp_path / "out"
    make_corpus(corpus, documents=4, pages=4)
    expected = sorted((f"doc{d:03d}.pdf", p) for d in range(4) for p in range(1, 5))
    # A slow simulated server (launched by the run: --engine sim), one request at a time: the
    # run takes a minute, and is interrupted after its first pages.
    options = dict(engine="sim", server_args="--prefill-ms 1000 --slots 1", workers=0, max_in_flight=1,
                   flush_interval=0.2, part_rows=1, grace_period=30)
    cell = f"import llm_ocr\nresult = llm_ocr.run({str(corpus)!r}, output={str(out)!r}, **{options!r})\nresult.exit_code"
    km, kc = jupyter_client.manager.start_new_kernel(kernel_name="python3", cwd=str(REPO))
    try:
        kernel = psutil.Process(km.provisioner.process.pid)
        first = kc.execute(cell)
        deadline = time.monotonic() + 240
        while not list((out / "extract").glob("*.parquet")):  # some pages are stored: mid-run
            assert time.monotonic() < deadline, "the run stored nothing"
            time.sleep(0.1)
        assert _servers(kernel), "the run's simulated server should be running"
        km.interrupt_kernel()
        reply = _reply(kc, first, timeout=120)
        assert reply["content"]["status"] == "error" and reply["content"]["ename"] == "KeyboardInterrupt", reply["content"]
        assert not _servers(kernel), "the server outlived the interrupted run"
        interrupted = pages_of(out, "extract")
        assert interrupted and len(interrupted) < len(expected)  # stopped part-way, what was done is kept
        assert len(set(interrupted)) == len(interrupted)

        second = kc.execute(cell)
        reply = _reply(kc, second, timeout=300)
        assert reply["content"]["status"] == "ok", reply["content"]
        assert _last_result(kc, second) == "0"
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    for stage in ("extract", "describe"):
        assert pages_of(out, stage) == expected, stage  # every page exactly once
    assert sorted(d["doc_id"] for d in read_stage(out, "assemble")) == [f"doc{d:03d}.pdf" for d in range(4)]


def _servers(kernel: psutil.Process) -> list[psutil.Process]:
    found = []
    for child in kernel.children(recursive=True):
        try:
            if "llm_ocr.engines.sim" in " ".join(child.cmdline()) and child.status() != psutil.STATUS_ZOMBIE:
                found.append(child)
        except psutil.Error:
            continue
    return found


def _reply(kc, msg_id: str, timeout: float) -> dict:  # type: ignore[no-untyped-def]
    """The shell reply to request ``msg_id`` (earlier replies, e.g. to kernel_info, are skipped)."""
    deadline = time.monotonic() + timeout
    while True:
        reply = kc.get_shell_msg(timeout=max(1.0, deadline - time.monotonic()))
        if reply["parent_header"].get("msg_id") == msg_id:
            return reply


def _last_result(kc, msg_id: str) -> str:  # type: ignore[no-untyped-def]
    """The cell's value (its last expression), from the kernel's output messages."""
    while True:
        msg = kc.get_iopub_msg(timeout=30)
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        if msg["msg_type"] == "execute_result":
            return str(msg["content"]["data"]["text/plain"])
        if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            return ""


def test_a_script_interrupted_with_ctrl_c_stops_cleanly_and_resumes(corpus: Path, tmp_path: Path) -> None:
    """Ctrl-C in a script (no event loop) stops intake, finishes the pages in flight, writes
    the parts and raises KeyboardInterrupt; running it again resumes to every page once."""
    out = tmp_path / "out"
    # The server holds the run's second request until its client lets go, so the run cannot
    # finish before the Ctrl-C however slow the machine: the interrupt lands mid-run for certain.
    # The held page is in flight when Ctrl-C comes; the grace period lets it go after 2 s.
    with SimulatedServer("--instant", corpus=corpus) as held:
        script = textwrap.dedent(f"""
            import json, llm_ocr
            try:
                result = llm_ocr.run({str(corpus)!r}, output={str(out)!r}, endpoint={held.base_url!r},
                                     workers=0, max_in_flight=2, flush_interval=0.2, part_rows=1, grace_period=2)
            except KeyboardInterrupt:
                print("interrupted", flush=True)
            else:
                print(json.dumps(result.pages), flush=True)
        """)
        held_at = hold_request(held, after=1)
        process = subprocess.Popen([sys.executable, "-c", script], cwd=REPO, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True)
        try:
            wait_until_held(held, held_at, process)
            wait_until(lambda: list((out / "extract").glob("*.parquet")), "a part was stored", process=process)
            process.send_signal(signal.SIGINT)  # as Ctrl-C
            stdout, stderr = process.communicate(timeout=HANG_GUARD_S)
        finally:
            if process.poll() is None:
                process.kill()
        assert process.returncode == 0 and stdout.strip() == "interrupted", stderr[-3000:]
        assert "Traceback" not in stderr
        interrupted = pages_of(out, "extract")
        assert 0 < len(interrupted) < len(EXPECTED) and len(set(interrupted)) == len(interrupted)
        again = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True,
                               timeout=HANG_GUARD_S)
    counts = json.loads(again.stdout.strip().splitlines()[-1])
    assert counts["skipped"] > 0 and counts["skipped"] + counts["ok"] == len(EXPECTED), again.stderr[-3000:]
    for stage in ("extract", "describe"):
        assert pages_of(out, stage) == EXPECTED, stage
