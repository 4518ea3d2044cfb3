"""The service's queue on SQLite (llm_ocr/service/queue.py): leases, redelivery, the queue limit,
idempotency keys and cancels, decided by the database alone (no server, no clock waits: a lease
given in the past has lapsed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from llm_ocr.service.queue import DocumentQueue, QueueFull

LAPSED = -1.0  # a lease that ended a second before it was given


def submit(queue: DocumentQueue, doc_id: str, key: str | None = None, limit: int = 10) -> bool:
    return queue.submit(doc_id, name=f"{doc_id}.pdf", input_url=f"/in/{doc_id}.pdf", options={}, pages=1, key=key,
                        limit=limit)[1]


def test_oldest_first_and_one_owner_at_a_time(tmp_path: Path) -> None:
    queue = DocumentQueue(tmp_path / "q.db")
    submit(queue, "a")
    submit(queue, "b")
    first = queue.claim("w1", 30, 3)
    second = queue.claim("w2", 30, 3)
    assert (first and first.id, second and second.id) == ("a", "b")
    assert queue.claim("w3", 30, 3) is None  # both held under live leases
    assert not queue.finish("a", "w2", "done", pages_done=1, pages_failed=0)  # not w2's document
    assert queue.finish("a", "w1", "done", pages_done=1, pages_failed=0)
    assert queue.get("a").status == "done"  # type: ignore[union-attr]


def test_a_lapsed_lease_is_delivered_again_and_the_lost_worker_can_no_longer_end_it(tmp_path: Path) -> None:
    queue = DocumentQueue(tmp_path / "q.db")
    submit(queue, "a")
    assert queue.claim("dead", LAPSED, 3) is not None
    again = queue.claim("alive", 30, 3)
    assert again is not None and again.id == "a" and again.deliveries == 2 and again.lease_owner == "alive"
    assert not queue.renew("a", "dead", 30).held
    assert not queue.finish("a", "dead", "failed", pages_done=0, pages_failed=1)
    assert queue.renew("a", "alive", 30).held


def test_a_document_that_keeps_losing_its_worker_fails(tmp_path: Path) -> None:
    queue = DocumentQueue(tmp_path / "q.db")
    submit(queue, "poison")
    for _ in range(2):
        assert queue.claim("w", LAPSED, 2) is not None
    assert queue.claim("w", 30, 2) is None
    doc = queue.get("poison")
    assert doc is not None and doc.status == "failed" and doc.cause == "worker_lost"
    assert queue.failure_causes() == {"worker_lost": 1}


def test_released_documents_go_back_and_cancelled_ones_do_not(tmp_path: Path) -> None:
    queue = DocumentQueue(tmp_path / "q.db")
    submit(queue, "a")
    submit(queue, "b")
    assert queue.claim("w", 30, 3).id == "a"  # type: ignore[union-attr]
    assert queue.release("a", "w")
    doc = queue.get("a")
    assert doc is not None and doc.status == "queued" and doc.deliveries == 0  # a stop is not a loss
    assert queue.claim("w", 30, 3).id == "a"  # type: ignore[union-attr]
    assert queue.cancel("a").status == "running"  # type: ignore[union-attr]  # asked; its worker stops it
    assert queue.cancel_asked("a") and queue.release("a", "w")
    assert queue.get("a").status == "cancelled"  # type: ignore[union-attr]
    assert queue.cancel("b").status == "cancelled"  # type: ignore[union-attr]  # queued: at once
    assert queue.claim("w", 30, 3) is None


def test_queue_limit_and_idempotency_keys(tmp_path: Path) -> None:
    queue = DocumentQueue(tmp_path / "q.db")
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
