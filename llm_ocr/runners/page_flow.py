"""The page flow of a GPU stage: documents → rendered pages → requests in flight → ordered rows.

Rendering runs ahead in worker processes (bounded prefetch); rendered pages wait in a bounded
look-ahead (:mod:`.look_ahead`) and the one expected to be longest is sent as soon as a slot is
free (never in lock-step batches); finished rows are released in input order through a bounded
reorder window and written in parts off the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import copy
import hashlib
import logging
import math
import os
import shutil
import tempfile
from collections.abc import (
    AsyncGenerator,
    AsyncIterator,
    Awaitable,
    Callable,
    Generator,
    Hashable,
    Iterable,
    Iterator,
    Sequence,
)
from dataclasses import dataclass, replace
from typing import Any, Generic, Protocol, TypeVar

import fsspec
from fsspec.implementations.local import LocalFileSystem

from llm_ocr.options import RenderOptions
from llm_ocr.records import DOCUMENT_LEVEL_PAGE, PageResult
from llm_ocr.runners.look_ahead import IN_ORDER, MB, Expected, LookAhead, Waiting, in_megabytes
from llm_ocr.runners.process_pool import WorkerDied
from llm_ocr.runners.progress import RunCounters
from llm_ocr.runners.render_order import OpenDocument, expected_order
from llm_ocr.runners.workers import WorkerPool
from llm_ocr.serving.in_flight import InFlightLimit
from llm_ocr.sources.base import DocumentRef, PageFailure, PageImage
from llm_ocr.sources.fingerprint import file_sha256
from llm_ocr.sources.render import DocumentError, count_pages, render_page_list, render_pages
from llm_ocr.storage import retry_io
from llm_ocr.storage.parts import RowSink, ShardIndex
from llm_ocr.storage.stores import store_options

log = logging.getLogger(__name__)

T = TypeVar("T")
#: What a flow's intake hands the handler first: the document (a :class:`DocumentRef` for
#: :class:`DocumentPages`, None for :class:`UpstreamRows`).
RefT = TypeVar("RefT")
#: What it hands the handler second: the page (a rendered :class:`PageImage` or a
#: :class:`PageFailure` for :class:`DocumentPages`, an earlier stage's :class:`PageResult` for
#: :class:`UpstreamRows`).
ItemT = TypeVar("ItemT")

#: The page's row, or a tuple of rows, one per writer (None: no row for that writer), when one
#: page feeds several stages (``llm-ocr run`` writes Extract and Describe).
PageRows = PageResult | tuple[PageResult | None, ...]
#: A handler ``(ref, item, num_pages) -> rows`` of the pages an intake gives: a flow takes only a
#: handler of its intake's ``(RefT, ItemT)``, so a type checker sees a stage's handler against it.
PageHandler = Callable[[RefT, ItemT, int | None], Awaitable[PageRows]]

CHUNK_PAGES = 8


class OrderedRows:
    """Releases rows to the writer in input order, holding at most ``window`` out-of-order rows
    (``window`` None: as they come, holding none).

    A page that takes very long (a loop, a retry) must not stall the GPU: when the window is
    full, the oldest held rows are written out of order, and the slow page follows when done.
    """

    def __init__(self, writer: RowSink, window: int | None) -> None:
        self.writer = writer
        self.window = window
        self.next_seq = 0
        self.held: dict[int, dict[str, Any] | None] = {}
        self.released_early: set[int] = set()

    async def put(self, seq: int, row: dict[str, Any] | None) -> None:
        """Accept the row of sequence number ``seq`` (None: the seq produced no row)."""
        if self.window is None:
            if row is not None:
                await self.writer.add(row)
            return
        if seq in self.released_early:
            self.released_early.discard(seq)
        self.held[seq] = row
        while self.next_seq in self.held or self.next_seq in self.released_early:
            if self.next_seq in self.released_early:
                self.released_early.discard(self.next_seq)
            else:
                ready = self.held.pop(self.next_seq)
                if ready is not None:
                    await self.writer.add(ready)
            self.next_seq += 1
        while len(self.held) > self.window:
            oldest = min(self.held)
            row = self.held.pop(oldest)
            self.released_early.add(oldest)
            if row is not None:
                await self.writer.add(row)

    async def drain(self) -> None:
        """Write everything held (end of run, or interruption)."""
        for seq in sorted(self.held):
            row = self.held.pop(seq)
            if row is not None:
                await self.writer.add(row)


async def iterate_in_thread(items: Iterable[T]) -> AsyncIterator[T]:
    """Pull a blocking iterator (listing may hit the network) without blocking the loop."""
    iterator: Iterator[T] = iter(items)
    sentinel = object()
    while True:
        item = await asyncio.to_thread(next, iterator, sentinel)
        if item is sentinel:
            return
        yield item  # type: ignore[misc]


def _is_local(url: str) -> bool:
    fs, _ = fsspec.core.url_to_fs(url)
    return isinstance(fs, LocalFileSystem)


def _download(url: str, folder: str, storage_options: dict[str, Any]) -> tuple[str, str]:
    """A local copy of ``url`` in ``folder``, and its sha256 (computed as it is copied)."""
    target = os.path.join(folder, f"doc-{abs(hash(url)) % 10**12}{os.path.splitext(url)[1][:10]}")
    digest: list[str] = []

    def copy() -> None:
        # store_options: flat keys plus this protocol's entry of --storage-options.
        sha = hashlib.sha256()
        with fsspec.open(url, "rb", **store_options(url, storage_options)) as src, open(target, "wb") as dst:
            while block := src.read(1 << 20):
                sha.update(block)
                dst.write(block)
        digest[:] = [sha.hexdigest()]

    retry_io(copy, what=f"reading {url}")  # transient store errors are retried, then stop the run
    return target, digest[0]


def _dataset_sha256(ref: DocumentRef) -> str:
    """The sha256 of a dataset row's page images, each framed by its length."""
    sha = hashlib.sha256()
    for image in ref.images:
        sha.update(len(image).to_bytes(8, "big"))
        sha.update(image)
    return sha.hexdigest()


