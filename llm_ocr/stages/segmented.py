"""A long page read in segments (:mod:`llm_ocr.sources.segments`) and joined into one row.

Each segment is its own request. Its blocks come back with boxes in the segment's pixels; they
are moved to page pixels, and each segment contributes the blocks whose centre lies in its share
of the page (up to the middle of its overlap with the next). A block that spans a whole overlap
is kept from both segments, each copy cut at one edge: the two copies (same label, boxes that
overlap in page pixels) are merged into one block, and the words the second copy repeats from
the first (the lines both segments showed) are removed; two copies of a figure become one
figure whose box covers both.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field, replace
from typing import Any

from llm_ocr.records import Figure, PageResult
from llm_ocr.sources.base import DocumentRef, PageImage
from llm_ocr.sources.pieces import PiecedPage, crop_from_pieces, image_info, stitch_figures
from llm_ocr.sources.segments import Segment, cut_line
from llm_ocr.stages.attempts import UNFINISHED
from llm_ocr.stages.split import Rest, Splitter, read_pieces
from llm_ocr.vlm.box import Box
from llm_ocr.vlm.client import RequestFailed
from llm_ocr.vlm.families.base import Reading
from llm_ocr.vlm.layout import FigureBox, PageBlock, alt_text, clean_markdown

#: Stitches a page's figures from its pieces: ``(pieces as (segment, image), boxes) -> PNGs``.
Stitch = Callable[[Sequence[tuple[Segment, bytes]], Sequence[Box]], Awaitable[list[bytes]]]
#: Tokens for the overlap search: tags, words, punctuation runs.
_TOKEN = re.compile(r"<[^<>\s]{1,40}>|[^\s<>]+")
#: Words compared when looking for the lines two copies of a block share.
_MAX_OVERLAP_TOKENS = 400
#: The share of the tokens a repeat found by its first words must agree on, token by token.
ANCHOR_AGREES = 0.6


@dataclass
class Piece:
    """A block of one segment, in page pixels, with its figures."""

    segment: int
    block: PageBlock
    figures: list[FigureBox] = field(default_factory=list)
    #: Why the join of this block to the piece before could not be verified (None: it was, or
    #: there was nothing to join): it starts with words the piece before holds, but not as the
    #: lines the two pieces' overlap showed (:func:`repeated_start`'s ``"dubious"``).
    unverified: str | None = None

    def centre(self, tall: bool) -> float | None:
        """The middle of the block's boxes down the page (``tall``) or across it."""
        if not self.block.boxes:
            return None
        x, y = Box.union(self.block.boxes).centre
        return y if tall else x


def _moved(box: Box, segment: Segment, size: tuple[int, int]) -> Box:
    """A box in the pixels of a piece's image (``size``) in the pixels the segment is planned in."""
    sx, sy = segment.width / max(1, size[0]), segment.height / max(1, size[1])
    return box.scaled(sx, sy).moved(segment.left, segment.top)


def _pieces(reading: Reading, segment: Segment) -> tuple[list[Piece], list[str]]:
    """One segment's reading as blocks in page pixels (figures attached to their blocks)."""
    layout = reading.layout
    size = (reading.width, reading.height)
    pieces = [
        Piece(segment.index, PageBlock(block.label, [_moved(b, segment, size) for b in block.boxes], block.text))
        for block in layout.blocks
    ]
    for figure in layout.figures:
        if 0 <= figure.block < len(pieces):
            moved = FigureBox("", _moved(figure.bbox, segment, size), description=figure.description)
            pieces[figure.block].figures.append(moved)
    return pieces, layout.warnings


def _to_page(pieces: list[Piece], sx: float, sy: float) -> list[Piece]:
    """The joined blocks with their boxes moved from the pieces' virtual render to the pixels of
    the page image the row describes."""
    if sx == sy == 1.0:
        return pieces
    out = []
    for piece in pieces:
        block = PageBlock(piece.block.label, [b.scaled(sx, sy) for b in piece.block.boxes], piece.block.text)
        figures = [replace(f, bbox=f.bbox.scaled(sx, sy)) for f in piece.figures]
        out.append(replace(piece, block=block, figures=figures))
    return out


