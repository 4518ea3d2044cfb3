"""Crops of known pages: where a received image lies on a corpus page, and what it shows of it.

A client that reads a dense page in tiles or bands (any family) sends rectangles cut from the page's image. The
simulated model answers such a crop with the text of that region of the page, as a model reads
what it is shown: the lines of each block that lie (mostly) inside it, with boxes relative to
the crop.

Where the crop lies is found by normalised cross-correlation of the crop, shrunk to the scale of
the page's stored grey image, against that image (numpy FFTs). The crop's scale is the client's
rendering scale, which the simulator is told (``--render-dpi``, llm-ocr's own default of 144,
with llm-ocr's rule that a page is rendered at least 640 pixels on its longer side): a crop of
``w`` pixels at 144 DPI is ``w / 2`` points of the page; at the scale of the family's own page
image (its recipe's rendering: olmOCR-2's 1,288 pixels on the longer side); and at the scale
the family's published rule gives the piece read as a page of its own (:func:`rule_scales`: its
DPI, or, where the rule leaves the scale free, a search over scales: LightOnOCR-3 sizes every
image by its longest side). A piece resized to another shape (MinerU2.5's square layout pass)
is looked for as a piece spanning a long page's width (:func:`locate_reshaped`). A piece of a
family whose client rounds each side to a multiple (``Rendering.multiple``: Infinity-Parser2's 32
px, GLM-OCR's and Surya's 28) that is not found so is looked for again at the sizes it may have
had before that rounding stretched it, half a multiple either way on each side. A crop found at
none of these is answered as an unknown image.
"""

from __future__ import annotations

import math
import threading
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
#: A piece whose scale its family's rule leaves free (:func:`rule_scales`: its longer side within
#: this share of the rule's cap, or its pixels at least :data:`RULE_PIXELS_SHARE` of the cap) ...
RULE_SIDE_SLACK = 0.01
RULE_PIXELS_SHARE = 0.97
#: ... is searched for at scales this factor apart at half resolution (a 3% step: the crop is at
#: most 1.5% off, which blurs, but keeps, its peak) ...
SEARCH_STEP = 1.03
#: ... down to a shorter side of this many half-resolution pixels and an area of this many (a
#: smaller crop says too little: a few lines of a column, 10 x 40 pixels, correlate well with
#: many places of a page of text; a masthead's one line of large type, 100 x 24, is enough) ...
SEARCH_MIN_SIDE = 12
SEARCH_MIN_AREA = 1024
#: ... keeping the scales where the correlation peaks at least this high there (lower than
#: :data:`COARSE_CORRELATION`: the right scale may be 1.5% off), the best this many of a page
#: (a small crop of a page of text correlates fairly well with many places of it: its true
#: scale is not always the highest peak at half resolution, but is at full resolution) ...
SEARCH_CORRELATION = 0.4
SEARCH_PEAKS = 5
#: ... the best :data:`REFINED_PEAKS` of them refined at full resolution in steps of this factor,
#: this many either side (the half-resolution step's width: at full resolution the peak is a
#: few tenths of a percent wide, and the half-resolution one may be 3% off it).
REFINE_STEP = 1.005
REFINE_STEPS = 6
REFINED_PEAKS = 2
#: A searched piece found on a page at least this well is taken without searching the other
#: pages (the pages it was last found on are searched first: a page's pieces come together).
SEARCH_SURE = 0.9
#: A piece resized to another shape is looked for on pages at least this many times as long as
#: wide (the pages a client reads in pieces that span their width) ...
RESHAPED_PAGE_ASPECT = 2.0
#: ... from a length this share of the page's width (a segment cut in two; shorter, a few lines
#: of text match anywhere) to this many times it (or the whole page).
RESHAPED_SHORTEST = 0.5
RESHAPED_LONGEST = 8.0
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


def client_scales(page: KnownPage, width: float, height: float, dpi: float) -> list[float]:
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


