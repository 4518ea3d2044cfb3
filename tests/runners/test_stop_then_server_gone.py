"""A stop that takes the model server with it is an interruption, not a failure to run.

A platform's stop reaches every process of a task: Slurm's ``scontrol requeue``, a preemption or
``scancel`` send SIGTERM to llm-ocr and to the model server it started, and a Kubernetes pod's
containers are stopped together. llm-ocr then finishes its pages in flight, but their server is
going away too, so the endpoint fails during the grace period. The run was stopped as asked and
kept what it read: exit 3 (interrupted, rerun to resume), not 2 (could not run), which a Slurm
task's runner would retry as a crash and a user would read as a broken endpoint. (A fresh-clone
run saw a requeued Slurm task end with 2 at load 18; whether for this reason is not known.)
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from llm_ocr.api import shard_coroutine, stage_spec
from llm_ocr.options import StageSpec
from llm_ocr.outcomes import ExitCode
from llm_ocr.runners.shard import ShardOutcome, run_guarded
from llm_ocr.testing import SimulatedServer
from tests import waiting
from tests.conftest import read_stage
from tests.docs import make_corpus
from tests.launchers.simulators import HELD_START, JobSimulator


def _run_stopped_by(spec: StageSpec, stopper: Callable[[Callable[[], None]], None]) -> ShardOutcome:
    """Run Extract of ``spec`` as the command line does (``run_guarded``), while ``stopper`` runs
    in a thread with a function that asks the run to stop, as SIGTERM does."""
    stop = asyncio.Event()
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=stopper, args=(lambda: loop.call_soon_threadsafe(stop.set),), daemon=True)
    thread.start()
    try:
        return loop.run_until_complete(run_guarded(shard_coroutine("extract", spec), stop))
    finally:
        loop.close()
        thread.join(30)


def test_the_server_gone_after_a_stop_ends_the_run_interrupted_with_its_pages_kept(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    make_corpus(docs, documents=2, pages=1)
    out = tmp_path / "out"
    with SimulatedServer("--corpus", str(docs), "--instant") as server:
        held_at = waiting.hold_request(server, after=1)  # the first page is read, the second held
        spec = stage_spec("extract", [str(docs)], {
            "output": str(out), "endpoint": server.base_url, "max_in_flight": 1, "part_rows": 1, "workers": 0,
            "progress": "off", "dead_after": 0.5, "grace_period": 120,  # the endpoint dies well within the grace
        })

        def stop_then_kill_the_server(stop: Callable[[], None]) -> None:
            waiting.wait_until_held(server, held_at)
            stop()  # SIGTERM to llm-ocr ...
            server.stop(grace=0)  # ... and to its server, which goes

        outcome = _run_stopped_by(spec, stop_then_kill_the_server)
    assert outcome.exit_code == ExitCode.INTERRUPTED, outcome.error
    assert outcome.error is None
    assert [r["page"] for r in read_stage(out, "extract")] == [1]  # the page read before the stop is kept


def _managed_simulator() -> tuple[psutil.Process, JobSimulator] | None:
    """The simulated server this process launched (``--engine sim``), once it listens."""
    for child in psutil.Process().children(recursive=True):
        try:
            cmdline = child.cmdline()
        except psutil.NoSuchProcess:
            continue
        if "llm_ocr.engines.sim" in cmdline and "--port" in cmdline:
            server = JobSimulator(f"http://127.0.0.1:{cmdline[cmdline.index('--port') + 1]}")
            try:
                server.hangs_applied()
            except OSError:
                return None  # not listening yet
            return child, server
    return None


def test_a_launched_server_that_exits_after_a_stop_is_not_restarted(tmp_path: Path,
                                                                    caplog: pytest.LogCaptureFixture) -> None:
    # As under Slurm: the stop reaches llm-ocr and the server it launched. Restarting the server
    # (minutes of model loading on a GPU) would only hold the page in flight through the grace
    # period; it is left for the rerun instead, and the run ends at once.
    docs = tmp_path / "docs"
    make_corpus(docs, documents=2, pages=1)
    out = tmp_path / "out"
    spec = stage_spec("extract", [str(docs)], {
        "output": str(out), "engine": "sim", "server_args": f"--corpus {docs} --instant {HELD_START}",
        "max_in_flight": 1, "part_rows": 1, "workers": 0, "progress": "off", "grace_period": 120,
    })

    def stop_both_once_the_second_page_is_held(stop: Callable[[], None]) -> None:
        process, server = waiting.wait_until(_managed_simulator, "the launched server listens", interval=0.2)
        held_at = server.hold(after=1)
        server.ready()
        waiting.wait_until(lambda: server.hangs_applied() >= held_at, "the second page is held", interval=0.2)
        stop()  # SIGTERM to llm-ocr ...
        process.terminate()  # ... and to its server

    with caplog.at_level(logging.INFO, logger="llm_ocr"):
        outcome = _run_stopped_by(spec, stop_both_once_the_second_page_is_held)
    assert outcome.exit_code == ExitCode.INTERRUPTED, outcome.error
    said = caplog.text
    assert "not restarted" in said and "restarting" not in said, said
    assert [r["page"] for r in read_stage(out, "extract")] == [1]  # the held page is left for the rerun
