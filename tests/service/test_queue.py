"""The service's queue (llm_ocr/service/queue.py) on both backends, SQLite and a real PostgreSQL
(tests/fixtures/postgres.py): leases, redelivery, the queue limit, idempotency keys and cancels,
decided by the database alone (no clock waits: a lease given in the past has lapsed)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from llm_ocr.service.config import open_queue
from llm_ocr.service.queue import DocumentQueue, QueueFull, QueueUnavailable

LAPSED = -1.0  # a lease that ended a second before it was given


@pytest.fixture(params=["sqlite", "postgresql"])
def queue(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[DocumentQueue]:
    """An empty queue on each backend."""
    database = str(tmp_path / "q.db") if request.param == "sqlite" else request.getfixturevalue("postgres_url")
    opened = open_queue(database)
    yield opened
    opened.close()


def submit(queue: DocumentQueue, doc_id: str, key: str | None = None, limit: int = 10) -> bool:
    return queue.submit(doc_id, name=f"{doc_id}.pdf", input_url=f"/in/{doc_id}.pdf", options={}, pages=1, key=key,
                        limit=limit)[1]


def test_oldest_first_and_one_owner_at_a_time(queue: DocumentQueue) -> None:
    submit(queue, "a")
    submit(queue, "b")
    first = queue.claim("w1", 30, 3)
    second = queue.claim("w2", 30, 3)
    assert (first and first.id, second and second.id) == ("a", "b")
    assert queue.claim("w3", 30, 3) is None  # both held under live leases
    renewed = queue.renew(["a", "b"], "w1", 30)  # one statement for a worker's documents: only its own renewed
    assert {doc_id: lease.held for doc_id, lease in renewed.items()} == {"a": True, "b": False}
    assert not queue.finish("a", "w2", "done", pages_done=1, pages_failed=0)  # not w2's document
    assert queue.finish("a", "w1", "done", pages_done=1, pages_failed=0)
    assert queue.get("a").status == "done"  # type: ignore[union-attr]


def test_a_lapsed_lease_is_delivered_again_and_the_lost_worker_can_no_longer_end_it(queue: DocumentQueue) -> None:
    submit(queue, "a")
    assert queue.claim("dead", LAPSED, 3) is not None
    again = queue.claim("alive", 30, 3)
    assert again is not None and again.id == "a" and again.deliveries == 2 and again.lease_owner == "alive"
    assert not queue.renew(["a"], "dead", 30)["a"].held
    assert not queue.finish("a", "dead", "failed", pages_done=0, pages_failed=1)
    assert queue.renew(["a"], "alive", 30)["a"].held


def test_a_document_that_keeps_losing_its_worker_fails(queue: DocumentQueue) -> None:
    submit(queue, "poison")
    for _ in range(2):
        assert queue.claim("w", LAPSED, 2) is not None
    assert queue.claim("w", 30, 2) is None
    doc = queue.get("poison")
    assert doc is not None and doc.status == "failed" and doc.cause == "worker_lost"
    assert queue.failure_causes() == {"worker_lost": 1}


def test_released_documents_go_back_and_cancelled_ones_do_not(queue: DocumentQueue) -> None:
    submit(queue, "a")
    submit(queue, "b")
    assert queue.claim("w", 30, 3).id == "a"  # type: ignore[union-attr]
    assert queue.release("a", "w")
    doc = queue.get("a")
    assert doc is not None and doc.status == "queued" and doc.deliveries == 0  # a stop is not a loss
    assert queue.claim("w", 30, 3).id == "a"  # type: ignore[union-attr]
    assert queue.cancel("a").status == "running"  # type: ignore[union-attr]  # asked; its worker stops it
    assert queue.cancels_asked(["a", "b"]) == {"a"} and queue.release("a", "w")
    assert queue.get("a").status == "cancelled"  # type: ignore[union-attr]
    assert queue.cancel("b").status == "cancelled"  # type: ignore[union-attr]  # queued: at once
    assert queue.claim("w", 30, 3) is None


def test_queue_limit_and_idempotency_keys(queue: DocumentQueue) -> None:
    assert submit(queue, "a", key="k1", limit=2)
    assert not submit(queue, "a2", key="k1", limit=2)  # the same key: the first document, nothing new
    assert queue.get("a2") is None
    assert submit(queue, "b", limit=2)
    with pytest.raises(QueueFull):
        submit(queue, "c", limit=2)
    assert not submit(queue, "c", key="k1", limit=2)  # a known key answers even when the queue is full
    queue.claim("w", 30, 3)
    assert submit(queue, "c", limit=2)  # a document taken by a worker no longer counts
    assert queue.counts() == {"queued": 2, "running": 1, "done": 0, "failed": 0, "cancelled": 0}


def test_workers_claiming_at_once_each_get_a_different_document(queue: DocumentQueue) -> None:
    """Eight threads claim together (each with its own connection): every document is taken by
    exactly one of them, none is taken twice (PostgreSQL: FOR UPDATE SKIP LOCKED; SQLite: its
    write lock)."""
    for n in range(16):
        submit(queue, f"d{n:02}", limit=100)
    taken: list[str] = []
    lock = threading.Lock()
    start = threading.Barrier(8)

    def work(name: str) -> None:
        start.wait()
        while (doc := queue.claim(name, 30, 3)) is not None:
            with lock:
                taken.append(doc.id)

    threads = [threading.Thread(target=work, args=(f"w{n}",)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(taken) == [f"d{n:02}" for n in range(16)]
    assert queue.counts()["running"] == 16


def test_a_database_that_does_not_answer_is_said_plainly_without_its_password() -> None:
    """Nothing listens on the port: the queue gives up after its wait with a message that names the
    database without the URL's password."""
    from llm_ocr.service.postgres import PostgresQueue
    from tests.fixtures.postgres import PASSWORD

    with pytest.raises(QueueUnavailable) as raised:
        PostgresQueue(f"postgresql://u:{PASSWORD}@127.0.0.1:1/db", wait_s=0.5)
    assert "127.0.0.1:1/db" in str(raised.value) and PASSWORD not in str(raised.value)


