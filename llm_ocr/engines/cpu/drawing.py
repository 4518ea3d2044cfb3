"""What in a region of a page is drawn and what is text: the pixels behind the figure rules.

The layout model says where it sees a figure, and it is wrong in both directions on documents
unlike its training set (a book page, a table or a column of numbers called a figure). The page
itself tells which is which: the OCR found the text lines, so every pixel of *ink* (unlike the
paper's colour) in a region either lies in a text line or is something drawn there — bars,
axes, curves, a photo. This module measures that:

- :func:`ink` — the ink of a region (a boolean mask);
- :func:`text_mask` — the pixels the region's text lines cover;
- :func:`drawing_box` — the box around what is drawn: the ink outside the text lines, grouped
  into connected strokes, keeping only groups at least one text line tall and wide. Smaller
  marks are part of the text (bullets, accents, an underline, a rule, a glyph's tip outside its
  line's box), not a drawing;
- :func:`rules` — the ink of ruled lines: thin straight runs, as a table's or a form's grid;
- :func:`text_share` — the share of a box's ink, rules aside, that lies in text lines.

A region whose ink is mostly text (:data:`TEXT_SHARE`) is text, whatever the model says: a
chart's labels are a small part of its ink (bars, axes and curves are the rest), a paragraph's or
a table's ink is all glyphs. A ruled table or form (a well log's header block: a grid of 0.5 pt
rules around 5.5 pt fields) is all glyphs too once its rules are set aside; counted as ink, its
rules outweighed its small type. Everything here works on numpy arrays and plain boxes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from .layout import Line

if TYPE_CHECKING:
    import numpy as np

Box = tuple[float, float, float, float]

#: A pixel is ink when one of its channels differs this much from the page background.
INK_DIFF = 40
#: Padding around the ink of a figure, in pixels (the crop keeps a thin margin).
INK_PAD = 4
#: A region is text when at least this share of its ink lies in text lines: "mostly text".
TEXT_SHARE = 0.5
#: Text line boxes are grown by this fraction of their height before they mask the ink: the
#: detector's boxes are already padded, this catches the tips of italics and accents.
TEXT_PAD = 0.1
#: A rule is a straight horizontal or vertical run of ink at least this many line heights long
#: (no glyph stroke is: an em dash is under one) ...
RULE_LENGTH = 3.0
#: ... and thinner than this fraction of a line height (0.5-1 pt rules are 1-2 px at 144 DPI;
#: a chart's bars are thicker).
RULE_THICKNESS = 0.25


def background(page: np.ndarray) -> np.ndarray:
    """The page's background colour: the median pixel of a coarse grid over the page."""
    import numpy as np

    step = max(1, min(page.shape[0], page.shape[1]) // 64)
    return np.median(page[::step, ::step].reshape(-1, page.shape[2]), axis=0)


def _clip(page: np.ndarray, box: Box) -> tuple[int, int, int, int] | None:
    height, width = page.shape[:2]
    x1, y1 = max(0, int(box[0])), max(0, int(box[1]))
    x2, y2 = min(width, math.ceil(box[2])), min(height, math.ceil(box[3]))
    return (x1, y1, x2, y2) if x2 > x1 and y2 > y1 else None


def ink(page: np.ndarray, box: Box, paper: np.ndarray) -> tuple[np.ndarray, tuple[int, int]] | None:
    """The ink of ``box`` (a boolean mask of the clipped box) and the mask's top-left corner in
    page pixels; ``None`` when the box lies outside the page."""
    import numpy as np

    clipped = _clip(page, box)
    if clipped is None:
        return None
    x1, y1, x2, y2 = clipped
    patch = page[y1:y2, x1:x2].astype(np.int16)
    return np.any(np.abs(patch - paper.astype(np.int16)) > INK_DIFF, axis=2), (x1, y1)


def text_mask(shape: tuple[int, int], origin: tuple[int, int], lines: Sequence[Line]) -> np.ndarray:
    """The pixels (of a mask of ``shape`` whose top-left is ``origin`` in page pixels) that the
    boxes of ``lines`` cover, each grown by :data:`TEXT_PAD` of its height."""
    import numpy as np

    mask = np.zeros(shape, bool)
    ox, oy = origin
    for line in lines:
        pad = TEXT_PAD * line.height
        x1, y1 = max(0, int(line.x1 - pad) - ox), max(0, int(line.y1 - pad) - oy)
        x2, y2 = math.ceil(line.x2 + pad) - ox, math.ceil(line.y2 + pad) - oy
        if x2 > x1 and y2 > y1:
            mask[y1:y2, x1:x2] = True
    return mask


def _mask_box(mask: np.ndarray, origin: tuple[int, int], within: Box) -> Box | None:
    import numpy as np

    cols = np.flatnonzero(mask.any(axis=0))
    rows_ = np.flatnonzero(mask.any(axis=1))
    if cols.size == 0:
        return None
    ox, oy = origin
    return (
        float(max(within[0], ox + cols[0] - INK_PAD)),
        float(max(within[1], oy + rows_[0] - INK_PAD)),
        float(min(within[2], ox + cols[-1] + 1 + INK_PAD)),
        float(min(within[3], oy + rows_[-1] + 1 + INK_PAD)),
    )


def drawing_box(page: np.ndarray, box: Box, lines: Sequence[Line], paper: np.ndarray, line_height: float) -> Box | None:
    """The box around what is drawn in ``box`` (ink outside the text ``lines``), or ``None``
    when nothing there is a drawing.

    Drawn ink is grouped into connected strokes after closing gaps of half a line height (the
    bars and the axis of a chart, a dashed curve, a photo's speckle are one drawing); a group
    is kept when its ink is at least ``line_height`` tall and wide. A text line the OCR did not
    read is about one line tall at most, and a bullet, an accent or a rule is smaller still.
    """
    import cv2
    import numpy as np

    found = ink(page, box, paper)
    if found is None:
        return None
    mask, origin = found
    drawn = mask & ~text_mask(mask.shape, origin, lines)
    if not drawn.any():
        return None
    reach = max(1, int(line_height / 2))
    closed = cv2.dilate(drawn.astype(np.uint8), np.ones((reach, reach), np.uint8))
    count, labels, stats, _ = cv2.connectedComponentsWithStats(closed, connectivity=8)
    keep = np.zeros(count, bool)
    for index in range(1, count):
        # The group's extent without the dilation's margin: the ink's own size.
        width = stats[index, cv2.CC_STAT_WIDTH] - (reach - 1)
        height = stats[index, cv2.CC_STAT_HEIGHT] - (reach - 1)
        keep[index] = width >= line_height and height >= line_height
    if not keep.any():
        return None
    return _mask_box(drawn & keep[labels], origin, box)


def rules(mask: np.ndarray, line_height: float) -> np.ndarray:
    """The pixels of ``mask`` on ruled lines: in a horizontal run of at least
    :data:`RULE_LENGTH` line heights that is thinner than :data:`RULE_THICKNESS` of one (or the
    same turned upright). A filled bar or a photo is thick both ways; a curve is not straight."""
    import cv2
    import numpy as np

    ink_u8 = mask.astype(np.uint8)
    length = max(3, round(RULE_LENGTH * line_height))
    thick = max(2, round(RULE_THICKNESS * line_height))

    def runs(width: int, height: int) -> np.ndarray:
        """The pixels in a run of ``width`` x ``height`` ink (a morphological opening)."""
        return cv2.morphologyEx(ink_u8, cv2.MORPH_OPEN, np.ones((height, width), np.uint8)).astype(bool)

    across = runs(length, 1) & ~runs(1, thick)
    upright = runs(1, length) & ~runs(thick, 1)
    return across | upright


def text_share(page: np.ndarray, box: Box, lines: Sequence[Line], paper: np.ndarray, line_height: float) -> float:
    """The share of the ink in ``box``, its :func:`rules` aside, that lies in the text ``lines``
    (0 when it has no such ink)."""
    found = ink(page, box, paper)
    if found is None:
        return 0.0
    mask, origin = found
    mask = mask & ~rules(mask, line_height)
    total = int(mask.sum())
    if total == 0:
        return 0.0
    return int((mask & text_mask(mask.shape, origin, lines)).sum()) / total
