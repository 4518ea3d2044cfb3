"""Each distinct page read once across the processes of a run read in work groups (docs/dedup.md).

Within a process, :class:`~.dedup.PageReuse` finds a page's repeats by their difference hash and
an exact pixel comparison. Across processes the images cannot be compared, so only **exact**
repeats are found: a page's claim is the sha256 of its decoded pixels
(:func:`~llm_ocr.sources.fingerprint.pixel_sha256`), made like a document's
(:class:`~llm_ocr.storage.hash_claims.HashClaims`, under ``pages``). The first process to create
a page hash's claim reads the page; a process reaching the same pixels in another document:

- gives its in-flight slot back (:func:`~.page_flow.give_up_slot`): a page waiting for another
  process holds no slot (up to :data:`MAX_WAITING` pages; past them a page waits in its slot, so
  that the images kept stay bounded);
- looks in storage, every :data:`POLL_SECONDS`, at the first's group: its claim state, then the
  first page's rows in the group's parts. Rows there with text (``ok``/``truncated``, every
  stage): the page gets copies of them (``duplicate_of``/``duplicate_page``), no request. Rows
  there without text, or the group done without them: the page is read here. The group free
  (its holder died and its lease ran out, or it stopped): this page is named the first in the
  hash's next epoch and read here. Otherwise (held: its reader alive) it looks again;
- meanwhile stores the rows its own group holds of the pages read here as firsts (two groups
  may each wait for the other's first: neither could end before its rows are stored).

A page read here after all takes a slot again first. Near-duplicates (same difference hash,
pixels different) are not looked for across processes: only within one (:class:`~.dedup.PageReuse`).
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from llm_ocr.runners.dedup import copied
from llm_ocr.runners.groups import GroupWork
from llm_ocr.runners.page_flow import PageFlow, PageRows, flow_stop, give_up_slot, take_slot
from llm_ocr.runners.shared_dedup import group_rows
from llm_ocr.runners.workers import WorkerPool
from llm_ocr.sources.base import DocumentRef, PageFailure, PageImage
from llm_ocr.sources.fingerprint import pixel_sha256
from llm_ocr.stages.space import place
from llm_ocr.storage.claims import GroupId
from llm_ocr.storage.hash_claims import PAGES_DIR, FirstCopy, HashClaims
from llm_ocr.storage.url import Storage

log = logging.getLogger(__name__)

#: Seconds between two looks at a page's first while the page waits for it (a look: the first's
#: latest claim epoch, its group's claim, the footers of its group's parts).
POLL_SECONDS = 2.0
#: Page hashes this process claimed, kept so that a repeat within the process makes no create
#: (64 bytes each: 1 MB at most; one dropped costs only a refused create and a read).
MINE_KEPT = 16384
#: Pages waiting without a slot at most (each keeps its image, a few hundred KB: some 75 MB in
#: all); beyond them a page waits in its slot, so the in-flight limit bounds the rest.
MAX_WAITING = 256

Item = PageImage | PageFailure
Handler = Callable[[DocumentRef, Item, int | None], Awaitable[PageRows]]


@dataclass
class _Look:
    """What a look found: ``copy`` (with the first's rows, one per stage), ``read``, ``take`` (read,
    as the first named here in place of one left unread) or ``wait``."""

    action: str
    rows: list[dict[str, Any]] = field(default_factory=list)
    first: FirstCopy | None = None


class SharedPages:
    """Wraps a page handler so a page whose pixels another process of the run claimed first gets
    a copy of that reading (see the module docstring). ``output``: where the run's rows are
    stored (its stage folders ``stages``)."""

    def __init__(self, handler: Handler, pool: WorkerPool, out: Storage, groups: GroupWork, stages: Sequence[str],
                 output: str, storage_options: dict[str, Any]) -> None:
        self.handler = handler
        self.pool = pool
        self.groups = groups
        self.stages = tuple(stages)
        self.output = output
        self.storage_options = storage_options
        self.claims = HashClaims(out, groups.book.flow, groups.book.holder, kind=PAGES_DIR)
        self._mine: OrderedDict[str, None] = OrderedDict()
        #: The documents with a page read here as its pixels' first, by group: their rows are
        #: stored early while a page of that group waits.
        self._firsts: dict[GroupId, set[str]] = {}
        #: Pages copied from another process's reading, read here after all (the first's failed or
        #: was left unread), firsts taken over from a process gone, and pages waiting now.
        self.copied = 0
        self.read_after_all = 0
        self.taken_over = 0
        self.waiting = 0

    def attach(self, flow: PageFlow[Any, Any]) -> None:
        """Before ``flow`` runs: its rows go to the writers as they come, not held for input
        order (a first's row held behind a page that waits for another process would hold that
        process's wait too)."""
        for ordered in flow.ordered_all:
            ordered.window = None

    async def __call__(self, ref: DocumentRef, item: Item, num_pages: int | None) -> PageRows:
        if not isinstance(item, PageImage) or item.pieces is not None:
            return await self.handler(ref, item, num_pages)
        sha256 = await self.pool.run(pixel_sha256, item.image)
        if sha256 in self._mine:  # claimed here already: the in-process reuse finds the first
            self._mine.move_to_end(sha256)
            return await self.handler(ref, item, num_pages)
        group = self.groups.group_of(ref.doc_id)
        first = await asyncio.to_thread(self.claims.claim, sha256, ref.doc_id, group, item.page)
        if first.holder == self.claims.holder or (first.doc_id, first.page) == (ref.doc_id, item.page):
            self._read_here(sha256, ref.doc_id, group)
            return await self.handler(ref, item, num_pages)
        return await self._wait(ref, item, num_pages, sha256, group)

    def stats(self) -> dict[str, int]:
        """What the completion marker records of the pages compared across processes."""
        return {"pages_copied_across": self.copied, "pages_read_after_all": self.read_after_all,
                "page_firsts_taken_over": self.taken_over}

    def _read_here(self, sha256: str, doc_id: str, group: GroupId) -> None:
        self._mine[sha256] = None
        while len(self._mine) > MINE_KEPT:
            self._mine.popitem(last=False)
        self._firsts.setdefault(group, set()).add(doc_id)

    async def _wait(self, ref: DocumentRef, item: PageImage, num_pages: int | None, sha256: str,
                    group: GroupId) -> PageRows:
        stop = give_up_slot() if self.waiting < MAX_WAITING else flow_stop()
        self.waiting += 1
        try:
            while True:
                if stop is not None and stop.is_set():
                    raise asyncio.CancelledError  # stopping: no row, the rerun reads the page
                await self._store_firsts(group)
                look = await asyncio.to_thread(self._look, sha256, ref, item.page, group)
                if look.action == "copy":
                    assert look.first is not None
                    self.copied += 1
                    first = look.first
                    # Each copy on this page's own PDF box and /Rotate (the first's may be another PDF's).
                    rows = tuple(place(copied(row, ref, item.page, first.doc_id, first.page), item.pdf_page)
                                 for row in look.rows)
                    return rows if len(rows) > 1 else rows[0]
                if look.action == "take":  # named the first here: later repeats here find it by the local reuse
                    self.taken_over += 1
                    self._read_here(sha256, ref.doc_id, group)
                if look.action in ("read", "take"):
                    break
                await asyncio.sleep(POLL_SECONDS)
        finally:
            self.waiting -= 1
        if not await take_slot():
            raise asyncio.CancelledError
        self.read_after_all += 1
        return await self.handler(ref, item, num_pages)

    async def _store_firsts(self, group: GroupId) -> None:
        """Store now ``group``'s rows of pages read here as firsts (the group cannot end while
        one of its pages waits, and another process's page may wait for them)."""
        firsts = self._firsts.get(group)
        if firsts:
            for stage in self.stages:
                await self.groups.writer(stage).store_if_holding(group, firsts)

    def _look(self, sha256: str, ref: DocumentRef, page: int, group: GroupId) -> _Look:
        """What became of the first of ``sha256`` (a worker thread: storage reads)."""
        first = self.claims.latest(sha256)
        assert first is not None, "a page waits only once its hash is claimed"
        if (first.doc_id, first.page) == (ref.doc_id, page) or first.holder == self.claims.holder:
            return _Look("read")
        book = self.groups.book
        # The state first, then the rows: a group found done had stored its rows before.
        seen = book.latest(first.group, None)
        state = book.state(first.group, seen)
        rows = []
        for stage in self.stages:
            found = [r for r in group_rows(self.output, first.group, stage, first.doc_id, self.storage_options)
                     if r["page"] == first.page]
            if found:
                rows.append(found[-1])
        if len(rows) == len(self.stages):
            if all(r.get("status") in ("ok", "truncated") for r in rows):
                return _Look("copy", rows, first)
            return _Look("read")  # the first's reading failed: this page is read itself
        if state == "done":
            return _Look("read")
        if state == "free":  # nobody reads it: this page becomes the first, unless another did
            latest = self.claims.take_over(first, ref.doc_id, group, page, book=book, seen=seen)
            if latest is not None and latest.holder == self.claims.holder:
                return _Look("take")
        return _Look("wait")
