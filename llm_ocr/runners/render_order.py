"""Which pages are rendered next: those whose answers are expected to be longest, estimated from
the PDFs before any page is rendered.

The look-ahead (:mod:`.look_ahead`) ranks pages once they are rendered, and only while every
slot is busy: the first pages of a run go out as they are rendered, in input order, and at 256
slots that is nearly every page of a shard. So the documents are read ahead first: each is
opened, its pages counted and their cost estimated from the file (:mod:`llm_ocr.sources.page_cost`:
the text layer's length, a scan's image size; about a millisecond a page, in the render
workers), and the pages wait in a :class:`RenderPlan`, a few numbers each. Rendering then takes
them from the plan in estimated order, a chunk of one document's pages at a time, so the pages
expected to be longest are rendered, and sent, first.

**Bounds.** An estimate is a few dozen bytes, so the plan reaches far: up to ``ahead`` pages
(``--estimate-ahead``, 4,096 by default) of documents opened and not yet rendered, plus the
documents being read at the time (:data:`ESTIMATING_PER_WORKER` per render worker), and up to
:data:`DOWNLOAD_BYTES` of documents copied from a remote store to read them (a document's copy is
removed once its last chunk is rendered). Rendered pages stay bounded by the look-ahead as before.

**When the first page is rendered.** Once the plan holds ``ahead`` pages or every document: on a
shard of a few thousand pages the whole shard is ranked before anything is sent, which costs
the estimates' time (about a millisecond a page, spread over the workers: 0.25 s for 500 pages
on two idle cores) and gains a longest-first start. Then the plan goes on filling while pages
are rendered and sent (its reads then queue behind renders in the workers, far ahead of what is
sent). Work groups hand documents out only as the flow has room for them (fewer pages planned
than a round of slots, none of a started group waiting: :class:`~llm_ocr.runners.group_state.Room`):
with them, rendering starts once the plan holds what the groups hand now (nothing is being
estimated and the next document waits for room), and the plan reaches no further than the
groups a process holds.

**Pages without an estimate.** Images and dataset rows (no PDF to read) are rendered in input
order as before, as they come, and the estimating waits until they have gone (a dataset row
carries its images: holding thousands ahead would hold their bytes); the look-ahead ranks them
by their ink once rendered. A PDF page that cannot be read ranks with the average page known so
far. A document that cannot be opened sends its error row at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import os
from collections import deque
from collections.abc import AsyncGenerator, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Generic, TypeVar

from llm_ocr.runners.cost_scale import CostScale
from llm_ocr.runners.process_pool import WorkerDied
from llm_ocr.sources.base import DocumentRef
from llm_ocr.sources.page_cost import TEXT, PageEstimate, page_estimates
from llm_ocr.sources.render import DocumentError

if TYPE_CHECKING:
    from llm_ocr.runners.page_flow import Batch, DocumentPages, PageFlow
    from llm_ocr.sources.base import PageFailure, PageImage

DocT = TypeVar("DocT")

#: Most bytes of remote documents copied here to be estimated and not yet rendered (when one
#: document alone is larger, it is read alone).
DOWNLOAD_BYTES = 2 * 1024**3
#: Pages estimated in one worker call: a 1,000-page document is read in a few calls, so the
#: estimates of its first pages are in the plan while the rest are read.
ESTIMATE_PAGES = 256
#: Documents opened and estimated at once, per render worker (their calls queue behind renders).
ESTIMATING_PER_WORKER = 4
#: A chunk holds no page expected to cost less than this share of its chunk's costliest. Cut
#: every ``chunk_pages`` alone, a document's few long pages took its short ones along: on a run's
#: first round, while slots are free and pages go as they are rendered, the chunks holding the
#: longest pages sent mostly short pages, and the longest went out seconds late (the long tail of
#: ``llm-ocr bench --ordering``: the 15 longest pages among the first 128 sent, the last at 6.4 s).
#: Halving bounds the extra chunks (so extra opens of a document) to one a halving of its costs.
SIMILAR_COST = 0.5


@dataclass(frozen=True)
class OpenDocument:
    """A document ready to render: its local copy, its page count, the pages to read this run
    (``todo``), and what removes the local copy once they are rendered (None: nothing to)."""

    ref: DocumentRef
    local: DocumentRef
    num_pages: int
    todo: list[int]
    cleanup: Callable[[], None] | None
    #: Read in the reverse of the order its holder reads it in (a work group's second reader).
    backward: bool = False


@dataclass(order=True)
class PlannedChunk(Generic[DocT]):
    """Pages of one document waiting to be rendered: their place in the plan (the largest
    expected cost among them on the run's one scale, highest first; then its own estimate; then
    the document's and the chunk's place in the input), the document and the pages, most
    expensive first, with their estimates; ``lead`` is the estimate the chunk ranks by."""

    key: tuple[float, float, int, int]
    doc: DocT = field(compare=False)
    pages: list[int] = field(compare=False)
    costs: list[PageEstimate] = field(compare=False)
    lead: PageEstimate = field(compare=False)


#: The plan ranks its chunks again when either kind of estimate on its scale has grown by this
#: factor since it last did (a scan's place moves with the scale): a few dozen times a run at most.
RESCALE_GROWTH = 1.25


class RenderPlan(Generic[DocT]):
    """Estimated pages not yet rendered, cut into chunks of one document's pages with similar
    costs (at most ``chunk_pages``, none under :data:`SIMILAR_COST` of its chunk's first):
    :meth:`pop` returns the chunk holding the most expensive page of all, text-layer and scan
    estimates ranked on one scale (:class:`~llm_ocr.runners.cost_scale.CostScale`)."""

    def __init__(self, chunk_pages: int) -> None:
        self.chunk_pages = chunk_pages
        self.scale = CostScale()
        self._heap: list[PlannedChunk[DocT]] = []
        self._pages = 0
        self._known_sum = 0.0
        self._known_count = 0
        #: The scale's sizes when the chunks were last ranked on it.
        self._ranked_at = (0, 0)

    @property
    def pages(self) -> int:
        """Pages waiting in the plan."""
        return self._pages

    def __len__(self) -> int:
        return len(self._heap)

    def add(self, doc: DocT, place: int, pages: Sequence[int], costs: Sequence[PageEstimate | float | None],
            backward: bool = False) -> int:
        """Plan the ``pages`` of ``doc`` (the ``place``-th document of the input) at their expected
        ``costs`` (a number is a text-layer estimate); returns how many chunks they make. A page
        without an estimate ranks with the average of the pages known so far (neither ahead of
        those known to be long nor behind those known to be short). ``backward``: in the exact
        reverse of that order (a work group's second reader, which meets its holder instead of
        racing it for the same pages)."""
        estimates = [c if c is None or isinstance(c, PageEstimate) else PageEstimate(float(c), TEXT) for c in costs]
        known = [c for c in estimates if c is not None]
        self.scale.add(known)
        self._known_sum += sum(c.chars for c in known)
        self._known_count += len(known)
        average = PageEstimate(self._known_sum / self._known_count if self._known_count else 0.0, TEXT)
        value = self.scale.value
        ranked = sorted(((page, average if c is None else c) for page, c in zip(pages, estimates)),
                        key=lambda pc: (-value(pc[1]), -pc[1].chars, pc[0]), reverse=backward)
        parts: list[list[tuple[int, PageEstimate]]] = []
        for page, cost in ranked:
            if (not parts or len(parts[-1]) == self.chunk_pages
                    or (not backward and value(cost) < value(parts[-1][0][1]) * SIMILAR_COST)):
                parts.append([])
            parts[-1].append((page, cost))
        for number, part in enumerate(parts):
            # Backward, every chunk of the document ranks as its costliest page, so they go in turn.
            lead = ranked[-1][1] if backward else part[0][1]
            heapq.heappush(self._heap, PlannedChunk(self._key(lead, place, number), doc, [p for p, _ in part],
                                                    [c for _, c in part], lead))
        self._pages += len(ranked)
        return len(parts)

    def pop(self) -> PlannedChunk[DocT] | None:
        """The chunk to render next (None when the plan is empty)."""
        if not self._heap:
            return None
        self._rerank()
        chunk = heapq.heappop(self._heap)
        self._pages -= len(chunk.pages)
        return chunk

    def value(self, estimate: PageEstimate) -> float:
        """``estimate`` on the plan's one scale (what the look-ahead ranks the page by, once rendered)."""
        return self.scale.value(estimate)

    def _key(self, lead: PageEstimate, place: int, number: int) -> tuple[float, float, int, int]:
        return -self.scale.value(lead), -float(lead.chars), place, number

    def _rerank(self) -> None:
        """Rank the chunks again on the scale if it has grown enough since they last were: chunks
        planned early were ranked on the few estimates known then."""
        (texts, scans), (ranked_texts, ranked_scans) = self.scale.sizes, self._ranked_at
        if not (texts and scans):
            return  # one kind so far: every estimate is its own value, and the keys hold
        if texts < ranked_texts * RESCALE_GROWTH and scans < ranked_scans * RESCALE_GROWTH:
            return
        self._ranked_at = (texts, scans)
        for chunk in self._heap:
            _, _, place, number = chunk.key
            chunk.key = self._key(chunk.lead, place, number)
        heapq.heapify(self._heap)


@dataclass
class _Document:
    """An open document in the plan: its chunks not yet rendered, and its local copy's size."""

    opened: OpenDocument
    chunks_left: int
    downloaded: int


class EstimatedOrder:
    """One run of :func:`expected_order`: the plan, what fills it and what waits to be rendered."""

    def __init__(self, intake: DocumentPages, flow: PageFlow[DocumentRef, PageImage | PageFailure],
                 ahead: int, chunk_pages: int, paced: bool = False) -> None:
        self.intake = intake
        self.flow = flow
        self.ahead = ahead
        self.paced = paced
        self.plan: RenderPlan[_Document] = RenderPlan(chunk_pages)
        #: Batches to hand on before anything planned: a document's error row, an image's pages.
        self.direct: deque[Batch[DocumentRef, PageImage | PageFailure]] = deque()
        self.changed = asyncio.Event()  # the plan or ``direct`` grew, or the estimating ended
        self.room = asyncio.Event()  # a batch went out, a copy was removed or an estimate ended
        self.downloaded = 0
        self.estimating = 0  # documents being opened and estimated
        #: The fill waits for the intake's next document (with work groups: for room to claim one).
        self.listing = False

    def has_room(self) -> bool:
        """Whether another document may be opened and estimated."""
        if self.direct:  # images and dataset rows go out before anything else is read
            return False
        if self.estimating >= ESTIMATING_PER_WORKER * max(1, self.intake.pool.workers):
            return False
        if not len(self.plan) and not self.estimating:
            return True  # nothing planned: one document, however large, is read alone
        return self.plan.pages < self.ahead and self.downloaded < DOWNLOAD_BYTES

    async def wait_for_room(self) -> None:
        """Return once :meth:`has_room` (or the run stops)."""
        while not self.has_room() and not self.flow.stop.is_set():
            self.room.clear()
            await self.room.wait()

    async def fill(self) -> None:
        """Open and estimate the intake's documents into the plan, as room allows (the next
        document is not even listed before there is room for it: work groups claim as they list)."""
        tasks: set[asyncio.Task[None]] = set()
        place = 0
        try:
            async with contextlib.aclosing(self.intake.documents_to_read(self.flow)) as documents:
                while True:
                    await self.wait_for_room()
                    for task in [t for t in tasks if t.done()]:
                        tasks.discard(task)
                        task.result()  # a download that failed stops the run, as a failed render did
                    if self.flow.stop.is_set():
                        break
                    self.listing = True
                    self.changed.set()  # work groups may hand no document until planned pages are sent
                    ref = await anext(documents, None)
                    self.listing = False
                    if ref is None:
                        break
                    self.estimating += 1
                    tasks.add(asyncio.create_task(self._estimate(ref, place)))
                    place += 1
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            self.changed.set()

    async def _estimate(self, ref: DocumentRef, place: int) -> None:
        try:
            opened = await self.intake.open_document(ref, self.flow)
            if opened is None:
                return
            if not isinstance(opened, OpenDocument):  # the batch of a document's error row
                self.direct.append(opened)
                return
            if opened.local.kind != "pdf":
                self._direct(opened)
                return
            costs: list[PageEstimate | None] = []
            for start in range(0, len(opened.todo), ESTIMATE_PAGES):
                costs += await self._costs(opened, opened.todo[start : start + ESTIMATE_PAGES])
            downloaded = _size(opened.local.location) if opened.cleanup is not None else 0
            document = _Document(opened, 0, downloaded)
            document.chunks_left = self.plan.add(document, place, opened.todo, costs, backward=opened.backward)
            self.downloaded += downloaded
            self.flow.pages_ahead = self.plan.pages
        finally:
            self.estimating -= 1
            self.changed.set()
            self.room.set()

    async def _costs(self, opened: OpenDocument, pages: list[int]) -> list[PageEstimate | None]:
        try:
            return list(await self.intake.pool.read_ahead(page_estimates, opened.local, self.intake.render, pages))
        except (DocumentError, OSError, WorkerDied):  # the render will say what is wrong with it
            return [None] * len(pages)

    def _direct(self, opened: OpenDocument) -> None:
        """An image's or a dataset row's pages: in input order, as they come."""
        size = self.plan.chunk_pages
        chunks = [opened.todo[i : i + size] for i in range(0, len(opened.todo), size)]
        for number, pages in enumerate(chunks):
            self.direct.append(self.intake.chunk(opened, pages, opened.cleanup if number == len(chunks) - 1 else None))

    def started(self, filling: asyncio.Task[None]) -> bool:
        """Whether planned pages may be rendered: the plan holds every document or reached a bound,
        or, when the documents come as the flow has room for them (work groups), it holds all the
        intake hands now: nothing is being estimated and the next document waits. Work groups
        claim another group only once the pages planned are fewer than a round of slots and none
        of a started group waits to be sent (:class:`~llm_ocr.runners.group_state.Room`), so waiting
        for a fuller plan there would wait for ever."""
        return (filling.done() or self.plan.pages >= self.ahead or self.downloaded >= DOWNLOAD_BYTES
                or (self.paced and (self.flow.ready_batches > 1
                                    or (self.listing and not self.estimating and len(self.plan) > 0))))

    def next_chunk(self) -> Batch[DocumentRef, PageImage | PageFailure] | None:
        """The batch of the planned chunk expected to cost most, its render started now."""
        chunk = self.plan.pop()
        if chunk is None:
            return None
        self.flow.pages_ahead = self.plan.pages
        document = chunk.doc
        document.chunks_left -= 1
        cleanup = self._cleanup(document) if document.chunks_left == 0 else None
        self.intake.expected.update(((document.opened.ref.doc_id, p), self.plan.value(c))
                                    for p, c in zip(chunk.pages, chunk.costs))
        return self.intake.chunk(document.opened, chunk.pages, cleanup)

    def _cleanup(self, document: _Document) -> Callable[[], None]:
        def done() -> None:
            self.downloaded -= document.downloaded
            if document.opened.cleanup is not None:
                document.opened.cleanup()
            self.room.set()

        return done


async def expected_order(
    intake: DocumentPages, flow: PageFlow[DocumentRef, PageImage | PageFailure], ahead: int, chunk_pages: int,
    paced: bool = False,
) -> AsyncGenerator[Batch[DocumentRef, PageImage | PageFailure], None]:
    """The batches of ``intake``'s documents, the pages expected to cost most first (see the
    module docstring; ``paced``: the documents come as the flow has room for them, as work groups
    hand them): each batch's render starts when it is handed on, so the choice is made as late as
    the flow's render queue allows."""
    order = EstimatedOrder(intake, flow, ahead, chunk_pages, paced)
    filling = asyncio.create_task(order.fill())
    try:
        while True:
            order.changed.clear()
            if filling.done() and (error := filling.exception()) is not None:
                raise error  # the listing's or a download's error ends the run, as before
            batch = order.direct.popleft() if order.direct else order.next_chunk() if order.started(filling) else None
            if batch is None:
                if filling.done():
                    return
                await order.changed.wait()
                continue
            yield batch
            order.room.set()
    finally:
        filling.cancel()
        await asyncio.gather(filling, return_exceptions=True)
        flow.pages_ahead = 0


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0