def rule_scales(rendering: Rendering, width: int, height: int) -> tuple[list[float], bool]:
    """What a family's published rendering rule, applied to a piece of a page as to a page of its
    own, says of the scale of a ``width`` x ``height`` piece: ``(scales, free)``. A family that
    renders at a DPI renders a piece at it (``dpi / 72``: a piece is under the caps its page may
    reach), unless the piece's pixels show a cap (its longer side ``max_long_side``, its pixels
    at the pixel cap): then it may have been any size in points, and its scale is ``free``. So is
    every piece of a family that sizes images by their longer side (``long_side``): a piece is
    rendered that long whatever its size in points, and a part of such a piece (cut in two when
    its image would not fit the context beside the answer) keeps its scale. A free scale is
    searched for (:func:`_search`)."""
    if rendering.long_side:
        return [], True
    long = max(width, height)
    limit = rendering.max_pixels or CLIENT_MAX_PIXELS
    capped = bool(rendering.max_long_side) and abs(long - (rendering.max_long_side or 0)) <= RULE_SIDE_SLACK * long
    return [rendering.dpi / 72], capped or width * height >= RULE_PIXELS_SHARE * limit


def locate(
    image: Any, width: int, height: int, pages: list[KnownPage], dpi: float, rendering: Rendering | None = None
) -> Crop | None:
    """The known page ``image`` (a PIL image of ``width`` x ``height`` pixels) is a crop of,
    and where; None when it is none of theirs (or a whole page). The crop is looked for at the
    :func:`client_scales` (the page at ``dpi``, a piece as wide or as tall as the page) and,
    given a family's ``rendering``, at the scale of its own page image (olmOCR-2's 1,288 pixels
    on the longer side) and at the scale its rule gives a piece rendered as a page of its own
    (:func:`rule_scales`: its DPI; or, for a piece sized by its longer side or pixel count, a
    search over scales, :func:`_search`). A family's piece its client stretched to a multiple
    (``rendering.multiple``) is looked for at its sizes before the stretch when not found as it is.

    Every page that could hold the crop is first compared at half the stored resolution (a few
    milliseconds each); the few that correlate at least :data:`COARSE_CORRELATION` there are
    compared at the full stored resolution, where :data:`MIN_CORRELATION` decides.
    """
    import numpy as np
    from PIL import Image

    levels = [image.convert("L")]  # the crop, then halved while more than twice the size asked
    shrunk: dict[tuple[int, int], np.ndarray] = {}

    def crop_at(w: int, h: int) -> np.ndarray:
        if (w, h) not in shrunk:
            level = 0
            while levels[level].width >= 4 * w and levels[level].height >= 4 * h:
                if level + 1 == len(levels):
                    levels.append(levels[level].reduce(2))
                level += 1
            shrunk[(w, h)] = np.asarray(soften(levels[level].resize((w, h), Image.Resampling.BOX)), dtype=np.float64)
        return shrunk[(w, h)]

    ruled, free = rule_scales(rendering, width, height) if rendering is not None else ([], False)

    def at(sizes: list[tuple[float, float]]) -> Crop | None:
        candidates: list[tuple[float, int, KnownPage, int, int]] = []
        for number, page in enumerate(pages):
            for w, h in sizes:
                scales = set(client_scales(page, w, h, dpi)) if page.size_pt[0] else set()
                if rendering is not None and page.size_pt[0]:
                    scales.add(family_scale(page.size_pt, rendering))
                    scales.update(ruled)
                for client in sorted(scales):
                    found = _coarse_score(page, w, h, client, crop_at)
                    if found is not None and found[0] >= COARSE_CORRELATION:
                        candidates.append((found[0], number, page, *found[1]))
        return _best_crop(candidates, crop_at)

    best = at([(width, height)])
    if best is None and rendering is not None and rendering.multiple:
        # The family's client rounded each side to a multiple (Infinity-Parser2's 32 px): the
        # piece is stretched by up to half a multiple either way; look for it as it was before.
        half = rendering.multiple / 2
        best = at([(width + dw, height + dh) for dw in (-half, 0, half) for dh in (-half, 0, half) if dw or dh])
    if best is None and free:
        # One search at a time: a page's pieces arrive together, and the first one found puts
        # its page first for the others (searched at once, each would scan every page).
        with _SEARCH_LOCK:
            best = _search(pages, width, height, crop_at)
    return best


