"""A worker's claims and leases: one claimer per worker, however many documents it reads at once;
as many documents open as twice its in-flight limit unless told; one renewal and one cancel
look-up for all the documents it reads.

The worker runs as it does in the service (:meth:`llm_ocr.service.worker.Worker.run`) on a real
SQLite queue; opening a model endpoint and reading a document are replaced by ending the
document, since what is counted is the claims."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from llm_ocr.outcomes import ExitCode
from llm_ocr.runners.shard import ShardOutcome
from llm_ocr.service.queue import Document
from llm_ocr.service.spool import Spool
from llm_ocr.service.sqlite import SQLiteQueue
from llm_ocr.service.worker import Worker, WorkerSettings


class CountingQueue(SQLiteQueue):
    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.claims = 0

    def claim(self, owner: str, lease_s: float, max_deliveries: int) -> Document | None:
        self.claims += 1
        return super().claim(owner, lease_s, max_deliveries)


class EndingWorker(Worker):
    """Ends each document it takes at once, and says so."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.ended: asyncio.Queue[str] = asyncio.Queue()

    @contextlib.asynccontextmanager
    async def _endpoint(self) -> AsyncIterator[None]:
        yield None  # no model: nothing is read

    async def process(self, doc: Document, stop: asyncio.Event) -> None:
        await asyncio.to_thread(self.queue.finish, doc.id, self.name, "done", pages_done=1, pages_failed=0)
        await self.ended.put(doc.id)


async def _three_documents(tmp: Path) -> tuple[list[str], int]:
    queue = CountingQueue(tmp / "q.db")
    # `poll` an hour: every claim but the first is one a submission woke.
    settings = WorkerSettings(concurrency=8, poll=3600)
    worker = EndingWorker(queue, Spool(str(tmp)), settings)
    stop = asyncio.Event()
    loop = asyncio.create_task(worker.run(stop))
    ended = []
    for n in range(3):
        queue.submit(f"doc{n}", name=f"doc{n}.png", input_url=str(tmp / f"doc{n}.png"), options={}, pages=1,
                     key=None, limit=10)
        worker.wake.set()  # what the gateway in the same process does after a submission
        ended.append(await asyncio.wait_for(worker.ended.get(), timeout=120))
    stop.set()
    await asyncio.wait_for(loop, timeout=120)
    return ended, queue.claims


def test_a_submission_wakes_one_claim_not_one_per_place(tmp_path: Path) -> None:
    ended, claims = asyncio.run(_three_documents(tmp_path))
    assert ended == ["doc0", "doc1", "doc2"]
    # One claim when the worker starts, then per document the claim that takes it and, at most,
    # one that finds the queue empty: not eight (one per place) racing for each document.
    assert claims <= 1 + 2 * len(ended), claims


class HoldingWorker(Worker):
    """Holds each document it takes until the test lets it go, and says how many it holds."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.holding: set[str] = set()
        self.changed = asyncio.Event()
        self.release = asyncio.Event()

    @contextlib.asynccontextmanager
    async def _endpoint(self) -> AsyncIterator[None]:
        yield None

    async def process(self, doc: Document, stop: asyncio.Event) -> None:
        self.holding.add(doc.id)
        self.changed.set()
        await self.release.wait()
        await asyncio.to_thread(self.queue.finish, doc.id, self.name, "done", pages_done=1, pages_failed=0)


async def _held_at_once(tmp: Path, in_flight: int, docs: int) -> tuple[int, int]:
    queue = SQLiteQueue(tmp / "q.db")
    for n in range(docs):
        queue.submit(f"doc{n}", name=f"doc{n}.png", input_url=str(tmp / f"doc{n}.png"), options={}, pages=1,
                     key=None, limit=100)
    # No --concurrency: the worker opens as many documents as its in-flight limit calls for.
    worker = HoldingWorker(queue, Spool(str(tmp)), WorkerSettings(poll=3600, run_options={"max_in_flight": in_flight}))
    stop = asyncio.Event()
    loop = asyncio.create_task(worker.run(stop))
    # Until the claimer stopped at its bound: the documents left in the queue are those it did not take.
    while len(worker.holding) < min(docs, 2 * in_flight):
        worker.changed.clear()
        await asyncio.wait_for(worker.changed.wait(), timeout=60)  # the old default (4) never gets there
    held, waiting = len(worker.holding), queue.depth()
    worker.release.set()
    stop.set()
    await asyncio.wait_for(loop, timeout=120)
    return held, waiting


def test_a_worker_opens_twice_its_in_flight_limit_by_default(tmp_path: Path) -> None:
    # With as many documents open as slots (or fewer: the old default was 4 whatever the limit),
    # a one-page document starting or ending left its slot idle.
    held, waiting = asyncio.run(_held_at_once(tmp_path, in_flight=3, docs=8))
    assert (held, waiting) == (6, 2)


class RecordingQueue(SQLiteQueue):
    """Records the documents each lease renewal and cancel look-up names."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.calls: list[tuple[str, frozenset[str]]] = []
        self.called = asyncio.Event()
        self.loop = asyncio.get_running_loop()

    def _record(self, what: str, ids: Any) -> None:
        self.calls.append((what, frozenset([ids] if isinstance(ids, str) else ids)))
        self.loop.call_soon_threadsafe(self.called.set)

    def renew(self, doc_ids: Any, *args: Any) -> Any:
        self._record("renew", doc_ids)
        return super().renew(doc_ids, *args)

    def cancels_asked(self, doc_ids: Any) -> Any:
        self._record("cancels", doc_ids)
        return super().cancels_asked(doc_ids)


