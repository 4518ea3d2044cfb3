"""Long pages cut into overlapping segments of a readable shape.

DeepSeek-OCR reads an image as a 1024-pixel global view plus at most a handful of 640-pixel tiles,
picked by aspect ratio (docs/facts.md#deepseek-ocr). A page far longer than it is wide (a 234 x
14,295 pt strip renders to 443 x 27,049 px at 144 DPI) is shrunk into those tiles until its text is
a few pixels tall. Such a page is read in pieces instead: segments as wide as the page and at most
``segment_aspect`` times as long, each overlapping the next by a few text lines so that a line cut
by one segment's edge is whole in its neighbour. :func:`plan_segments` cuts a page much wider than
tall the same way across, left to right, but a run does not read wide pages so: a line cut
across its length cannot be joined, so they are cut only at the gutters between their columns,
or read whole (:mod:`llm_ocr.sources.wide`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from llm_ocr.options import dense


@dataclass(frozen=True)
class Segment:
    """One piece of a page: ``[left, top, right, bottom)`` in page pixels."""

    index: int
    left: int
    top: int
    right: int
    bottom: int

    @property
    def box(self) -> list[int]:
        """``[x1, y1, x2, y2]``, the crop box."""
        return [self.left, self.top, self.right, self.bottom]

    @property
    def width(self) -> int:
        """Width in pixels."""
        return self.right - self.left

    @property
    def height(self) -> int:
        """Height in pixels."""
        return self.bottom - self.top


def plan_segments(
    width: int,
    height: int,
    *,
    max_aspect: float = 3.0,
    segment_aspect: float | None = None,
    overlap: float | None = None,
    min_overlap_px: int | None = None,
) -> list[Segment]:
    """The segments of a ``width`` x ``height`` page, or ``[]`` when it reads whole.

    A page is cut when its long side exceeds ``max_aspect`` times its short side (0 disables
    cutting). Segments span the short side; along the long side each is about
    ``segment_aspect`` times the short side, consecutive ones overlapping by ``overlap`` of a
    segment (at least ``min_overlap_px``), spaced evenly so the last ends at the page's end (each
    None: the knob in force, :class:`~llm_ocr.options.DenseOptions`).
    """
    if max_aspect <= 0 or width <= 0 or height <= 0:
        return []
    knobs = dense()
    segment_aspect = knobs.segment_aspect if segment_aspect is None else segment_aspect
    overlap = knobs.segment_overlap if overlap is None else overlap
    min_overlap_px = knobs.segment_min_overlap_px if min_overlap_px is None else min_overlap_px
    tall = height >= width
    short, long = (width, height) if tall else (height, width)
    if long <= max_aspect * short:
        return []
    length = max(1, min(long, round(short * min(segment_aspect, max_aspect))))
    shared = min(length // 2, max(min_overlap_px, round(length * overlap)))
    count = max(2, math.ceil((long - shared) / (length - shared)))
    stride = (long - length) / (count - 1)
    segments = []
    for i in range(count):
        start = round(i * stride)
        end = long if i == count - 1 else start + length
        if tall:
            segments.append(Segment(i, 0, start, width, end))
        else:
            segments.append(Segment(i, start, 0, end, height))
    return segments


def cut_line(segments: list[Segment], i: int) -> int:
    """Where segment ``i``'s share of the page ends along the long side: the middle of its
    overlap with the next (the page's end for the last)."""
    here = segments[i]
    if i == len(segments) - 1:
        return here.bottom if _tall(segments) else here.right
    nxt = segments[i + 1]
    if _tall(segments):
        return (nxt.top + here.bottom) // 2
    return (nxt.left + here.right) // 2


def _tall(segments: list[Segment]) -> bool:
    return len(segments) < 2 or segments[1].top > segments[0].top
