"""Tall images read in windows at their own resolution, their lines joined by position.

RapidOCR shrinks every image whose longer side exceeds ``Global.max_side_len`` (2,000 px in the
``config.yaml`` of rapidocr 3.x: ``resize_image_within_bounds`` in ``rapidocr/utils/process_img.py``)
before it detects anything, and crops the text lines for recognition from the shrunk image. A
segment of a long page (1,224 x 2,448 px at 144 DPI for an 8.5 in strip) loses a fifth of its
resolution that way, and a whole 1:61 strip sent as one image (1,224 x 74,664 px) would be read
at 33 x 2,000 px, nothing legible left. So the engine pins ``max_side_len`` to :data:`WINDOW` and
never hands RapidOCR a larger image:

- an image wider than :data:`WINDOW` is scaled down to that width first (as RapidOCR would
  scale it, but only as far as its width needs: text lines run across, and a window cut across
  them would cut every line in two);
- an image taller than :data:`WINDOW` is read in as few windows as fit, as wide as the image,
  all as tall (at most :data:`WINDOW`), each sharing :data:`OVERLAP` rows with the next (a
  1,224 x 2,448 px segment: two windows of 1,352 rows); each window keeps the lines whose
  centre lies in its share of the image (down to the middle of its overlap with the next). A
  line at most half the overlap tall lies whole in the window that keeps it; its cut-off copy in
  the neighbouring window has its centre on the far side of that middle and is dropped.

An image no larger than the window in either direction is read in one piece, as before.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .layout import Line

if TYPE_CHECKING:
    import numpy as np

#: The longest side RapidOCR reads without shrinking (its default ``Global.max_side_len``, which
#: the engine passes explicitly so that the two cannot drift apart).
WINDOW = 2000
#: Rows two consecutive windows share: lines up to half of it tall (64 pt type at 144 DPI)
#: lie whole in one of them.
OVERLAP = 256


@dataclass(frozen=True)
class Window:
    """Rows ``[top, bottom)`` of the image, and the share of them whose lines this window keeps:
    those with their centre in ``[keep_from, keep_to)``."""

    top: int
    bottom: int
    keep_from: float
    keep_to: float


def plan_windows(height: int, window: int = WINDOW, overlap: int = OVERLAP) -> list[Window]:
    """The windows of an image ``height`` px tall: one when it fits in ``window``, else as few
    as fit, all of one size (at most ``window``), consecutive ones sharing ``overlap`` rows."""
    if height <= window:
        return [Window(0, height, -math.inf, math.inf)]
    count = math.ceil((height - overlap) / (window - overlap))
    size = math.ceil((height + (count - 1) * overlap) / count)
    tops = [min(i * (size - overlap), height - size) for i in range(count)]
    cuts = [(tops[i + 1] + tops[i] + size) / 2 for i in range(count - 1)]  # the overlaps' middles
    return [
        Window(top, top + size, cuts[i - 1] if i else -math.inf, cuts[i] if i < count - 1 else math.inf)
        for i, top in enumerate(tops)
    ]


def _moved(line: Line, dy: float, scale: float) -> Line:
    return Line(line.x1 * scale, (line.y1 + dy) * scale, line.x2 * scale, (line.y2 + dy) * scale, line.text,
                line.score, line.kind)


def read_in_windows(read: Callable[[np.ndarray], list[Line]], bgr: np.ndarray, window: int = WINDOW,
                    overlap: int = OVERLAP) -> list[Line]:
    """The text lines of ``bgr`` (height x width x 3), read by ``read`` in windows no larger than
    ``window`` px either way (module docstring); boxes in the pixels of ``bgr``."""
    import cv2
    import numpy as np

    height, width = bgr.shape[:2]
    scale = 1.0
    if width > window:
        scale = width / window
        bgr = cv2.resize(bgr, (window, max(1, round(height / scale))), interpolation=cv2.INTER_AREA)
        height = bgr.shape[0]
    windows = plan_windows(height, window, overlap)
    if len(windows) == 1:
        lines = read(bgr)
        return lines if scale == 1.0 else [_moved(l, 0, scale) for l in lines]
    out: list[Line] = []
    for w in windows:
        for line in read(np.ascontiguousarray(bgr[w.top:w.bottom])):
            if w.keep_from <= w.top + line.cy < w.keep_to:
                out.append(_moved(line, w.top, scale))
    return out
