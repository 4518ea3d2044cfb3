"""Wide pages: cut only between columns, else read whole.

A page more than ``max_aspect`` times wider than tall (a receipt's line scanned sideways, a
statement's banner, a 900 x 200 px line of text) used to be cut like a long page, across: in
overlapping segments left to right. But a line of text cut across its length cannot be joined
by the text two pieces repeat: each piece shows the letters inside it (``quick brov`` and
``k brown fox``), no word is whole in both, and the join came out garbled while the row said
``ok`` (issue 47). So a wide page is cut only at its **gutters**: runs of ink columns blank from
its top to its bottom, at least ``wide_gutter_lines`` text-line heights wide (wider than a
word space of the same type), between inked ones. The pieces end in the middle of a gutter and
do not overlap: every letter is in exactly one piece, and nothing needs joining by its text. A
wide page without such a gutter is read whole, resized by its family's recipe as any page.

A wide piece whose answer runs out is cut in two the same way, at its gutter nearest the middle
(:func:`split_at_gutter`), or not at all.

Its knobs (``wide_gutter_lines``, ``min_wide_gutter_px``, and the ``blank``, ``analysis_side`` and
``paper_percentile`` it shares with the cuts of a dense page) are fields of :class:`llm_ocr.options.DenseOptions`.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from itertools import pairwise
from typing import Any

from llm_ocr.options import dense

from .segments import Segment

#: A gutter as ``(start, end)`` fractions of the page's width.
Gutter = tuple[float, float]


def ink_of(image: Any) -> Any:
    """The darkness of a PIL image's grey copy, at most ``analysis_side`` pixels long: how much
    darker than its paper (its ``paper_percentile`` grey level) each pixel is."""
    import numpy as np
    from PIL import Image

    grey = image.convert("L")
    factor = max(grey.size) / dense().analysis_side
    if factor > 1:
        grey = grey.resize((max(1, round(grey.width / factor)), max(1, round(grey.height / factor))),
                           Image.Resampling.BOX)
    pixels = np.asarray(grey, dtype=np.float32)
    paper = float(np.percentile(pixels, dense().paper_percentile)) if pixels.size else 255.0
    return np.clip(paper - pixels, 0.0, None)


def _runs(flags: Any) -> list[tuple[int, int]]:
    """``[start, end)`` of each run of true values."""
    runs, start = [], None
    for i, flag in enumerate(list(flags) + [False]):
        if flag and start is None:
            start = i
        elif not flag and start is not None:
            runs.append((start, i))
            start = None
    return runs


def line_height(ink: Any) -> float | None:
    """The median height of the runs of inked rows (a text line's ink), None without ink."""
    import numpy as np

    if ink.size == 0:
        return None
    rows = ink.sum(axis=1)
    inked = rows > dense().blank * max(float(rows.max()), 1e-6)
    heights = [b - a for a, b in _runs(inked)]
    return float(np.median(heights)) if heights else None


def gutters(ink: Any) -> list[Gutter]:
    """The gutters of a page whose ink (darkness, rows x columns) is ``ink``: blank from top to
    bottom, at least ``wide_gutter_lines`` line heights wide, inked columns either side."""
    height = line_height(ink)
    if height is None:
        return []
    cols = ink.shape[1]
    profile = ink.sum(axis=0)
    blank = profile <= dense().blank * max(float(profile.max()), 1e-6)
    wide = max(dense().min_wide_gutter_px, dense().wide_gutter_lines * height)
    return [(a / cols, b / cols) for a, b in _runs(blank) if a > 0 and b < cols and b - a >= wide]


def image_gutters(image: Any) -> list[Gutter]:
    """:func:`gutters` of a PIL image, or of an encoded one (bytes)."""
    if isinstance(image, (bytes, bytearray)):
        from PIL import Image

        with Image.open(io.BytesIO(image)) as img:
            return gutters(ink_of(img))
    return gutters(ink_of(image))


def wide_segments(width: int, height: int, found: Sequence[Gutter], *, max_aspect: float = 3.0,
                  segment_aspect: float | None = None) -> list[Segment]:
    """The pieces of a wide ``width`` x ``height`` page cut at the middles of its gutters
    (``found``, fractions of the width), each as few as can be and at most ``segment_aspect``
    (or ``max_aspect``; None: the ``segment_aspect`` knob) times the height long where the
    gutters allow; ``[]``: read it whole (no gutter, or it is not wider than ``max_aspect``
    times its height)."""
    if max_aspect <= 0 or height <= 0 or width <= max_aspect * height:
        return []
    aspect = dense().segment_aspect if segment_aspect is None else segment_aspect
    length = height * min(aspect, max_aspect)
    cuts = sorted(round((a + b) / 2 * width) for a, b in found)
    edges, start = [0], 0
    while True:
        ahead = [c for c in cuts if c > start]
        if not ahead or width - start <= length:
            break
        fitting = [c for c in ahead if c - start <= length]
        start = max(fitting) if fitting else min(ahead)  # a column longer than a piece: its own
        edges.append(start)
    edges.append(width)
    if len(edges) < 3:
        return []
    return [Segment(i, a, 0, b, height) for i, (a, b) in enumerate(pairwise(edges))]


def plan_wide(image: bytes, width: int, height: int, max_aspect: float) -> list[Segment]:
    """:func:`wide_segments` of an encoded ``width`` x ``height`` page image, gutters found in it."""
    if max_aspect <= 0 or width <= max_aspect * height:
        return []
    return wide_segments(width, height, image_gutters(image), max_aspect=max_aspect)


def split_at_gutter(image: bytes, piece: Segment) -> tuple[list[Segment], str]:
    """A wide piece (its image ``image``) cut in two at its gutter nearest its middle, in page
    pixels, the halves meeting in the gutter's middle; ``([], why)`` when it has none (cutting
    its lines across their length would garble them)."""
    found = image_gutters(image)
    if not found:
        return [], "no gutter between columns to cut at (a line cut across its length cannot be joined)"
    a, b = min(found, key=lambda g: abs((g[0] + g[1]) / 2 - 0.5))
    x = piece.left + round((a + b) / 2 * piece.width)
    halves = [Segment(0, piece.left, piece.top, x, piece.bottom), Segment(1, x, piece.top, piece.right, piece.bottom)]
    return halves, "cut in two at a gutter between columns"
