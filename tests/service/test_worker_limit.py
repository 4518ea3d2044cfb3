"""A worker's in-flight limit is one, shared by every document it has open.

The worker reads many one-page documents at once (``concurrency``), each a run of its own; their
pages take slots from the worker's one limit (``max_in_flight``), so the model server sees as
many requests as the limit allows while documents start and end, and never more. Every request
is held by the simulated server (``hang`` faults) until the test releases them, round after
round; between rounds the test waits until the worker has settled: the server holds the
limit's worth of requests, and every other open document waits for a slot with its page
rendered (docs/service.md, "Throughput"). The worker runs in this process on a real SQLite
queue, against the simulator as a subprocess.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from reportlab.pdfgen import canvas

from llm_ocr.service.spool import Spool
from llm_ocr.service.sqlite import SQLiteQueue
from llm_ocr.service.worker import Worker, WorkerSettings
from llm_ocr.testing import SimulatedServer
from tests.waiting import HANG_GUARD_S, hangs_applied

SLOTS = 2  # the worker's in-flight limit
OPEN = 4  # documents it reads at once
DOCS = 8


def _page(path: Path, number: int) -> None:
    pdf = canvas.Canvas(str(path), pagesize=(288, 144))
    pdf.drawString(24, 100, f"document {number}: a few words")
    pdf.save()


async def _settled(worker: Worker, queue: SQLiteQueue, sim: SimulatedServer, ids: list[str],
                   released: int) -> int:
    """Wait until the server holds the requests the worker's limit allows and the other open
    documents wait for a slot; fail as soon as the server holds more, or a run waits for a slot
    with no page to send. Returns the hangs the server has applied (all of them in flight)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + HANG_GUARD_S
    while True:
        # Documents not ended, read first: it only falls, so the bounds below are never too tight.
        statuses = await asyncio.to_thread(lambda: [queue.get(doc_id) for doc_id in ids])
        left = sum(1 for doc in statuses if doc is not None and doc.status != "done")
        applied = await asyncio.to_thread(hangs_applied, sim)
        held_at_server = applied - released
        assert held_at_server <= SLOTS, f"the server holds {held_at_server} requests; the worker's limit is {SLOTS}"
        limits = getattr(worker.reuse, "limits", None)
        if limits is not None:
            expected_waiting = max(0, min(OPEN, left) - SLOTS)
            # Only a document with a page to send waits for a slot (one whose run is ending holds none).
            assert limits.pages.waiting <= expected_waiting, \
                f"{limits.pages.waiting} wait for a slot; {left} documents left, {OPEN} open, {SLOTS} slots"
            if (held_at_server == limits.pages.held == min(SLOTS, left)
                    and limits.pages.waiting == expected_waiting):
                return applied
        assert loop.time() < deadline, f"never settled: {held_at_server} held at the server, {left} left"
        await asyncio.sleep(0.05)  # a poll of the two states, not a wait for time to pass


def _started_worker(tmp: Path, sim: SimulatedServer) -> tuple[SQLiteQueue, Worker, asyncio.Event, asyncio.Task[None]]:
    """A worker on a fresh SQLite queue under ``tmp``: ``OPEN`` documents at once, a limit of
    ``SLOTS`` requests, running in a task until its ``stop`` is set (call from a running loop)."""
    queue = SQLiteQueue(tmp / "q.db")
    settings = WorkerSettings(endpoint=sim.base_url, concurrency=OPEN, poll=3600,
                              run_options={"max_in_flight": SLOTS, "dedup": False})
    worker = Worker(queue, Spool(str(tmp / "data")), settings)
    stop = asyncio.Event()
    return queue, worker, stop, asyncio.create_task(worker.run(stop))


async def _stream(tmp: Path, docs: Path, sim: SimulatedServer) -> tuple[list[int], Worker, int]:
    queue, worker, stop, running = _started_worker(tmp, sim)
    while not worker.ready:  # the endpoint opened (no chat request: nothing is held yet)
        assert not running.done(), running
        await asyncio.sleep(0.05)
    followers = worker.reuse.limits.pages.followers if getattr(worker.reuse, "limits", None) else 0
    ids = [f"doc{number}" for number in range(DOCS)]
    for doc_id in ids:
        queue.submit(doc_id, name=f"{doc_id}.pdf", input_url=str(docs / f"{doc_id}.pdf"), options={},
                     pages=1, key=None, limit=100)
    worker.wake.set()
    # The server is the module's: what it held for the other test is applied already.
    rounds: list[int] = []
    released = base = await asyncio.to_thread(hangs_applied, sim)
    while released - base < DOCS:
        released = await _settled(worker, queue, sim, ids, released)
        rounds.append(worker.reuse.limits.pages.held)
        await asyncio.to_thread(sim.release)
    while any(doc is None or doc.status != "done" for doc in [queue.get(doc_id) for doc_id in ids]):
        assert not running.done(), running
        await asyncio.sleep(0.05)
    stop.set()
    await asyncio.wait_for(running, HANG_GUARD_S)
    return rounds, worker, followers


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SimulatedServer, Path]]:
    """The simulator and its corpus of one-page documents, shared by the module's tests (each
    injects the hangs it needs and counts from what the server applied before it)."""
    docs = tmp_path_factory.mktemp("docs")
    for number in range(DOCS):
        _page(docs / f"doc{number}.pdf", number)
    # The pages are the server's corpus: it answers with their text, no figure to describe (a
    # figure request would be held as well, and counted against another limit).
    with SimulatedServer("--instant", corpus=str(docs)) as sim:
        yield sim, docs


