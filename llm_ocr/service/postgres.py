"""The service's state and queue on PostgreSQL: any number of gateways and workers, on any
machines, share one table (``llm_ocr_documents``, created if absent) under the rules of
:mod:`.queue`.

- **Claims** take the next row with ``SELECT ... FOR UPDATE SKIP LOCKED``: two workers claiming at
  once never wait for each other and never get the same document; each takes the first row no
  other claim holds.
- **Leases** are times on the database's clock (``now()``), not the workers': machines whose
  clocks differ still agree on when a lease lapsed.
- **Submissions** take a transaction-scoped advisory lock first, so the queue limit and an
  idempotency key are decided on a count no other gateway can change under them (the key is
  also ``UNIQUE``).
- **Cancels** and every write a worker makes are single conditional ``UPDATE``\\ s; a row a claim
  holds is waited for (a cancel then finds it running and marks it), never skipped.

Connections come from a small pool per process (psycopg_pool). A database that stops answering
(restarted, failed over, unreachable) is waited for: each call retries for up to ``wait_s``
seconds on a fresh connection, then raises :class:`~llm_ocr.service.queue.QueueUnavailable`
(the gateway answers 503; a worker tries again later). A retried claim whose first attempt did
commit leaves that document under a lease nobody renews: it is delivered again when it lapses.

The connection URL's password never appears in a message: errors are passed through
:func:`llm_ocr.redaction.redact` with the password as a known secret.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from llm_ocr.redaction import Redactor
from llm_ocr.service import reviews
from llm_ocr.service.queue import FINAL, STATUSES, Document, DriverMissing, Lease, QueueFull, QueueUnavailable
from llm_ocr.service.reviews import Correction

log = logging.getLogger("llm_ocr.service")

T = TypeVar("T")

#: The package that provides the driver (extra ``postgres``).
#: The channel submissions and releases notify, so that workers in other processes wake at once.
CHANNEL = "llm_ocr_queue"
_NOTIFY = f"NOTIFY {CHANNEL}"
DRIVER_PACKAGES = "psycopg[binary] psycopg-pool"


_SCHEMA = """
CREATE TABLE IF NOT EXISTS llm_ocr_documents (
    seq BIGSERIAL PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    status TEXT NOT NULL,
    name TEXT NOT NULL,
    input TEXT NOT NULL,
    options JSONB NOT NULL,
    idempotency_key TEXT UNIQUE,
    pages INTEGER,
    created DOUBLE PRECISION NOT NULL,
    started DOUBLE PRECISION,
    finished DOUBLE PRECISION,
    lease_owner TEXT,
    lease_expires DOUBLE PRECISION,
    deliveries INTEGER NOT NULL DEFAULT 0,
    cancel BOOLEAN NOT NULL DEFAULT false,
    error TEXT,
    cause TEXT,
    pages_done INTEGER NOT NULL DEFAULT 0,
    pages_failed INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS llm_ocr_documents_by_status ON llm_ocr_documents (status, seq);
-- Times are epoch seconds on the database's clock: now() is the transaction's start, one moment
-- for every statement of a transaction.
CREATE OR REPLACE FUNCTION llm_ocr_now() RETURNS double precision
    LANGUAGE sql STABLE AS 'SELECT extract(epoch FROM now())::double precision';
"""

#: The review's tables (:mod:`.reviews`), prefixed like the documents'.
_PREFIX = "llm_ocr_"
_REVIEW_SCHEMA = reviews.sql(reviews.SCHEMA, _PREFIX, "%s")

#: Advisory lock keys (``hashtext`` of a name: stable, and unlikely to meet another program's).
_SCHEMA_LOCK = "SELECT pg_advisory_xact_lock(hashtext('llm_ocr_documents schema'))"
_SUBMIT_LOCK = "SELECT pg_advisory_xact_lock(hashtext('llm_ocr_documents submit'))"


def _driver() -> Any:
    try:
        import psycopg
        import psycopg_pool
    except ImportError:
        raise DriverMissing(f"a PostgreSQL --database needs the driver: pip install 'llm-ocr[postgres]' "
                            f"(or {DRIVER_PACKAGES})") from None
    return psycopg, psycopg_pool


class PostgresQueue:
    """The documents table in the PostgreSQL database at ``url`` (``postgresql://user:pw@host/db``;
    created with its schema if absent); a :class:`~llm_ocr.service.queue.DocumentQueue`.

    Args:
        url: a libpq connection URL (or ``key=value`` string).
        wait_s: seconds a call waits for a database that does not answer before
            :class:`QueueUnavailable`.
        max_connections: the pool's largest size in this process.
    """

    def __init__(self, url: str, *, wait_s: float = 15.0, max_connections: int = 8) -> None:
        psycopg, psycopg_pool = _driver()
        from psycopg.rows import dict_row

        self._psycopg = psycopg
        self._url = url  # for the listening connection of :meth:`watch`; never shown
        password = psycopg.conninfo.conninfo_to_dict(url).get("password")
        self._redact = Redactor([str(password)] if password else [])
        #: The URL as it may be shown (no password).
        self.display = self._redact(url)
        self.wait_s = wait_s
        self._pool = psycopg_pool.ConnectionPool(
            url, min_size=1, max_size=max_connections, open=False, name="llm-ocr-service",
            kwargs={"autocommit": True, "row_factory": dict_row},
        )
        try:
            self._pool.open(wait=False)
            self._call(self._create_schema)
        except BaseException:
            self._pool.close()
            raise

    @staticmethod
    def _create_schema(db: Any) -> None:
        with db.transaction():
            # Two gateways starting at once would race on CREATE TABLE IF NOT EXISTS (a unique
            # violation in the catalog); the lock makes the second find the table.
            db.execute(_SCHEMA_LOCK)
            db.execute(_SCHEMA)
            db.execute(_REVIEW_SCHEMA)

    def _call(self, fn: Callable[[Any], T], wait_s: float | None = None) -> T:
        """``fn(connection)``, retried on a fresh connection while the database does not answer."""
        wait = self.wait_s if wait_s is None else wait_s
        deadline = time.monotonic() + wait
        delay = 0.05
        while True:
            try:
                with self._pool.connection(timeout=max(0.1, deadline - time.monotonic())) as db:
                    return fn(db)
            except self._psycopg.OperationalError as exc:
                # Connection lost, server restarting or shutting down, pool timeout (its
                # PoolTimeout is one too), serialization failure: all worth another try.
                if time.monotonic() + delay >= deadline:
                    raise QueueUnavailable(f"PostgreSQL at {self.display} did not answer for {wait:g} s: "
                                           f"{self._redact(str(exc).strip())}") from None
                log.debug("PostgreSQL: %s; trying again", self._redact(str(exc).strip()))
                time.sleep(delay)
                delay = min(delay * 2, 1.0)

    def close(self) -> None:
        """Close the pool's connections."""
        self._pool.close()

    # -- the gateway's side ------------------------------------------------------------------------

    def by_key(self, key: str) -> Document | None:
        """The document submitted with idempotency key ``key``, if any."""
        row = self._call(lambda db: db.execute("SELECT * FROM llm_ocr_documents WHERE idempotency_key = %s",
                                               (key,)).fetchone())
        return Document.of(row) if row else None

    def depth(self) -> int:
        """Documents queued and not yet taken by a worker."""
        return self._call(lambda db: int(db.execute(
            "SELECT count(*) AS n FROM llm_ocr_documents WHERE status = 'queued'").fetchone()["n"]))

    def submit(self, doc_id: str, *, name: str, input_url: str, options: dict[str, Any], pages: int | None,
               key: str | None, limit: int) -> tuple[Document, bool]:
        """Queue a document; ``(its row, True)``, or ``(the row submitted earlier with key, False)``.
        Raises :class:`QueueFull` when ``limit`` documents are queued already."""

        def submit(db: Any) -> tuple[Document, bool]:
            with db.transaction():
                db.execute(_SUBMIT_LOCK)
                if key is not None:
                    row = db.execute("SELECT * FROM llm_ocr_documents WHERE idempotency_key = %s", (key,)).fetchone()
                    if row:
                        return Document.of(row), False
                depth = int(db.execute("SELECT count(*) AS n FROM llm_ocr_documents WHERE status = 'queued'")
                            .fetchone()["n"])
                if depth >= limit:
                    raise QueueFull(depth)
                row = db.execute(
                    "INSERT INTO llm_ocr_documents (id, status, name, input, options, idempotency_key, pages, created) "
                    "VALUES (%s, 'queued', %s, %s, %s::jsonb, %s, %s, llm_ocr_now()) RETURNING *",
                    (doc_id, name, input_url, json.dumps(options, sort_keys=True), key, pages),
                ).fetchone()
                db.execute(_NOTIFY)  # sent when the transaction commits: the row is there to claim
                return Document.of(row), True

        return self._call(submit)

    def get(self, doc_id: str) -> Document | None:
        """The document ``doc_id``, or None."""
        row = self._call(lambda db: db.execute("SELECT * FROM llm_ocr_documents WHERE id = %s", (doc_id,)).fetchone())
        return Document.of(row) if row else None

    def list(self, *, status: str | None = None, since: float | None = None, after: int = 0,
             limit: int = 50) -> list[Document]:
        """Documents in submission order after cursor ``after`` (a ``seq``), of ``status``,
        submitted at or after ``since`` (epoch seconds); ``limit`` at most."""
        query = "SELECT * FROM llm_ocr_documents WHERE seq > %s"
        args: list[object] = [after]
        if status is not None:
            query += " AND status = %s"
            args.append(status)
        if since is not None:
            query += " AND created >= %s"
            args.append(since)
        query += " ORDER BY seq LIMIT %s"
        args.append(limit)
        rows = self._call(lambda db: db.execute(query, args).fetchall())
        return [Document.of(row) for row in rows]

    def recent(self, limit: int) -> Sequence[Document]:
        """The ``limit`` documents submitted last, newest first."""
        rows = self._call(lambda db: db.execute("SELECT * FROM llm_ocr_documents ORDER BY seq DESC LIMIT %s",
                                                (limit,)).fetchall())
        return [Document.of(row) for row in rows]

    def cancel(self, doc_id: str) -> Document | None:
        """Cancel ``doc_id``: a queued document is cancelled at once (it never starts); a running
        one is marked, and its worker stops it after the pages in flight. None if unknown."""

        def cancel(db: Any) -> Any:
            with db.transaction():
                # A claim holding the row is waited for: this then finds it running, and the next
                # statement (a new snapshot) marks it.
                db.execute("UPDATE llm_ocr_documents SET status = 'cancelled', finished = llm_ocr_now() "
                           "WHERE id = %s AND status = 'queued'", (doc_id,))
                return db.execute("UPDATE llm_ocr_documents SET cancel = true WHERE id = %s AND status = 'running' "
                                  "RETURNING *", (doc_id,)).fetchone() or \
                    db.execute("SELECT * FROM llm_ocr_documents WHERE id = %s", (doc_id,)).fetchone()

        row = self._call(cancel)
        return Document.of(row) if row else None

    def counts(self) -> dict[str, int]:
        """Documents by status (every status, zeros included)."""
        rows = self._call(lambda db: db.execute(
            "SELECT status, count(*) AS n FROM llm_ocr_documents GROUP BY status").fetchall())
        found = {row["status"]: int(row["n"]) for row in rows}
        return {status: found.get(status, 0) for status in STATUSES}

    def failure_causes(self) -> dict[str, int]:
        """Failed documents by cause."""
        rows = self._call(lambda db: db.execute(
            "SELECT cause, count(*) AS n FROM llm_ocr_documents WHERE status = 'failed' GROUP BY cause").fetchall())
        return {str(row["cause"] or "unknown"): int(row["n"]) for row in rows}

    def pages_done(self) -> int:
        """Pages read (ok or truncated) in documents that ended."""
        return self._call(lambda db: int(db.execute(
            "SELECT coalesce(sum(pages_done), 0) AS n FROM llm_ocr_documents").fetchone()["n"]))

    def timings(self) -> Sequence[tuple[float, float, float]]:
        """``(created, started, finished)`` of every document that ended after a worker took it."""
        rows = self._call(lambda db: db.execute(
            "SELECT created, started, finished FROM llm_ocr_documents "
            "WHERE started IS NOT NULL AND finished IS NOT NULL").fetchall())
        return [(float(row["created"]), float(row["started"]), float(row["finished"])) for row in rows]

    def ping(self) -> None:
        """Raise if the database cannot be read (waits 2 s at most: a readiness probe must answer)."""
        self._call(lambda db: db.execute("SELECT 1 FROM llm_ocr_documents LIMIT 1").fetchall(), wait_s=2.0)

    # -- the review's side ------------------------------------------------------------------------

    def correct(self, doc_id: str, path: str, value: Any) -> None:
        """Keep a reviewer's ``value`` of field ``path`` of ``doc_id`` (replacing an earlier one)."""
        self._call(lambda db: db.execute(reviews.sql(reviews.CORRECT, _PREFIX, "%s"),
                                         (doc_id, path, json.dumps(value), time.time())))

    def corrections(self, doc_id: str) -> Sequence[Correction]:
        """``doc_id``'s corrections, by path."""
        rows = self._call(lambda db: db.execute(reviews.sql(reviews.CORRECTIONS, _PREFIX, "%s"),
                                                (doc_id,)).fetchall())
        return [Correction(row["path"], json.loads(row["value"]), float(row["corrected"])) for row in rows]

    def approve(self, doc_id: str) -> float:
        """Mark ``doc_id`` approved (now); when."""
        now = time.time()
        self._call(lambda db: db.execute(reviews.sql(reviews.APPROVE, _PREFIX, "%s"), (doc_id, now)))
        return now

    def approved(self, doc_id: str) -> float | None:
        """When ``doc_id`` was approved, or None."""
        row = self._call(lambda db: db.execute(reviews.sql(reviews.APPROVED, _PREFIX, "%s"), (doc_id,)).fetchone())
        return float(row["approved"]) if row else None

    def reviewed(self) -> Sequence[str]:
        """The documents with a correction or an approval."""
        rows = self._call(lambda db: db.execute(reviews.sql(reviews.REVIEWED, _PREFIX, "%s")).fetchall())
        return [row["doc_id"] for row in rows]

    # -- the workers' side -------------------------------------------------------------------------

    def claim(self, owner: str, lease_s: float, max_deliveries: int) -> Document | None:
        """Take the next document for ``owner`` under a lease of ``lease_s`` seconds: one whose
        lease lapsed first (its worker was lost), then the oldest queued. None when none waits."""

        def claim(db: Any) -> Any:
            with db.transaction():
                # A lost worker's document that was being cancelled ends cancelled, not
                # redelivered; one lost max_deliveries times fails. Rows another claim holds are
                # skipped here (that claim sweeps them).
                db.execute(
                    "UPDATE llm_ocr_documents SET status = 'cancelled', finished = llm_ocr_now(), lease_owner = NULL "
                    "WHERE seq IN (SELECT seq FROM llm_ocr_documents WHERE status = 'running' "
                    "AND lease_expires < llm_ocr_now() AND cancel FOR UPDATE SKIP LOCKED)")
                db.execute(
                    "UPDATE llm_ocr_documents SET status = 'failed', finished = llm_ocr_now(), lease_owner = NULL, "
                    "cause = 'worker_lost', error = 'its worker was lost ' || deliveries || ' times (killed, or "
                    "stalled past its lease)' WHERE seq IN (SELECT seq FROM llm_ocr_documents WHERE status = 'running' "
                    "AND lease_expires < llm_ocr_now() AND deliveries >= %s FOR UPDATE SKIP LOCKED)",
                    (max_deliveries,))
                # The conditions repeat the sweeps': a lapsed row one of them skipped (held by
                # another claim) is not taken here either.
                return db.execute(
                    "WITH next AS (SELECT seq FROM llm_ocr_documents WHERE status = 'queued' OR (status = 'running' "
                    "AND lease_expires < llm_ocr_now() AND NOT cancel AND deliveries < %s) "
                    "ORDER BY status = 'running' DESC, seq LIMIT 1 FOR UPDATE SKIP LOCKED) "
                    "UPDATE llm_ocr_documents AS d SET status = 'running', lease_owner = %s, "
                    "lease_expires = llm_ocr_now() + %s, deliveries = d.deliveries + 1, "
                    "started = coalesce(d.started, llm_ocr_now()) "
                    "FROM next WHERE d.seq = next.seq RETURNING d.*",
                    (max_deliveries, owner, lease_s),
                ).fetchone()

        row = self._call(claim)
        return Document.of(row) if row else None

    def renew(self, doc_ids: Sequence[str], owner: str, lease_s: float) -> dict[str, Lease]:
        """Extend ``owner``'s leases on ``doc_ids`` (one statement for all: a worker renews every
        document it reads at once); for each, whether it still held it and whether a cancel was asked."""

        def renew(db: Any) -> dict[str, Lease]:
            ids = list(doc_ids)
            held = {row["id"]: bool(row["cancel"]) for row in db.execute(
                "UPDATE llm_ocr_documents SET lease_expires = llm_ocr_now() + %s WHERE id = ANY(%s) "
                "AND lease_owner = %s AND status = 'running' RETURNING id, cancel", (lease_s, ids, owner)).fetchall()}
            lost = [doc_id for doc_id in ids if doc_id not in held]
            asked = self._cancels_asked(db, lost) if lost else set()
            return {doc_id: Lease(doc_id in held, held.get(doc_id, doc_id in asked))
                    for doc_id in ids}

        return self._call(renew)

    @staticmethod
    def _cancels_asked(db: Any, doc_ids: Sequence[str]) -> set[str]:
        rows = db.execute("SELECT id FROM llm_ocr_documents WHERE id = ANY(%s) AND cancel", (list(doc_ids),))
        return {row["id"] for row in rows.fetchall()}

    def cancels_asked(self, doc_ids: Sequence[str]) -> set[str]:
        """Those of ``doc_ids`` whose cancel was asked (one read for all)."""
        return self._call(lambda db: self._cancels_asked(db, doc_ids))

    def finish(self, doc_id: str, owner: str, status: str, *, pages_done: int, pages_failed: int,
               error: str | None = None, cause: str | None = None) -> bool:
        """End ``doc_id`` with ``status`` if ``owner`` still holds it; whether it did."""
        assert status in FINAL, status
        return self._call(lambda db: db.execute(
            "UPDATE llm_ocr_documents SET status = %s, finished = llm_ocr_now(), error = %s, cause = %s, "
            "pages_done = %s, pages_failed = %s, lease_owner = NULL, lease_expires = NULL "
            "WHERE id = %s AND lease_owner = %s AND status = 'running'",
            (status, error, cause, pages_done, pages_failed, doc_id, owner),
        ).rowcount == 1)

    def release(self, doc_id: str, owner: str) -> bool:
        """Give ``doc_id`` back to the queue (its worker is stopping): the next claim resumes it.
        The delivery is not counted against it. Whether ``owner`` held it."""
        released = self._call(lambda db: db.execute(
            # A document being cancelled ends cancelled here: it is not taken again.
            "UPDATE llm_ocr_documents SET status = CASE WHEN cancel THEN 'cancelled' ELSE 'queued' END, "
            "finished = CASE WHEN cancel THEN llm_ocr_now() END, lease_owner = NULL, lease_expires = NULL, "
            "deliveries = greatest(deliveries - 1, 0) WHERE id = %s AND lease_owner = %s AND status = 'running'",
            (doc_id, owner),
        ).rowcount == 1)
        if released:
            self._call(lambda db: db.execute(_NOTIFY))
        return released

    def watch(self, wake: Callable[[], None], stop: threading.Event) -> None:
        """Call ``wake`` each time a document is queued or released, until ``stop`` is set (run in
        a thread of its own): ``LISTEN`` on one connection of its own, so a worker in any process
        takes a document as soon as it is submitted instead of at its next look at the queue
        (PostgreSQL docs, "NOTIFY": a notification is delivered when the transaction that sent it
        commits, https://www.postgresql.org/docs/current/sql-notify.html). A lost connection is
        opened again; meanwhile the worker's poll still finds what is queued."""
        psycopg = self._psycopg
        while not stop.is_set():
            try:
                with psycopg.connect(self._url, autocommit=True, connect_timeout=10) as conn:
                    conn.execute(f"LISTEN {CHANNEL}")
                    wake()  # anything queued while this connection was not listening
                    while not stop.is_set():
                        # The timeout only bounds how long a stop waits for this thread.
                        for _ in conn.notifies(timeout=1.0):
                            wake()
            except psycopg.Error as exc:
                log.debug("PostgreSQL notifications: %s; listening again", self._redact(str(exc).strip()))
                stop.wait(1.0)