def locate_reshaped(image: Any, width: int, height: int, pages: list[KnownPage]) -> Crop | None:
    """The known page ``image`` is a piece of, resized to another shape (MinerU2.5's layout pass
    sends every image it reads as a 1036 x 1036 square), and where; None when it is none of
    theirs. Only a piece that spans a long page's width (or a wide page's height) is looked for:
    a segment of a page at least :data:`RESHAPED_PAGE_ASPECT` times as long as wide, the pieces a
    client cuts such a page into. Its other side is searched for (:func:`_search_span`)."""
    import numpy as np
    from PIL import Image

    grey = image.convert("L")
    across: dict[int, Any] = {}  # the piece resized across only, to each width asked
    shrunk: dict[tuple[int, int], np.ndarray] = {}

    def crop_at(w: int, h: int) -> np.ndarray:
        if (w, h) not in shrunk:
            # In two passes, across then down, as PIL resizes (across first): the search asks
            # for tens of lengths at one width, and each then resizes a narrow image, not the
            # whole square.
            if w not in across:
                across[w] = grey.resize((w, grey.height), Image.Resampling.BOX)
            shrunk[(w, h)] = np.asarray(soften(across[w].resize((w, h), Image.Resampling.BOX)), dtype=np.float64)
        return shrunk[(w, h)]

    best: Crop | None = None
    for page in pages:
        if page.grey is None or not page.size_pt[0]:
            continue
        rows, cols = page.grey.shape
        if max(rows, cols) < RESHAPED_PAGE_ASPECT * min(rows, cols):
            continue
        found = _search_span(page, crop_at, tall=rows > cols)
        if found is not None and (best is None or found.correlation > best.correlation):
            best = found
    return best


def _search_span(page: KnownPage, crop_at: Any, tall: bool) -> Crop | None:
    """A resized piece spanning ``page``'s width (``tall``; else its height): its length along
    the page, from :data:`RESHAPED_SHORTEST` to :data:`RESHAPED_LONGEST` times its breadth in steps of
    :data:`SEARCH_STEP` at half resolution, the best :data:`SEARCH_PEAKS` peaks compared at full
    resolution and the best refined there (:data:`REFINE_STEP`)."""
    rows, cols = page.grey.shape

    def fine(share: float) -> Crop | None:
        w, h = (cols, round(share * rows)) if tall else (round(share * cols), rows)
        if min(w, h) < MIN_SIDE or w > cols or h > rows:
            return None
        score, y, x = _best_match(_fine(page), crop_at(w, h))
        return Crop(page, Box(x / cols, y / rows, (x + w) / cols, (y + h) / rows), score)

    # A long page's pieces come together and are mostly of one length: first the lengths last
    # found on this page, refined across a step; one matched :data:`SEARCH_SURE` is taken (13
    # correlations, not the scan's ~100 and the peaks' refining).
    with _CACHE_LOCK:
        recent = list(_RECENT_SPANS.get(id(page), ()))
    for share in recent:
        near = [c for c in (fine(share * REFINE_STEP**step) for step in range(-REFINE_STEPS, REFINE_STEPS + 1))
                if c is not None]
        top = max(near, key=lambda c: c.correlation, default=None)
        if top is not None and top.correlation >= SEARCH_SURE:
            return _remember_span(page, top, tall)
    coarse = _coarse(page)
    c_rows, c_cols = coarse.shape
    breadth, length = (c_cols, c_rows) if tall else (c_rows, c_cols)
    span = RESHAPED_SHORTEST * breadth
    scored: list[tuple[float, float]] = []  # (score, length as a share of the page's)
    while span < min(WHOLE_PAGE * length, RESHAPED_LONGEST * breadth):
        shape = (round(span), breadth) if tall else (breadth, round(span))
        scored.append((_best_match(coarse, crop_at(shape[1], shape[0]))[0], span / length))
        span *= SEARCH_STEP
    peaks = [share for i, (score, share) in enumerate(scored)
             if score >= SEARCH_CORRELATION and score >= max(s for s, _ in scored[max(0, i - 1): i + 2])]
    peaks = [share for _, share in sorted(((s, c) for s, c in scored if c in peaks), reverse=True)[:SEARCH_PEAKS]]
    found = [c for c in (fine(share) for share in peaks) if c is not None]
    if not found:
        return None
    top = max(found, key=lambda c: c.correlation)
    if len(found) == len(peaks):
        centre = peaks[found.index(top)]
        refined = [fine(centre * REFINE_STEP**step) for step in range(-REFINE_STEPS, REFINE_STEPS + 1) if step]
        top = max([top, *(c for c in refined if c is not None)], key=lambda c: c.correlation)
    return _remember_span(page, top, tall) if top.correlation >= MIN_CORRELATION else None


