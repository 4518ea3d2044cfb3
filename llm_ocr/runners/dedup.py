"""Each distinct document and each distinct page read once (docs/dedup.md).

* :class:`DocumentReadings`: before a document's pages are counted or rendered, its sha256 (from
  the manifest, else computed as its bytes are read) says whether this shard's run, an earlier
  run into the same OUT, or a ``--dedup-index`` read it already. A duplicate is set aside
  (:attr:`DocumentReadings.deferred`) and, once the shard's reading is stored, gets its rows as
  copies of the first's (:class:`CopiedDocuments`), read from where they are stored: the same
  path for all three, and memory that does not grow with the shard. A duplicate whose first's
  rows are not all stored (the first failed to finish) is read after all.
* :class:`PageReuse`: within a run, a page whose image is pixel for pixel one already sent gets
  a copy of that reading instead of a request.

Every copied row names what it copies (``duplicate_of``, ``duplicate_page``) and carries no
tokens, attempts or latency of its own: it cost no request.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections import OrderedDict
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from llm_ocr.options import ExtractOptions
from llm_ocr.records import DOCUMENT_LEVEL_PAGE, PageResult
from llm_ocr.runners.lifecycle import PageWork
from llm_ocr.runners.look_ahead import IN_ORDER, LookAhead
from llm_ocr.runners.page_flow import Batch, DocumentPages, PageFlow, PageRows
from llm_ocr.runners.workers import WorkerPool
from llm_ocr.sources.base import DocumentRef, PageFailure, PageImage
from llm_ocr.sources.fingerprint import page_fingerprint, same_pixels
from llm_ocr.sources.listing import InputError
from llm_ocr.stages.space import place
from llm_ocr.storage.parts import PartWriter, ShardIndex
from llm_ocr.storage.readings import HASHES, Reading, load_readings, stored_rows, write_readings
from llm_ocr.storage.url import Storage

log = logging.getLogger(__name__)

#: Duplicates whose firsts' rows are looked up together (one pass over the stored parts each).
LOOKUP_CHUNK = 256
#: Bytes of first pages' images kept to compare later pages with (oldest dropped first): a page
#: whose first was dropped is read again, never guessed.
PAGE_MEMORY = 64 * 1024 * 1024
#: At most this many pixel comparisons a page, with the newest kept pages of its fingerprint
#: whose bytes differ (PageReuse._candidates): what page dedup may spend on a page is bounded.
PIXEL_COMPARES = 2
#: A figure's id names its page (``p{page}-f{k}``): a copy on another page is renamed.
_FIGURE_PAGE = re.compile(r"^p\d+-")


class HasDeferred(Protocol):
    """Readings that set duplicates aside (:class:`DocumentReadings`, and with work groups
    :class:`~.shared_dedup.SharedReadings`)."""

    @property
    def deferred(self) -> Sequence[object]: ...


@dataclass(frozen=True)
class Duplicate:
    """A document whose bytes were read already, as ``first`` (its rows in folder ``rows``)."""

    ref: DocumentRef
    first: str
    rows: str


@dataclass
class DocumentReadings:
    """The documents read by content hash: in this shard's run (:attr:`read`), and earlier
    (:attr:`earlier`: OUT's hash records and ``--dedup-index``); ``rows`` is the URL of the
    folder this run writes its rows to."""

    rows: str
    earlier: dict[str, Reading] = field(default_factory=dict)
    #: The documents this run reads, by sha256 (recorded in OUT/_state/hashes at the end).
    read: dict[str, Reading] = field(default_factory=dict)
    #: The duplicates set aside, in input order.
    deferred: list[Duplicate] = field(default_factory=list)

    async def duplicate(self, ref: DocumentRef, sha256: str) -> Duplicate | None:
        """Whether ``ref`` (bytes hashing to ``sha256``) was read already; else it is this run's
        first of them. A duplicate is set aside in :attr:`deferred`."""
        first = self.read.get(sha256) or self.earlier.get(sha256)
        # The same doc_id in this output is this document resumed; in another output, a copy.
        if first is not None and (first.doc_id != ref.doc_id or first.rows != self.rows):
            found = Duplicate(ref, first.doc_id, first.rows)
            self.deferred.append(found)
            return found
        # Read here: a new document, or one an earlier run began under this name (resumed).
        self.read.setdefault(sha256, Reading(ref.doc_id, None, self.rows))
        return None

    def counted(self, sha256: str, num_pages: int) -> None:
        """The first of ``sha256`` has ``num_pages`` pages (what its hash record says)."""
        if (reading := self.read.get(sha256)) is not None:
            self.read[sha256] = replace(reading, num_pages=num_pages)

    def start(self, intake: DocumentPages, flow: PageFlow[DocumentRef, PageImage | PageFailure]) -> None:
        """Nothing to begin: the duplicates are copied after the flow (:func:`copy_duplicates`)."""

    async def settle(self) -> None:
        """Nothing handed on while the flow runs."""

    async def close(self) -> None:
        """Nothing begun."""


def copied(row: dict[str, Any], ref: DocumentRef, page: int, first: str, first_page: int) -> PageResult:
    """Page ``page`` of ``ref`` as a copy of ``row``, the row of page ``first_page`` of ``first``
    (a copy itself, maybe: its own ``duplicate_of`` is then replaced, and a reader follows the chain)."""
    result = PageResult.from_row(row)
    figures = result.figures
    if page != first_page:
        figures = [replace(f, id=_FIGURE_PAGE.sub(f"p{page}-", f.id)) for f in figures]
    return replace(result, doc_id=ref.doc_id, doc_index=ref.index, page=page, source=ref.source, figures=figures,
                   duplicate_of=first, duplicate_page=first_page, prompt_tokens=None, completion_tokens=None,
                   latency_s=None, attempts=0)


class CopiedDocuments:
    """An intake of the duplicates set aside: each one's pages not done yet, copied from its
    first's stored rows in each of ``stages`` (a page's item is its row, or its tuple of rows
    with several stages). Those whose first's rows do not cover them go to :attr:`unresolved`
    (to be read after all)."""

    #: Rows are handed on as they come.
    look_ahead: LookAhead[PageRows] = IN_ORDER

    def __init__(self, deferred: list[Duplicate], index: ShardIndex, stages: Sequence[str],
                 storage_options: dict[str, Any]) -> None:
        self.deferred = deferred
        self.index = index
        self.stages = tuple(stages)
        self.storage_options = storage_options
        self.unresolved: list[DocumentRef] = []

    async def batches(self, flow: PageFlow[DocumentRef, PageRows]) -> AsyncGenerator[
            Batch[DocumentRef, PageRows], None]:
        counters = flow.counters
        if counters.pages_found is None:
            counters.pages_found = 0
        for start in range(0, len(self.deferred), LOOKUP_CHUNK):
            chunk = self.deferred[start : start + LOOKUP_CHUNK]
            rows = await asyncio.to_thread(self._lookup, chunk)
            for dup in chunk:
                if flow.stop.is_set():
                    return
                batch = self._batch(dup, [rows.get((stage, dup.rows, dup.first), []) for stage in self.stages], flow)
                if batch is not None:
                    yield batch

    def _lookup(self, chunk: list[Duplicate]) -> dict[tuple[str, str, str], list[dict[str, Any]]]:
        """The stored rows of the firsts of ``chunk``, by (stage, output folder, doc_id)."""
        found: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
        for output in {d.rows for d in chunk}:
            wanted = {d.first for d in chunk if d.rows == output}
            for stage in self.stages:
                for doc_id, rows in stored_rows(output, stage, wanted, self.storage_options).items():
                    found[(stage, output, doc_id)] = rows
        return found

    def _batch(self, dup: Duplicate, stored: list[list[dict[str, Any]]],
               flow: PageFlow[DocumentRef, PageRows]) -> Batch[DocumentRef, PageRows] | None:
        counters = flow.counters
        assert counters.pages_found is not None
        by_page = [{r["page"]: r for r in rows} for rows in stored]
        first = by_page[0]
        if DOCUMENT_LEVEL_PAGE in first:  # the first could not be opened: nor can its copy
            num_pages, pages = 1, [DOCUMENT_LEVEL_PAGE]
        else:
            num_pages = max((r.get("num_pages") or 0 for r in stored[0]), default=0)
            pages = list(range(1, num_pages + 1))
        if not pages or any(p not in rows for rows in by_page for p in pages):
            log.info("%s: a copy of %s, whose rows are not all stored: read instead", dup.ref.doc_id, dup.first)
            self.unresolved.append(dup.ref)
            return None
        if first.get(DOCUMENT_LEVEL_PAGE) is None and any(
                rows[p].get("status") not in ("ok", "truncated") for rows in by_page for p in pages):
            # As for a page: a reading that failed is not copied (a retry may read it), the copy is read.
            log.info("%s: a copy of %s, whose reading has failed pages: read instead", dup.ref.doc_id, dup.first)
            self.unresolved.append(dup.ref)
            return None
        done = self.index.done_pages.get(dup.ref.doc_id, set())
        todo = [p for p in pages if p not in done]
        counters.pages_found += len(pages)
        counters.pages_skipped += len(pages) - len(todo)
        if not todo:
            return None
        flow.expect(dup.ref.doc_id, len(todo))
        items: list[PageRows] = []
        for p in todo:
            copies = tuple(copied(rows[p], dup.ref, p, dup.first, p) for rows in by_page)
            items.append(copies if len(copies) > 1 else copies[0])
        return Batch(dup.ref, items, None if pages == [DOCUMENT_LEVEL_PAGE] else num_pages)


async def copy_duplicates(work: PageWork, readings: DocumentReadings, index: ShardIndex, stages: Sequence[str],
                          storage_options: dict[str, Any],
                          on_copy: Callable[[PageRows], None] | None = None) -> list[DocumentRef]:
    """Write the rows of the duplicates ``readings`` set aside, as copies of their firsts' rows
    once this run's are stored (``on_copy`` is told each page's); returns those to read after
    all (their firsts' rows are not all stored)."""
    if not readings.deferred or work.shard.stop.is_set():
        return []
    for stage in stages:  # this run's firsts are read back from where they are stored
        writer = work.writers[stage]
        if isinstance(writer, PartWriter):
            await writer.settle()
    copies = CopiedDocuments(readings.deferred, index, stages, storage_options)

    async def handle(ref: DocumentRef, rows: PageRows, num_pages: int | None) -> PageRows:
        if on_copy is not None:
            on_copy(rows)
        return rows

    await work.run(copies, handle, list(stages))
    log.info("%d document(s) read already were copied, not read", len(readings.deferred) - len(copies.unresolved))
    return copies.unresolved


@dataclass
class _First:
    """A page sent to the model, kept to compare later pages with: its image and its reading."""

    doc_id: str
    page: int
    image: bytes
    reading: asyncio.Future[PageRows | None]


Handler = Callable[[DocumentRef, PageImage | PageFailure, int | None], Awaitable[PageRows]]


def _readings(rows: PageRows) -> tuple[PageResult | None, ...]:
    return rows if isinstance(rows, tuple) else (rows,)


class PageReuse:
    """Wraps a page handler so a page whose image is pixel for pixel one already handled in this
    run gets a copy of that reading (``duplicate_of``/``duplicate_page`` name the first).

    Candidates are the pages of the same size and difference hash
    (:func:`~llm_ocr.sources.fingerprint.page_fingerprint`, threshold 0: equal pixels give equal
    hashes, so a candidate found at a greater distance could only fail the exact comparison);
    :func:`~llm_ocr.sources.fingerprint.same_pixels` decides. A page waiting for its first's
    reading holds its slot, and its first already holds one (it was registered as it was sent),
    so the wait always ends. Only a reading with text is reused (``ok`` or ``truncated``): after
    an error the copy is read itself. Pages read in segments are not compared (their segments
    come from the source, not the page image).
    """

    def __init__(self, handler: Handler, pool: WorkerPool, memory: int = PAGE_MEMORY) -> None:
        self.handler = handler
        self.pool = pool
        self.memory = memory
        self.held = 0
        self.firsts: OrderedDict[tuple[int, int, int], list[_First]] = OrderedDict()
        #: Pages that got a copy, and candidates the pixel comparison turned down.
        self.reused = 0
        self.rejected = 0

    async def __call__(self, ref: DocumentRef, item: PageImage | PageFailure, num_pages: int | None) -> PageRows:
        if not isinstance(item, PageImage) or item.pieces is not None:
            return await self.handler(ref, item, num_pages)
        key = await self.pool.run(page_fingerprint, item.image)
        for first in self._candidates(key, item.image):
            # Equal bytes are equal pixels: decoded in a worker only when the bytes differ.
            if first.image != item.image and not await self.pool.run(same_pixels, first.image, item.image):
                self.rejected += 1
                continue
            reading = await asyncio.shield(first.reading)
            rows = _readings(reading) if reading is not None else ()
            if rows and all(r is not None and r.status in ("ok", "truncated") for r in rows):
                self.reused += 1
                # Each copy on this page's own PDF box and /Rotate (the first's may be another PDF's).
                copies = tuple(place(copied(r.to_row(), ref, item.page, first.doc_id, first.page), item.pdf_page)
                               for r in rows if r is not None)
                return copies if isinstance(reading, tuple) else copies[0]
            break  # the first's reading failed (or has no row of a stage): this page is read itself
        first = _First(ref.doc_id, item.page, item.image, asyncio.get_running_loop().create_future())
        self._keep(key, first)
        try:
            row = await self.handler(ref, item, num_pages)
        except BaseException:
            first.reading.set_result(None)
            raise
        first.reading.set_result(row)
        return row

    def _candidates(self, key: tuple[int, int, int], image: bytes) -> list[_First]:
        """The kept pages to compare ``image`` with: one of the same bytes (equal pixels, no
        decoding), else the :data:`PIXEL_COMPARES` newest of its fingerprint.

        Text pages that differ by a few words (the pages of a form, numbered pages) often share
        their difference hash; compared with every kept one, a run of N such pages decoded and
        compared N²/2 pairs in the render pool (24 one-page documents: 0.89 pages/s against 4.82
        without dedup, measured by the service benchmark at load 11.7). The renderer encodes equal
        pixels as equal bytes, so the byte match finds every page it rendered twice; the bounded
        pixel comparisons are for equal pixels in different encodings (image inputs)."""
        kept = self.firsts.get(key, ())
        for first in kept:
            if first.image == image:  # a byte compare stops at the first difference: cheap
                return [first]
        return list(kept[-PIXEL_COMPARES:][::-1])

    def _keep(self, key: tuple[int, int, int], first: _First) -> None:
        """Keep ``first`` to compare later pages with, dropping the oldest beyond the memory."""
        self.firsts.setdefault(key, []).append(first)
        self.firsts.move_to_end(key)
        self.held += len(first.image)
        while self.held > self.memory and len(self.firsts) > 1:
            _, dropped = self.firsts.popitem(last=False)
            self.held -= sum(len(f.image) for f in dropped)

    def stats(self) -> dict[str, int]:
        """What the completion marker records of the page reuse."""
        return {"pages_reused": self.reused, "candidates_rejected": self.rejected}


def shard_readings(out: Storage, options: ExtractOptions, storage_options: dict[str, Any]) -> DocumentReadings:
    """The documents read before this shard's run: those OUT records (``OUT/_state/hashes``) and
    ``--dedup-index``'s; this run's are recorded as read into OUT."""
    output = out.fs.unstrip_protocol(out.root)
    # OUT's own records name rows in OUT, wherever OUT was when they were written: an OUT copied
    # or moved elsewhere must not take its own documents for another output's copies.
    own = {sha: replace(r, rows=output) for sha, r in load_readings([out.child(HASHES).url], storage_options).items()}
    try:
        earlier = {**load_readings([options.dedup_index], storage_options), **own} if options.dedup_index else own
    except (OSError, ValueError) as exc:
        raise InputError(f"--dedup-index: {exc}") from exc
    if earlier:
        log.info("%d document(s) read before are known by their sha256", len(earlier))
    return DocumentReadings(output, earlier)


def record_readings(out: Storage, shard: int, num_shards: int, readings: DocumentReadings) -> None:
    """Record the documents this shard's run read (those with their pages counted), for later
    runs into OUT and for other outputs' ``--dedup-index``."""
    read = {sha: r for sha, r in readings.read.items() if r.num_pages is not None}
    write_readings(out, shard, num_shards, read)


def dedup_stats(readings: DocumentReadings | HasDeferred | None, reuse: PageReuse | None) -> dict[str, Any]:
    """What the completion marker records of deduplication: documents set aside as read
    already, pages that got a copy of a pixel-identical page's reading, and candidates the
    pixel comparison turned down (None where it was off)."""
    return {
        "documents_duplicate": len(readings.deferred) if readings is not None else None,
        **(reuse.stats() if reuse is not None else {"pages_reused": None, "candidates_rejected": None}),
    }