class Readings(Protocol):
    """Which documents were read already, by content hash (:class:`~.dedup.DocumentReadings`;
    with work groups, :class:`~.shared_dedup.SharedReadings`)."""

    async def duplicate(self, ref: DocumentRef, sha256: str) -> object | None:
        """Not None when ``ref`` was read already, or is being read elsewhere (it is then set
        aside, not read here)."""
        ...

    def counted(self, sha256: str, num_pages: int) -> None:
        """The document first read with ``sha256`` has ``num_pages`` pages."""
        ...

    def start(self, intake: DocumentPages, flow: PageFlow[DocumentRef, PageImage | PageFailure]) -> None:
        """The intake begins handing ``flow`` its pages (duplicates set aside may be handed on
        while it goes: :meth:`PageFlow.put`)."""
        ...

    async def settle(self) -> None:
        """The intake reached its last document: return once every duplicate set aside that is
        handed on while the flow runs has been (or the flow stops)."""
        ...

    async def close(self) -> None:
        """The intake ended, however it ended: stop what :meth:`start` began."""
        ...


@dataclass
class FlowSettings:
    """Knobs of the page flow."""

    max_in_flight: int = 64
    prefetch_chunks: int = 8
    reorder_window: int = 1024
    flush_interval: float = 120.0
    grace_period: float = 30.0
    #: The in-flight limit, when it may change during the run (else max_in_flight, fixed).
    limit: InFlightLimit | None = None


def flow_settings(limit: InFlightLimit, *, flush_interval: float, grace_period: float,
                  workers: int = 0) -> FlowSettings:
    """The flow's knobs for a run whose pages in flight are bounded by ``limit``: render work
    queued ahead for two chunks per worker (at least 4), and a reorder window of four times the
    starting limit (at least 256 rows), so a slow page rarely forces rows out of order."""
    return FlowSettings(
        max_in_flight=limit.limit,
        prefetch_chunks=max(4, workers * 2),
        reorder_window=max(256, limit.limit * 4),
        flush_interval=flush_interval,
        grace_period=grace_period,
        limit=limit,
    )


@dataclass
class Batch(Generic[RefT, ItemT]):
    """Some pages of one document, handed to the flow by an intake."""

    #: The handler's first argument (the document's :class:`DocumentRef`; None for upstream rows).
    ref: RefT
    #: The pages: ready, or a render under way that turns its own failure into the pages' failures
    #: (see :func:`_keep`): the flow only waits for it.
    items: Awaitable[list[ItemT]] | list[ItemT]
    num_pages: int | None = None
    #: Called once the items are out (a downloaded copy of the document is removed).
    cleanup: Callable[[], None] | None = None


class Intake(Protocol[RefT, ItemT]):
    """Where a flow's pages come from: documents to render, or rows an earlier stage wrote."""

    #: How many of its pages may wait for a slot, and which of them goes first.
    look_ahead: LookAhead[ItemT]

    def batches(self, flow: PageFlow[RefT, ItemT]) -> AsyncGenerator[Batch[RefT, ItemT], None]:
        """The batches to handle, in input order; counts what it finds and skips in ``flow.counters``
        (``pages_found``, ``pages_skipped``, documents) and stops early once ``flow.stop`` is set."""
        ...


