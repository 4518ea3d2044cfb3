"""Each distinct document read once across the shards of a run read in work groups (docs/dedup.md).

With work groups every process may read any shard's groups, and a group ends only once every
page of it has a row stored, so a duplicate cannot wait for the end of the run as it does in a
static shard (:mod:`.dedup`). Instead the content hash is claimed like a unit of work
(:class:`~llm_ocr.storage.hash_claims.HashClaims`): the first process to reach a hash names its
document the first and reads it; a process reaching another copy sets it aside and, while its
flow goes on, looks in storage for what became of the first:

- the first's rows are all stored in its group's parts, with text: the copy gets copies of them
  (``duplicate_of``), handed to the flow as pages that need no request (:class:`CopiedPage`);
- the first's group is done and its rows are not all there, or not all with text (its reading
  failed): the copy is read here;
- the first's group is free again (its holder died, its lease ran out, or it stopped): the copy
  is named the first in the hash's next epoch and read here; whoever reads the old group later
  finds its document a copy of this one;
- otherwise (the group is held: its reader is alive) the copy waits, and is looked at again
  every :data:`POLL_SECONDS`.

Nothing here waits on time to decide: only the claims and the rows in storage decide, and a
holder's lease is what ends a wait on a process that died. The copy's group is not ended while
it waits (its rows are not stored yet), and its claim is renewed meanwhile, as any held group's.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from llm_ocr.records import DOCUMENT_LEVEL_PAGE
from llm_ocr.runners.dedup import DocumentReadings, copied
from llm_ocr.runners.groups import GroupWork
from llm_ocr.runners.page_flow import CHUNK_PAGES, Batch, DocumentPages, PageFlow, PageRows
from llm_ocr.runners.render_order import OpenDocument
from llm_ocr.sources.base import DocumentRef, PageFailure, PageImage
from llm_ocr.storage.claims import GroupId
from llm_ocr.storage.group_parts import group_part_name
from llm_ocr.storage.hash_claims import FirstCopy, HashClaims
from llm_ocr.storage.readings import Reading, stored_rows
from llm_ocr.storage.url import Storage

log = logging.getLogger(__name__)

#: Seconds between two looks at what became of the firsts of the copies set aside: each look
#: reads, per copy waiting, the first's group's claim and parts (a few small reads).
POLL_SECONDS = 2.0

Item = PageImage | PageFailure
Handler = Callable[[DocumentRef, Item, int | None], Awaitable[PageRows]]


@dataclass(frozen=True)
class CopiedPage(PageFailure):
    """A page of a copy, with its rows copied from the first's: handed on as is, no request
    (a :class:`PageFailure` to the flow: it holds no image and goes out first)."""

    rows: Any = None


@dataclass
class _Waiting:
    """A copy set aside: its document, its hash, and the first it copies (``first``, by the hash
    claims; or ``earlier``, read by an earlier run or in the ``--dedup-index``)."""

    ref: DocumentRef
    sha256: str
    #: The copy's own group (it stays open while the copy waits).
    group: GroupId
    first: FirstCopy | None = None
    earlier: Reading | None = None


@dataclass
class _Look:
    """What one look found for a copy: ``copy`` (with the first's rows, one list per stage
    folder), ``read``, or ``wait``."""

    action: str
    rows: list[list[dict[str, Any]]] = field(default_factory=list)
    first: str = ""


class SharedReadings:
    """The :class:`~llm_ocr.runners.page_flow.Readings` of a flow read in work groups: documents
    read earlier (``base.earlier``: OUT's hash records, ``--dedup-index``) and documents of this
    run, by the hash claims, whichever process reads them (see the module docstring)."""

    def __init__(self, base: DocumentReadings, out: Storage, groups: GroupWork, stages: Sequence[str],
                 storage_options: dict[str, Any]) -> None:
        self.base = base
        self.groups = groups
        #: The stage folders the flow writes (a copy gets a row in each: ``llm-ocr run``'s two).
        self.stages = tuple(stages)
        self.storage_options = storage_options
        self.hashes = HashClaims(out, groups.book.flow, groups.book.holder)
        #: Copies set aside and not handed on yet.
        self.waiting: list[_Waiting] = []
        #: Every copy set aside (the completion marker's ``documents_duplicate``), those copied and
        #: those read after all, and firsts named here in place of one left unread (taken over).
        self.deferred: list[DocumentRef] = []
        self.copied = 0
        self.read_after_all = 0
        self.taken_over = 0
        #: The documents this process reads as firsts, with their groups.
        self._mine: dict[str, GroupId] = {}
        self._intake: DocumentPages | None = None
        self._flow: PageFlow[DocumentRef, Item] | None = None
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._settling = False
        #: Called with the flow before it runs (:class:`~.shared_pages.SharedPages`).
        self.attached: list[Callable[[PageFlow[DocumentRef, Item]], None]] = []

    # -- the intake's side (on the event loop) ---------------------------------------------------

    async def duplicate(self, ref: DocumentRef, sha256: str) -> object | None:
        """Whether ``ref`` is a copy (set aside) rather than the first of its bytes (read here)."""
        earlier = self.base.earlier.get(sha256)
        if earlier is not None and (earlier.doc_id != ref.doc_id or earlier.rows != self.base.rows):
            return self._set_aside(_Waiting(ref, sha256, self.groups.group_of(ref.doc_id), earlier=earlier))
        group = self.groups.group_of(ref.doc_id)
        first = await asyncio.to_thread(self.hashes.claim, sha256, ref.doc_id, group)
        if first.doc_id == ref.doc_id:  # this document is the first (or was, in an earlier run into OUT)
            self._read_here(ref, sha256)
            return None
        return self._set_aside(_Waiting(ref, sha256, group, first=first))

    def counted(self, sha256: str, num_pages: int) -> None:
        self.base.counted(sha256, num_pages)

    def start(self, intake: DocumentPages, flow: PageFlow[DocumentRef, Item]) -> None:
        self._intake, self._flow = intake, flow
        for attach in self.attached:
            attach(flow)
        self._task = asyncio.get_running_loop().create_task(self._resolve())

    async def settle(self) -> None:
        self._settling = True
        self._wake.set()
        if self._task is not None:
            await self._task

    async def close(self) -> None:
        task = self._task
        if task is None:
            return
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        elif not task.cancelled() and (error := task.exception()) is not None:
            raise error  # a store that failed the looks: the run stops on it, as on a failed write

    def handler(self, inner: Handler) -> Handler:
        """``inner``, but a copied page's rows are handed on as they are (no request)."""

        async def handle(ref: DocumentRef, item: Item, num_pages: int | None) -> PageRows:
            if isinstance(item, CopiedPage):
                return item.rows
            return await inner(ref, item, num_pages)

        return handle

    def stats(self) -> dict[str, int]:
        """What the completion marker records besides ``documents_duplicate``."""
        return {"documents_copied": self.copied, "documents_read_after_all": self.read_after_all,
                "firsts_taken_over": self.taken_over}

    def _read_here(self, ref: DocumentRef, sha256: str) -> None:
        self._mine[ref.doc_id] = self.groups.group_of(ref.doc_id)
        self.base.read.setdefault(sha256, Reading(ref.doc_id, None, self.base.rows))

    def _set_aside(self, waiting: _Waiting) -> _Waiting:
        self.waiting.append(waiting)
        self.deferred.append(waiting.ref)
        self._wake.set()
        return waiting

    # -- the looks (a task beside the intake) ----------------------------------------------------

    async def _resolve(self) -> None:
        flow = self._flow
        assert flow is not None
        while not flow.stop.is_set():
            if self.waiting:
                waiting, self.waiting = self.waiting, []
                looks = await asyncio.to_thread(self._look, waiting)
                for item, look in zip(waiting, looks):
                    if flow.stop.is_set():
                        return
                    if look.action == "wait":
                        self.waiting.append(item)
                    elif look.action == "copy" and await self._copy(item, look):
                        self.copied += 1
                    else:
                        await self._read(item)
                await self._store_firsts()
            if self._settling and not self.waiting:
                return
            self._wake.clear()
            if self.waiting:
                try:
                    await asyncio.wait_for(self._wake.wait(), POLL_SECONDS)
                except asyncio.TimeoutError:
                    pass
            else:
                await self._wake.wait()

    def _look(self, waiting: list[_Waiting]) -> list[_Look]:
        """What became of the firsts of ``waiting`` (a worker thread: storage reads)."""
        # Copies of earlier readings: their firsts' rows are looked up together, one pass over
        # each output's parts (they are stored: their run is over).
        earlier: dict[tuple[str, str], dict[str, list[dict[str, Any]]]] = {}
        for output in {w.earlier.rows for w in waiting if w.earlier is not None}:
            wanted = {w.earlier.doc_id for w in waiting if w.earlier is not None and w.earlier.rows == output}
            for stage in self.stages:
                earlier[(output, stage)] = stored_rows(output, stage, wanted, self.storage_options)
        return [_Look("copy", [earlier[(w.earlier.rows, stage)].get(w.earlier.doc_id, []) for stage in self.stages],
                      w.earlier.doc_id)
                if w.earlier is not None else self._look_at_claim(w) for w in waiting]

    def _look_at_claim(self, item: _Waiting) -> _Look:
        first = self.hashes.latest(item.sha256)
        assert first is not None, "a copy is set aside only once its hash is claimed"
        item.first = first
        if first.doc_id == item.ref.doc_id:
            return _Look("read")
        group = first.group
        # The group's state before its rows: a group ends only once its rows are stored, so
        # "done" read first means the rows read after it are all there is. Read the other way
        # round, a group that ended between the two reads looked done without its rows, and the
        # copy was read again (r100, r106: five requests for four pages).
        book = self.groups.book
        seen = book.latest(group, None)
        state = book.state(group, seen)
        rows = [self._group_rows(group, stage, first.doc_id) for stage in self.stages]
        if _complete(rows):
            return _Look("copy", rows, first.doc_id)
        if state == "done":  # the group ended without the first's rows all stored with text
            return _Look("read")
        if state == "free":  # nobody reads it: this copy becomes the first, unless another did
            latest = self.hashes.take_over(first, item.ref.doc_id, item.group, book=book, seen=seen)
            if latest is not None:
                item.first = latest
                if latest.doc_id == item.ref.doc_id:
                    self.taken_over += 1
                    return _Look("read")
        return _Look("wait")

    def _group_rows(self, group: GroupId, stage: str, doc_id: str) -> list[dict[str, Any]]:
        return group_rows(self.base.rows, group, stage, doc_id, self.storage_options)

    async def _store_firsts(self) -> None:
        """Store now the rows of this process's firsts in the groups that hold a copy waiting.

        Such a group ends only after its copy, which may wait for a first in a group that holds
        a copy of one of these firsts (two groups, each with the other's first): the firsts'
        rows must not wait for their group's end. A group's rows are stored only while some of
        them are a first's (a part per first at most, not one per look)."""
        open_groups = {w.group for w in self.waiting}
        firsts = {doc for doc, group in self._mine.items() if group in open_groups}
        if firsts:
            for stage in self.stages:
                writer = self.groups.writer(stage)
                for group in open_groups:
                    await writer.store_if_holding(group, firsts)

    # -- handing the copies on -------------------------------------------------------------------

    async def _copy(self, item: _Waiting, look: _Look) -> bool:
        """Hand the flow the pages of ``item`` not done yet as copies of ``look``'s rows; False
        when they cannot be copied (a failed reading, or rows missing: it is read instead)."""
        flow, intake = self._flow, self._intake
        assert flow is not None and intake is not None
        by_page = [{r["page"]: r for r in rows} for rows in look.rows]
        if DOCUMENT_LEVEL_PAGE in by_page[0]:
            num_pages, pages = 1, [DOCUMENT_LEVEL_PAGE]
        else:
            num_pages = max((r.get("num_pages") or 0 for r in look.rows[0]), default=0)
            pages = list(range(1, num_pages + 1))
        if not pages or any(p not in rows for rows in by_page for p in pages) or (
                DOCUMENT_LEVEL_PAGE not in by_page[0]
                and any(rows[p].get("status") not in ("ok", "truncated") for rows in by_page for p in pages)):
            log.info("%s: a copy of %s, whose rows are not all stored with text: read instead", item.ref.doc_id,
                     look.first)
            return False
        counters = flow.counters
        assert counters.pages_found is not None
        done = intake.index.done_pages.get(item.ref.doc_id, set())
        todo = [p for p in pages if p not in done]
        counters.pages_found += len(pages)
        counters.pages_skipped += len(pages) - len(todo)
        intake.planned(item.ref, todo)
        if todo:
            flow.expect(item.ref.doc_id, len(todo))
            copies: list[Item] = []
            for p in todo:
                rows = tuple(copied(stage_rows[p], item.ref, p, look.first, p) for stage_rows in by_page)
                copies.append(CopiedPage(item.ref.doc_id, p, "", rows if len(rows) > 1 else rows[0]))
            await flow.put(Batch(item.ref, copies, None if pages == [DOCUMENT_LEVEL_PAGE] else num_pages))
        return True

    async def _read(self, item: _Waiting) -> None:
        """Read ``item`` here after all: its pages handed to the flow as any document's."""
        flow, intake = self._flow, self._intake
        assert flow is not None and intake is not None
        self.read_after_all += 1
        plain = intake.over(())
        opened = await plain.open_document(item.ref, flow)
        if isinstance(opened, Batch):
            await flow.put(opened)
            return
        if opened is None:
            return
        if item.first is not None and item.first.doc_id == item.ref.doc_id:  # the first now: recorded as read here
            self._read_here(item.ref, item.sha256)
            self.base.counted(item.sha256, opened.num_pages)
        await _put_chunks(plain, opened, flow)


def group_rows(output: str, group: GroupId, stage: str, doc_id: str,
               storage_options: dict[str, Any]) -> list[dict[str, Any]]:
    """The rows of ``doc_id`` stored in ``group``'s parts of stage folder ``stage`` of ``output``."""
    pattern = group_part_name(group.shard, group.num_shards, group.group, 0).replace("-0000.parquet", "-*.parquet")
    return stored_rows(output, stage, [doc_id], storage_options, pattern).get(doc_id, [])


async def _put_chunks(intake: DocumentPages, opened: OpenDocument, flow: PageFlow[DocumentRef, Item]) -> None:
    chunks = [opened.todo[i : i + CHUNK_PAGES] for i in range(0, len(opened.todo), CHUNK_PAGES)]
    for number, pages in enumerate(chunks):
        await flow.put(intake.chunk(opened, pages, opened.cleanup if number == len(chunks) - 1 else None))


def _complete(rows: list[list[dict[str, Any]]]) -> bool:
    """Whether ``rows`` (a document's, one list per stage folder) hold every page of it in every
    folder (the document-level row of one that could not be opened counts as all of it)."""
    if not rows[0]:
        return False
    pages = {r["page"] for r in rows[0]}
    if DOCUMENT_LEVEL_PAGE not in pages:
        num_pages = max((r.get("num_pages") or 0 for r in rows[0]), default=0)
        if num_pages == 0 or not pages >= set(range(1, num_pages + 1)):
            return False
        pages = set(range(1, num_pages + 1))
    return all(pages <= {r["page"] for r in stage} for stage in rows[1:])
