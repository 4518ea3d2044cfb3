"""The render workers as the page flow uses them (``WorkerPool.run``): real worker processes.

What the pipeline relies on: a document's error comes back as the same exception (the page flow
turns a ``DocumentError`` into that document's error row); a worker that dies fails its own call
only, and the next call gets a new worker; a Ctrl-C reaching a worker (the terminal signals the
whole process group) leaves it alone; output a worker prints never reaches the answers; a
worker busy with a long call ends when its parent is killed; a document that kills its
worker is that document's error, the others complete; and a second worker starts only once
calls have waited longer than the first took to start.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from llm_ocr.options import RenderOptions
from llm_ocr.records import PageResult, page_schema
from llm_ocr.runners.page_flow import DocumentPages, FlowSettings, PageFlow
from llm_ocr.runners.process_pool import ProcessPool, WorkerDied
from llm_ocr.runners.progress import RunCounters
from llm_ocr.runners.workers import WorkerPool
from llm_ocr.sources.base import DocumentRef, PageFailure, PageImage
from llm_ocr.sources.listing import list_documents
from llm_ocr.sources.render import DocumentError, count_pages, render_pages
from llm_ocr.storage import Storage
from llm_ocr.storage.parts import PartWriter, ShardIndex
from tests.conftest import REPO, read_stage
from tests.docs import make_corpus
from tests.waiting import wait_until


def call(pool: WorkerPool, fn: Any, *args: Any) -> Any:
    return asyncio.run(pool.run(fn, *args))


@pytest.fixture
def pool() -> WorkerPool:
    with WorkerPool(1) as workers:
        yield workers


def test_a_documents_error_comes_back_as_itself(pool: WorkerPool, tmp_path: Path) -> None:
    broken = tmp_path / "broken.pdf"
    broken.write_bytes(b"%PDF-1.7\nnot really a PDF")
    ref = DocumentRef("broken.pdf", 0, str(broken), "pdf", str(broken))
    with pytest.raises(DocumentError) as raised:
        call(pool, count_pages, ref, RenderOptions())
    assert "count_pages" in str(raised.value.__cause__)  # the worker's traceback, for a bug report
    good = DocumentRef("report.pdf", 1, "report.pdf", "pdf", str(REPO / "samples" / "report.pdf"))
    assert call(pool, count_pages, good, RenderOptions()) == 2


def test_a_worker_that_dies_fails_its_own_call_only(pool: WorkerPool) -> None:
    first = call(pool, os.getpid)

    async def killed_mid_call() -> None:
        sleeping = asyncio.ensure_future(pool.run(time.sleep, 600))
        os.kill(first, signal.SIGKILL)  # as the OOM killer would
        await sleeping

    with pytest.raises(WorkerDied, match="running sleep ended without answering \\(killed by SIGKILL\\)"):
        asyncio.run(killed_mid_call())
    with pytest.raises(WorkerDied, match="exit code 3"):
        call(pool, os._exit, 3)
    second = call(pool, os.getpid)  # the pool still works, with a new worker
    assert second not in (first, os.getpid())
    assert not psutil.pid_exists(first) or psutil.Process(first).status() == psutil.STATUS_ZOMBIE


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "slurm-stop"])
def test_a_stop_signal_reaching_a_worker_leaves_it_alone(pool: WorkerPool, signum: int) -> None:
    # Ctrl-C reaches the terminal's process group, Slurm's SIGTERM every process of a task (r117:
    # a requeued task's render worker died in a page's fingerprint, and the run exited 2).
    worker = call(pool, os.getpid)
    os.kill(worker, signum)
    assert call(pool, os.getpid) == worker  # the same worker, still answering


def test_output_a_worker_prints_never_reaches_the_answers(pool: WorkerPool) -> None:
    call(pool, print, "noise from Python")
    assert call(pool, os.write, 1, b"noise from C, straight to fd 1\n") > 0
    assert call(pool, sum, [1, 2, 3]) == 6


def test_a_busy_worker_ends_with_its_parent(tmp_path: Path) -> None:
    parent = textwrap.dedent("""
        import os, sys, time
        from llm_ocr.runners.process_pool import ProcessPool
        pool = ProcessPool(1)
        print(pool.submit(os.getpid).result(), flush=True)
        pool.submit(time.sleep, 600)   # busy: it will not read EOF on its stdin
        time.sleep(600)
    """)
    process = subprocess.Popen([sys.executable, "-c", parent], cwd=REPO, stdout=subprocess.PIPE, text=True)
    worker: psutil.Process | None = None
    try:
        assert process.stdout is not None
        worker = psutil.Process(int(process.stdout.readline()))
        process.kill()
        process.wait()
        worker.wait(timeout=60)  # raises TimeoutExpired if the worker outlives its parent
    finally:
        process.kill()
        if worker is not None and worker.is_running():
            worker.kill()


class Clock:
    """The pool's clock, moved by the test only while the pool's calls are held."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Gate:
    """A FIFO a worker's call reads (``Gate.path.read_text``): it blocks until released."""

    def __init__(self, path: Path) -> None:
        os.mkfifo(path)
        self.path = path
        self.writer: int | None = None

    def held(self) -> bool:
        """Whether a call has it open to read; once it has, the write end stays open here (a
        writer that closed at once would end the call's read)."""
        if self.writer is None:
            try:
                self.writer = os.open(self.path, os.O_WRONLY | os.O_NONBLOCK)  # ENXIO while no one reads
            except OSError:
                return False
        return True

    def release(self, data: bytes = b"go") -> None:
        """Let the call's read return ``data`` (once it holds the gate)."""
        wait_until(self.held, f"a call reading {self.path.name}")
        assert self.writer is not None
        os.write(self.writer, data)
        os.close(self.writer)
        self.writer = None