def _to_page_figures(figures: list[FigureBox], sx: float, sy: float) -> list[FigureBox]:
    return [replace(f, bbox=f.bbox.scaled(sx, sy)) for f in figures]


def _tokens(text: str) -> list[tuple[str, int]]:
    """``(normalised token, end offset)`` of each token of ``text``."""
    return [(m.group().lower().strip(".,;:!?"), m.end()) for m in _TOKEN.finditer(text)]


def drop_repeated_start(first: str, second: str) -> str:
    """``second`` without the words at its start that repeat the end of ``first``
    (:func:`repeated_start`)."""
    return repeated_start(first, second)[0]


def repeated_start(first: str, second: str) -> tuple[str, str]:
    """``(second without the words at its start that repeat the end of first, how)``: ``how`` is
    ``"repeated"`` (a repeat was removed), ``"none"`` (``second`` starts with nothing of ``first``:
    the pieces' overlap may be blank) or ``"dubious"`` (see below: the join cannot be verified).

    The longest run of tokens that ends ``first`` and starts ``second`` is removed; failing
    that (the line cut by the first segment's edge read differently), ``second``'s first four
    tokens are looked for near the end of ``first`` and everything up to the end of ``first``'s
    copy is removed, provided at least :data:`ANCHOR_AGREES` of the tokens removed are the ones
    ``first`` holds there: a line a model writes atop every piece (a running header) starts both
    texts, and what follows it in ``first`` is not what follows it in ``second`` (removing it
    lost 40% of a page, issue 47). Nothing removed, the join is ``"dubious"`` when both texts
    start with the same words (:func:`dubious_start`).
    """
    a = [t for t, _ in _tokens(first)][-_MAX_OVERLAP_TOKENS:]
    b_full = _tokens(second)
    b = [t for t, _ in b_full][:_MAX_OVERLAP_TOKENS]
    for k in range(min(len(a), len(b)), 1, -1):
        if a[-k:] == b[:k]:
            return second[b_full[k - 1][1] :].lstrip(), "repeated"
    anchor = b[:4]
    if len(anchor) == 4:
        for start in range(len(a) - 4, -1, -1):
            if a[start : start + 4] == anchor:
                k = min(len(a) - start, len(b_full))
                if sum(x == y for x, y in zip(a[start:], b[:k])) >= ANCHOR_AGREES * k:
                    return second[b_full[k - 1][1] :].lstrip(), "repeated"
    return second, "dubious" if dubious_start(first, second) else "none"


def dubious_start(first: str, second: str) -> bool:
    """Whether ``first`` and ``second`` start with the same four words, not removed as the lines
    two pieces' overlap showed: a line a model writes atop every piece, whose join cannot be
    verified."""
    a, b = [t for t, _ in _tokens(first)][:4], [t for t, _ in _tokens(second)][:4]
    return len(a) == 4 and a == b


def drop_exact_repeat(first: str, second: str, min_tokens: int = 4) -> str:
    """``second`` without the longest run of at least ``min_tokens`` tokens that both ends
    ``first`` and starts it (``second`` unchanged when there is none): the lines two pieces of
    a page both showed, with no looking further (a multi-column band's text ends elsewhere)."""
    a = [t for t, _ in _tokens(first)][-_MAX_OVERLAP_TOKENS:]
    b_full = _tokens(second)
    b = [t for t, _ in b_full][:_MAX_OVERLAP_TOKENS]
    for k in range(min(len(a), len(b)), min_tokens - 1, -1):
        if a[-k:] == b[:k]:
            return second[b_full[k - 1][1] :].lstrip()
    return second


