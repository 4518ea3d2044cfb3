"""Figures on a page: the layout model's figure regions, the text lines inside them and the
caption beside them.

The layout model (:mod:`.layout_model`) gives labelled regions; the OCR gives text lines. This
module decides, with plain rules on those numbers:

- which regions are figures: ``figure`` regions at or above the score threshold, nested ones
  merged; then the page's pixels have the last word (:mod:`.drawing`). A figure is what is
  *drawn* in the region — ink that lies in no text line — so the region shrinks to its drawing
  and the text within a line height of it (the model's boxes are loose: tens of pixels of white
  around a chart, or a whole column of text beside a plot). A region with nothing drawn in it,
  or whose ink is still mostly text lines, is text whatever the model says: a page of a book, a
  table, a column of numbers;
- which lines are *inside* a figure (axis labels, legends, text in a diagram): those whose box
  lies mostly in the figure's region; they belong to the figure, not to the body text. Except
  in a drawing that covers most of the image (:data:`PAGE_SHARE` of its area: a stretch of a
  well log, a map, a drawing sheet): that drawing is the page rather than a figure set in its
  text, and the words on it are the page's words, so they stay body text too (and are still
  the figure's text for its description);
- which lines are its *caption*: the row right below the figure (else right above), within
  :data:`CAPTION_GAP` line heights and overlapping it horizontally, when it starts like a
  caption ("Figure 3", "Fig. 2.", "Chart 1", ...) or lies in a ``figure_caption`` region the
  model found beside the figure; the caption goes on over the following rows of the same
  paragraph. A caption row the loose figure region swallowed is taken back out of it, and so
  is a row of body text at its top or bottom edge (:data:`BODY_WORDS` words or more): a figure's
  own text at its edges is short (axis titles, legends), and body text must not vanish into a
  figure.

Everything here works on plain numbers (and an optional page array for the pixels), so it is
testable without any model.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .drawing import TEXT_SHARE, background, drawing_box, text_share
from .layout import SIZE_SPLIT, Y_GAP, Line, bbox, body_line_height, has_word, rows

if TYPE_CHECKING:  # numpy is only needed when the page pixels are given
    import numpy as np

Box = tuple[float, float, float, float]

#: The layout model's label for figures and for figure captions (CDLA's label set).
FIGURE = "figure"
FIGURE_CAPTION = "figure_caption"
#: A line belongs inside a figure when at least this fraction of its box lies in the region.
INSIDE = 0.6
#: A caption starts at most this many body line heights below (or above) its figure.
CAPTION_GAP = 2.5
#: ... and a caption is at most this many rows long.
CAPTION_MAX_ROWS = 6
#: How a caption starts when the model did not label it: a figure word and a number.
CAPTION_START = re.compile(
    r"^\s*(fig(ure|\.)?|chart|graph|diagram|image|photo(graph)?|plate|illustration|exhibit|map|scheme|abbildung|abb\.)"
    r"\s*[.:]?\s*([0-9]+|[ivxlc]+\b|[a-z]\b)",
    re.IGNORECASE,
)
#: A row at a figure's top or bottom edge with this many words is body text, not the figure's.
BODY_WORDS = 7
#: A figure whose drawing covers at least this share of the image's area is the page itself (a
#: segment of a well log: 0.70-0.93 of it), not a figure in the page's text (the charts of the
#: layout sets: 0.03-0.13): its text stays the page's text.
PAGE_SHARE = 0.5


@dataclass(frozen=True)
class Region:
    """One region found by the layout model: its label, box in image pixels and score."""

    label: str
    box: Box
    score: float


@dataclass
class PageFigure:
    """A figure found on a page: its box, the text read inside it and its caption."""

    box: Box
    score: float
    inside: list[Line] = field(default_factory=list)
    caption: list[Line] = field(default_factory=list)
    label: str = FIGURE  # the layout model's class for the region
    fills_page: bool = False  # the drawing is most of the image: its text is the page's too

    @property
    def caption_box(self) -> Box | None:
        """The box around the caption lines (``None`` without a caption)."""
        return bbox(self.caption) if self.caption else None

    @property
    def caption_text(self) -> str:
        """The caption, its rows joined by spaces ("" without one)."""
        return " ".join(l.text.strip() for row in rows(self.caption) for l in row)


def _area(box: Box) -> float:
    return max(0.0, box[2] - box[0]) * max(0.0, box[3] - box[1])


def _overlap(a: Box, b: Box) -> float:
    """Area of the intersection of two boxes."""
    return _area((max(a[0], b[0]), max(a[1], b[1]), min(a[2], b[2]), min(a[3], b[3])))


def _union(a: Box, b: Box) -> Box:
    return (min(a[0], b[0]), min(a[1], b[1]), max(a[2], b[2]), max(a[3], b[3]))


def _line_box(line: Line) -> Box:
    return (line.x1, line.y1, line.x2, line.y2)


def is_inside(line: Line, box: Box) -> bool:
    """Whether most of ``line`` (:data:`INSIDE` of its box) lies in ``box``."""
    own = _area(_line_box(line))
    return own > 0 and _overlap(_line_box(line), box) >= INSIDE * own


def _merge_nested(regions: list[Region]) -> list[Region]:
    """Figure regions with the ones mostly (80 %) inside a bigger one dropped: the model
    sometimes finds a panel of a figure as well as the whole figure."""
    kept: list[Region] = []
    for region in sorted(regions, key=lambda r: -_area(r.box)):
        if any(_overlap(region.box, k.box) >= 0.8 * _area(region.box) for k in kept):
            continue
        kept.append(region)
    return kept


def _starts_caption(row: list[Line]) -> bool:
    return bool(CAPTION_START.match(row[0].text))


def _in_region(row: list[Line], regions: Sequence[Region]) -> bool:
    box = bbox(row)
    return any(_overlap(box, r.box) >= 0.5 * _area(box) for r in regions)


def _x_overlaps(row: list[Line], box: Box) -> bool:
    """Whether a row overlaps the figure horizontally by a third of the narrower of the two."""
    rx1, _, rx2, _ = bbox(row)
    overlap = min(rx2, box[2]) - max(rx1, box[0])
    return overlap >= min(rx2 - rx1, box[2] - box[0]) / 3


def _peel_edges(figure: PageFigure, captions: Sequence[Region]) -> list[Line]:
    """Take back out of the figure the rows its (loose) region swallowed at its top or bottom
    edge: a caption (a row that starts like one, or lies in a caption region) becomes the
    figure's caption, and rows of body text (:data:`BODY_WORDS` words or more) are returned to
    the body. The figure's box then ends short of them."""
    released: list[Line] = []
    while figure.inside:
        inside_rows = rows(figure.inside)
        x1, y1, x2, y2 = figure.box
        for index in (-1, 0):  # the bottom row first: captions sit below figures more often
            row = inside_rows[index]
            words = sum(len(l.text.split()) for l in row)
            if not figure.caption and (_starts_caption(row) or _in_region(row, captions)):
                figure.caption = list(row)
            elif words >= BODY_WORDS:
                released.extend(row)
            else:
                continue
            peeled = {id(l) for l in row}
            figure.inside = [l for l in figure.inside if id(l) not in peeled]
            ry1, ry2 = min(l.y1 for l in row), max(l.y2 for l in row)
            figure.box = (x1, y1, x2, max(y1, ry1)) if index == -1 else (x1, min(y2, ry2), x2, y2)
            break
        else:
            break
    if figure.caption and released:
        # A caption of several rows: the rows released below (or above) it continue it.
        edge = sorted(rows(figure.caption + released), key=lambda r: min(l.y1 for l in r))
        start = next(i for i, r in enumerate(edge) if any(l in figure.caption for l in r))
        h = statistics.median(l.height for l in figure.caption)
        below_caption = figure.caption[0].y1 >= figure.box[3] - 1
        figure.caption = _caption_rows(edge, start, 1 if below_caption else -1, h)
        kept = {id(l) for l in figure.caption}
        released = [l for l in released if id(l) not in kept]
    return released