#: id() of a long page -> the lengths (shares of the page's) of the resized pieces last found on
#: it, the latest first, at most :data:`RECENT_SPANS` of them.
_RECENT_SPANS: dict[int, list[float]] = {}
RECENT_SPANS = 2


def _remember_span(page: KnownPage, crop: Crop, tall: bool) -> Crop:
    """``crop``, its length along ``page`` remembered as the first to try for the next piece."""
    share = crop.region.height if tall else crop.region.width
    with _CACHE_LOCK:
        kept = [s for s in _RECENT_SPANS.get(id(page), []) if abs(s / share - 1) > REFINE_STEP - 1]
        _RECENT_SPANS[id(page)] = [share, *kept][:RECENT_SPANS]
    return crop


def _coarse_score(
    page: KnownPage, width: float, height: float, client: float, crop_at: Any
) -> tuple[float, tuple[int, int]] | None:
    """The half-resolution correlation of a crop rendered at ``client`` pixels per point with
    ``page``, and its size in the stored image's pixels; None when it cannot be a crop of it."""
    size = _crop_size(page, page.grey.shape if page.grey is not None else None, width, height, client)
    if size is None:
        return None
    coarse = _coarse(page)
    small = _crop_size(page, coarse.shape, width, height, client, whole_ok=True)
    if small is None or min(small) < MIN_SIDE:
        return None
    return _best_match(coarse, crop_at(*small))[0], size


def _best_crop(
    candidates: list[tuple[float, int, KnownPage, int, int]], crop_at: Any, keep: int = COARSE_KEEP
) -> Crop | None:
    """Of the best ``keep`` ``(coarse score, page number, page, w, h)`` candidates,
    the one that correlates best at full resolution, if at least :data:`MIN_CORRELATION`."""
    best: Crop | None = None
    for _, _, page, w, h in sorted(candidates, key=lambda c: (c[0], c[1], c[3]), reverse=True)[:keep]:
        rows, cols = page.grey.shape
        score, y, x = _best_match(_fine(page), crop_at(w, h))
        if score >= MIN_CORRELATION and (best is None or score > best.correlation):
            best = Crop(page, Box(x / cols, y / rows, (x + w) / cols, (y + h) / rows), score)
    return best


def _search(pages: list[KnownPage], width: int, height: int, crop_at: Any) -> Crop | None:
    """A piece whose scale its family's rule leaves free, looked for over scales: from the one
    where it spans its page's width or height, in steps of :data:`SEARCH_STEP`, until on the
    half-resolution page its shorter side is under :data:`SEARCH_MIN_SIDE` pixels or its area
    under :data:`SEARCH_MIN_AREA`. The scales where the half-resolution correlation peaks (the
    best :data:`SEARCH_PEAKS` of a page) are compared at full resolution, the best
    :data:`REFINED_PEAKS` of them across a step in steps of :data:`REFINE_STEP` (at half
    resolution a scale 1% off can score higher than the right one). Tens of
    half-resolution correlations a page: only for pieces no fixed scale finds. The pages a
    piece was last found on are searched first, and a match of :data:`SEARCH_SURE` ends the
    search (a corpus of many pages costs tens of correlations a page for every piece). Before
    any scan, the scales pieces were last found at on the latest of them are tried (:func:`_known_scale`)."""
    with _CACHE_LOCK:
        recent = list(_RECENT)
    sure = _known_scale(next((p for p in pages if recent and id(p) == recent[0]), None), width, height, crop_at)
    if sure is not None:
        return sure
    best: Crop | None = None
    best_scale = 0.0
    order = {id(p): i for i, p in enumerate(pages)}
    for page in sorted(pages, key=lambda p: (recent.index(id(p)) if id(p) in recent else len(recent), order[id(p)])):
        if page.grey is None or not page.size_pt[0]:
            continue
        coarse_per_pt = _coarse(page).shape[1] / page.size_pt[0]
        scale = max(width / page.size_pt[0], height / page.size_pt[1])
        scored: list[tuple[float, float]] = []
        while min(width, height) * coarse_per_pt / scale >= SEARCH_MIN_SIDE and \
                width * height * (coarse_per_pt / scale) ** 2 >= SEARCH_MIN_AREA:
            got = _coarse_score(page, width, height, scale, crop_at)
            scored.append((got[0] if got is not None else 0.0, scale))
            scale *= SEARCH_STEP
        peaks = [
            scale for i, (score, scale) in enumerate(scored)
            if score >= SEARCH_CORRELATION and score >= max(s for s, _ in scored[max(0, i - 1): i + 2])
        ]
        peaks = [scale for _, scale in sorted(((s, c) for s, c in scored if c in peaks), reverse=True)[:SEARCH_PEAKS]]
        # The best half-resolution peaks refined across a step; the rest compared as they are.
        tried = [scale * REFINE_STEP**step for scale in peaks[:REFINED_PEAKS]
                 for step in range(-REFINE_STEPS, REFINE_STEPS + 1)] + peaks[REFINED_PEAKS:]
        found = [(c, scale) for c, scale in ((_fine_crop(page, width, height, scale, crop_at), scale)
                                             for scale in tried) if c is not None]
        if not found:
            continue
        top, top_scale = max(found, key=lambda c: c[0].correlation)
        if top.correlation >= MIN_CORRELATION and (best is None or top.correlation > best.correlation):
            best, best_scale = top, top_scale
        if best is not None and best.correlation >= SEARCH_SURE:
            break
    if best is not None:
        _remember(best, best_scale)
    return best