def test_documents_share_the_workers_limit_and_leave_nothing_on_it(
        tmp_path: Path, server: tuple[SimulatedServer, Path]) -> None:
    sim, docs = server
    before = sim.stats()
    sim.inject("hang", count=DOCS)  # every request held until released
    rounds, worker, followers = asyncio.run(_stream(tmp_path, docs, sim))
    after = sim.stats()
    assert after["requests"] - before["requests"] == DOCS  # one request a page, none sent again
    # The model's context length is the worker's, read when its endpoint opens and once for its
    # runs, not twice by every document's run (Extract's and Describe's contexts).
    assert after.get("model_lists", 0) - before.get("model_lists", 0) <= 2, after
    # No progress file per document: the queue says how it goes (its results hold the run's own).
    results = tmp_path / "data" / "results"
    assert list(results.glob("*/_state/progress/*")) == []
    assert len(list(results.glob("*/_state/extract/done-*.json"))) == DOCS
    # Each round the server held the limit's worth of requests while documents turned over.
    assert rounds == [SLOTS] * (DOCS // SLOTS), rounds
    limits = worker.reuse.limits
    # Nothing of the ended documents is left on the worker's limits.
    assert (limits.pages.held, limits.pages.waiting, limits.pages.followers) == (0, 0, followers)
    for limit in (limits.pieces, limits.figures, limits.describe_pages):
        assert (limit.held, limit.waiting, limit.followers) == (0, 0, 0)


#: A Fields schema each document is submitted with (the gateway stores its text in the options).
SCHEMA = json.dumps({"type": "object", "properties": {"title": {"type": "string"}}})


async def _fields_stream(tmp: Path, docs: Path, sim: SimulatedServer) -> tuple[int, int]:
    """Four documents open with a schema: their pages and then their Fields requests, all held by
    the server until the test releases what it holds. Returns the most requests the server held at
    once and the rounds."""
    queue, worker, stop, running = _started_worker(tmp, sim)
    ids = [f"doc{number}" for number in range(OPEN)]
    for doc_id in ids:
        queue.submit(doc_id, name=f"{doc_id}.pdf", input_url=str(docs / f"{doc_id}.pdf"),
                     options={"fields_schema": SCHEMA, "fields_repair": False}, pages=1, key=None, limit=100)
    worker.wake.set()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + HANG_GUARD_S
    released = await asyncio.to_thread(hangs_applied, sim)  # the module's server: applied before
    most = rounds = 0
    while True:
        statuses = await asyncio.to_thread(lambda: [queue.get(doc_id) for doc_id in ids])
        left = sum(1 for doc in statuses if doc is None or doc.status not in ("done", "failed"))
        if not left:
            break
        held_at_server = await asyncio.to_thread(hangs_applied, sim) - released
        most = max(most, held_at_server)
        assert held_at_server <= SLOTS, f"the server holds {held_at_server} requests; the worker's limit is {SLOTS}"
        limits = getattr(worker.reuse, "limits", None)
        # Settled: every request at the server holds one of the worker's slots, and either they are
        # all taken or every document not ended holds one or waits for one (a document has one
        # request at a time: its page, then its Fields), so nothing more comes before a release.
        # (Releasing whenever none waited released one request at a time on a busy machine, the
        # other documents still starting: the server never held 2.)
        if limits is not None and held_at_server == limits.pages.held > 0 and (
                held_at_server == SLOTS or limits.pages.held + limits.pages.waiting == left):
            rounds += 1
            # What the release ended: a request held after the count above (a slot was free) is
            # ended by it too, and must not be counted as still held.
            released += await asyncio.to_thread(sim.release)
        assert not running.done(), running
        assert loop.time() < deadline, f"never settled: {held_at_server} held at the server"
        await asyncio.sleep(0.05)  # a poll of the two states, not a wait for time to pass
    stop.set()
    await asyncio.wait_for(running, HANG_GUARD_S)
    return most, rounds


def test_fields_requests_take_their_slots_from_the_workers_limit(
        tmp_path: Path, server: tuple[SimulatedServer, Path]) -> None:
    sim, docs = server
    before = sim.stats()["requests"]
    sim.inject("hang", count=2 * OPEN)  # every request held until released
    most, rounds = asyncio.run(_fields_stream(tmp_path, docs, sim))
    # A page and a Fields request a document (before, the Fields requests were on no shared
    # limit: two documents' fields were held beside two others' pages).
    assert sim.stats()["requests"] - before == 2 * OPEN
    assert most == SLOTS and rounds >= 2 * OPEN // SLOTS
