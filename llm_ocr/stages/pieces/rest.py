"""The complete part of a tile's answer that ran out kept, and the rest of the tile to read again.

Serves **tiles** only (a family whose answers box every block: DeepSeek-OCR's grounding output),
built for a dense multi-column page (a 7-column newspaper page, a two-column paper set small)
whose tile still holds more text than one answer: the answer's blocks but the last (which the
answer may have cut off) are kept, and only the rest of the tile is read again: in each column,
what lies below the lowest block kept there (a model reads a column top to bottom, whatever
order it takes the columns in); a column no kept block covers, whole. A tile that runs out with
most of it read costs the rest, not two halves (:mod:`.read` cuts it in halves otherwise).
"""

from __future__ import annotations

from dataclasses import replace

from llm_ocr.options import dense
from llm_ocr.sources.segments import Segment
from llm_ocr.vlm.box import Box
from llm_ocr.vlm.families.base import Reading
from llm_ocr.vlm.layout import PageLayout


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
    ``rest_min_share`` of the piece, nor, where no kept block lies over it, when it is
    narrower than half a kept block (a column): a gutter, a margin, the part of a column a tile
    cut off (its neighbour's). Neighbouring parts are joined until each is ``rest_min_width``
    of the piece wide (what the deeper-read of them shows again is merged when tiles are joined,
    as their overlaps are)."""
    blocks = reading.layout.blocks
    if len(blocks) < 2 or any(not b.boxes for b in blocks):
        return None
    kept = blocks[:-1]
    places = [_on_page(segment, reading, block.boxes) for block in kept]
    strips = _Strips(segment, places)
    narrow = max(min_side, dense().rest_min_share * segment.width)
    others = strips.unread(_merge_narrow(strips.runs(), strips.step, narrow), min_side, narrow)
    # The block the answer was cut in is read again, however little of the piece is left below
    # it: a part too small to send grows up over it to the family's minimum side.
    cut_in = _on_page(segment, reading, blocks[-1].boxes)
    if not any(Box(*o.box).overlaps(cut_in) for o in others):
        others.append(_around(segment, cut_in, max(min_side, dense().rest_min_share * segment.height), narrow))
        others.sort(key=lambda o: o.left)
    knobs = dense()
    wide = _wide_enough(others, knobs.rest_min_width * segment.width, knobs.rest_max_reach * segment.height)
    others = [_whole_blocks(_grown(o, segment), places) for o in wide]
    if sum(o.width * o.height for o in others) > knobs.rest_max_share * segment.width * segment.height:
        return None  # the rest is most of the piece: its halves are read instead
    figures = [f for f in reading.layout.figures if 0 <= f.block < len(kept)]
    layout = PageLayout(kept, figures, "\n\n".join(b.text for b in kept), reading.layout.warnings,
                        reading.layout.metadata)
    done = Reading(layout, [], reading.raw, reading.image, reading.width, reading.height, reading.notes)
    rest = " and ".join(f"[{o.top}:{o.bottom}, {o.left}:{o.right}]" for o in others) or "nothing"
    return done, others, f"its {len(kept)} complete blocks kept, the rest of it read again: {rest}"


def _on_page(segment: Segment, reading: Reading, boxes: list[Box]) -> Box:
    """The box around ``boxes`` (the pixels of ``reading``'s image) in page pixels."""
    sx, sy = segment.width / max(1, reading.width), segment.height / max(1, reading.height)
    around = Box.union(boxes)
    return Box(segment.left + around.x1 * sx, segment.top + around.y1 * sy,
               segment.left + around.x2 * sx, segment.top + around.y2 * sy)


class _Strips:
    """A piece cut across into ``rest_strips`` strips, each with the depth the kept blocks
    over it read it to (the piece's top where none lies over it)."""

    def __init__(self, segment: Segment, places: list[Box]) -> None:
        self.segment = segment
        self.count = max(1, min(dense().rest_strips, segment.width))
        self.step = segment.width / self.count
        self.depth = []
        for k in range(self.count):
            mid = segment.left + (k + 0.5) * self.step
            self.depth.append(max((p.y2 for p in places if p.x1 <= mid <= p.x2), default=float(segment.top)))
        widths = sorted(p.width for p in places)
        #: A kept block's usual width: a column of the page.
        self.column = widths[len(widths) // 2]

    def runs(self) -> list[list[int]]:
        """Runs of strips read to about the same depth (a line of text apart at most)."""
        close = dense().rest_depth_share * self.segment.height
        runs: list[list[int]] = []
        for k in range(self.count):
            if runs and abs(self.depth[k] - self.depth[runs[-1][0]]) <= close:
                runs[-1].append(k)
            else:
                runs.append([k])
        return runs

    def unread(self, runs: list[list[int]], min_side: int, narrow: float) -> list[Segment]:
        """The part of the piece below each run of strips, those worth reading again."""
        segment = self.segment
        out: list[Segment] = []
        for run in runs:
            read_to = [self.depth[k] for k in run if self.depth[k] > segment.top]
            top = int(min(read_to)) if read_to else segment.top
            left = int(segment.left + run[0] * self.step)
            last = run[-1] < self.count - 1
            right = int(segment.left + (run[-1] + 1) * self.step + 0.5) if last else segment.right
            part = Segment(0, left, min(top, segment.bottom), right, segment.bottom)
            if not read_to and part.width < self.column / 2:
                continue  # no kept block over it, and too narrow for a column: a margin, a gutter
            if part.height >= max(min_side, dense().rest_min_share * segment.height) and part.width >= narrow:
                out.append(part)
        return out


def _merge_narrow(runs: list[list[int]], step: float, narrow: float) -> list[list[int]]:
    """``runs`` with a narrow run between two others (a gutter no block covers) joined to its
    deeper-read neighbour's run: it holds no text of its own."""
    merged: list[list[int]] = []
    for run in runs:
        if merged and len(run) * step < narrow:
            merged[-1].extend(run)
        elif merged and len(merged[-1]) * step < narrow:
            merged[-1] = merged[-1] + run
        else:
            merged.append(list(run))
    return merged


def _around(segment: Segment, cut_in: Box, tall: float, narrow: float) -> Segment:
    """The part of ``segment`` below the top of the block the answer was cut in, at least
    ``tall`` high and ``narrow`` wide."""
    wide = max(narrow, cut_in.width)
    left = int(max(segment.left, min(cut_in.x1, segment.right - wide)))
    return Segment(0, left, int(max(segment.top, min(cut_in.y1, segment.bottom - tall))),
                   int(min(segment.right, left + wide + 0.5)), segment.bottom)


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
    ``rest_strips`` strips across it, from its top down to the lowest kept block there."""
    sx, sy = segment.width / max(1, done.width), segment.height / max(1, done.height)
    places = [Box.union(b.boxes) for b in done.layout.blocks if b.boxes]
    strips = max(1, min(dense().rest_strips, segment.width))
    step = segment.width / strips
    area = 0.0
    for k in range(strips):
        mid = (k + 0.5) * step / sx
        area += step * max((p.y2 * sy for p in places if p.x1 <= mid <= p.x2), default=0.0)
    return area


def _grown(part: Segment, piece: Segment) -> Segment:
    """``part`` of the rest of ``piece`` at least ``rest_min_side`` of it a side, grown up
    and to the left (its bottom is the piece's; what it shows again of the kept blocks is
    merged when tiles are joined, as their overlaps are)."""
    tall = int(dense().rest_min_side * piece.height + 0.5)
    wide = int(dense().rest_min_side * piece.width + 0.5)
    top = max(piece.top, min(part.top, part.bottom - tall))
    left = max(piece.left, min(part.left, part.right - wide))
    right = min(piece.right, max(part.right, left + wide))
    return replace(part, top=top, left=left, right=right)
