"""A worker: takes documents from the queue under a lease and runs the ``run`` stage on each.

Each document is read by the same code as ``llm_ocr.run([document], results/ID)``: Extract,
Describe, Assemble, against the worker's model endpoint. What a run would open for itself is the
worker's, open for its lifetime and shared by the documents it reads at once (``concurrency``):
the model endpoint (its client and connections, checked once) and the render pool. A run that
opened and closed its own paid that per document, and closing a render pool waits for its
thread, on the event loop every document shares: at eight documents at once the service read
about a third of the pages/s ``llm-ocr run`` reads (docs/service.md, the benchmark).

The worker's requests in flight are bounded by one limit, the worker's, shared by every document
it has open (``max_in_flight`` of its run options; else the launched server's preset, else 64):
each run's pages take their slots from it and give them back per page (its figure and piece
requests likewise, from limits that follow it, :class:`~llm_ocr.serving.in_flight.RunLimits`,
made once when the worker starts), and a run waits for a slot only with a page to send. With
more documents open (``concurrency``) than slots, a document that is starting, rendering its
page or ending holds no slot, and another document's page takes it: the model sees the limit's
worth of requests while documents turn over, as ``llm-ocr run`` feeds its pages. (When each
run had a limit of its own, a one-page document's slot stood idle while it started and ended:
0.86 to 0.92 of the batch's pages/s; docs/service.md, the benchmark.) A run that ends leaves
nothing on the worker's limits. A document's Fields requests, given a schema, take their slots
from the pages' limit too (the document's pages hold none by then). A worker started with
``--escalate-to MODEL --escalate-endpoint URL`` keeps the stronger model's endpoint open too, with
limits of its own (``max_in_flight`` of its run options, else 64), shared likewise by the
Escalate stages of every document it reads at once (a submission's ``escalate=off`` reads
without it): the stronger model sees at most that many of the worker's requests, however many
documents escalate at once.
Unless told (``concurrency``), a worker opens twice as many documents as its limit has slots
(:func:`default_concurrency`), and the documents open share one run's bound on rendered pages
waiting for a slot.

A document's results folder is that run's output, written one part per page (``part_rows=1``):
every page read is a checkpoint, and a document taken again (its worker was killed and its lease
lapsed, or it was released at shutdown) resumes there; the run's own resume skips the pages it
finds, so each page has one row.

While documents run, their leases are renewed every third of the lease, and cancels looked for
every ``poll`` seconds, by one task of the worker, one statement for all the documents it holds
(one per document cost a database connection and, on SQLite, a write each). A renewal that finds
a lease gone (another worker took the document) stops that run; a cancel asked stops it too,
after the pages in flight (the run's ``stop``), and what was read is kept.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from llm_ocr.api import keyword_spec
from llm_ocr.config import OptionError
from llm_ocr.options import ClientOptions, ServerOptions
from llm_ocr.outcomes import ExitCode
from llm_ocr.runners.shard import DEFAULT_IN_FLIGHT, ShardOutcome, run_guarded
from llm_ocr.service.callback import CallbackSettings, deliver
from llm_ocr.service.queue import FINAL, Document, DocumentQueue, QueueUnavailable, summary
from llm_ocr.service.spool import Spool
from llm_ocr.serving.in_flight import InFlightLimit, RunLimits
from llm_ocr.serving.open import Endpoint, EndpointError, open_endpoint
from llm_ocr.storage.stores import scrub

if TYPE_CHECKING:  # the run's machinery is imported when a worker starts, not with the service's config
    from llm_ocr.runners.reuse import Reuse
    from llm_ocr.runners.workers import WorkerPool

log = logging.getLogger("llm_ocr.service")

#: A submission's options that are the service's, not ``llm_ocr.run``'s keywords.
SERVICE_OPTIONS = frozenset({"schema", "classes", "fields_classes", "escalate", "callback"})


@dataclass
class WorkerSettings:
    """How a worker runs (``llm-ocr worker``'s options)."""

    #: An OpenAI-compatible endpoint; None: launch ``engine`` for the worker's lifetime.
    endpoint: str | None = None
    engine: str = "auto"
    model: str | None = None
    #: Seconds a document's lease lasts without renewal (renewed every third of it).
    lease: float = 30.0
    #: Seconds between looks at an empty queue (a submission in this process wakes it at once).
    poll: float = 1.0
    #: Deliveries of one document (workers lost while reading it) before it is failed.
    max_deliveries: int = 3
    #: Documents read at once by this worker (they share its endpoint, render pool and in-flight
    #: limit): more than the limit's slots, so that a document's start and end overlap other
    #: documents' pages at the model. None: :func:`default_concurrency` of the worker's limit.
    concurrency: int | None = None
    #: Seconds the pages in flight may take to finish when the worker stops.
    grace_period: float = 30.0
    #: More keyword options of every run (``llm_ocr.run``'s names), e.g. ``max_in_flight``.
    run_options: dict[str, Any] = field(default_factory=dict)


@dataclass
class _Held:
    """A document a worker is reading: its run's stop, and what the lease keeper found."""

    halt: asyncio.Event
    #: When its lease was last renewed (or taken), by the monotonic clock.
    renewed: float
    cancel: bool = False
    lost: bool = False


#: The most documents a worker opens by default (:func:`default_concurrency`).
MAX_DEFAULT_CONCURRENCY = 128
#: MiB of rendered page images a worker's open documents hold together while their pages wait
#: for a slot: one run's own default (``--look-ahead-mb``), shared among the documents open.
WORKER_LOOK_AHEAD_MB = 256.0


def default_concurrency(in_flight: int) -> int:
    """The documents a worker reads at once when not told: twice its in-flight limit, so that
    while a document starts, renders its page or ends, another one's page takes its slot (with
    as many documents as slots, one-page documents left slots idle); at most
    :data:`MAX_DEFAULT_CONCURRENCY`. Memory stays bounded whatever the number: the documents
    open share :data:`WORKER_LOOK_AHEAD_MB` of pages waiting for a slot."""
    return max(1, min(2 * in_flight, MAX_DEFAULT_CONCURRENCY))


def worker_name() -> str:
    """A worker's name in leases: host, process, and a random part, so that two workers of one
    process (two services in one program) never take each other's leases for their own."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class Worker:
    """Reads documents from ``queue`` into ``spool`` until stopped."""

    def __init__(self, queue: DocumentQueue, spool: Spool, settings: WorkerSettings, name: str | None = None,
                 callbacks: CallbackSettings | None = None) -> None:
        self.queue = queue
        self.callbacks = callbacks or CallbackSettings()
        #: Callbacks under way: made in the background (a receiver that is down does not hold a
        #: document's place), waited for when the worker stops.
        self._calls: set[asyncio.Task[bool]] = set()
        self.spool = spool
        self.settings = settings
        self.name = name or worker_name()
        #: Set by a submission in the same process: look at the queue now.
        self.wake = asyncio.Event()
        #: What every run of this worker shares (open while :meth:`run` runs; its endpoint is
        #: :attr:`endpoint_url`'s).
        self.reuse: Reuse | None = None
        #: Documents read at once: ``settings.concurrency``, else set from the limit when :meth:`run` starts.
        self.concurrency = settings.concurrency or default_concurrency(self._fixed_in_flight() or DEFAULT_IN_FLIGHT)
        #: The documents being read, by id: their leases are renewed together (:meth:`_keep_leases`).
        self._held: dict[str, _Held] = {}

    @property
    def ready(self) -> bool:
        """True once the model endpoint is open."""
        return self.endpoint_url is not None

    @property
    def endpoint_url(self) -> str | None:
        """The endpoint the runs use, once open (``/readyz``): ``--endpoint``, or where the
        worker's own server listens now (a managed server restarted on another port moves)."""
        if self.reuse is None:
            return None
        endpoint = self.reuse.endpoint
        return self.settings.endpoint or (endpoint.client.base_url if endpoint is not None else None)

    async def run(self, stop: asyncio.Event) -> None:
        """Open the endpoint, then take and read documents until ``stop`` is set; a document
        in progress then stops after its pages in flight and goes back to the queue."""
        from llm_ocr.runners.reuse import ContextLength, Reuse

        async with self._endpoint() as endpoint, self._stronger_endpoint() as stronger, self._pool() as pool:
            await asyncio.to_thread(_warm_up)
            limits = self._limits(endpoint)
            writable = await self._writable()
            # The stronger model's requests take slots of its own limits, shared by the documents'
            # Escalate stages as the pages' are by their first readings.
            escalate = Reuse(stronger, pool, self._limits(stronger), writable_checked=writable,
                             context_length=ContextLength(stronger.client),
                             progress_files=False) if stronger is not None else None
            # Per worker, not per document: the model's context length (read again each minute,
            # not twice a document), and no progress file (the queue says how a document goes).
            self.reuse = Reuse(endpoint, pool, limits, writable_checked=writable,
                               context_length=ContextLength(endpoint.client) if endpoint is not None else None,
                               progress_files=False, escalate=escalate)
            self.concurrency = self.settings.concurrency or default_concurrency(
                limits.pages.limit if limits is not None else self._fixed_in_flight() or DEFAULT_IN_FLIGHT)
            log.info("worker %s reading up to %d documents at once with %s", self.name, self.concurrency,
                     self.endpoint_url)
            watching = self._watch()
            keeping = asyncio.create_task(self._keep_leases(), name=f"leases-{self.name}")
            try:
                await self._loop(stop)
            finally:
                keeping.cancel()
                await asyncio.gather(keeping, return_exceptions=True)
                watching.set()
                await self._calls_done()

    async def _writable(self) -> bool:
        """Whether the results folder can be written, checked once (a probe file) rather than by
        every document's run; when it cannot, each run checks its own and fails saying why."""
        from llm_ocr.runners.shard import RunError, check_writable

        try:
            await asyncio.to_thread(check_writable, self.spool.root.child("results"))
        except RunError as exc:
            log.warning("worker %s: %s", self.name, exc)
            return False
        return True

    def _watch(self) -> threading.Event:
        """Wake the claimer when the queue says a document was queued (PostgreSQL's notifications,
        from a gateway in any process), in a thread; the event returned stops it. A queue that
        cannot say (SQLite) leaves the in-process wake-up and the poll."""
        halt = threading.Event()
        watch = getattr(self.queue, "watch", None)
        if watch is None:
            return halt
        loop = asyncio.get_running_loop()

        def wake() -> None:
            with contextlib.suppress(RuntimeError):  # the loop closed as the worker stopped
                loop.call_soon_threadsafe(self.wake.set)

        threading.Thread(target=watch, args=(wake, halt), name=f"llm-ocr-watch-{self.name}", daemon=True).start()
        return halt

    @contextlib.asynccontextmanager
    async def _endpoint(self) -> AsyncIterator[Endpoint | None]:
        settings = self.settings
        model = settings.model or _default_model()
        key = os.environ.get("LLM_OCR_API_KEY")
        if settings.endpoint is not None:
            async with self._served(settings.endpoint, model, key, "the endpoint") as endpoint:
                yield endpoint
            return
        # One server for the worker's lifetime, not one per document.
        async with open_endpoint(None, model, api_key=key, client_options=ClientOptions(**_client_options(settings)),
                                 server_options=ServerOptions(engine=settings.engine),
                                 out=self.spool.root, log_name=f"server-{os.getpid()}.log") as endpoint:
            yield endpoint

    @contextlib.asynccontextmanager
    async def _stronger_endpoint(self) -> AsyncIterator[Endpoint | None]:
        """The endpoint of the stronger model (``--escalate-to`` at ``--escalate-endpoint``) for
        the worker's lifetime; None without one, or while it cannot be opened (each document's
        Escalate stage then opens it for itself, and fails while it cannot, as a run would)."""
        options = self.settings.run_options
        url, model = options.get("escalate_endpoint"), options.get("escalate_to")
        if not (url and model):
            yield None
            return
        key = os.environ.get("LLM_OCR_ESCALATE_API_KEY") or os.environ.get("LLM_OCR_API_KEY")
        async with self._served(url, model, key, "the stronger model's endpoint") as endpoint:
            yield endpoint

    @contextlib.asynccontextmanager
    async def _served(self, url: str, model: str, key: str | None, what: str) -> AsyncIterator[Endpoint | None]:
        """The OpenAI-compatible endpoint at ``url`` serving ``model``, open for the worker's
        lifetime; None while it cannot be opened (not served yet, or not this model): each
        document's run then opens it for itself, and fails with cause "endpoint" while it cannot,
        as a run would. (Only the opening is caught: an error of the worker's own is not.)"""
        async with contextlib.AsyncExitStack() as stack:
            endpoint: Endpoint | None = None
            try:
                endpoint = await stack.enter_async_context(open_endpoint(
                    url, model, api_key=key, client_options=ClientOptions(**_client_options(self.settings))))
            except EndpointError as exc:
                log.warning("worker %s: %s; each document will open %s itself", self.name, exc, what)
            yield endpoint

    def _limits(self, endpoint: Endpoint | None) -> RunLimits | None:
        """The worker's in-flight limits, shared by the runs of every document it reads at once:
        ``max_in_flight`` of the run options, else the launched server's preset, else the run's
        default (None: no endpoint open, each run opens and sizes its own)."""
        if endpoint is None:
            return None
        size = self._fixed_in_flight() or endpoint.suggested_in_flight or DEFAULT_IN_FLIGHT
        return RunLimits.following(InFlightLimit(size))

    def _fixed_in_flight(self) -> int | None:
        fixed = self.settings.run_options.get("max_in_flight")
        return int(fixed) if fixed else None

    @contextlib.asynccontextmanager
    async def _pool(self) -> AsyncIterator[WorkerPool]:
        # The runs' render work (``workers``: processes; 0, the default, one thread of this process).
        from llm_ocr.runners.workers import WorkerPool

        workers = self.settings.run_options.get("workers")
        pool = WorkerPool(int(workers) if workers is not None else 0)
        try:
            yield pool
        finally:
            # Closing waits for the work in hand: off the event loop.
            await asyncio.to_thread(pool.close)

    async def _loop(self, stop: asyncio.Event) -> None:
        """Claim documents while a place among ``concurrency`` is free, and read each in a task.

        One claimer per worker, not one per place: a submission wakes one claim, not
        ``concurrency`` of them racing for the one document (on SQLite they queue for its write
        lock, the winner behind the losers), and an idle worker looks at the queue once per
        ``poll``, not ``concurrency`` times."""
        reading: set[asyncio.Task[None]] = set()
        stopped = asyncio.ensure_future(stop.wait())
        try:
            while not stop.is_set():
                if len(reading) >= self.concurrency:
                    await asyncio.wait({*reading, stopped}, return_when=asyncio.FIRST_COMPLETED)
                    continue
                # Cleared before the claim, not after the wait: a submission after this line wakes
                # the wait below, and one before it is in the database the claim reads.
                self.wake.clear()
                try:
                    doc = await asyncio.to_thread(self.queue.claim, self.name, self.settings.lease,
                                                  self.settings.max_deliveries)
                except QueueUnavailable as exc:
                    # The database is away (restarting, failing over): look again after a while.
                    log.warning("worker %s: %s; trying again", self.name, exc)
                    await _first(stop.wait(), timeout=self.settings.poll)
                    continue
                if doc is None:
                    await _first(stop.wait(), self.wake.wait(), timeout=self.settings.poll)
                    continue
                task = asyncio.create_task(self._read(doc, stop), name=f"document-{doc.id}")
                reading.add(task)
                task.add_done_callback(reading.discard)
        except asyncio.CancelledError:
            for task in reading:
                task.cancel()
            raise
        finally:
            stopped.cancel()
            # The documents in hand stop after their pages in flight (``stop`` is their halt).
            await asyncio.gather(*reading, stopped, return_exceptions=True)

    async def _read(self, doc: Document, stop: asyncio.Event) -> None:
        """:meth:`process` ``doc``; a failure costs this document, not the worker."""
        try:
            await self.process(doc, stop)
        except QueueUnavailable as exc:
            # The document could not be ended: its lease lapses and it is delivered again,
            # where the run finds every page stored and only ends it.
            log.warning("document %s: %s; it will be delivered again", doc.id, exc)
        except Exception as exc:  # a bug or a store failing costs this document, not the worker
            log.exception("document %s: the worker failed on it", doc.id)
            message = scrub(f"{type(exc).__name__}: {exc}", self.spool.storage_options)
            try:
                await asyncio.to_thread(self.queue.finish, doc.id, self.name, "failed", pages_done=0,
                                        pages_failed=0, error=f"the worker failed: {message}", cause="internal")
                await self._call_back(doc)
            except QueueUnavailable as lost:
                log.warning("document %s: %s; it will be delivered again", doc.id, lost)

    async def process(self, doc: Document, stop: asyncio.Event) -> None:
        """Read ``doc`` (held under this worker's lease) and end it, or release it if the worker stops.
        Its lease is renewed, and a cancel looked for, by :meth:`_keep_leases` with the others'."""
        log.info("document %s (%s): delivery %d", doc.id, doc.name, doc.deliveries)
        # The run's stop: pages in flight finish, the parts are written.
        held = self._held[doc.id] = _Held(asyncio.Event(), time.monotonic(), cancel=doc.cancel)

        async def follow_stop() -> None:
            await stop.wait()
            held.halt.set()

        following = asyncio.create_task(follow_stop())
        try:
            outcome = await self._run(doc, held.halt) if not held.cancel else None
        finally:
            self._held.pop(doc.id, None)
            following.cancel()
            await asyncio.gather(following, return_exceptions=True)
        if held.lost:
            return
        await asyncio.to_thread(self._end, doc, outcome, held.cancel, stop.is_set())
        await self._call_back(doc)

    async def _keep_leases(self) -> None:
        """Renew the leases of every document this worker holds, and look for cancels, in one
        statement each for all of them, not one per document: every ``poll`` seconds the cancels
        (a read: WAL readers never wait), every third of the lease a renewal (which says the
        cancels too). A document whose lease another worker took stops; so does one cancelled,
        after its pages in flight, and what was read is kept."""
        settings = self.settings
        every = settings.lease / 3
        while True:
            await asyncio.sleep(min(every, settings.poll))
            held = dict(self._held)
            if not held:
                continue
            now = time.monotonic()
            due = min(doc.renewed for doc in held.values()) <= now - every
            try:
                if due:
                    leases = await asyncio.to_thread(self.queue.renew, list(held), self.name, settings.lease)
                else:
                    asked = await asyncio.to_thread(self.queue.cancels_asked, list(held))
            except QueueUnavailable as exc:
                # Work goes on: pages read are stored whoever ends the document. If a lease lapses
                # meanwhile, the next renewal finds it lost and stops that document.
                log.warning("worker %s: %s", self.name, f"leases not renewed: {exc}" if due else exc)
                continue
            # A document that ended meanwhile is no longer this keeper's (its row was ended first).
            held = {doc_id: doc for doc_id, doc in held.items() if doc_id in self._held}
            if due:
                asked = {doc_id for doc_id, lease in leases.items() if lease.cancel}
                for doc_id, doc in held.items():
                    if leases[doc_id].held:
                        doc.renewed = now
                    elif not doc.lost:
                        log.warning("document %s: lease lost (another worker has it): stopping", doc_id)
                        doc.lost = True
                        doc.halt.set()
            for doc_id in asked & held.keys():
                doc = held[doc_id]
                if not doc.cancel and not doc.lost:
                    log.info("document %s: cancelled: stopping after the pages in flight", doc_id)
                    doc.cancel = True
                    doc.halt.set()

    async def _call_back(self, doc: Document) -> None:
        """Call ``doc``'s callback, if it has one and it ended (it may have gone back to the queue)."""
        url = doc.options.get("callback")
        if not isinstance(url, str):
            return
        ended = await asyncio.to_thread(self.queue.get, doc.id)
        if ended is None or ended.status not in FINAL:
            return
        task = asyncio.create_task(deliver(url, summary(ended), self.callbacks), name=f"callback-{doc.id}")
        self._calls.add(task)
        task.add_done_callback(self._calls.discard)

    async def _calls_done(self) -> None:
        """Wait for the callbacks under way (at most the grace period), then drop the rest."""
        if not self._calls:
            return
        _, late = await asyncio.wait(set(self._calls), timeout=self.settings.grace_period)
        for task in late:
            log.warning("worker %s stopping: %s not delivered", self.name, task.get_name())
            task.cancel()
        await asyncio.gather(*late, return_exceptions=True)

    async def _run(self, doc: Document, halt: asyncio.Event) -> ShardOutcome:
        options: dict[str, Any] = {
            **self.settings.run_options,
            # The service's own options are not the run's (the schema's text is, as fields_schema;
            # the classes', as classes, below).
            **{key: value for key, value in doc.options.items() if key not in SERVICE_OPTIONS},
            "endpoint": self.endpoint_url,
            "part_rows": 1,  # a part per page: each page read is a checkpoint
            "progress": "off",
            "workers": 0,  # rendering in a thread of this process (PDFium behind its lock)
            "grace_period": self.settings.grace_period,
            "storage_options": self.spool.storage_options,
        }
        if "fields_classes" in doc.options:  # the classes, inline, as the gateway loaded them
            options["classes"] = doc.options["fields_classes"]
        if doc.options.get("escalate") == "off":
            options = {key: value for key, value in options.items() if not key.startswith("escalate_")}
        elif doc.options.get("escalate") == "on" and not options.get("escalate_to"):
            return ShardOutcome(ExitCode.COULD_NOT_RUN, error=OptionError(
                f"escalate=on, but worker {self.name} has no stronger model to escalate to (start workers with "
                "--escalate-to MODEL --escalate-endpoint URL, or submit without escalate)"))
        if "look_ahead_mb" not in options:
            # The open documents share one run's worth of pages waiting for a slot.
            options["look_ahead_mb"] = WORKER_LOOK_AHEAD_MB / self.concurrency
        if self.settings.model and "model" not in doc.options:
            options["model"] = self.settings.model
        try:
            spec = await asyncio.to_thread(keyword_spec, "run", [doc.input], self.spool.results_url(doc.id), options)
        except OptionError as exc:
            return ShardOutcome(ExitCode.COULD_NOT_RUN, error=exc)
        from llm_ocr.runners.run import run_shard

        return await run_guarded(lambda stop: run_shard(spec, stop, self.reuse), halt)

    def _end(self, doc: Document, outcome: ShardOutcome | None, cancelled: bool, stopping: bool) -> None:
        done = _read_this_run(outcome)
        if done is None:  # pages read by an earlier delivery too, or some failed: the rows say
            pages = self.spool.rows(doc.id, "extract", ["page", "status", "error"])
            done = sum(1 for row in pages if row.get("status") in ("ok", "truncated"))
            failed = [row for row in pages if row.get("status") == "error"]
        else:
            pages, failed = [], []
        end = self.queue.finish
        if cancelled and (outcome is None or outcome.exit_code != ExitCode.OK):
            end(doc.id, self.name, "cancelled", pages_done=done, pages_failed=len(failed))
            log.info("document %s cancelled (%d page(s) read kept)", doc.id, done)
            return
        assert outcome is not None
        code = outcome.exit_code
        if code == ExitCode.INTERRUPTED or (stopping and code != ExitCode.OK):
            self.queue.release(doc.id, self.name)
            log.info("document %s released to the queue (%d page(s) read so far)", doc.id, done)
            return
        if code == ExitCode.OK:
            end(doc.id, self.name, "done", pages_done=done, pages_failed=0)
            log.info("document %s done: %d page(s)", doc.id, done)
            return
        if code == ExitCode.PAGES_FAILED:
            first = failed[0] if failed else {}
            why = (f"{len(failed)} of {len(pages)} page(s) failed; page {first.get('page')}: {first.get('error')}"
                   if failed else "the document failed (see its pages)")
            end(doc.id, self.name, "failed", pages_done=done, pages_failed=len(failed), error=why, cause="pages")
            log.info("document %s failed: %s", doc.id, why)
            return
        # Could not run. A model server that refuses or is down fails the document too (cause
        # "endpoint"), rather than sending it round the queue for ever (a model name no worker
        # serves would never succeed).
        cause = "internal" if outcome.unexpected else _cause(outcome.error)
        message = scrub(str(outcome.error), self.spool.storage_options) if outcome.error else "the run could not start"
        end(doc.id, self.name, "failed", pages_done=done, pages_failed=len(failed), error=message, cause=cause)
        log.info("document %s failed (%s): %s", doc.id, cause, message)


def _read_this_run(outcome: ShardOutcome | None) -> int | None:
    """The pages of a document read, all by this run and none failed, as its Extract stats count
    them; None when the rows must say (an earlier delivery read some, or a page failed): a
    finished one-page document is ended without reading its rows back."""
    if outcome is None or outcome.exit_code != ExitCode.OK:
        return None
    pages = (outcome.stats.get("extract") or {}).get("pages") or {}
    if pages.get("skipped", 1) or pages.get("error", 1) or pages.get("quarantined", 1):
        return None
    return int(pages.get("ok", 0)) + int(pages.get("truncated", 0))


def _cause(error: BaseException | None) -> str:
    """The failure's cause as ``/metrics`` counts it."""
    if isinstance(error, EndpointError):
        return "endpoint"
    if isinstance(error, OptionError):
        return "options"
    name = type(error).__name__
    if name == "StorageError":
        return "storage"
    if name == "InputError":
        return "input"
    return "run"


def _warm_up() -> None:
    """Convert one page row to Parquet, in memory: Arrow's first conversion of the page schema
    loads what it needs (1.7 s measured at load 50 on 2 cores), which the first document read
    would otherwise wait for."""
    from llm_ocr.records import PageResult, page_schema
    from llm_ocr.storage.parts import rows_to_bytes

    row = PageResult(doc_id="warm-up", doc_index=0, source="warm-up", page=1, markdown="", status="ok")
    rows_to_bytes([row.to_row()], page_schema())


def _client_options(settings: WorkerSettings) -> dict[str, Any]:
    """The client options of the runs' keywords (``dead_after``, ...), for the worker's own endpoint."""
    return {key: value for key, value in settings.run_options.items() if key in ClientOptions.model_fields}


def _default_model() -> str:
    from llm_ocr.options import JobOptions

    return str(JobOptions.model_fields["model"].default)


async def _first(*waits: Any, timeout: float) -> None:
    """Wait for the first of ``waits`` (coroutines), at most ``timeout`` seconds."""
    tasks = [asyncio.ensure_future(wait) for wait in waits]
    try:
        await asyncio.wait(tasks, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