class WaitingWorker(Worker):
    """Its runs wait until they are stopped (a cancel, the worker stopping)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.running: set[str] = set()
        self.changed = asyncio.Event()

    @contextlib.asynccontextmanager
    async def _endpoint(self) -> AsyncIterator[None]:
        yield None

    async def _run(self, doc: Document, halt: asyncio.Event) -> ShardOutcome:
        self.running.add(doc.id)
        self.changed.set()
        await halt.wait()
        self.running.discard(doc.id)
        self.changed.set()
        return ShardOutcome(ExitCode.INTERRUPTED)


async def _keeping(tmp: Path) -> tuple[list[tuple[str, frozenset[str]]], dict[str, str], list[str]]:
    queue = RecordingQueue(tmp / "q.db")
    ids = [f"doc{n}" for n in range(4)]
    for doc_id in ids:
        queue.submit(doc_id, name=f"{doc_id}.png", input_url=str(tmp / f"{doc_id}.png"), options={}, pages=1,
                     key=None, limit=100)
    # A lease of 0.6 s: renewed every 0.2 s; cancels looked for every 0.05 s between.
    worker = WaitingWorker(queue, Spool(str(tmp)), WorkerSettings(concurrency=4, poll=0.05, lease=0.6))
    stop = asyncio.Event()
    loop = asyncio.create_task(worker.run(stop))
    while worker.running != set(ids):
        worker.changed.clear()
        await asyncio.wait_for(worker.changed.wait(), timeout=60)
    # The lease keeper takes its list of documents, then calls the queue from a thread: a call
    # recorded after all four run may still carry a list taken before the fourth was held (r23).
    # Once one call names all four, every later one is from a list taken after (or a dozen
    # calls: one per document each, as before).
    while not any(held == set(ids) for _, held in queue.calls) and len(queue.calls) < 12:
        queue.called.clear()
        await asyncio.wait_for(queue.called.wait(), timeout=60)
    queue.calls.clear()
    # A renewal and a cancel look-up since all four run (or a dozen calls: one per document each).
    while not ({"renew", "cancels"} <= {what for what, _ in queue.calls} or len(queue.calls) >= 12):
        queue.called.clear()
        await asyncio.wait_for(queue.called.wait(), timeout=60)
    calls = list(queue.calls)
    queue.cancel("doc2")
    while "doc2" in worker.running:  # stopped by the lease keeper's look-up, the others not
        worker.changed.clear()
        await asyncio.wait_for(worker.changed.wait(), timeout=60)
    still = sorted(worker.running)
    stop.set()
    await asyncio.wait_for(loop, timeout=120)
    return calls, {doc_id: doc.status for doc_id in ids if (doc := queue.get(doc_id))}, still


def test_one_worker_renews_its_leases_and_looks_for_cancels_in_one_statement(tmp_path: Path) -> None:
    calls, statuses, still = asyncio.run(_keeping(tmp_path))
    # Every renewal and look-up named every document the worker held (before: one per document).
    assert calls and all(ids == {"doc0", "doc1", "doc2", "doc3"} for _, ids in calls), calls
    assert {what for what, _ in calls} == {"renew", "cancels"}
    # The cancelled one stopped alone; the others went back to the queue when the worker stopped.
    assert still == ["doc0", "doc1", "doc3"]
    assert statuses == {"doc0": "queued", "doc1": "queued", "doc2": "cancelled", "doc3": "queued"}