@pytest.mark.parametrize(("waited", "workers", "first_answer"),
                         [(0.4, 1, b"go"), (2.0, 2, b"go"), (2.0, 2, b"\xff not UTF-8")])
def test_a_second_worker_starts_once_calls_waited_longer_than_the_first_took_to_start(
        tmp_path: Path, waited: float, workers: int, first_answer: bytes) -> None:
    # The first worker takes 1.0 s (on the pool's clock) from its start to its first answer, a
    # result or the call's own error (a first document that cannot be read times a start too).
    # Then two calls queue behind a held one; released after `waited` s, the next is taken and
    # the last still waits: 0.4 + 0.4 is less than a start (one worker was right), 2.0 + 2.0 more.
    gates = [Gate(tmp_path / f"gate-{i}") for i in range(3)]
    clock = Clock()
    pool = ProcessPool(2, clock=clock)
    try:
        first = pool.submit(gates[0].path.read_text)
        wait_until(lambda: pool.started == 1, "the first worker started")
        clock.now = 1.0
        gates[0].release(first_answer)
        assert first.exception() is None if first_answer == b"go" else isinstance(first.exception(), UnicodeDecodeError)
        pid = pool.submit(os.getpid).result()  # taken at once: no wait
        held = pool.submit(gates[1].path.read_text)
        wait_until(gates[1].held, "the worker holding a call")
        queued = [pool.submit(gates[2].path.read_text), pool.submit(os.getpid)]
        clock.now += waited
        gates[1].release()
        held.result()
        wait_until(gates[2].held, "the next call taken")
        if workers == 2:  # the last call went to a second worker while the first is held
            assert queued[1].result() != pid
        gates[2].release()
        assert queued[0].result() == "go"
        assert (queued[1].result() == pid) == (workers == 1)
        assert pool.started == workers
    finally:
        for gate in gates:
            if gate.writer is not None:
                gate.release()
        pool.shutdown(cancel_futures=True)


def test_a_worker_started_while_another_runs_takes_no_call_before_it_has_started(tmp_path: Path) -> None:
    # On a loaded machine a second worker took 1.3 s to start, and the call it had taken at once
    # (a document's page count, before a run's first render) waited all that time, while the
    # first worker answered the others in milliseconds. Here the second worker's start waits for
    # a file: the calls queued meanwhile must all be answered by the first.
    clock = Clock()
    pool = ProcessPool(2, clock=clock)
    started = tmp_path / "let-the-second-worker-start"
    held = Gate(tmp_path / "held")
    try:
        pid = pool.submit(os.getpid).result()  # the first worker: its start took 0 s on this clock
        pool._command = ["sh", "-c", 'while [ ! -e "$0" ]; do sleep 0.05; done; exec "$@"', str(started),
                         *pool._command]
        holding = pool.submit(held.path.read_text)
        wait_until(held.held, "the first worker holding a call")
        calls = [pool.submit(os.getpid)]
        clock.now += 1.0  # queued longer than a start: the next submission lets a second worker start
        calls += [pool.submit(os.getpid) for _ in range(4)]
        wait_until(lambda: pool.started == 2, "a second worker starting")
        held.release()
        assert holding.result() == "go"
        # Every call answered, or all but one with none left queued: that one is in the hands of
        # the worker still starting.
        wait_until(lambda: all(c.done() for c in calls)
                   or (not pool._queue and sum(c.done() for c in calls) == len(calls) - 1),
                   "the queued calls answered or taken")
        assert all(c.done() for c in calls), "a call waited for a worker still starting"
        assert [c.result() for c in calls] == [pid] * len(calls)
    finally:
        started.touch()
        if held.writer is not None:
            held.release()
        pool.shutdown(cancel_futures=True)


