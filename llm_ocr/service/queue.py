"""The service's state and queue: what every backend keeps, and how one is chosen.

A document is one row. Its life::

    queued -> running -> done | failed | cancelled
    queued -> cancelled                         (DELETE before a worker took it: it never starts)
    running -> queued                           (its worker stopped gracefully: released, resumed later)
    running (lease lapsed) -> running           (redelivered to another worker)

A worker takes a document under a **lease** (``lease_owner``, ``lease_expires``) and renews it
while it works; every write a worker makes is conditional on still holding the lease, so a worker
that lost it (killed, or stalled past its lease) can no longer change the row. A document
whose lease lapsed is taken again by the next claim; one delivered ``max_deliveries`` times
without ending is failed (cause ``worker_lost``) rather than crash workers for ever.

Two backends keep these rules (:class:`DocumentQueue` is their interface): one SQLite file
(:mod:`.sqlite`, the embedded default: the gateway and workers of one machine) and PostgreSQL
(:mod:`.postgres`: any number of gateways and workers on any machines);
:func:`llm_ocr.service.config.open_queue` picks one from ``--database``.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Protocol

from llm_ocr.service.reviews import Correction

#: Every status a document can have.
STATUSES = ("queued", "running", "done", "failed", "cancelled")
#: Statuses a document never leaves.
FINAL = frozenset({"done", "failed", "cancelled"})


class QueueFull(Exception):
    """The queue holds its limit of documents waiting; ``depth`` of them."""

    def __init__(self, depth: int) -> None:
        super().__init__(f"the queue is full ({depth} documents waiting)")
        self.depth = depth


class QueueUnavailable(Exception):
    """The database did not answer (down, restarting, unreachable) for longer than the queue
    waits for it; the message says why, without credentials."""


class DriverMissing(Exception):
    """The database's driver is not installed; the message says what to install."""


@dataclass(frozen=True)
class Document:
    """One document's row."""

    seq: int
    id: str
    status: str
    name: str
    input: str
    options: dict[str, Any]
    idempotency_key: str | None
    pages: int | None
    created: float
    started: float | None
    finished: float | None
    lease_owner: str | None
    lease_expires: float | None
    deliveries: int
    cancel: bool
    error: str | None
    cause: str | None
    pages_done: int
    pages_failed: int

    @classmethod
    def of(cls, row: dict[str, Any]) -> Document:
        """The document of a ``SELECT *`` row as a dict (options as JSON text or already decoded)."""
        values = dict(row)
        if isinstance(values["options"], str):
            values["options"] = json.loads(values["options"])
        values["cancel"] = bool(values["cancel"])
        return cls(**values)


@dataclass(frozen=True)
class Lease:
    """What renewing a lease found: whether it is still held, and whether a cancel was asked."""

    held: bool
    cancel: bool


class DocumentQueue(Protocol):
    """The documents, their status and leases: what the gateway and the workers use."""

    # -- the gateway's side

    def by_key(self, key: str) -> Document | None:
        """The document submitted with idempotency key ``key``, if any."""

    def depth(self) -> int:
        """Documents queued and not yet taken by a worker."""

    def submit(self, doc_id: str, *, name: str, input_url: str, options: dict[str, Any], pages: int | None,
               key: str | None, limit: int) -> tuple[Document, bool]:
        """Queue a document; ``(its row, True)``, or ``(the row submitted earlier with key, False)``.
        Raises :class:`QueueFull` when ``limit`` documents are queued already."""

    def get(self, doc_id: str) -> Document | None:
        """The document ``doc_id``, or None."""

    def list(self, *, status: str | None = None, since: float | None = None, after: int = 0,
             limit: int = 50) -> list[Document]:
        """Documents in submission order after cursor ``after`` (a ``seq``), of ``status``,
        submitted at or after ``since`` (epoch seconds); ``limit`` at most."""

    def recent(self, limit: int) -> Sequence[Document]:
        """The ``limit`` documents submitted last, newest first."""

    def cancel(self, doc_id: str) -> Document | None:
        """Cancel ``doc_id``: a queued document is cancelled at once (it never starts); a running
        one is marked, and its worker stops it after the pages in flight. None if unknown."""

    def counts(self) -> dict[str, int]:
        """Documents by status (every status, zeros included)."""

    def failure_causes(self) -> dict[str, int]:
        """Failed documents by cause."""

    def pages_done(self) -> int:
        """Pages read (ok or truncated) in documents that ended."""

    def timings(self) -> Sequence[tuple[float, float, float]]:
        """``(created, started, finished)`` of every document that ended after a worker took it."""

    def ping(self) -> None:
        """Raise if the database cannot be read."""

    # -- the review's side (:mod:`.reviews`)

    def correct(self, doc_id: str, path: str, value: Any) -> None:
        """Keep a reviewer's ``value`` of field ``path`` of ``doc_id`` (replacing an earlier one)."""

    def corrections(self, doc_id: str) -> Sequence[Correction]:
        """``doc_id``'s corrections, by path."""

    def approve(self, doc_id: str) -> float:
        """Mark ``doc_id`` approved (now); when."""

    def approved(self, doc_id: str) -> float | None:
        """When ``doc_id`` was approved, or None."""

    def reviewed(self) -> Sequence[str]:
        """The documents with a correction or an approval."""

    # -- the workers' side

    def claim(self, owner: str, lease_s: float, max_deliveries: int) -> Document | None:
        """Take the next document for ``owner`` under a lease of ``lease_s`` seconds: one whose
        lease lapsed first (its worker was lost), then the oldest queued. None when none waits."""

    def renew(self, doc_ids: Sequence[str], owner: str, lease_s: float) -> dict[str, Lease]:
        """Extend ``owner``'s leases on ``doc_ids`` (one statement for all: a worker renews every
        document it reads at once); for each, whether it still held it and whether a cancel was asked."""

    def cancels_asked(self, doc_ids: Sequence[str]) -> set[str]:
        """Those of ``doc_ids`` whose cancel was asked (one read for all)."""

    def finish(self, doc_id: str, owner: str, status: str, *, pages_done: int, pages_failed: int,
               error: str | None = None, cause: str | None = None) -> bool:
        """End ``doc_id`` with ``status`` if ``owner`` still holds it; whether it did."""

    def release(self, doc_id: str, owner: str) -> bool:
        """Give ``doc_id`` back to the queue (its worker is stopping): the next claim resumes it.
        The delivery is not counted against it. Whether ``owner`` held it."""

    def close(self) -> None:
        """Let go of the database's connections (the queue is not used after)."""


#: The variable that names the database when ``--database`` does not.
DATABASE_VARIABLE = "LLM_OCR_SERVICE_DATABASE"


def is_postgres(database: str) -> bool:
    """True when ``database`` is a PostgreSQL connection URL (``postgresql://``, ``postgres://``)."""
    return database.startswith(("postgresql://", "postgres://"))


def iso(seconds: float | None) -> str | None:
    """Epoch seconds as ISO 8601 UTC."""
    return datetime.fromtimestamp(seconds, timezone.utc).isoformat() if seconds is not None else None


def summary(doc: Document) -> dict[str, Any]:
    """A document as listed (``GET /v1/documents``), and as its callback is told of its end."""
    return {
        "id": doc.id, "name": doc.name, "status": doc.status, "created": iso(doc.created),
        "started": iso(doc.started), "finished": iso(doc.finished), "pages": doc.pages,
        "pages_done": doc.pages_done, "pages_failed": doc.pages_failed, "error": doc.error, "cause": doc.cause,
    }


def new_id() -> str:
    """A document id: random, so ids say nothing about other documents."""
    return uuid.uuid4().hex
