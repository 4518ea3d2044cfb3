"""Crops of known pages: where a received image lies on a corpus page, and what it shows of it.

A client that reads a dense page in tiles or bands (any family) sends rectangles cut from the page's image. The
simulated model answers such a crop with the text of that region of the page, as a model reads
what it is shown: the lines of each block that lie (mostly) inside it, with boxes relative to
the crop.

Where the crop lies is found by normalised cross-correlation of the crop, shrunk to the scale of
the page's stored grey image, against that image (numpy FFTs). The crop's scale is the client's
rendering scale, which the simulator is told (``--render-dpi``, llm-ocr's own default of 144,
with llm-ocr's rule that a page is rendered at least 640 pixels on its longer side): a crop of
``w`` pixels at 144 DPI is ``w / 2`` points of the page; and at the scale of the family's own
page image (its recipe's rendering: olmOCR-2's 1,288 pixels on the longer side). A crop of a
page rendered at another scale is not found, and is answered as an unknown image.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from llm_ocr.vlm.box import Box
from llm_ocr.vlm.families.base import Rendering

from .corpus import KnownPage, LayoutBlock, soften

if TYPE_CHECKING:
    import numpy as np

#: A crop is found when its correlation with the page region is at least this. Both images are
#: softened first (:func:`~.corpus.soften`), so that a crop's edge falling between two pixels of the
#: stored page costs little. Measured on tiles of a 7-column page at 36, 72 and 144 DPI: 0.85 to
#: 0.98 on their own page, at most 0.76 on another page of the same layout, under 0.2 on others.
MIN_CORRELATION = 0.8
#: Pages on which a crop correlates at least this at half resolution are compared in full ...
COARSE_CORRELATION = 0.5
#: ... the best this many of them (measured at half resolution: 0.80-0.88 on the crop's own
#: page, 0.63-0.76 on another page of the same layout, under 0.42 on other pages).
COARSE_KEEP = 3
#: A crop within this share of the whole page in both directions is a whole page, not a crop.
WHOLE_PAGE = 0.97
#: Fewest pixels a shrunk crop may have on a side to be looked for (smaller says too little).
MIN_SIDE = 8
#: llm-ocr renders a PDF page at least this many pixels on its longer side (``--min-page-side``).
MIN_PAGE_SIDE = 640
#: llm-ocr's default ``--max-page-pixels``: a family without its own cap has pages rendered within it.
CLIENT_MAX_PIXELS = 12_000_000
#: A line of a block is in a crop when at least this share of its height and of its width is.
LINE_INSIDE = 0.5
#: A figure is in a crop when at least this share of its area is (its box is then clipped).
FIGURE_INSIDE = 0.3


@dataclass(frozen=True)
class Crop:
    """A received image found on a known page: the page and the region (page fractions)."""

    page: KnownPage
    region: Box
    correlation: float


def page_scale(size_pt: tuple[float, float], dpi: float) -> float:
    """Pixels per point of a page rendered at ``dpi`` as llm-ocr renders PDF pages: ``dpi / 72``,
    raised so that the longer side has at least :data:`MIN_PAGE_SIDE` pixels."""
    scale = dpi / 72
    long_side = max(size_pt)
    if 0 < long_side * scale < MIN_PAGE_SIDE:
        scale = MIN_PAGE_SIDE / long_side
    return scale


def client_scales(page: KnownPage, width: int, height: int, dpi: float) -> list[float]:
    """The scales (pixels per point) a ``width`` x ``height`` crop of ``page`` may have been
    rendered at: the page's at ``dpi``, and those of a piece as wide or as tall as the page (the
    segments of a long page, each rendered from the source at its own resolution)."""
    scales = [page_scale(page.size_pt, dpi)]
    for side, size in ((width, page.size_pt[0]), (height, page.size_pt[1])):
        if size > 0 and all(abs(side / size - s) > 0.01 * s for s in scales):
            scales.append(side / size)
    return scales


def family_scale(size_pt: tuple[float, float], rendering: Rendering) -> float:
    """Pixels per point of a page rendered as a family's recipe renders it (llm-ocr's rules,
    ``llm_ocr/sources/render.py``): ``long_side`` pixels on the longer side, else ``dpi / 72``;
    capped at ``max_long_side``; raised to :data:`MIN_PAGE_SIDE`; capped at ``max_pixels``
    (:data:`CLIENT_MAX_PIXELS` for a family without its own cap)."""
    width, height = size_pt
    long_side = max(size_pt)
    if not long_side:
        return rendering.dpi / 72
    scale = rendering.long_side / long_side if rendering.long_side else rendering.dpi / 72
    if rendering.max_long_side and long_side * scale > rendering.max_long_side:
        scale = rendering.max_long_side / long_side
    if long_side * scale < MIN_PAGE_SIDE:
        scale = MIN_PAGE_SIDE / long_side
    limit = rendering.max_pixels or CLIENT_MAX_PIXELS
    if width * height * scale * scale > limit:
        scale = math.sqrt(limit / (width * height))
    return scale


def locate(
    image: Any, width: int, height: int, pages: list[KnownPage], dpi: float, rendering: Rendering | None = None
) -> Crop | None:
    """The known page ``image`` (a PIL image of ``width`` x ``height`` pixels) is a crop of,
    and where; None when it is none of theirs (or a whole page). The crop is looked for at the
    :func:`client_scales` (the page at ``dpi``, a piece as wide or as tall as the page) and,
    given a family's ``rendering``, at the scale of its own page image (olmOCR-2's 1,288 pixels
    on the longer side).

    Every page that could hold the crop is first compared at half the stored resolution (a few
    milliseconds each); the few that correlate at least :data:`COARSE_CORRELATION` there are
    compared at the full stored resolution, where :data:`MIN_CORRELATION` decides.
    """
    import numpy as np
    from PIL import Image

    grey = image.convert("L")
    shrunk: dict[tuple[int, int], np.ndarray] = {}

    def crop_at(w: int, h: int) -> np.ndarray:
        if (w, h) not in shrunk:
            shrunk[(w, h)] = np.asarray(soften(grey.resize((w, h), Image.Resampling.BOX)), dtype=np.float64)
        return shrunk[(w, h)]

    candidates: list[tuple[float, int, KnownPage, int, int]] = []
    for number, page in enumerate(pages):
        scales = set(client_scales(page, width, height, dpi)) if page.size_pt[0] else set()
        if rendering is not None and page.size_pt[0]:
            scales.add(family_scale(page.size_pt, rendering))
        for client in sorted(scales):
            size = _crop_size(page, page.grey.shape if page.grey is not None else None, width, height, client)
            if size is None:
                continue
            coarse = _coarse(page)
            small = _crop_size(page, coarse.shape, width, height, client, whole_ok=True)
            if small is None or min(small) < MIN_SIDE:
                continue
            score = _best_match(coarse, crop_at(*small))[0]
            if score >= COARSE_CORRELATION:
                candidates.append((score, number, page, *size))
    best: Crop | None = None
    for _, _, page, w, h in sorted(candidates, reverse=True)[:COARSE_KEEP]:
        rows, cols = page.grey.shape
        score, y, x = _best_match(page.grey.astype(np.float64), crop_at(w, h))
        if score >= MIN_CORRELATION and (best is None or score > best.correlation):
            best = Crop(page, Box(x / cols, y / rows, (x + w) / cols, (y + h) / rows), score)
    return best


def _crop_size(
    page: KnownPage, shape: tuple[int, int] | None, width: int, height: int, client: float, whole_ok: bool = False
) -> tuple[int, int] | None:
    """``(w, h)``: a ``width`` x ``height`` crop (rendered at ``client`` pixels per point) in the
    pixels of an image of ``page`` of ``shape``; None when it cannot be a crop of it (larger, or
    the whole page)."""
    if shape is None or not page.size_pt[0]:
        return None
    rows, cols = shape
    stored = cols / page.size_pt[0]  # pixels per point of the image
    w, h = round(width * stored / client), round(height * stored / client)
    if w > cols + 2 or h > rows + 2:
        return None
    w, h = min(w, cols), min(h, rows)  # a crop as wide as the page, give or take rounding
    if not whole_ok and w >= WHOLE_PAGE * cols and h >= WHOLE_PAGE * rows:
        return None
    return w, h


_COARSE: dict[int, Any] = {}  # id(page) -> its grey image at half the resolution


def _coarse(page: KnownPage) -> np.ndarray:
    import numpy as np
    from PIL import Image

    found = _COARSE.get(id(page))
    if found is None:
        rows, cols = page.grey.shape
        half = Image.fromarray(page.grey).resize((max(1, cols // 2), max(1, rows // 2)), Image.Resampling.BOX)
        found = _COARSE[id(page)] = np.asarray(half, dtype=np.float64)
    return found


def _best_match(page: np.ndarray, crop: np.ndarray) -> tuple[float, int, int]:
    """``(correlation, top, left)`` of the position where ``crop`` matches ``page`` best
    (normalised cross-correlation over every position where it fits)."""
    import numpy as np

    rows, cols = page.shape
    h, w = crop.shape
    if h > rows or w > cols:
        return 0.0, 0, 0
    t = crop - crop.mean()
    t_norm = float(np.sqrt((t * t).sum()))
    if t_norm == 0.0:  # a blank crop matches every blank region equally: it is not located
        return 0.0, 0, 0
    shape = (_fast_length(rows), _fast_length(cols))
    # Cross-correlation as a product of spectra; positions where the crop fits do not wrap.
    corr = np.fft.irfft2(np.fft.rfft2(page, shape) * np.conj(np.fft.rfft2(t, shape)), shape)[: rows - h + 1,
                                                                                             : cols - w + 1]
    # The page's sum and sum of squares under the crop at each position (integral images).
    s1 = _window_sums(page, h, w)
    s2 = _window_sums(page * page, h, w)
    spread = np.sqrt(np.maximum(s2 - s1 * s1 / (h * w), 0.0))
    with np.errstate(divide="ignore", invalid="ignore"):
        score = np.where(spread > 1e-6, corr / (spread * t_norm), 0.0)
    y, x = np.unravel_index(int(np.argmax(score)), score.shape)
    return float(score[y, x]), int(y), int(x)


def _fast_length(n: int) -> int:
    """The smallest length >= ``n`` whose only prime factors are 2, 3 and 5 (a fast FFT size)."""
    while True:
        m = n
        for p in (2, 3, 5):
            while m % p == 0:
                m //= p
        if m == 1:
            return n
        n += 1


def _window_sums(values: np.ndarray, h: int, w: int) -> np.ndarray:
    import numpy as np

    table = np.zeros((values.shape[0] + 1, values.shape[1] + 1))
    table[1:, 1:] = values.cumsum(0).cumsum(1)
    return table[h:, w:] - table[:-h, w:] - table[h:, :-w] + table[:-h, :-w]


def region_blocks(blocks: list[LayoutBlock], region: Box) -> list[LayoutBlock]:
    """What a crop of ``region`` (page fractions) shows of a page's blocks, with boxes as
    fractions of the crop: the lines of each block mostly inside it, the figures partly in it."""
    out = []
    for block in blocks:
        box = Box(*block.box)
        if block.lines:
            lines = [(Box(*b), text) for b, text in block.lines if _inside(Box(*b), region, LINE_INSIDE, LINE_INSIDE)]
            if not lines:
                continue
            shown = Box.union(b for b, _ in lines).clipped(region)
            out.append(LayoutBlock(block.label, shown.within(region), " ".join(t for _, t in lines)))
        elif block.label == "image" or not block.text:
            clipped = box.clipped(region)
            if clipped.area >= FIGURE_INSIDE * max(box.area, 1e-12):
                out.append(LayoutBlock(block.label, clipped.within(region), block.text))
        elif region.x1 <= box.centre[0] <= region.x2 and region.y1 <= box.centre[1] <= region.y2:
            out.append(LayoutBlock(block.label, box.clipped(region).within(region), block.text))
    return out


def _inside(box: Box, region: Box, height_share: float, width_share: float) -> bool:
    """Whether at least ``height_share`` of ``box``'s height and ``width_share`` of its width
    lie inside ``region``."""
    inside = box.clipped(region)
    return inside.height >= height_share * box.height and inside.width >= width_share * box.width and inside.area > 0