class DiesOn(WorkerPool):
    """Real workers, one of which dies when given ``doc_id`` to ``fn`` (count or render its
    pages), as on a PDF that crashes pdfium."""

    def __init__(self, fn: Any, doc_id: str) -> None:
        super().__init__(1)
        self.fn, self.doc_id = fn, doc_id

    async def read_ahead(self, fn: Any, *args: Any) -> Any:
        if fn is self.fn and args[0].doc_id == self.doc_id:
            return await super().read_ahead(os._exit, 1)
        return await super().read_ahead(fn, *args)


@pytest.mark.parametrize("fn", [count_pages, render_pages])
def test_a_document_that_kills_its_worker_is_an_error_and_the_others_complete(fn: Any, tmp_path: Path) -> None:
    make_corpus(tmp_path / "docs", documents=3, pages=2)
    pool = DiesOn(fn, "doc001.pdf")

    async def handler(ref: DocumentRef, item: PageImage | PageFailure, num_pages: int | None) -> PageResult:
        if isinstance(item, PageFailure):
            return PageResult(ref.doc_id, ref.index, item.page, ref.source, num_pages, status="error", error=item.error)
        return PageResult(ref.doc_id, ref.index, item.page, ref.source, num_pages, status="ok")

    async def main() -> None:
        writer = PartWriter(Storage(str(tmp_path / "out/extract")), page_schema(), 0, 1)
        flow = PageFlow(handler=handler, writer=writer, counters=RunCounters("extract", 0, 1),
                        settings=FlowSettings(max_in_flight=4, prefetch_chunks=1))
        await flow.run(DocumentPages(list_documents([str(tmp_path / "docs")]), ShardIndex(), pool, RenderOptions()))
        await writer.close()

    try:
        asyncio.run(main())
    finally:
        pool.close()
    rows = {(r["doc_id"], r["page"]): r for r in read_stage(tmp_path / "out", "extract")}
    ok = {key for key, row in rows.items() if row["status"] == "ok"}
    assert ok == {("doc000.pdf", 1), ("doc000.pdf", 2), ("doc002.pdf", 1), ("doc002.pdf", 2)}
    failed = [row for key, row in rows.items() if key[0] == "doc001.pdf"]
    assert failed and all(row["status"] == "error" for row in failed)
    assert all("ended without answering (exit code 1)" in row["error"] for row in failed), failed


@pytest.mark.parametrize("workers", [1, 0], ids=["processes", "a thread"])
def test_a_call_a_page_waits_on_goes_before_the_renders_queued(tmp_path: Path, workers: int) -> None:
    # A run renders ahead of its requests, so renders queue in the pool; a page's fingerprint,
    # asked while it holds an in-flight slot, waited behind them up to 3.4 s on a loaded machine.
    # It must wait only for the call running. The calls read the monotonic clock (one clock for
    # every process of the machine) when they run.
    held = Gate(tmp_path / "held")

    async def main(pool: WorkerPool) -> tuple[int, list[int]]:
        holding = asyncio.ensure_future(pool.read_ahead(held.path.read_text))
        await asyncio.to_thread(wait_until, held.held, "a render holding the pool")
        behind = [asyncio.ensure_future(pool.read_ahead(time.monotonic_ns)) for _ in range(3)]
        await asyncio.sleep(0)  # the read-ahead calls are submitted before the page's
        first = asyncio.ensure_future(pool.run(time.monotonic_ns))
        await asyncio.sleep(0)
        held.release()
        assert await holding == "go"
        return await first, list(await asyncio.gather(*behind))

    with WorkerPool(workers) as pool:
        try:
            first, behind = asyncio.run(main(pool))
        finally:
            if held.writer is not None:
                held.release()
    assert first < min(behind), "the page's call ran after renders queued before it"
    assert behind == sorted(behind), "the read-ahead calls kept their order"