def _known_scale(page: KnownPage | None, width: int, height: int, crop_at: Any) -> Crop | None:
    """A piece found at a scale pieces were last found at on ``page`` (the page a piece was last
    found on): a page's pieces come together, mostly of a few sizes, each size at one scale.
    Each such scale is compared at full resolution as it is, then the latest across a step
    (:data:`REFINE_STEP`); a match of :data:`SEARCH_SURE` is taken: 1 to 15 correlations instead
    of a scan's tens at half resolution and its peaks' refining. None: scan."""
    if page is None:
        return None
    with _CACHE_LOCK:
        scales = list(_RECENT_SCALES.get(id(page), ()))
    tries = [[scale] for scale in scales] + [[scales[0] * REFINE_STEP**s for s in range(-REFINE_STEPS, REFINE_STEPS + 1)
                                              if s]] if scales else []
    for scaled in tries:
        found = [(c, scale) for scale in scaled if (c := _fine_crop(page, width, height, scale, crop_at)) is not None]
        top = max(found, key=lambda c: c[0].correlation, default=None)
        if top is not None and top[0].correlation >= SEARCH_SURE:
            _remember(*top)
            return top[0]
    return None


def _remember(crop: Crop, scale: float) -> None:
    """``crop``'s page first of the pages to search, and ``scale`` first of its scales."""
    key = id(crop.page)
    with _CACHE_LOCK:
        if key in _RECENT:
            _RECENT.remove(key)
        _RECENT.insert(0, key)
        del _RECENT[PREPARED_PAGES:]
        kept = [s for s in _RECENT_SCALES.get(key, []) if abs(s / scale - 1) > REFINE_STEP - 1]
        _RECENT_SCALES[key] = [scale, *kept][:RECENT_SCALES]


#: id() of the pages searched pieces were last found on, the latest first.
_RECENT: list[int] = []
#: id() of a page -> the scales searched pieces were last found at on it, the latest first, at
#: most :data:`RECENT_SCALES` of them (a dense page's tiles, bands and their halves: a few sizes).
_RECENT_SCALES: dict[int, list[float]] = {}
RECENT_SCALES = 3
_SEARCH_LOCK = threading.Lock()


def _fine_crop(page: KnownPage, width: int, height: int, scale: float, crop_at: Any) -> Crop | None:
    """Where a crop rendered at ``scale`` pixels per point matches ``page`` best at full
    resolution, and how well (None when it cannot be a crop of it)."""
    size = _crop_size(page, page.grey.shape, width, height, scale)
    if size is None:
        return None
    w, h = size
    rows, cols = page.grey.shape
    score, y, x = _best_match(_fine(page), crop_at(w, h))
    return Crop(page, Box(x / cols, y / rows, (x + w) / cols, (y + h) / rows), score)