def join_pieces(
    segments: list[Segment], per_segment: list[list[Piece]], page: int, *, text_overlap: bool = True
) -> list[Piece]:
    """The blocks of the page, in order, each once (see the module docstring). ``text_overlap``
    False: the boxless blocks' repeated lines were already dropped (the bands of a dense page)."""
    tall = len(segments) < 2 or segments[1].top > segments[0].top
    kept: list[Piece] = []
    for i, pieces in enumerate(per_segment):
        lower = cut_line(segments, i - 1) if i > 0 else None
        upper = None if i == len(segments) - 1 else cut_line(segments, i)
        mine = []
        for piece in pieces:
            centre = piece.centre(tall)
            # No box: kept where the segment put it. Else only in this segment's share.
            if centre is None or ((lower is None or centre >= lower) and (upper is None or centre < upper)):
                mine.append(piece)
        previous = per_segment[i - 1] if i > 0 else []
        if text_overlap and mine and not mine[0].block.boxes and previous and not previous[-1].block.boxes:
            # A family without text boxes (olmOCR-2) reads the overlap twice: the words this
            # segment's text starts with that repeat the end of the last one's are dropped.
            head = mine[0]
            before = " ".join(p.block.text for p in previous if not p.block.boxes)
            text, how = repeated_start(before, head.block.text)
            note = f"pieces {i} and {i + 1} both start with the same words" if how == "dubious" else None
            mine[0] = replace(head, block=PageBlock(head.block.label, [], text), unverified=note)
        for piece in mine:
            twin = _twin(kept, piece)
            if twin is None:
                kept.append(piece)
                continue
            head = kept[twin]
            text, how = repeated_start(head.block.text, piece.block.text)
            note = head.unverified or (f"a block of pieces {i} and {i + 1} starts with the same words in both"
                                       if how == "dubious" else None)
            boxes = box_union(head.block.boxes + piece.block.boxes)
            merged = PageBlock(head.block.label, boxes, f"{head.block.text} {text}".strip())
            kept[twin] = replace(head, block=merged, figures=merge_figures(head.figures + piece.figures),
                                 unverified=note)
    return number_figures(kept, page)


def merge_figures(figures: list[FigureBox]) -> list[FigureBox]:
    """Figures with the copies of one figure made one: a figure cut by a segment's edge is seen
    in part by each segment, and the two parts (their boxes overlap in page pixels, in the lines
    both segments show) are one figure with the box around both, cropped once from the page."""
    out: list[FigureBox] = []
    for figure in figures:
        copy = next((i for i, f in enumerate(out) if f.bbox.overlaps(figure.bbox)), None)
        if copy is None:
            out.append(figure)
            continue
        first = out[copy]
        box = Box.union([first.bbox, figure.bbox])
        out[copy] = replace(first, bbox=box, description=first.description or figure.description)
    return out


def number_figures(pieces: list[Piece], page: int) -> list[Piece]:
    """``pieces`` with their figures numbered in order (``p{page}-f1``, ...)."""
    counter = 0
    for piece in pieces:
        for k, figure in enumerate(piece.figures):
            counter += 1
            piece.figures[k] = replace(figure, id=f"p{page}-f{counter}")
    return pieces


def _twin(kept: list[Piece], piece: Piece) -> int | None:
    """The index of the block of the previous segment that ``piece`` is another copy of: the
    same label and overlapping boxes (blocks of one page never overlap, copies of one block
    in two segments do, in their shared lines)."""
    if not piece.block.boxes:
        return None
    for index in range(len(kept) - 1, max(-1, len(kept) - 50), -1):
        other = kept[index]
        if other.segment != piece.segment - 1:
            if other.segment < piece.segment - 1:
                return None
            continue
        if other.block.label == piece.block.label and any(
            a.overlaps(b) for a in other.block.boxes for b in piece.block.boxes
        ):
            return index
    return None


def box_union(boxes: list[Box]) -> list[Box]:
    """The one box around ``boxes``, as a list of one box (a block's boxes)."""
    return [Box.union(boxes)]


def _markdown(pieces: list[Piece]) -> str:
    parts = []
    for piece in pieces:
        links = "".join(f"![{alt_text(f.description)}](figure:{f.id})\n" for f in piece.figures)
        parts.append(links + piece.block.text)
    return clean_markdown("\n\n".join(p for p in parts if p))


#: How the pieces' answers become the page's blocks in order: ``(pieces, their blocks, page)``.
Join = Callable[[list[Segment], list[list[Piece]], int], list[Piece]]