class PageFlow(Generic[RefT, ItemT]):
    """Runs one shard's pages through ``handler`` and writes the rows in input order.

    Pages come from an :class:`Intake`; a page is sent as soon as it is ready and a slot of the
    in-flight limit is free; each writer gets its row of every page (``handler`` returns one row
    per writer) through its own bounded reorder window.
    """

    def __init__(
        self,
        *,
        handler: PageHandler[RefT, ItemT],
        writer: RowSink | Sequence[RowSink],
        counters: RunCounters,
        settings: FlowSettings,
        stop: asyncio.Event | None = None,
    ) -> None:
        self.handler = handler
        self.writers = list(writer) if isinstance(writer, Sequence) else [writer]
        self.counters = counters
        self.settings = settings
        self.stop = stop or asyncio.Event()
        self.ordered_all = [OrderedRows(w, settings.reorder_window) for w in self.writers]
        #: Documents that got a row this run.
        self.documents: set[str] = set()
        self._queue: asyncio.Queue[Batch[RefT, ItemT] | None] = asyncio.Queue(maxsize=max(1, settings.prefetch_chunks))
        self._slots = settings.limit or asyncio.Semaphore(settings.max_in_flight)
        self._tasks: set[asyncio.Task[None]] = set()
        #: The rendered pages waiting for a slot (set when :meth:`run` starts).
        self.waiting: Waiting[RefT, ItemT] | None = None
        #: Asked, as a slot is free for a page, whether the page may be sent (work groups: one
        #: of a group another process took before its first page was sent here may not).
        self.admit: Callable[[RefT], Awaitable[bool]] | None = None
        #: Whether a page may go ahead of the waiting pages it does not accept (work groups: the
        #: pages of started groups go before those of groups only claimed; :meth:`Waiting.take`).
        self.preferred: Callable[[RefT], bool] | None = None
        #: Work groups read by two processes (docs/stragglers.md, second readers): a page's key,
        #: whether a rendered page is to be left out when its turn comes (the other reader wrote
        #: it), and a call made as its handler returns (its row is on its way) or is left out.
        self.page_key: Callable[[ItemT], Hashable] | None = None
        self.left_out: Callable[[RefT, ItemT], bool] | None = None
        self.returned: Callable[[RefT, ItemT, bool], None] | None = None
        #: Whose pages go in the order they are rendered, not longest first (a second reader's).
        self.in_render_order: Callable[[RefT], bool] | None = None
        #: The handlers running now, by page key (:meth:`cancel_pages`).
        self._in_handler: dict[Hashable, asyncio.Future[Any]] = {}
        self._stopped: set[Hashable] = set()
        #: Pages the intake has estimated and not rendered yet (:mod:`.render_order`).
        self.pages_ahead = 0
        self._doc_pending: dict[str, int] = {}
        self._fatal: BaseException | None = None
        self._scratch: str | None = None

    @property
    def slot_use(self) -> tuple[int, int]:
        """The in-flight limit, and how many of its slots no page holds now (work groups claim a
        group by them: :class:`~llm_ocr.runners.group_state.Room`). Counted from the pages in flight:
        the dispatcher holds a permit between a free slot and the page it sends."""
        limit = self.settings.limit.limit if self.settings.limit is not None else self.settings.max_in_flight
        return limit, max(0, limit - self.counters.in_flight)

    @property
    def ready_batches(self) -> int:
        """Batches rendered (or being rendered) ahead, waiting for a free slot: those queued, and
        one more for each in-flight limit's worth of pages waiting in the look-ahead.

        The pages estimated ahead and not rendered yet count as waiting (:mod:`.render_order`
        starts rendering a paced plan once it holds two rounds of slots)."""
        waiting = (self.waiting.pages if self.waiting is not None else 0) + self.pages_ahead
        slots = self.settings.limit.limit if self.settings.limit is not None else self.settings.max_in_flight
        return self._queue.qsize() + waiting // max(1, slots)

    @property
    def scratch(self) -> str:
        """A local folder for the run's temporary files (downloaded documents), removed at its end."""
        if self._scratch is None:
            self._scratch = tempfile.mkdtemp(prefix="llm-ocr-docs-")
        return self._scratch

    async def put(self, batch: Batch[RefT, ItemT]) -> None:
        """Hand the flow a batch besides its intake's (before the intake ends: a duplicate whose
        first's reading became known while the intake went on, :mod:`.shared_dedup`)."""
        await self._queue.put(batch)

    def expect(self, doc_id: str, pages: int) -> None:
        """``pages`` of document ``doc_id`` will be handled: the document is finished after them."""
        self._doc_pending[doc_id] = pages

    async def run(self, intake: Intake[RefT, ItemT]) -> None:
        """Handle every page ``intake`` gives; returns when all rows are handed to the writers."""
        waiting: Waiting[RefT, ItemT] = Waiting(intake.look_ahead)
        waiting.in_render_order = self.in_render_order
        self.waiting = waiting
        if intake.look_ahead.pages > 0:
            self.counters.look_ahead = {"pages": intake.look_ahead.pages, "mb": in_megabytes(intake.look_ahead.bytes)}
            # Pages go out longest first, and short ones may wait until the end of the shard:
            # rows held back for input order would wait for them, unwritten (a kill would lose
            # them, and a page held by the server would hold every row). They are written as
            # their pages finish.
            for ordered in self.ordered_all:
                ordered.window = None
        producer = asyncio.create_task(self._produce(intake))
        filler = asyncio.create_task(self._fill(waiting))
        flusher = asyncio.create_task(self._flush_periodically())
        try:
            await self._dispatch(waiting)
            if self.stop.is_set():
                # The producer may be blocked on a full queue nobody reads any more, the filler
                # on a look-ahead nobody takes from.
                producer.cancel()
                filler.cancel()
            else:
                await producer
                await filler
            await self._wait_tasks()
        finally:
            producer.cancel()
            filler.cancel()
            flusher.cancel()
            # Pages still in flight when the run itself is cancelled (a second Ctrl-C) end here,
            # not later on a loop whose writers are closed.
            for task in self._tasks:
                task.cancel()
            try:
                # Reap them all. Their own errors are already raised above (or moot once
                # stopped); a cancel of this run itself still propagates from here.
                await asyncio.gather(producer, filler, flusher, *self._tasks, return_exceptions=True)
            finally:
                for ordered in self.ordered_all:
                    await ordered.drain()
                if self._scratch is not None:
                    shutil.rmtree(self._scratch, ignore_errors=True)
        if self._fatal is not None:
            raise self._fatal

    async def _flush_periodically(self) -> None:
        # Bounds what a hard kill can lose to about one interval of work.
        while True:
            await asyncio.sleep(self.settings.flush_interval)
            for writer in self.writers:
                await writer.flush()

    async def _produce(self, intake: Intake[RefT, ItemT]) -> None:
        try:
            async with contextlib.aclosing(intake.batches(self)) as batches:
                async for batch in batches:
                    # The queue's bound is the prefetch limit: intake stays ahead of the
                    # requests, not arbitrarily far ahead of them.
                    await self._queue.put(batch)
                    if self.stop.is_set():
                        break
                else:
                    # Every document reached (an intake stops early only once stop is set):
                    # pages_found is the shard's total, shown with the time left.
                    self.counters.intake_done = not self.stop.is_set()
        except asyncio.CancelledError:
            # run() cancels the producer only once _dispatch has stopped reading: no end marker
            # is needed, and waiting for room in the full queue would never end (with a wedged
            # endpoint the run would stop, then wait here for ever).
            raise
        except BaseException:
            await self._queue.put(None)  # _dispatch still reads: let it end; run() raises this
            raise
        await self._queue.put(None)

    async def _fill(self, waiting: Waiting[RefT, ItemT]) -> None:
        """Move the rendered pages of each batch, in input order, into ``waiting`` while it has room."""
        try:
            while (batch := await self._queue.get()) is not None:
                await waiting.wait_for_room()
                pending = batch.items
                try:
                    items = await pending if isinstance(pending, Awaitable) else pending
                finally:
                    if batch.cleanup:
                        batch.cleanup()
                waiting.add(batch.ref, items, batch.num_pages)
                self._note(waiting)
        finally:
            waiting.close()

    def _note(self, waiting: Waiting[RefT, ItemT]) -> None:
        """Show what waits in the progress (and, at the end, in the completion marker)."""
        self.counters.waiting = waiting.pages
        if self.counters.look_ahead:
            self.counters.look_ahead.update(peak_pages=waiting.peak_pages, peak_mb=in_megabytes(waiting.peak_bytes))

    async def _dispatch(self, waiting: Waiting[RefT, ItemT]) -> None:
        while True:
            if self.stop.is_set() or self._fatal is not None:
                return
            # A page first, then a slot: a flow waiting for its next page to be rendered (or
            # for its intake to end) holds no slot. Where the limit is shared by the runs of
            # many documents (the service's worker), a document starting or ending would
            # otherwise keep a slot from the others' pages meanwhile.
            if not await waiting.ready(self.stop):
                return
            # SIGTERM (or a fatal error) may come while we wait for a slot: intake has
            # stopped, so no more page may be sent (the rerun does it), and the wait
            # must end at once (with every slot on a hung request it could outlast any
            # grace period: the grace period starts only when this loop returns).
            if not await acquire_unless_stopped(self._slots, self.stop):
                return
            # The page is chosen once a slot is free: the longest of all that wait by then.
            entry = await waiting.take(self.stop, self.preferred)
            self._note(waiting)
            if entry is None or self._fatal is not None:
                self._slots.release()
                return
            if self.left_out is not None and self.left_out(entry.ref, entry.item):
                # Another reader of its work group wrote it while it waited here.
                self._slots.release()
                self.counters.pages_skipped += 1
                if self.returned is not None:
                    self.returned(entry.ref, entry.item, False)
                for ordered in self.ordered_all:
                    await ordered.put(entry.seq, None)
                continue
            if self.admit is not None and not await self.admit(entry.ref):
                # Read by another process: counted as done, and its place in the order given up.
                self._slots.release()
                self.counters.pages_skipped += 1
                for ordered in self.ordered_all:
                    await ordered.put(entry.seq, None)
                continue
            task = asyncio.create_task(self._handle(entry.ref, entry.item, entry.num_pages, entry.seq))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _handle(self, ref: RefT, item: ItemT, num_pages: int | None, seq: int) -> None:
        self.counters.in_flight += 1
        held = _HeldSlot(self)
        _HELD.set(held)  # this task's own context: the handler may give the slot up (give_up_slot)
        rows: list[dict[str, Any] | None] = [None] * len(self.writers)
        key = self.page_key(item) if self.page_key is not None else None
        try:
            if key is None:
                returned = await self.handler(ref, item, num_pages)
            else:
                # Its own task, so that :meth:`cancel_pages` stops the request and nothing else.
                inner = asyncio.ensure_future(self.handler(ref, item, num_pages))
                self._in_handler[key] = inner
                try:
                    returned = await inner
                except asyncio.CancelledError:
                    if not (key in self._stopped and inner.cancelled()):
                        raise  # the flow itself is cancelled
                    self.counters.pages_skipped += 1  # another reader wrote it: no row from here
                    return
                finally:
                    self._in_handler.pop(key, None)
                    # Stopped only if the handler ended by the stop: one that answered anyway has
                    # its row on the way (the group's log leaves it out if it is a second one).
                    # A flow cancelled as a whole says nothing: the page stays unsettled, and its
                    # group is released, not ended.
                    stopped = key in self._stopped and inner.cancelled()
                    self._stopped.discard(key)
                    if self.returned is not None and (stopped or not inner.cancelled()):
                        self.returned(ref, item, not stopped)
            results = returned if isinstance(returned, tuple) else (returned,)
            result = results[0]
            assert result is not None, "the first writer's row is the page's own"
            rows = [r.to_row() if r is not None else None for r in results]
            rows += [None] * (len(self.writers) - len(rows))  # every writer must see every seq
            self.counters.pages[result.tally] += 1
            self.counters.prompt_tokens += result.prompt_tokens or 0
            self.counters.completion_tokens += result.completion_tokens or 0
            self.documents.add(result.doc_id)
            if result.doc_id in self._doc_pending:
                left = self._doc_pending[result.doc_id] - 1
                self._doc_pending[result.doc_id] = left
                if left <= 0:
                    del self._doc_pending[result.doc_id]
                    self.counters.docs_finished += 1
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # noqa: BLE001 - e.g. EndpointDown: stop the whole flow
            if self._fatal is None:
                self._fatal = exc
                self.stop.set()
        finally:
            if held.held:
                self.counters.in_flight -= 1
                self._slots.release()
            for ordered, row in zip(self.ordered_all, rows):
                try:
                    await ordered.put(seq, row)
                except Exception as exc:  # noqa: BLE001 - a part could not be stored: stop the flow
                    if self._fatal is None:
                        self._fatal = exc
                        self.stop.set()

    def cancel_pages(self, keys: Iterable[Hashable]) -> set[Hashable]:
        """Stop the requests of the pages ``keys`` whose handlers are running (another reader of
        their work group wrote them): they end with no row. Returns the keys stopped; a page whose
        handler has returned keeps its row (the group's log leaves it out if it is a second one)."""
        stopped = set()
        for key in keys:
            inner = self._in_handler.pop(key, None)
            if inner is not None and not inner.done():
                inner.cancel()
                stopped.add(key)
                self._stopped.add(key)
        return stopped

    async def _wait_tasks(self) -> None:
        abandoned = await finish_in_flight(self._tasks, self.stop, self.settings.grace_period)
        if abandoned:
            log.warning("abandoned %d page(s) still in flight after the %.0fs grace period", abandoned,
                        self.settings.grace_period)