def _crop_size(
    page: KnownPage, shape: tuple[int, int] | None, width: float, height: float, client: float, whole_ok: bool = False
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
_FINE: dict[int, Any] = {}  # id(page) -> its grey image as floats (the most recent PREPARED_PAGES)


def _fine(page: KnownPage) -> np.ndarray:
    """The page's stored grey image as floats (kept, so that its spectrum is too)."""
    import numpy as np

    with _CACHE_LOCK:  # requests are analysed in worker threads
        found = _FINE.pop(id(page), None)
        if found is None:
            found = np.asarray(page.grey, dtype=np.float64)
        _FINE[id(page)] = found
        while len(_FINE) > PREPARED_PAGES:
            del _FINE[next(iter(_FINE))]
    return found


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
    spectrum, table, squares = _prepared(page)
    if w == cols:
        # The crop spans the page's width (a segment of a long page, a piece searched along a
        # strip): its positions are one column, and the correlation there is the sum of the 1-D
        # correlations down each column, one short inverse FFT instead of a 2-D one.
        length = _fast_length(rows)
        rows_spectrum = spectrum.get("rows")
        if rows_spectrum is None:
            rows_spectrum = spectrum["rows"] = np.fft.rfft(page, length, axis=0)
        summed = (rows_spectrum * np.conj(np.fft.rfft(t, length, axis=0))).sum(axis=1)
        corr = np.fft.irfft(summed, length)[: rows - h + 1, None]
    else:
        shape = (_fast_length(rows), _fast_length(cols))
        whole = spectrum.get("2d")
        if whole is None:
            whole = spectrum["2d"] = np.fft.rfft2(page, shape)
        # Cross-correlation as a product of spectra; positions where the crop fits do not wrap.
        corr = np.fft.irfft2(whole * np.conj(np.fft.rfft2(t, shape)), shape)[: rows - h + 1, : cols - w + 1]
    # The page's sum and sum of squares under the crop at each position (integral images).
    s1 = _window_sums(table, h, w)
    s2 = _window_sums(squares, h, w)
    spread = np.sqrt(np.maximum(s2 - s1 * s1 / (h * w), 0.0))
    with np.errstate(divide="ignore", invalid="ignore"):
        score = np.where(spread > 1e-6, corr / (spread * t_norm), 0.0)
    y, x = np.unravel_index(int(np.argmax(score)), score.shape)
    return float(score[y, x]), int(y), int(x)


#: Pages whose spectrum and integral images are kept (a scale search compares one page with
#: tens of crops): the most recently used this many.
PREPARED_PAGES = 8
_PREPARED: dict[int, tuple[np.ndarray, tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]]] = {}
_CACHE_LOCK = threading.Lock()


def _prepared(page: np.ndarray) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
    """What every correlation with ``page`` needs of it alone: its spectra at a fast FFT size
    (filled as they are first needed: ``"2d"``, and ``"rows"``, the 1-D spectrum of each column,
    for crops spanning the page's width), and the integral images of its values and of their
    squares."""

    key = id(page)
    with _CACHE_LOCK:
        found = _PREPARED.pop(key, None)
    if found is None or found[0] is not page:
        found = (page, ({}, _integral(page), _integral(page * page)))
    with _CACHE_LOCK:
        _PREPARED[key] = found  # the newest last
        while len(_PREPARED) > PREPARED_PAGES:
            del _PREPARED[next(iter(_PREPARED))]
    return found[1]


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


def _integral(values: np.ndarray) -> np.ndarray:
    """The integral image of ``values``: sums over every rectangle from the top left corner."""
    import numpy as np

    table = np.zeros((values.shape[0] + 1, values.shape[1] + 1))
    table[1:, 1:] = values.cumsum(0).cumsum(1)
    return table


def _window_sums(table: np.ndarray, h: int, w: int) -> np.ndarray:
    """The sums of the values under an ``h`` x ``w`` window at each position (from their integral image)."""
    return table[h:, w:] - table[:-h, w:] - table[h:, :-w] + table[:-h, :-w]


def region_blocks(blocks: list[LayoutBlock], region: Box) -> list[LayoutBlock]:
    """What a crop of ``region`` (page fractions) shows of a page's blocks, with boxes as
    fractions of the crop: the lines of each block mostly inside it, the figures partly in it."""
    out = []
    rx1, ry1, rx2, ry2 = region
    for block in blocks:
        box = Box(*block.box)
        if block.lines:
            # A line that does not overlap the region is never inside it (its clipped area is 0):
            # compared on the tuple first, as a long page's crop overlaps few of its thousand lines.
            lines = [(Box(*b), text) for b, text in block.lines
                     if b[0] < rx2 and b[2] > rx1 and b[1] < ry2 and b[3] > ry1
                     and _inside(Box(*b), region, LINE_INSIDE, LINE_INSIDE)]
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