def _caption_rows(candidates: list[list[Line]], start: int, step: int, h: float) -> list[Line]:
    """The caption paragraph beginning at ``candidates[start]``, going on in direction ``step``
    (+1 down, -1 up) while the rows keep the same size and no paragraph gap opens."""
    first = candidates[start]
    size = statistics.median(l.height for l in first)
    taken = [first]
    i = start + step
    while 0 <= i < len(candidates) and len(taken) < CAPTION_MAX_ROWS:
        row, prev = candidates[i], taken[-1]
        gap = ((min(l.y1 for l in row) - max(l.y2 for l in prev)) if step > 0
               else (min(l.y1 for l in prev) - max(l.y2 for l in row)))
        row_size = statistics.median(l.height for l in row)
        if gap > Y_GAP * h or max(row_size, size) / min(row_size, size) >= SIZE_SPLIT:
            break
        taken.append(row)
        i += step
    return [l for row in taken for l in row]


def _find_caption(figure: PageFigure, free: list[Line], captions: Sequence[Region], h: float) -> list[Line]:
    """The caption lines beside ``figure`` among ``free`` lines (not inside any figure)."""
    _, y1, _, y2 = figure.box
    column = [l for l in free if _x_overlaps([l], figure.box)]
    candidates = rows(column)
    below = [i for i, r in enumerate(candidates) if 0 <= min(l.y1 for l in r) - y2 + 0.5 * h <= (CAPTION_GAP + 0.5) * h]
    above = [i for i, r in enumerate(candidates) if 0 <= y1 - max(l.y2 for l in r) + 0.5 * h <= (CAPTION_GAP + 0.5) * h]
    for index, step in ((below[0] if below else None, 1), (above[-1] if above else None, -1)):
        if index is None:
            continue
        row = candidates[index]
        if _starts_caption(row) or _in_region(row, captions):
            return _caption_rows(candidates, index, step, h)
    return []


