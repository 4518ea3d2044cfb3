"""The pieces of a page read again in halves while an answer runs out of tokens: the adaptive split.

A dense page is cut into pieces (tiles or bands, :mod:`llm_ocr.stages.tiled`; a long page into
segments, :mod:`llm_ocr.stages.segmented`) from an estimate of its text's tokens, which is a
first guess: a model may write more tokens per character of text than the guess (more markup,
another language, another layout). A piece whose answer runs to ``max_tokens`` without
repeating itself (:attr:`~llm_ocr.stages.attempts.Answer.long`: the loop watch saw no loop) is
therefore cut in two (:func:`~llm_ocr.sources.tiles.split_piece`: at a gutter, or between two
text lines) and both halves are read again, at once; and so on, until every piece's answer
fits, or a piece is a few text lines tall (:data:`~llm_ocr.sources.tiles.MIN_SPLIT_LINES`), or
the page has been read in :data:`MAX_PIECES` pieces. Only then is a piece kept as it ran out,
and the page's row is ``truncated``, with the reason. An answer that loops keeps the loop
policy (retried hotter, cut): it is not long, and cutting its piece would not help.

**The complete part of an answer is kept** where the family's answers box every block (tiles,
:func:`complete_part`): a piece whose answer ran out keeps the blocks before the last one (the
last may be cut off), and only the rest of the piece is read again: in each column, what lies
below the lowest block kept there (a model reads a column top to bottom, whatever order it takes
the columns in); a column no kept block covers, whole. A piece that runs out with most of it
read costs the rest, not two halves.

The answers that ran out are not thrown away from the accounting: their tokens and attempts
count in the row, beside those of the pieces read again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace

from llm_ocr.sources.segments import Segment
from llm_ocr.vlm.box import Box
from llm_ocr.vlm.client import RequestFailed
from llm_ocr.vlm.families.base import AnswerLike, Reading
from llm_ocr.vlm.layout import PageLayout

#: The most pieces one page is read in, splits included (each a request).
MAX_PIECES = 64

#: Cuts a piece (its image, its place on the page) in two: ``(halves, how)``, or ``([], why not)``.
Splitter = Callable[[bytes, Segment], tuple[list[Segment], str]]
#: The part of a piece's answer that ran out worth keeping, and the rest of the piece to read
#: again: ``(the reading cut to its complete blocks, the rest's pieces, how)``; None: keep none.
Rest = Callable[[Segment, Reading], "tuple[Reading, list[Segment], str] | None"]
#: The rest of a piece is not read where it is thinner than this share of the piece (a sliver
#: below the last block: the piece's margin).
MIN_REST_SHARE = 0.04
#: Strips a piece is cut across into to find how far down its answer read each part of it.
REST_STRIPS = 64
#: Strips read to depths this share of the piece's height apart are read again as one piece.
REST_DEPTH_SHARE = 0.03
#: A piece of the rest is at least this share of its piece's width, neighbours joined (from the
#: shallower one's depth) until it is: a column's strip alone is a small image, read with little
#: of the page around it, and a request of its own.
REST_MIN_WIDTH = 0.5
#: ... but not two parts whose tops are more than this share of the piece's height apart.
REST_MAX_REACH = 0.5
#: A piece of the rest smaller than this share of its piece a side grows (up, and left) to it:
#: a few lines of a column alone are read with nothing of the page around them.
REST_MIN_SIDE = 0.25
#: A piece of the rest larger than this share of the area the answer that ran out read (its
#: kept blocks' strips, down to each one's depth) is cut in two before it is read: at the rate
#: that answer showed it would run out too.
REST_FITS = 0.8
#: When the rest of a piece is more than this share of it, its halves are read instead: what
#: would be kept is little, and the rest would run out again.
REST_MAX_SHARE = 0.75


@dataclass
class PieceReadings:
    """What reading a page's pieces produced: the pieces finally read, in page order (their
    index their position), each with its reading or failure; the answers of pieces that ran out
    and were read again in halves; and a line for every piece that ran out."""

    leaves: list[tuple[Segment, Reading | RequestFailed]] = field(default_factory=list)
    spent: list[AnswerLike] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: The pieces that ran out and could not be cut further (their notes say why).
    kept_long: int = 0


def ran_long(reading: Reading | RequestFailed) -> AnswerLike | None:
    """The answer of ``reading`` that ran to ``max_tokens`` without repeating itself, if any."""
    if isinstance(reading, RequestFailed):
        return None
    return next((a for a in reading.answers if getattr(a, "long", False)), None)


async def read_pieces(
    segments: list[Segment],
    images: list[bytes],
    *,
    read: Callable[[Segment, bytes], Awaitable[Reading | RequestFailed]],
    crop: Callable[[list[Segment]], Awaitable[list[bytes]]],
    split: Splitter | None,
    kind: str,
    max_pieces: int = MAX_PIECES,
    too_big: Callable[[Segment], str | None] | None = None,
    rest: Rest | None = None,
) -> PieceReadings:
    """Read every piece (``read``, concurrently; the caller bounds how many at once) and, with
    ``split``, every piece whose answer ran out again in halves (``crop`` makes their images);
    see the module docstring. ``kind`` names a piece in the notes ("tile", "band", "segment").
    ``too_big`` says why a piece cannot be sent at all (its image and ``max_tokens`` exceed the
    server's context): such a piece is cut in two before it is read, when it can be. ``rest``
    (:func:`complete_part`) keeps the complete part of an answer that ran out and says what is
    left of its piece to read, instead of both halves."""
    out = PieceReadings()
    pieces = len(segments)

    async def halves_of(segment: Segment, image: bytes, label: str, why: str,
                        spent: Reading | None) -> list[tuple[Segment, Reading | RequestFailed]] | None:
        """The halves of a piece, read (None: it cannot be cut; ``why`` it is cut goes in the notes)."""
        nonlocal pieces
        assert split is not None
        where = f"{kind} {label} [{segment.top}:{segment.bottom}, {segment.left}:{segment.right}]"
        if pieces >= max_pieces:
            out.notes.append(f"{where} {why}, and the page is already read in {max_pieces} pieces: "
                             "its text up to there kept")
            return None
        halves, how = await asyncio.to_thread(split, image, segment)
        if len(halves) < 2:
            out.notes.append(f"{where} {why}, and is {how}: its text up to there kept")
            return None
        pieces += len(halves) - 1
        if spent is not None:
            out.spent.extend(spent.answers)
        out.notes.append(f"{where} {why}: {how}, both read again" if spent is not None else f"{where} {why}: {how}")
        crops = await crop(halves)
        parts = await asyncio.gather(
            *(one(half, crop_, f"{label}.{k + 1}") for k, (half, crop_) in enumerate(zip(halves, crops)))
        )
        return [leaf for part in parts for leaf in part]

    async def rest_of(segment: Segment, reading: Reading, kept: tuple[Reading, list[Segment], str], label: str,
                      why: str) -> list[tuple[Segment, Reading | RequestFailed]]:
        """The complete part of a piece's answer, then the rest of the piece, read."""
        nonlocal pieces
        done, others, how = kept
        pieces += len(others)
        out.spent.extend(reading.answers)  # their tokens count; the kept part's reading has none
        where = f"{kind} {label} [{segment.top}:{segment.bottom}, {segment.left}:{segment.right}]"
        out.notes.append(f"{where} {why}: {how}")
        if not others:
            return [(segment, done)]
        crops = await crop(others)
        # The answer that ran out filled max_tokens with the part of the piece above the rest:
        # at that rate, a part of the rest larger than most of that would run out too. It is cut
        # in two before it is read.
        read = max(1, read_area(segment, done))

        async def rest_one(other: Segment, image: bytes, name: str) -> list[tuple[Segment, Reading | RequestFailed]]:
            answers = other.width * other.height / read
            if answers > REST_FITS:
                why = f"holds ~{answers:.1f} answers of text at the rate its tile's answer showed"
                cut = await halves_of(other, image, name, why, None)
                if cut is not None:
                    return cut
            return await one(other, image, name)

        parts = await asyncio.gather(
            *(rest_one(other, crop_, f"{label}.{k + 2}") for k, (other, crop_) in enumerate(zip(others, crops)))
        )
        return [(segment, done)] + [leaf for part in parts for leaf in part]

    async def one(segment: Segment, image: bytes, label: str) -> list[tuple[Segment, Reading | RequestFailed]]:
        oversize = too_big(segment) if too_big is not None and split is not None else None
        if oversize is not None:
            cut = await halves_of(segment, image, label, oversize, None)
            if cut is not None:
                return cut
        reading = await read(segment, image)
        long = ran_long(reading) if split is not None else None
        if long is None or isinstance(reading, RequestFailed) or split is None:
            return [(segment, reading)]
        ran = f"ran to max_tokens ({long.result.completion_tokens} tokens) without repeating itself"
        kept = rest(segment, reading) if rest is not None and not isinstance(reading, RequestFailed) else None
        if kept is not None and pieces + len(kept[1]) <= max_pieces:
            return await rest_of(segment, reading, kept, label, ran)
        cut = await halves_of(segment, image, label, ran, reading)
        if cut is None:
            out.kept_long += 1
            return [(segment, reading)]
        return cut

    parts = await asyncio.gather(*(one(s, image, str(s.index + 1)) for s, image in zip(segments, images)))
    leaves = [leaf for part in parts for leaf in part]
    out.leaves = [(replace(segment, index=i), reading) for i, (segment, reading) in enumerate(leaves)]
    return out


def complete_part(segment: Segment, reading: Reading, min_side: int = 0) -> tuple[Reading, list[Segment], str] | None:
    """The part of a piece's answer that ran out worth keeping, and the rest of the piece: its
    blocks but the last (which the answer may have cut off), and, across the piece, what lies
    below the blocks kept there (see the module docstring). None when the answer's blocks do
    not all have boxes or none is complete.

    The piece is cut across into strips; a strip has been read down to the lowest kept block
    over it (a model reads each column top to bottom: what is below its last block there is
    not read yet; a strip no kept block covers is read from the top). Neighbouring strips read
    to about the same depth make one piece of the rest. A part of the rest is not read when it
    is under ``min_side`` pixels a side (the family's minimum readable size) or
    :data:`MIN_REST_SHARE` of the piece, nor, where no kept block lies over it, when it is
    narrower than half a kept block (a column): a gutter, a margin, the part of a column a tile
    cut off (its neighbour's). Neighbouring parts are joined until each is :data:`REST_MIN_WIDTH`
    of the piece wide (what the deeper-read of them shows again is merged when tiles are joined,
    as their overlaps are)."""
    blocks = reading.layout.blocks
    if len(blocks) < 2 or any(not b.boxes for b in blocks):
        return None
    sx, sy = segment.width / max(1, reading.width), segment.height / max(1, reading.height)
    kept = blocks[:-1]
    places = []
    for block in kept:
        around = Box.union(block.boxes)
        places.append(Box(segment.left + around.x1 * sx, segment.top + around.y1 * sy,
                          segment.left + around.x2 * sx, segment.top + around.y2 * sy))
    strips = max(1, min(REST_STRIPS, segment.width))
    step = segment.width / strips
    depth = []
    for k in range(strips):
        mid = segment.left + (k + 0.5) * step
        depth.append(max((p.y2 for p in places if p.x1 <= mid <= p.x2), default=float(segment.top)))
    # Runs of strips read to about the same depth (a line of text apart at most).
    close = REST_DEPTH_SHARE * segment.height
    runs: list[list[int]] = []
    for k in range(strips):
        if runs and abs(depth[k] - depth[runs[-1][0]]) <= close:
            runs[-1].append(k)
        else:
            runs.append([k])
    # A narrow run between two others (a gutter no block covers) goes with its deeper-read
    # neighbour's run: it holds no text of its own.
    narrow = max(min_side, MIN_REST_SHARE * segment.width)
    merged: list[list[int]] = []
    for run in runs:
        if merged and len(run) * step < narrow:
            merged[-1].extend(run)
        elif merged and len(merged[-1]) * step < narrow:
            merged[-1] = merged[-1] + run
        else:
            merged.append(list(run))
    widths = sorted(p.width for p in places)
    column = widths[len(widths) // 2]  # a kept block's usual width: a column of the page
    others: list[Segment] = []
    for run in merged:
        top = int(min(depth[k] for k in run if depth[k] > segment.top) if any(depth[k] > segment.top for k in run)
                  else segment.top)
        left = int(segment.left + run[0] * step)
        right = int(segment.left + (run[-1] + 1) * step + 0.5) if run[-1] < strips - 1 else segment.right
        part = Segment(0, left, min(top, segment.bottom), right, segment.bottom)
        unread = all(depth[k] <= segment.top for k in run)
        if unread and part.width < column / 2:
            continue  # no kept block over it, and too narrow for a column: a margin, a gutter
        if part.height >= max(min_side, MIN_REST_SHARE * segment.height) and part.width >= narrow:
            others.append(part)
    # The block the answer was cut in is read again, however little of the piece is left below
    # it: a part too small to send grows up over it to the family's minimum side.
    cut_in = Box.union(blocks[-1].boxes)
    cut_in = Box(segment.left + cut_in.x1 * sx, segment.top + cut_in.y1 * sy,
                 segment.left + cut_in.x2 * sx, segment.top + cut_in.y2 * sy)
    if not any(Box(*o.box).overlaps(cut_in) for o in others):
        tall = max(min_side, MIN_REST_SHARE * segment.height)
        wide = max(narrow, cut_in.width)
        left = int(max(segment.left, min(cut_in.x1, segment.right - wide)))
        others.append(Segment(0, left, int(max(segment.top, min(cut_in.y1, segment.bottom - tall))),
                              int(min(segment.right, left + wide + 0.5)), segment.bottom))
        others.sort(key=lambda o: o.left)
    others = [_whole_blocks(_grown(o, segment), places)
              for o in _wide_enough(others, REST_MIN_WIDTH * segment.width, REST_MAX_REACH * segment.height)]
    if sum(o.width * o.height for o in others) > REST_MAX_SHARE * segment.width * segment.height:
        return None  # the rest is most of the piece: its halves are read instead
    figures = [f for f in reading.layout.figures if 0 <= f.block < len(kept)]
    layout = PageLayout(kept, figures, "\n\n".join(b.text for b in kept), reading.layout.warnings,
                        reading.layout.metadata)
    done = Reading(layout, [], reading.raw, reading.image, reading.width, reading.height, reading.notes)
    rest = " and ".join(f"[{o.top}:{o.bottom}, {o.left}:{o.right}]" for o in others) or "nothing"
    return done, others, f"its {len(kept)} complete blocks kept, the rest of it read again: {rest}"


def _wide_enough(parts: list[Segment], width: float, reach: float) -> list[Segment]:
    """``parts`` (left to right) each joined with a neighbour while it is under ``width`` wide
    (the one before, else the one after), from the shallowest top of those joined; not two whose
    tops are more than ``reach`` apart (the deeper one would be read again over that height)."""
    groups = [[p] for p in parts]

    def span(group: list[Segment]) -> int:
        return group[-1].right - group[0].left

    def joins(a: list[Segment], b: list[Segment]) -> bool:
        tops = [p.top for p in a + b]
        return max(tops) - min(tops) <= reach

    joined = True
    while joined:
        joined = False
        for i, group in enumerate(groups):
            if span(group) >= width:
                continue
            for j in (i - 1, i + 1):
                if 0 <= j < len(groups) and joins(groups[j], group):
                    low, high = min(i, j), max(i, j)
                    groups[low:high + 1] = [groups[low] + groups[high]]
                    joined = True
                    break
            if joined:
                break
    return [Segment(0, g[0].left, min(p.top for p in g), g[-1].right, max(p.bottom for p in g)) for g in groups]


def _whole_blocks(part: Segment, places: list[Box]) -> Segment:
    """``part`` reaching up over every kept block its top would cut through: the piece of the
    rest owns what lies inside it when tiles are joined, so a kept block it cut would lose the
    lines above the cut (the piece of the rest reads that block again, whole)."""
    top = part.top
    while True:
        cut = [p.y1 for p in places if p.y1 < top < p.y2 and p.x2 > part.left and p.x1 < part.right]
        if not cut:
            return replace(part, top=top)
        top = int(min(cut))


def read_area(segment: Segment, done: Reading) -> float:
    """The area of ``segment`` (page pixels) its kept answer ``done`` read: under each of
    :data:`REST_STRIPS` strips across it, from its top down to the lowest kept block there."""
    sx, sy = segment.width / max(1, done.width), segment.height / max(1, done.height)
    places = [Box.union(b.boxes) for b in done.layout.blocks if b.boxes]
    strips = max(1, min(REST_STRIPS, segment.width))
    step = segment.width / strips
    area = 0.0
    for k in range(strips):
        mid = (k + 0.5) * step / sx
        area += step * max((p.y2 * sy for p in places if p.x1 <= mid <= p.x2), default=0.0)
    return area


def _grown(part: Segment, piece: Segment) -> Segment:
    """``part`` of the rest of ``piece`` at least :data:`REST_MIN_SIDE` of it a side, grown up
    and to the left (its bottom is the piece's; what it shows again of the kept blocks is
    merged when tiles are joined, as their overlaps are)."""
    tall = int(REST_MIN_SIDE * piece.height + 0.5)
    wide = int(REST_MIN_SIDE * piece.width + 0.5)
    top = max(piece.top, min(part.top, part.bottom - tall))
    left = max(piece.left, min(part.left, part.right - wide))
    right = min(piece.right, max(part.right, left + wide))
    return replace(part, top=top, left=left, right=right)