async def read_in_segments(
    ref: DocumentRef,
    item: PageImage,
    num_pages: int | None,
    segments: list[Segment],
    *,
    read: Callable[[PageImage], Awaitable[Reading]],
    crop: Callable[[bytes, Sequence[Box]], Awaitable[list[bytes]]],
    model: str,
    join: Join = join_pieces,
    kind: str = "segment",
    limit: AbstractAsyncContextManager[Any] | None = None,
    pieces: PiecedPage | None = None,
    stitch: Stitch | None = None,
    split: Splitter | None = None,
    too_big: Callable[[Segment], str | None] | None = None,
    rerender: Callable[[list[Segment]], Awaitable[list[bytes | None]]] | None = None,
    rest: Rest | None = None,
) -> PageResult:
    """Read ``item`` segment by segment with ``read`` (the family's reading of one image) and
    join the readings into its one row.

    The segments' images are ``pieces`` when the page has them (each rendered from the source
    as a page of its own, ``segments`` planned on their virtual render: boxes are joined there
    and moved to ``item``'s pixels at the end, figures stitched from the pieces with ``stitch``);
    else they are cropped from ``item``'s image with ``crop``.

    A segment whose request fails leaves a hole: the row keeps the other segments' text and is
    an ``error`` (a rerun redoes the page); a segment that looped makes the row ``truncated``.
    ``join`` puts the segments' blocks together (:func:`join_pieces`: along the page, for a
    long page); ``kind`` names a piece in ``raw`` and in errors (the tiles of a dense page,
    :mod:`llm_ocr.stages.tiled`, are read the same way). Every piece is asked at once, each
    holding a permit of ``limit`` (the run's piece limit, shared by every page's pieces) if any.
    With ``split``, a piece whose answer ran to ``max_tokens`` without repeating itself is cut
    in two and both halves read again (:mod:`llm_ocr.stages.split`); ``read`` must then stop
    at such an answer rather than retry it hotter. The halves of a piece rendered from the
    source are cut from its own image (as sharp as the piece was sent), else from ``item``'s;
    with ``rerender`` they are rendered from the source again, each as a page of its own, where
    it gives an image (a column's half, read by a family that sizes an image by its longer side,
    is sharper so than its piece's image shows it). With ``rest`` too, such a piece keeps its
    answer's complete part and only the rest of it is read again, where ``rest`` can tell
    (:func:`~llm_ocr.stages.split.complete_part`).
    """
    started = time.monotonic()
    rendered = pieces

    async def crop_pieces(halves: list[Segment]) -> list[bytes]:
        if rendered is None:
            return await crop(item.image, [Box(*s.box) for s in halves])
        shown = [(p.segment, p.image) for p in rendered.pieces]
        cut = await asyncio.to_thread(crop_from_pieces, shown, halves)
        if rerender is None:
            return cut
        try:
            again = await rerender(halves)
        except Exception:  # noqa: BLE001 - the source gone since: the halves cut from the pieces
            return cut
        return [image if image is not None else piece for image, piece in zip(again, cut)]

    if rendered is not None:
        images = [p.image for p in rendered.pieces]
    else:
        images = await crop_pieces(segments)
    gate = limit if limit is not None else contextlib.nullcontext()

    async def one(segment: Segment, image: bytes) -> Reading | RequestFailed:
        if rendered is None:
            page = PageImage(item.doc_id, item.page, image, "image/png", segment.width, segment.height)
        else:  # a piece rendered on its own (or a half cut from one): its own size and format
            mime, width, height = image_info(image)
            page = PageImage(item.doc_id, item.page, image, mime, width, height)
        async with gate:
            try:
                return await read(page)
            except RequestFailed as exc:
                return exc

    read_all = await read_pieces(segments, images, read=one, crop=crop_pieces, split=split, kind=kind, too_big=too_big,
                                 rest=rest)
    segments = [segment for segment, _ in read_all.leaves]
    readings = [reading for _, reading in read_all.leaves]
    per_segment: list[list[Piece]] = []
    warnings: list[str] = []
    failures: list[str] = []
    notes: list[str] = []
    raw: list[str] = []
    for segment, reading in zip(segments, readings):
        where = f"{kind} {segment.index + 1}/{len(segments)} [{segment.top}:{segment.bottom}, {segment.left}:{segment.right}]"  # noqa: E501 - not wrapped yet
        if isinstance(reading, RequestFailed):
            failures.append(f"{where}: {reading}")
            per_segment.append([])
            continue
        raw.append(f"<--- {where} --->\n{reading.raw}")
        blocks, found = _pieces(reading, segment)
        per_segment.append(blocks)
        warnings += [f"{where}: {w}" for w in (reading.notes + found)[:2]]
        cut = "; ".join(n for a in reading.answers for n in a.notes)
        if cut:
            notes.append(f"{where}: {cut}")
    done = [a for r in readings if isinstance(r, Reading) for a in r.answers]
    spent = read_all.spent  # answers that ran out, their pieces read again in halves
    looped = bool(notes)  # cut_tokens counts repetition cut, as for a page read whole
    notes = read_all.notes + notes
    joined = join(segments, per_segment, item.page)
    located = [f for p in joined for f in p.figures]
    figures: list[Figure] = []
    sx = item.width / rendered.width if rendered is not None else 1.0
    sy = item.height / rendered.height if rendered is not None else 1.0
    if located:
        try:
            if rendered is not None:
                shown = [(p.segment, p.image) for p in rendered.pieces]
                boxes = [f.bbox for f in located]
                crops = await (stitch(shown, boxes) if stitch else asyncio.to_thread(stitch_figures, shown, boxes))
            else:
                crops = await crop(item.image, [f.bbox for f in located])
            figures = [f.record(image=c) for f, c in zip(_to_page_figures(located, sx, sy), crops)]
        except Exception as exc:  # noqa: BLE001 - a bad crop must not lose the page's text
            figures = [f.record(error=f"crop failed: {exc}") for f in _to_page_figures(located, sx, sy)]
    unfinished = [a for a in done if a.result.finish_reason in UNFINISHED]
    unverified = [p.unverified for p in joined if p.unverified]
    status = "error" if failures else "truncated" if unfinished or unverified else "ok"
    error = None
    if failures:
        error = f"{len(failures)} of {len(segments)} {kind}s failed (text of the others kept): " + "; ".join(failures[:3])  # noqa: E501 - not wrapped yet
    elif unfinished:
        error = f"{len(unfinished)} of {len(segments)} {kind}s looped or hit max_tokens; their text up to the loop kept"
        if read_all.kept_long:
            error += ": " + "; ".join(n for n in read_all.notes if n.endswith("kept"))[:1000]
    if unverified:  # a seam whose text may be doubled or lost: never silently ok
        joins = f"{len(unverified)} join(s) of {kind}s could not be verified ({'; '.join(unverified[:3])}); text of every {kind} kept"  # noqa: E501
        error = f"{error}; {joins}" if error else joins
    if warnings:
        error = f"{error}; {'; '.join(warnings[:5])}" if error else f"output repaired: {'; '.join(warnings[:5])}"
    finish = next((a.result.finish_reason for a in unfinished), "stop" if done else None)
    placed = _to_page(joined, sx, sy)
    return PageResult(
        doc_id=ref.doc_id,
        doc_index=ref.index,
        page=item.page,
        source=ref.source,
        num_pages=num_pages,
        markdown=_markdown(placed),
        raw="\n".join(raw),
        figures=figures,
        blocks=[p.block.record() for p in placed],
        width=item.width,
        height=item.height,
        status=status,  # type: ignore[arg-type]
        error=error,
        finish_reason=finish,
        prompt_tokens=sum(a.result.prompt_tokens or 0 for a in done + spent),
        completion_tokens=sum(a.result.completion_tokens or 0 for a in done + spent),
        latency_s=round(time.monotonic() - started, 4),
        attempts=sum(a.attempts for a in done + spent)
        + sum(f.attempts for f in readings if isinstance(f, RequestFailed)),
        cut_tokens=sum(a.cut_tokens for a in done + spent) if looped else None,
        cut_reason="; ".join(notes) if notes else None,
        segments=len(segments),
        model=model,
    )
