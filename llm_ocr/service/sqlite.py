"""The service's state and queue in one SQLite file in WAL mode, shared by the gateway and the
workers of one machine (the rules every backend keeps are :mod:`.queue`'s).

Each call opens its own connection (cheap in SQLite) so any thread or process may call; writes
take the database's write lock first (``BEGIN IMMEDIATE``), so a claim, a submission against the
queue limit, or a cancel is decided on what no other writer can change under it.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from llm_ocr.service import reviews
from llm_ocr.service.queue import FINAL, STATUSES, Document, Lease, QueueFull
from llm_ocr.service.reviews import Correction

_SCHEMA = """
CREATE TABLE IF NOT EXISTS documents (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    status TEXT NOT NULL,
    name TEXT NOT NULL,
    input TEXT NOT NULL,
    options TEXT NOT NULL,
    idempotency_key TEXT UNIQUE,
    pages INTEGER,
    created REAL NOT NULL,
    started REAL,
    finished REAL,
    lease_owner TEXT,
    lease_expires REAL,
    deliveries INTEGER NOT NULL DEFAULT 0,
    cancel INTEGER NOT NULL DEFAULT 0,
    error TEXT,
    cause TEXT,
    pages_done INTEGER NOT NULL DEFAULT 0,
    pages_failed INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS documents_by_status ON documents (status, seq);
"""


class SQLiteQueue:
    """The documents table of the SQLite file at ``path`` (created with its schema if absent);
    a :class:`~llm_ocr.service.queue.DocumentQueue`."""

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        with self._connect() as db:
            # WAL: readers (status, lists, metrics) never wait for a writer, nor a writer for them.
            db.execute("PRAGMA journal_mode=WAL")
            db.executescript(_SCHEMA + reviews.sql(reviews.SCHEMA))

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        # Autocommit mode (isolation_level=None): transactions are the explicit BEGINs below.
        db = sqlite3.connect(self.path, timeout=30.0, isolation_level=None)
        db.row_factory = sqlite3.Row
        try:
            yield db
        finally:
            db.close()

    @contextmanager
    def _write(self, *, durable: bool = True) -> Iterator[sqlite3.Connection]:
        with self._connect() as db:
            if not durable:
                # A worker's own bookkeeping (claims, renewals, ends) commits without waiting for
                # the disk: in WAL mode such a commit survives a crash of any process, and only a
                # machine that loses power may lose the last of them, which the queue's rules
                # repair (a claim or an end lost with its worker's machine: the document is
                # delivered again, and its run finds the pages stored). A submission, which the
                # gateway answers 202 to, waits for the disk.
                db.execute("PRAGMA synchronous=NORMAL")
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")

    # -- the gateway's side ------------------------------------------------------------------------

    def by_key(self, key: str) -> Document | None:
        """The document submitted with idempotency key ``key``, if any."""
        with self._connect() as db:
            row = db.execute("SELECT * FROM documents WHERE idempotency_key = ?", (key,)).fetchone()
        return Document.of(dict(row)) if row else None

    def depth(self) -> int:
        """Documents queued and not yet taken by a worker."""
        with self._connect() as db:
            return int(db.execute("SELECT count(*) FROM documents WHERE status = 'queued'").fetchone()[0])

    def submit(self, doc_id: str, *, name: str, input_url: str, options: dict[str, Any], pages: int | None,
               key: str | None, limit: int) -> tuple[Document, bool]:
        """Queue a document; ``(its row, True)``, or ``(the row submitted earlier with key, False)``.
        Raises :class:`QueueFull` when ``limit`` documents are queued already."""
        with self._write() as db:
            if key is not None:
                row = db.execute("SELECT * FROM documents WHERE idempotency_key = ?", (key,)).fetchone()
                if row:
                    return Document.of(dict(row)), False
            depth = int(db.execute("SELECT count(*) FROM documents WHERE status = 'queued'").fetchone()[0])
            if depth >= limit:
                raise QueueFull(depth)
            db.execute(
                "INSERT INTO documents (id, status, name, input, options, idempotency_key, pages, created) "
                "VALUES (?, 'queued', ?, ?, ?, ?, ?, ?)",
                (doc_id, name, input_url, json.dumps(options, sort_keys=True), key, pages, time.time()),
            )
            row = db.execute("SELECT * FROM documents WHERE id = ?", (doc_id,)).fetchone()
        return Document.of(dict(row)), True

    def get(self, doc_id: str) -> Document | None:
        """The document ``doc_id``, or None."""
        with self._connect() as db:
            row = db.execute("SELECT * FROM documents WHERE id = ?", (doc_id,)).fetchone()
        return Document.of(dict(row)) if row else None

    def list(self, *, status: str | None = None, since: float | None = None, after: int = 0,
             limit: int = 50) -> list[Document]:
        """Documents in submission order after cursor ``after`` (a ``seq``), of ``status``,
        submitted at or after ``since`` (epoch seconds); ``limit`` at most."""
        query = "SELECT * FROM documents WHERE seq > ?"
        args: list[object] = [after]
        if status is not None:
            query += " AND status = ?"
            args.append(status)
        if since is not None:
            query += " AND created >= ?"
            args.append(since)
        query += " ORDER BY seq LIMIT ?"
        args.append(limit)
        with self._connect() as db:
            return [Document.of(dict(row)) for row in db.execute(query, args).fetchall()]

    def recent(self, limit: int) -> Sequence[Document]:
        """The ``limit`` documents submitted last, newest first."""
        with self._connect() as db:
            return [Document.of(dict(row)) for row in
                    db.execute("SELECT * FROM documents ORDER BY seq DESC LIMIT ?", (limit,)).fetchall()]

    def cancel(self, doc_id: str) -> Document | None:
        """Cancel ``doc_id``: a queued document is cancelled at once (it never starts); a running
        one is marked, and its worker stops it after the pages in flight. None if unknown."""
        now = time.time()
        with self._write() as db:
            db.execute("UPDATE documents SET status = 'cancelled', finished = ? WHERE id = ? AND status = 'queued'",
                       (now, doc_id))
            db.execute("UPDATE documents SET cancel = 1 WHERE id = ? AND status = 'running'", (doc_id,))
            row = db.execute("SELECT * FROM documents WHERE id = ?", (doc_id,)).fetchone()
        return Document.of(dict(row)) if row else None

    def counts(self) -> dict[str, int]:
        """Documents by status (every status, zeros included)."""
        with self._connect() as db:
            found = dict(db.execute("SELECT status, count(*) FROM documents GROUP BY status").fetchall())
        return {status: int(found.get(status, 0)) for status in STATUSES}

    def failure_causes(self) -> dict[str, int]:
        """Failed documents by cause."""
        with self._connect() as db:
            rows = db.execute("SELECT cause, count(*) FROM documents WHERE status = 'failed' GROUP BY cause")
            return {str(cause or "unknown"): int(n) for cause, n in rows.fetchall()}

    def pages_done(self) -> int:
        """Pages read (ok or truncated) in documents that ended."""
        with self._connect() as db:
            return int(db.execute("SELECT coalesce(sum(pages_done), 0) FROM documents").fetchone()[0])

    def timings(self) -> Sequence[tuple[float, float, float]]:
        """``(created, started, finished)`` of every document that ended after a worker took it."""
        with self._connect() as db:
            rows = db.execute("SELECT created, started, finished FROM documents "
                              "WHERE started IS NOT NULL AND finished IS NOT NULL").fetchall()
        return [(float(a), float(b), float(c)) for a, b, c in rows]

    def ping(self) -> None:
        """Raise if the database cannot be read."""
        with self._connect() as db:
            db.execute("SELECT 1 FROM documents LIMIT 1").fetchall()

    # -- the review's side ------------------------------------------------------------------------

    def correct(self, doc_id: str, path: str, value: Any) -> None:
        """Keep a reviewer's ``value`` of field ``path`` of ``doc_id`` (replacing an earlier one)."""
        with self._write() as db:
            db.execute(reviews.sql(reviews.CORRECT), (doc_id, path, json.dumps(value), time.time()))

    def corrections(self, doc_id: str) -> Sequence[Correction]:
        """``doc_id``'s corrections, by path."""
        with self._connect() as db:
            rows = db.execute(reviews.sql(reviews.CORRECTIONS), (doc_id,)).fetchall()
        return [Correction(row["path"], json.loads(row["value"]), float(row["corrected"])) for row in rows]

    def approve(self, doc_id: str) -> float:
        """Mark ``doc_id`` approved (now); when."""
        now = time.time()
        with self._write() as db:
            db.execute(reviews.sql(reviews.APPROVE), (doc_id, now))
        return now

    def approved(self, doc_id: str) -> float | None:
        """When ``doc_id`` was approved, or None."""
        with self._connect() as db:
            row = db.execute(reviews.sql(reviews.APPROVED), (doc_id,)).fetchone()
        return float(row["approved"]) if row else None

    def reviewed(self) -> Sequence[str]:
        """The documents with a correction or an approval."""
        with self._connect() as db:
            return [row[0] for row in db.execute(reviews.sql(reviews.REVIEWED)).fetchall()]

    # -- the workers' side -------------------------------------------------------------------------

    def claim(self, owner: str, lease_s: float, max_deliveries: int) -> Document | None:
        """Take the next document for ``owner`` under a lease of ``lease_s`` seconds: one whose
        lease lapsed first (its worker was lost), then the oldest queued. None when none waits."""
        now = time.time()
        with self._write(durable=False) as db:
            # A lost worker's document that was being cancelled ends cancelled, not redelivered.
            db.execute("UPDATE documents SET status = 'cancelled', finished = ?, lease_owner = NULL "
                       "WHERE status = 'running' AND lease_expires < ? AND cancel = 1", (now, now))
            db.execute("UPDATE documents SET status = 'failed', finished = ?, lease_owner = NULL, "
                       "cause = 'worker_lost', "
                       "error = 'its worker was lost ' || deliveries || ' times (killed, or stalled past its lease)' "
                       "WHERE status = 'running' AND lease_expires < ? AND deliveries >= ?", (now, now, max_deliveries))
            row = db.execute(
                "SELECT * FROM documents WHERE status = 'queued' OR (status = 'running' AND lease_expires < ?) "
                "ORDER BY status = 'running' DESC, seq LIMIT 1", (now,)
            ).fetchone()
            if row is None:
                return None
            db.execute("UPDATE documents SET status = 'running', lease_owner = ?, lease_expires = ?, "
                       "deliveries = deliveries + 1, started = coalesce(started, ?) WHERE id = ?",
                       (owner, now + lease_s, now, row["id"]))
            row = db.execute("SELECT * FROM documents WHERE id = ?", (row["id"],)).fetchone()
        return Document.of(dict(row))

    def renew(self, doc_ids: Sequence[str], owner: str, lease_s: float) -> dict[str, Lease]:
        """Extend ``owner``'s leases on ``doc_ids`` (one statement for all: a worker renews every
        document it reads at once); for each, whether it still held it and whether a cancel was asked."""
        marks = ", ".join("?" * len(doc_ids))
        with self._write(durable=False) as db:
            held = {row["id"] for row in db.execute(
                f"UPDATE documents SET lease_expires = ? WHERE id IN ({marks}) AND lease_owner = ? "  # noqa: S608 - placeholders only
                "AND status = 'running' RETURNING id", (time.time() + lease_s, *doc_ids, owner)).fetchall()}
            asked = {row["id"] for row in db.execute(
                f"SELECT id FROM documents WHERE id IN ({marks}) AND cancel = 1", tuple(doc_ids)).fetchall()}  # noqa: S608
        return {doc_id: Lease(doc_id in held, doc_id in asked) for doc_id in doc_ids}

    def cancels_asked(self, doc_ids: Sequence[str]) -> set[str]:
        """Those of ``doc_ids`` whose cancel was asked (one read for all)."""
        marks = ", ".join("?" * len(doc_ids))
        with self._connect() as db:
            return {row["id"] for row in db.execute(
                f"SELECT id FROM documents WHERE id IN ({marks}) AND cancel = 1", tuple(doc_ids)).fetchall()}  # noqa: S608

    def finish(self, doc_id: str, owner: str, status: str, *, pages_done: int, pages_failed: int,
               error: str | None = None, cause: str | None = None) -> bool:
        """End ``doc_id`` with ``status`` if ``owner`` still holds it; whether it did."""
        assert status in FINAL, status
        with self._write(durable=False) as db:
            return db.execute(
                "UPDATE documents SET status = ?, finished = ?, error = ?, cause = ?, pages_done = ?, "
                "pages_failed = ?, lease_owner = NULL, lease_expires = NULL "
                "WHERE id = ? AND lease_owner = ? AND status = 'running'",
                (status, time.time(), error, cause, pages_done, pages_failed, doc_id, owner),
            ).rowcount == 1

    def release(self, doc_id: str, owner: str) -> bool:
        """Give ``doc_id`` back to the queue (its worker is stopping): the next claim resumes it.
        The delivery is not counted against it. Whether ``owner`` held it."""
        with self._write(durable=False) as db:
            return db.execute(
                # A document being cancelled ends cancelled here: it is not taken again.
                "UPDATE documents SET status = CASE cancel WHEN 1 THEN 'cancelled' ELSE 'queued' END, "
                "finished = CASE cancel WHEN 1 THEN ? END, lease_owner = NULL, lease_expires = NULL, "
                "deliveries = max(deliveries - 1, 0) WHERE id = ? AND lease_owner = ? AND status = 'running'",
                (time.time(), doc_id, owner),
            ).rowcount == 1

    def close(self) -> None:
        """Nothing to let go: every call opens and closes its own connection."""