def _keep_drawing(figure: PageFigure, page: np.ndarray, paper: np.ndarray, h: float) -> bool:
    """Fit ``figure`` to what is drawn in its region, and say whether it is a figure at all.

    The figure becomes the box around its drawing (:func:`.drawing.drawing_box`: ink that is no
    text line, in strokes at least a line tall and wide) and the text lines within a line height
    of it (axis labels and legends sit beside the strokes); lines farther away leave the figure
    (a column of text the model's region swallowed beside a plot). It is no figure when nothing
    is drawn, or when most of the ink in its box, ruled lines aside, is text lines
    (:data:`.drawing.TEXT_SHARE`): a page, a table, a ruled form or a column of numbers the
    model took for a figure.
    """
    words = [l for l in figure.inside if has_word(l)]
    drawn = drawing_box(page, figure.box, words, paper, h)
    if drawn is None:
        return False
    near = (drawn[0] - h, drawn[1] - h, drawn[2] + h, drawn[3] + h)
    figure.inside = [l for l in figure.inside if is_inside(l, near)]
    box = _union(drawn, bbox(figure.inside)) if figure.inside else drawn
    if text_share(page, box, [l for l in figure.inside if has_word(l)], paper, h) >= TEXT_SHARE:
        return False
    # Text counted inside may reach out of the drawing a little: the crop keeps it whole.
    figure.box = box
    return True


def find_figures(
    lines: Sequence[Line],
    regions: Sequence[Region],
    *,
    page: np.ndarray | None = None,
    min_score: float = 0.5,
) -> tuple[list[PageFigure], list[Line]]:
    """The figures of a page and the lines left for the body text.

    ``regions`` come from the layout model, ``lines`` from the OCR, both in pixels of the same
    image; ``page`` (height x width x 3 ``uint8``), when given, fits each figure to what is
    drawn in it and keeps as text a region with nothing drawn or mostly text (:func:`_keep_drawing`).
    Returns the figures (top to bottom) and the lines that are neither inside a figure nor a
    caption, in their original order; the lines inside a figure that fills the page
    (:data:`PAGE_SHARE`, known only with ``page``) are in both.
    """
    figure_regions = _merge_nested([r for r in regions if r.label == FIGURE and r.score >= min_score])
    caption_regions = [r for r in regions if r.label == FIGURE_CAPTION and r.score >= min_score]
    if not figure_regions:
        return [], list(lines)
    paper = background(page) if page is not None else None
    text = [l for l in lines if l.text.strip()]
    h = body_line_height(text) if text else 1.0
    figures: list[PageFigure] = []
    taken: set[int] = set()
    for region in sorted(figure_regions, key=lambda r: (r.box[1], r.box[0])):
        figure = PageFigure(region.box, region.score, label=region.label)
        figure.inside = [l for l in text if id(l) not in taken and is_inside(l, region.box)]
        _peel_edges(figure, caption_regions)  # released rows stay free: the body keeps them
        if page is not None and paper is not None and not _keep_drawing(figure, page, paper, h):
            continue  # nothing drawn there, or mostly text: its lines stay body text
        if page is not None:
            figure.fills_page = _area(figure.box) >= PAGE_SHARE * page.shape[0] * page.shape[1]
        taken.update(id(l) for l in figure.inside + figure.caption)
        figures.append(figure)
    for figure in figures:
        if not figure.caption:
            free = [l for l in text if id(l) not in taken]
            figure.caption = _find_caption(figure, free, caption_regions, h)
            taken.update(id(l) for l in figure.caption)
    shown = {id(l) for f in figures if f.fills_page for l in f.inside}
    body = [l for l in lines if id(l) not in taken or id(l) in shown]
    return figures, body