@dataclass
class _HeldSlot:
    """The in-flight slot of the page a flow's task handles, and whether the page holds it now."""

    flow: PageFlow[Any, Any]
    held: bool = True


_HELD: contextvars.ContextVar[_HeldSlot | None] = contextvars.ContextVar("llm_ocr_held_slot", default=None)


def give_up_slot() -> asyncio.Event | None:
    """Give back the in-flight slot of the page being handled (called from its handler, before it
    waits on something other than the model: another process's reading of the same page), so
    other pages are sent meanwhile. Returns the flow's stop event (None: not in a flow's page).
    A page that must be sent after all takes a slot again with :func:`take_slot`."""
    held = _HELD.get()
    if held is None:
        return None
    if held.held:
        held.held = False
        held.flow.counters.in_flight -= 1
        held.flow._slots.release()
    return held.flow.stop


def flow_stop() -> asyncio.Event | None:
    """The stop event of the flow whose page is being handled (None: not in a flow's page)."""
    held = _HELD.get()
    return held.flow.stop if held is not None else None


async def take_slot() -> bool:
    """Take an in-flight slot again for the page being handled after :func:`give_up_slot`; False
    when the flow stops first (the page is not to be sent: its rerun reads it)."""
    held = _HELD.get()
    if held is None or held.held:
        return True
    if not await acquire_unless_stopped(held.flow._slots, held.flow.stop):
        return False
    held.held = True
    held.flow.counters.in_flight += 1
    return True


