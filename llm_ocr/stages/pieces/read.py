"""A page read in pieces by one reader: every piece asked at once, cut again while an answer runs out.

Serves every case :mod:`.plan` cuts a page for: the **segments** of a long page (a log sheet,
a receipt), the **tiles** or **bands** of a dense one (an old newspaper page). A
:class:`Reader` holds what every page's pieces are read with (the family's reading of one image,
the crop, the run's piece limit, the family, the context left beside ``max_tokens``); a
:class:`Job` says how one page's pieces are cut, read and joined; :meth:`Reader.read` reads
them and :func:`.row.page_row` makes the page's one row.

**The adaptive split.** A page is cut from an estimate of its text's tokens, which is a first
guess: a model may write more tokens per character than the guess (more markup, another
language, another layout). A piece whose answer runs to ``max_tokens`` without repeating itself
(:attr:`~llm_ocr.stages.attempts.Answer.long`: the loop watch saw no loop) is therefore cut in
two (:func:`.cuts.split_piece`: at a gutter, between two text lines, or by pixels where its
lines cannot be found) and both halves are read again, at once; and so on, until every piece's
answer fits, or a piece's halves would be too small to read (the ``min_cut_side`` knob), or the
page reaches its cost bound (:mod:`.cost`) or ``max_pieces`` pieces. What the server answered
decides whether a piece is cut; the piece's ink decides only where. Only then
is a piece kept as it ran out, and the page's row is ``truncated``, with the reason. An answer
that loops keeps the loop policy (retried hotter, cut): it is not long, and cutting its piece
would not help. Where the family's answers box every block (tiles), a piece that ran out keeps
its answer's complete blocks and only the rest of it is read again (:mod:`.rest`).

The answers that ran out are not thrown away from the accounting: their tokens and attempts
count in the row, beside those of the pieces read again.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

from llm_ocr.options import dense
from llm_ocr.records import PageResult
from llm_ocr.sources.base import DocumentRef, PageImage
from llm_ocr.sources.pieces import PiecedPage, image_info
from llm_ocr.sources.segments import Segment
from llm_ocr.stages.pieces.cost import Budget, paid, whole_cost
from llm_ocr.stages.pieces.cuts import plan_bands, plan_tiles
from llm_ocr.stages.pieces.images import Crop, PieceImages, Rerender, Sourced, as_sent, from_source, rerender
from llm_ocr.stages.pieces.join import Join, join_bands, join_pieces, join_tiles
from llm_ocr.stages.pieces.plan import (
    Splitter,
    TilePlan,
    band_fits,
    dense_split,
    dense_split_tiles,
    image_pieces,
    min_side,
    oversize,
    reads_columns,
    segment_split,
    tallest_band,
)
from llm_ocr.stages.pieces.rest import complete_part, read_area
from llm_ocr.stages.pieces.row import page_row, with_plan
from llm_ocr.vlm.box import Box
from llm_ocr.vlm.client import RequestFailed
from llm_ocr.vlm.families.base import AnswerLike, Family, Reading

#: Stitches a page's figures from its pieces: ``(pieces as (segment, image), boxes) -> PNGs``.
Stitch = Callable[[Sequence[tuple[Segment, bytes]], Sequence[Box]], Awaitable[list[bytes]]]
#: The part of a piece's answer that ran out worth keeping, and the rest of the piece to read
#: again: ``(the reading cut to its complete blocks, the rest's pieces, how)``; None: keep none.
Rest = Callable[[Segment, Reading], "tuple[Reading, list[Segment], str] | None"]
#: A piece read, or why its request failed.
Leaf = tuple[Segment, "Reading | RequestFailed"]


@dataclass
class PieceReadings:
    """What reading a page's pieces produced: the pieces finally read, in page order (their
    index their position), each with its reading or failure; the answers of pieces that ran out
    and were read again in halves; and a line for every piece that ran out."""

    leaves: list[Leaf] = field(default_factory=list)
    spent: list[AnswerLike] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: The pieces that ran out and could not be cut further (their notes say why).
    kept_long: int = 0


@dataclass(frozen=True)
class Job:
    """How one page's pieces are cut, read and joined.

    ``segments`` are the pieces as planned (page-image pixels, or the pixels of the page's
    virtual render when ``rendered`` holds their images rendered from the source); ``join``
    puts their blocks together; ``kind`` names a piece in ``raw`` and in errors. ``split`` cuts
    a piece whose answer ran out in two (None: never cut again); ``too_big`` says why a piece's
    image cannot be sent beside ``max_tokens`` (it is cut before it is read); ``rerender``
    renders halves from the source again; ``rest`` keeps the complete part of an answer that
    ran out (:func:`.rest.complete_part`)."""

    segments: list[Segment]
    join: Join = join_pieces
    kind: str = "segment"
    rendered: PiecedPage | None = None
    split: Splitter | None = None
    too_big: Callable[[Segment], str | None] | None = None
    rerender: Rerender | None = None
    rest: Rest | None = None
    #: ``(tokens, requests)`` the page cost before its pieces: its whole reading that ran out.
    spent: tuple[int, int] = (0, 0)


def ran_long(reading: Reading | RequestFailed) -> AnswerLike | None:
    """The answer of ``reading`` that ran to ``max_tokens`` without repeating itself, if any."""
    if isinstance(reading, RequestFailed):
        return None
    return next((a for a in reading.answers if getattr(a, "long", False)), None)


@dataclass(frozen=True)
class Reader:
    """What every page's pieces are read with: ``read`` (the family's reading of one image, which
    stops at an answer that runs out rather than retry it hotter), ``crop`` (boxes of an
    encoded image), ``model`` (for the row), ``limit`` (the run's piece limit: every piece holds
    a permit while it is asked; None: none), ``stitch`` (a page's figures from its rendered
    pieces, in a worker; None: on a thread), ``family`` (its recipe says tiles or bands; None:
    tiles) and ``prompt_room`` (the context beside ``max_tokens``: bounds each piece's image).
    With ``max_tokens``, a page's pieces cost at most the ``cost_bound`` knob times its whole-page
    reading of ``attempts`` requests (:mod:`.cost`; None: no bound)."""

    read: Callable[[PageImage], Awaitable[Reading]]
    crop: Crop
    model: str
    limit: AbstractAsyncContextManager[Any] | None = None
    stitch: Stitch | None = None
    family: Family | None = None
    prompt_room: int | None = None
    #: The most pieces a page is read in (None: the ``max_pieces`` knob in force).
    max_pieces: int | None = None
    max_tokens: int | None = None
    attempts: int = 2

    async def segments(self, ref: DocumentRef, item: PageImage, num_pages: int | None, segments: list[Segment],
                       rendered: PiecedPage | None = None) -> PageResult:
        """A long page read in ``segments`` (rendered with it from the source when ``rendered``),
        a segment whose answer runs out cut in two between text lines along the page."""
        tall = rendered.height >= rendered.width if rendered is not None else item.height >= item.width
        job = Job(segments, rendered=rendered, split=segment_split(tall))
        return await self.read_page(ref, item, num_pages, job)

    async def tiles(self, ref: DocumentRef, item: PageImage, num_pages: int | None, plan: TilePlan, *,
                    first: Reading | None = None, sourced: Sourced | None = None) -> PageResult | None:
        """A dense page read in the pieces of ``plan``, tiles or bands as the family's recipe says,
        all at once, cut again where an answer ran out, and joined into its one row (None when
        the page cannot be cut: read it whole). ``first`` is the whole page's reading that ran
        out, if there was one: its tokens and text stay in the row.

        The pieces are planned on the page image; with ``sourced`` (the page's regions rendered
        from its source at the family's resolution) they are sent so rendered, not cut from the
        page image, which a family that sizes pages by their longer side or pixel count has
        shrunk. When the source cannot be read again, they are cut from the page image, and the
        row says so."""
        family, room = self.family, self.prompt_room
        bands = family is not None and not family.dense_tiles
        spent = paid(list(first.answers)) if first is not None else (0, 0)
        # No more pieces than the page's cost bound leaves room for, each at one full request.
        most = self.budget(item, spent).room()
        count = min(max(plan.count, image_pieces(family, item.width, item.height, room)), most)
        tiles = await self._plan(item, count, bands)
        # A plan may hold more pieces than asked (columns, a grid): fewer asked.
        for _ in range(dense().replan_attempts):
            if len(tiles) <= most or count <= 2:
                break
            count = max(2, count * most // len(tiles))
            tiles = await self._plan(item, count, bands)
        if len(tiles) < 2 or len(tiles) > most:
            return None
        rendered, unsourced = await from_source(item, tiles, sourced, self.crop)
        job = Job(
            tiles, join=join_bands if bands else join_tiles, kind="band" if bands else "tile", rendered=rendered,
            split=dense_split(family) if family is not None else dense_split_tiles,
            too_big=as_sent(oversize(family, room), rendered),
            # The halves of a column's band cut again are rendered from the source again: a family
            # that sizes an image by its longer side reads such a half (shorter, as narrow) at a
            # finer scale than the band was sent at. A band across the page is cut as before.
            rerender=rerender(item, sourced, family, room) if rendered is not None and bands else None,
            rest=None if bands else partial(complete_part, min_side=min_side(family)),
            spent=spent,
        )
        row = await self.read_page(ref, item, num_pages, job)
        return with_plan(row, plan, len(tiles), job.kind, first, unsourced)

    async def _plan(self, item: PageImage, count: int, bands: bool) -> list[Segment]:
        """``item`` cut into about ``count`` bands (a family without boxes) or tiles."""
        family, room = self.family, self.prompt_room
        if bands:
            return await asyncio.to_thread(plan_bands, item.image, count, tallest_band(family, item),
                                           band_fits(family, room), reads_columns(family, room))
        return await asyncio.to_thread(plan_tiles, item.image, count)

    def budget(self, item: PageImage, spent: tuple[int, int]) -> Budget:
        """The cost bound of ``item``'s pieces, ``spent`` already (its whole reading that ran out)."""
        whole = None
        if self.max_tokens is not None:
            whole = whole_cost(self.family, item.width, item.height, self.max_tokens, self.attempts)
        return Budget(whole, dense().cost_bound, spent)

    async def read_page(self, ref: DocumentRef, item: PageImage, num_pages: int | None, job: Job) -> PageResult:
        """``item`` read piece by piece as ``job`` says and joined into its one row.

        A piece whose request fails leaves a hole: the row keeps the other pieces' text and is
        an ``error`` (a rerun redoes the page); a piece that looped makes the row ``truncated``."""
        started = time.monotonic()
        images = PieceImages(self.crop, item, job.rendered, job.rerender)
        budget = self.budget(item, job.spent)
        read_all = await _Splitting(self, job, item, images, budget).read_all(await images.first(job.segments))
        row = await page_row(ref, item, num_pages, job, read_all, self, started)
        if job.kind == "segment" and row.cut_reason is None:
            # A long page read in its planned segments, none cut again: no cut_reason, as before
            # (quality's "looped" signal reads any cut_reason as a cut).
            return row
        cost = budget.summary((row.prompt_tokens or 0) + (row.completion_tokens or 0) + job.spent[0],
                              row.attempts + job.spent[1])
        return replace(row, cut_reason="; ".join(n for n in (row.cut_reason, cost) if n) or None)


class _Splitting:
    """One page's pieces read, each cut again while its answer runs out (the module docstring)."""

    def __init__(self, reader: Reader, job: Job, item: PageImage, images: PieceImages, budget: Budget) -> None:
        self.reader, self.job, self.item, self.images, self.budget = reader, job, item, images, budget
        self.out = PieceReadings()
        self.pieces = len(job.segments)
        self.gate = reader.limit if reader.limit is not None else contextlib.nullcontext()
        self.most = reader.max_pieces if reader.max_pieces is not None else dense().max_pieces

    async def read_all(self, images: list[bytes]) -> PieceReadings:
        """Every planned piece read (at once), its answer cut again where it ran out."""
        segments = self.job.segments
        parts = await asyncio.gather(*(self.one(s, image, str(s.index + 1)) for s, image in zip(segments, images)))
        leaves = [leaf for part in parts for leaf in part]
        self.out.leaves = [(replace(segment, index=i), reading) for i, (segment, reading) in enumerate(leaves)]
        return self.out

    async def ask(self, segment: Segment, image: bytes) -> Reading | RequestFailed:
        """One piece's image read, holding a permit of the run's piece limit."""
        if self.job.rendered is None:
            page = PageImage(self.item.doc_id, self.item.page, image, "image/png", segment.width, segment.height)
        else:  # a piece rendered on its own (or a half cut from one): its own size and format
            mime, width, height = image_info(image)
            page = PageImage(self.item.doc_id, self.item.page, image, mime, width, height)
        async with self.gate:
            self.budget.start()
            try:
                reading = await self.reader.read(page)
            except RequestFailed as exc:
                self.budget.done([], exc.attempts)
                return exc
            self.budget.done(list(reading.answers))
            return reading

    def where(self, segment: Segment, label: str) -> str:
        """A piece as the notes name it."""
        return f"{self.job.kind} {label} [{segment.top}:{segment.bottom}, {segment.left}:{segment.right}]"

    async def one(self, segment: Segment, image: bytes, label: str) -> list[Leaf]:
        """A piece read: cut first if its image cannot be sent, cut again if its answer ran out."""
        split = self.job.split
        oversize = self.job.too_big(segment) if self.job.too_big is not None and split is not None else None
        if oversize is not None:
            cut = await self.halves(segment, image, label, oversize, None)
            if cut is not None:
                return cut
        reading = await self.ask(segment, image)
        long = ran_long(reading) if split is not None else None
        if long is None or isinstance(reading, RequestFailed):
            return [(segment, reading)]
        ran = f"ran to max_tokens ({long.result.completion_tokens} tokens) without repeating itself"
        kept = self.job.rest(segment, reading) if self.job.rest is not None else None
        if kept is not None and self.pieces + len(kept[1]) <= self.most:
            if self.budget.reserve(len(kept[1])):
                return await self.rest_of(segment, reading, kept, label, ran)
            return self.bounded(segment, reading, label, ran)
        cut = await self.halves(segment, image, label, ran, reading)
        if cut is None:
            self.out.kept_long += 1
            return [(segment, reading)]
        return cut

    async def halves(self, segment: Segment, image: bytes, label: str, why: str,
                     spent: Reading | None) -> list[Leaf] | None:
        """The halves of a piece, read (None: it cannot be cut; ``why`` it is cut goes in the notes)."""
        assert self.job.split is not None
        where, most = self.where(segment, label), self.most
        if self.pieces >= most:
            self.out.notes.append(f"{where} {why}, and the page is already read in {most} pieces: "
                                  "its text up to there kept")
            return None
        halves, how = await asyncio.to_thread(self.job.split, image, segment)
        if self.pieces >= most:  # other pieces were cut while this one's cut was found
            self.out.notes.append(f"{where} {why}, and the page is already read in {most} pieces: "
                                  "its text up to there kept")
            return None
        if len(halves) < 2:
            self.out.notes.append(f"{where} {why}, and is {how}: its text up to there kept")
            return None
        if spent is not None and not self.budget.reserve(len(halves)):
            self.out.notes.append(f"{where} {why}, and {self.budget.why()}: its text up to there kept")
            return None
        self.pieces += len(halves) - 1
        if spent is not None:
            self.out.spent.extend(spent.answers)
        again = ", both read again" if spent is not None else ""
        self.out.notes.append(f"{where} {why}: {how}{again}")
        crops = await self.images.of(halves)
        parts = await asyncio.gather(
            *(self.one(half, crop, f"{label}.{k + 1}") for k, (half, crop) in enumerate(zip(halves, crops)))
        )
        return [leaf for part in parts for leaf in part]

    def bounded(self, segment: Segment, reading: Reading, label: str, why: str) -> list[Leaf]:
        """A piece that ran out kept as it is: reading the rest of it would pass the cost bound."""
        self.out.kept_long += 1
        self.out.notes.append(f"{self.where(segment, label)} {why}, and {self.budget.why()}: its text up to there kept")
        return [(segment, reading)]

    async def rest_of(self, segment: Segment, reading: Reading, kept: tuple[Reading, list[Segment], str], label: str,
                      why: str) -> list[Leaf]:
        """The complete part of a piece's answer, then the rest of the piece, read."""
        done, others, how = kept
        self.pieces += len(others)
        self.out.spent.extend(reading.answers)  # their tokens count; the kept part's reading has none
        self.out.notes.append(f"{self.where(segment, label)} {why}: {how}")
        if not others:
            return [(segment, done)]
        crops = await self.images.of(others)
        # The answer that ran out filled max_tokens with the part of the piece above the rest:
        # at that rate, a part of the rest larger than most of that would run out too. It is cut
        # in two before it is read.
        area = max(1, read_area(segment, done))
        parts = await asyncio.gather(
            *(self.rest_one(other, crop, f"{label}.{k + 2}", area)
              for k, (other, crop) in enumerate(zip(others, crops)))
        )
        return [(segment, done)] + [leaf for part in parts for leaf in part]

    async def rest_one(self, other: Segment, image: bytes, name: str, area: float) -> list[Leaf]:
        """A piece of the rest of a piece, cut first when it holds more than an answer."""
        answers = other.width * other.height / area
        if answers > dense().rest_fits and self.budget.reserve(1):
            why = f"holds ~{answers:.1f} answers of text at the rate its tile's answer showed"
            cut = await self.halves(other, image, name, why, None)
            if cut is not None:
                return cut
        return await self.one(other, image, name)