def test_gateways_submitting_at_once_keep_the_queue_limit_and_one_document_per_key(queue: DocumentQueue) -> None:
    """Twelve submissions at once against a limit of 5, half of them with one idempotency key:
    exactly 5 documents are queued, at most one of them with the key, and every other submission
    is refused or answered with the keyed document. Which submissions win depends on the
    interleaving (the six without a key can fill all five places), so only what holds for every
    interleaving is asserted."""
    outcomes: dict[bool, list[str]] = {True: [], False: []}  # keyed? -> outcomes
    lock = threading.Lock()
    start = threading.Barrier(12)

    def work(n: int) -> None:
        keyed = bool(n % 2)
        start.wait()
        try:
            created = submit(queue, f"s{n:02}", key="same" if keyed else None, limit=5)
            outcome = "queued" if created else "replayed"
        except QueueFull:
            outcome = "full"
        with lock:
            outcomes[keyed].append(outcome)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    every = outcomes[True] + outcomes[False]
    assert queue.counts()["queued"] == every.count("queued") == 5, outcomes
    keyed_docs = sum(1 for doc in queue.list(limit=100) if doc.idempotency_key == "same")
    assert keyed_docs == outcomes[True].count("queued") <= 1, outcomes
    assert "replayed" not in outcomes[False], outcomes  # no key, nothing to replay
    if keyed_docs == 0:  # the key never got a place: a replay would have answered a document that is not there
        assert set(outcomes[True]) == {"full"}, outcomes


def test_timings_are_those_of_documents_that_ended_after_a_worker_took_them(queue: DocumentQueue) -> None:
    for doc_id in ("read", "waiting", "cancelled"):
        submit(queue, doc_id)
    queue.cancel("cancelled")  # ended, never taken: no time in a worker to report
    assert queue.claim("w", 30, 3) is not None  # "read", the oldest queued
    assert queue.timings() == []  # running: not ended yet
    assert queue.finish("read", "w", "done", pages_done=1, pages_failed=0)
    doc = queue.get("read")
    assert doc is not None and doc.started is not None and doc.finished is not None
    assert list(queue.timings()) == [(doc.created, doc.started, doc.finished)]


def test_corrections_and_approvals_are_kept_per_document_and_path(queue: DocumentQueue) -> None:
    for doc_id in ("a", "b", "c"):
        submit(queue, doc_id)
    assert queue.corrections("a") == [] and queue.approved("a") is None and queue.reviewed() == []
    queue.correct("a", "/total", 12.5)
    queue.correct("a", "/vendor", {"name": "<b>x</b>"})
    queue.correct("a", "/total", 13)  # corrected again: the latest value is kept
    assert [(c.path, c.value) for c in queue.corrections("a")] == [("/total", 13), ("/vendor", {"name": "<b>x</b>"})]
    assert queue.corrections("b") == []
    when = queue.approve("c")
    assert queue.approved("c") == pytest.approx(when) and queue.approved("a") is None
    assert queue.reviewed() == ["a", "c"]
    assert [doc.id for doc in queue.recent(2)] == ["c", "b"]