def expected_text(item: PageImage | PageFailure) -> Expected:
    """How long a page's answer is expected to be: the characters of text estimated as it was
    rendered (None: no estimate); a failure sends nothing and goes first (its row is written
    at once)."""
    if isinstance(item, PageFailure):
        return math.inf
    return item.text_estimate.chars if item.text_estimate is not None else None


def held_bytes(item: PageImage | PageFailure) -> int:
    """The bytes a waiting page holds: its encoded image, and its pieces' if it has any."""
    if not isinstance(item, PageImage):
        return 0
    return len(item.image) + (item.pieces.nbytes if item.pieces is not None else 0)


def page_look_ahead(pages: int, megabytes: float) -> LookAhead[PageImage | PageFailure]:
    """A look-ahead of at most ``pages`` rendered pages and ``megabytes`` MiB of their images,
    longest expected text first (``pages`` 0: input order)."""
    return LookAhead(pages, round(megabytes * MB), expected_text, held_bytes)


class DocumentPages:
    """An :class:`Intake` of documents: each is counted, its pages not done yet are rendered in
    worker processes, a chunk of :data:`CHUNK_PAGES` at a time, ahead of the requests (with
    ``estimate_text``, each page's text is estimated as it is rendered, and with a
    ``look_ahead``, the rendered pages expected to be longest are sent first). With
    ``estimate_ahead`` too, up to that many PDF pages are estimated from their files before
    rendering and rendered longest first (:mod:`.render_order`; ``paced``: the documents come as
    the flow has room for them, as work groups hand them out)."""

    def __init__(
        self,
        documents: Iterable[DocumentRef],
        index: ShardIndex,
        pool: WorkerPool,
        render: RenderOptions,
        storage_options: dict[str, Any] | None = None,
        estimate_text: bool = False,
        look_ahead: LookAhead[PageImage | PageFailure] = IN_ORDER,
        planned: Callable[[DocumentRef, list[int]], list[int] | None] | None = None,
        max_aspect: float = 0.0,
        estimate_ahead: int = 0,
        paced: bool = False,
        readings: Readings | None = None,
    ) -> None:
        self.documents = documents
        #: With these, a document whose bytes were read already is set aside, not read (:mod:`.dedup`).
        self.readings = readings
        #: Pages longer than this many times their width get their segments rendered too (0: none).
        self.max_aspect = max_aspect
        self.index = index
        self.pool = pool
        self.render = render
        self.storage_options = storage_options or {}
        self.estimate_text = estimate_text
        #: Pages estimated from their PDF before rendering, at most (0: rendered in input order;
        #: without a look-ahead too).
        self.estimate_ahead = estimate_ahead if look_ahead.pages > 0 else 0
        #: The documents come as the flow has room for them (work groups: see :mod:`.render_order`).
        self.paced = paced
        #: The estimate each page was rendered by, until the look-ahead ranks it by the same.
        self.expected: dict[tuple[str, int], float] = {}
        self.look_ahead = replace(look_ahead, expected=self._expected(look_ahead.expected)) if self.estimate_ahead \
            else look_ahead
        #: Told, for each document, which pages will get a row this run (page 0: the document
        #: could not be opened; none: it is done): work groups end when those rows are stored. It
        #: may answer the order to render them in (a group's second reader: from the end).
        self.planned: Callable[[DocumentRef, list[int]], list[int] | None] = planned or (lambda ref, pages: None)

    def over(self, documents: Iterable[DocumentRef]) -> DocumentPages:
        """This intake over ``documents`` instead, each read whatever its hash (duplicates whose
        firsts' rows were not all stored: :mod:`.dedup`)."""
        other = copy.copy(self)
        other.documents, other.readings = documents, None
        return other

    def _expected(self, rendered: Callable[[PageImage | PageFailure], Expected]) -> Callable[
            [PageImage | PageFailure], Expected]:
        """A page's rank in the look-ahead: the estimate it was rendered by (from its PDF), else
        what ``rendered`` says (its text as rendered; a failure goes at once)."""

        def expected(item: PageImage | PageFailure) -> Expected:
            known = self.expected.pop((item.doc_id, item.page), None)
            return rendered(item) if known is None or isinstance(item, PageFailure) else known

        return expected

    async def batches(
        self, flow: PageFlow[DocumentRef, PageImage | PageFailure]
    ) -> AsyncGenerator[Batch[DocumentRef, PageImage | PageFailure], None]:
        if self.readings is not None:
            self.readings.start(self, flow)
        try:
            if self.estimate_ahead > 0:
                ordered = expected_order(self, flow, self.estimate_ahead, CHUNK_PAGES, self.paced)
                async with contextlib.aclosing(ordered) as batches:
                    async for batch in batches:
                        yield batch
            else:
                async for ref in self.documents_to_read(flow):
                    async for batch in self._document(ref, flow):
                        yield batch
            if self.readings is not None:
                await self.readings.settle()
        finally:
            if self.readings is not None:
                await self.readings.close()

    async def documents_to_read(self, flow: PageFlow[DocumentRef, PageImage | PageFailure]) -> AsyncGenerator[
            DocumentRef, None]:
        """The documents with pages to read, in input order (those done already are counted as
        skipped); ends early once ``flow.stop`` is set."""
        counters = flow.counters
        if counters.pages_found is None:
            counters.pages_found = 0  # counted from the documents: see RunCounters.reconciliation
        async for ref in iterate_in_thread(self.documents):
            if flow.stop.is_set():
                break
            counters.docs_seen += 1
            if self.index.is_document_done(ref.doc_id):
                counters.docs_skipped += 1
                pages = self.index.num_pages.get(ref.doc_id) or 0
                counters.pages_skipped += pages
                counters.pages_found += pages
                self.planned(ref, [])
                continue
            yield ref

    async def _localize(self, ref: DocumentRef, folder: str) -> tuple[DocumentRef, Callable[[], None] | None, str]:
        """``ref`` made local (a remote file downloaded), what removes the copy, and its sha256
        when :attr:`readings` asks (from the manifest, else computed as its bytes are read)."""
        hashed = self.readings is not None and not ref.error
        if ref.kind == "dataset_row" or ref.error or _is_local(ref.location):
            if not hashed or ref.sha256:
                return ref, None, ref.sha256
            if ref.kind == "dataset_row":
                return ref, None, _dataset_sha256(ref)
            try:
                return ref, None, await asyncio.to_thread(file_sha256, ref.location)
            except OSError:  # a missing file: counting its pages says so, as without hashes
                return ref, None, ""
        path, digest = await asyncio.to_thread(_download, ref.location, folder, self.storage_options)

        def remove() -> None:
            if os.path.exists(path):
                os.remove(path)

        return replace(ref, location=path), remove, ref.sha256 or digest

    async def _document(
        self, ref: DocumentRef, flow: PageFlow[DocumentRef, PageImage | PageFailure]
    ) -> AsyncIterator[Batch[DocumentRef, PageImage | PageFailure]]:
        opened = await self.open_document(ref, flow)
        if isinstance(opened, Batch):
            yield opened
            return
        if opened is None:
            return
        chunks = [opened.todo[i : i + CHUNK_PAGES] for i in range(0, len(opened.todo), CHUNK_PAGES)]
        for number, pages in enumerate(chunks):
            last = number == len(chunks) - 1
            yield self.chunk(opened, pages, opened.cleanup if last else None)

    async def open_document(
        self, ref: DocumentRef, flow: PageFlow[DocumentRef, PageImage | PageFailure]
    ) -> OpenDocument | Batch[DocumentRef, PageImage | PageFailure] | None:
        """Make ``ref`` local, count its pages and tell the flow and ``planned`` which will get a
        row: the document ready to render, the batch of its one error row when it cannot be
        opened, or None when every page is done already."""
        counters = flow.counters
        assert counters.pages_found is not None
        try:
            local, cleanup, sha256 = await self._localize(ref, flow.scratch)
            if sha256 and self.readings is not None and await self.readings.duplicate(ref, sha256) is not None:
                # Read already (here, earlier, or as the index says), or being read elsewhere: its
                # rows are copies, made once the first's are stored; none of its pages is counted
                # or rendered here.
                if cleanup:
                    cleanup()
                return None
            if ref.kind == "dataset_row":  # counting is len(images): no need to ship them to a worker
                num_pages = count_pages(local, self.render)
            else:
                num_pages = await self.pool.read_ahead(count_pages, local, self.render)
        except (DocumentError, OSError, WorkerDied) as exc:  # WorkerDied: the document crashed the renderer
            failure = PageFailure(ref.doc_id, DOCUMENT_LEVEL_PAGE, str(exc) or type(exc).__name__)
            counters.pages_found += 1  # the document's one error row
            flow.expect(ref.doc_id, 1)  # which finishes the document
            self.planned(ref, [DOCUMENT_LEVEL_PAGE])
            return Batch(ref, [failure])
        if sha256 and self.readings is not None:
            self.readings.counted(sha256, num_pages)
        done = self.index.done_pages.get(ref.doc_id, set())
        todo = [p for p in range(1, num_pages + 1) if p not in done]
        # Counted from the input, not from the rows: the end-of-run line checks the rows against it.
        counters.pages_found += num_pages
        counters.pages_skipped += num_pages - len(todo)
        order = self.planned(ref, todo)
        todo = order or todo
        if not todo:
            if cleanup:
                cleanup()
            return None
        flow.expect(ref.doc_id, len(todo))
        return OpenDocument(ref, local, num_pages, todo, cleanup, backward=order is not None)

    def chunk(self, opened: OpenDocument, pages: list[int],
              cleanup: Callable[[], None] | None) -> Batch[DocumentRef, PageImage | PageFailure]:
        """The batch of ``pages`` of an open document, their render started in a worker now
        (``cleanup``: called once they are rendered)."""
        ref, local = opened.ref, opened.local
        # A worker gets a dataset row's images of these pages only, not all of a long row's.
        target = local.pages_slice(min(pages), max(pages)) if ref.kind == "dataset_row" else local
        if pages == sorted(pages) and pages[-1] - pages[0] < 2 * CHUNK_PAGES:  # a chunk in input order
            render = self.pool.read_ahead(render_pages, target, self.render, pages[0], pages[-1],
                                          self.estimate_text, self.max_aspect)
        else:
            render = self.pool.read_ahead(render_page_list, target, self.render, pages, self.estimate_text,
                                          self.max_aspect)
        return Batch(ref, _keep(asyncio.ensure_future(render), ref.doc_id, pages), opened.num_pages, cleanup)


class UpstreamRows:
    """An :class:`Intake` of the page rows an earlier stage wrote (``OUT/extract`` for Describe):
    rows whose page ``index`` holds already are skipped, the others are handed on as
    :class:`~llm_ocr.records.PageResult` values. Every row counts as a page found when the
    counters count them (``pages_found`` not None)."""

    #: Rows are handed on in their order, one at a time.
    look_ahead: LookAhead[PageResult] = IN_ORDER

    def __init__(self, rows: Iterable[dict[str, Any]], index: ShardIndex) -> None:
        self.rows = rows
        self.index = index

    async def batches(self, flow: PageFlow[None, PageResult]) -> AsyncGenerator[Batch[None, PageResult], None]:
        counters = flow.counters
        async for row in iterate_in_thread(self.rows):
            if flow.stop.is_set():
                break
            if counters.pages_found is not None:
                counters.pages_found += 1
            if row["page"] in self.index.done_pages.get(row["doc_id"], ()):
                counters.pages_skipped += 1
                continue
            yield Batch(None, [PageResult.from_row(row)], row.get("num_pages"))


async def finish_in_flight(tasks: set[asyncio.Task[None]], stop: asyncio.Event, grace_period: float) -> int:
    """Wait for ``tasks`` (the requests in flight) to end; once ``stop`` is set, whether before
    or during the wait, for at most ``grace_period`` seconds more, then cancel the rest. Returns
    how many were cancelled.

    A stop that comes while waiting must start the grace period too: after intake ends, a
    request hung on the server (the last pages of a run) would otherwise outlast Ctrl-C and
    SIGTERM alike, and the parts already done would wait on it.
    """
    stopped = asyncio.ensure_future(stop.wait())
    try:
        while (running := {t for t in tasks if not t.done()}) and not stop.is_set():
            await asyncio.wait({*running, stopped}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopped.cancel()
    running = {t for t in tasks if not t.done()}
    if not running:
        return 0
    _, pending = await asyncio.wait(running, timeout=grace_period)
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    return len(pending)


async def acquire_unless_stopped(semaphore: asyncio.Semaphore | InFlightLimit, stop: asyncio.Event) -> bool:
    """Acquire ``semaphore`` unless ``stop`` is set first; True if acquired (and not stopped)."""
    if stop.is_set():
        return False
    if not semaphore.locked():  # a free slot: taken at once, no tasks (the hot path of a run)
        return await semaphore.acquire()
    acquire = asyncio.ensure_future(semaphore.acquire())
    stopped = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({acquire, stopped}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopped.cancel()
        if not acquire.done():
            acquire.cancel()
    try:
        await acquire
    except asyncio.CancelledError:
        if not acquire.cancelled():
            raise  # we ourselves are being cancelled
        return False
    if stop.is_set():  # both happened: stopping wins, the slot goes back
        semaphore.release()
        return False
    return True


def _keep(
    future: asyncio.Future[list[PageImage | PageFailure]], doc_id: str, pages: list[int]
) -> Awaitable[list[PageImage | PageFailure]]:
    """Wrap a render future so only the requested ``pages`` come back (the rest are done already);
    a render that failed (a worker crash) fails these pages, not the run."""
    wanted = set(pages)

    async def filtered() -> list[PageImage | PageFailure]:
        try:
            items = await future
        except Exception as exc:  # noqa: BLE001 - each page gets an error row saying why
            return [PageFailure(doc_id, p, f"rendering failed: {exc}") for p in pages]
        return [item for item in items if item.page in wanted]

    return _Pending(filtered)


class _Pending:
    """An awaitable render result, made only when awaited."""

    def __init__(self, make: Callable[[], Awaitable[list[PageImage | PageFailure]]]) -> None:
        # The coroutine is made only when awaited, so entries an interrupted run never reaches
        # leave no "coroutine ... was never awaited" warning on stderr.
        self._make = make

    def __await__(self) -> Generator[Any, None, list[PageImage | PageFailure]]:
        return self._make().__await__()
