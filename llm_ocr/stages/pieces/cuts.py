"""Dense pages cut into overlapping tiles whose edges fall in the page's whitespace.

A page whose text is longer than one answer may hold is read in tiles, each a request whose
answer fits (:mod:`.plan`). The tiles form a grid of about ``count`` tiles as
square as the page allows:

- **bands** across the page, each cut at the whitespace between two text lines nearest to an
  even split, reaching ``tile_line_reach`` line pitches (the page's, measured on its ink)
  into the next: a line the cut grazes, in a column whose lines do not line up with the cut, is
  whole in one of the two. What two bands both show is read twice and costs tokens twice, so the
  overlap is under a line, not a share of the page (bands read whole across the page, joined by
  the text their overlap repeats, reach ``line_reach``, a line and a half); a page whose line pitch cannot be
  measured keeps the older rule, ``overlap`` of a band and at least ``min_overlap`` of
  the page's height;
- each band split into **columns** at its gutters only: the widest runs of blank columns within
  that band near an even split (the nearest of equally wide ones). A band without a gutter near
  a split stays wider: a cut through a text column would halve every line. Multi-column pages thus come apart between
  their columns,
  and the tiles' answers are put back in reading order by their boxes.

The page's ink is measured on a grey copy at most ``analysis_side`` pixels long; tiles are
returned in page pixels as :class:`~llm_ocr.sources.segments.Segment` (band by band, left to right).

A family whose answers carry no boxes reads a dense page in **bands** instead
(:func:`plan_bands`: the same cuts between text lines, full width; a page with columns column by
column, each in bands down it, :mod:`.columns`), joined by the text their overlap
repeats. A piece (tile, band or segment) whose answer still ran to ``max_tokens`` is cut
in two again (:func:`split_piece`) while its halves can be read at all (``min_cut_side``):
the server's answer decides whether. The ink decides only where: at a gutter when a tile is
wider than tall and has one, else between two text lines near its middle, else (no lines
found, or too few for the piece's size: a scan whose noise or merged lines hide them) by
pixels, at the blankest row near its middle.
"""

from __future__ import annotations

import io
import math
from collections.abc import Callable
from itertools import pairwise
from typing import Any

from llm_ocr.options import dense
from llm_ocr.sources.density import line_pitch as line_pitch_of_rows
from llm_ocr.sources.segments import Segment
from llm_ocr.sources.wide import ink_of
from llm_ocr.stages.pieces.columns import column_regions


def grid_shape(width: int, height: int, count: int) -> tuple[int, int]:
    """``(columns, bands)`` of at least ``count`` tiles whose shape is closest to square."""
    count = max(1, min(count, dense().max_tiles))
    best: tuple[float, int, int, int] | None = None
    for columns in range(1, count + 1):
        bands = math.ceil(count / columns)
        aspect = (width / columns) / (height / bands)
        key = (abs(math.log(aspect)), columns * bands, columns, bands)
        if best is None or key < best:
            best = key
    assert best is not None
    return best[2], best[3]


def plan_tiles(image: bytes, count: int) -> list[Segment]:
    """The tiles of an encoded page image cut into about ``count`` (see the module docstring)."""
    ink, width, height = image_ink(image)
    return plan_grid(ink, width, height, count, reach_pitches=dense().tile_line_reach)


def plan_bands(
    image: bytes, count: int, max_height: int | None = None, fits: Callable[[int, int], bool] | None = None,
    columns: bool = True,
) -> list[Segment]:
    """The page cut into about ``count`` bands between text lines, in reading order (see the
    module docstring): full-width bands of a page without columns; of a page with columns
    (:func:`.columns.column_regions`), each region (a masthead, a column) cut
    into bands along its height by its share of the page's ink, none taller than
    ``max_height`` page pixels (None: any), in the number nearest to that whose bands ``fits``
    says can be sent (``fits(width, height)`` in page pixels; None: any can). ``columns`` False:
    full-width bands whatever the page."""
    ink, width, height = image_ink(image)
    regions = column_regions(ink, line_pitch(ink)) if columns else [(0, ink.shape[0], 0, ink.shape[1])]
    if len(regions) == 1:
        return plan_grid(ink, width, height, count, columns=1)
    rows, cols = ink.shape
    sx, sy = width / cols, height / rows  # page pixels per ink pixel
    total = max(float(ink.sum()), 1e-9)
    margin = round(dense().gutter_margin * width)
    bands: list[Segment] = []
    for top, bottom, left, right in regions:
        # The region in page pixels, reaching a little past the gutters and row gaps it was cut
        # at (the middles of blank runs: a glyph standing in one is whole on its side).
        x1, x2 = max(0, round(left * sx) - margin), min(width, round(right * sx) + margin)
        y1, y2 = max(0, round(top * sy) - margin), min(height, round(bottom * sy) + margin)
        share = float(ink[top:bottom, left:right].sum()) / total
        n = max(1, round(count * share))
        if max_height is not None:
            n = max(n, math.ceil((y2 - y1) / max(1, max_height)))
        if fits is not None:
            n = _fitting(n, x2 - x1, y2 - y1, fits)
        part = ink[max(0, round(y1 / sy)):max(1, round(y2 / sy)), max(0, round(x1 / sx)):max(1, round(x2 / sx))]
        for band in plan_grid(part, x2 - x1, y2 - y1, n, columns=1):
            bands.append(Segment(len(bands), x1 + band.left, y1 + band.top, x1 + band.right, y1 + band.bottom))
    return bands


def _fitting(n: int, width: int, height: int, fits: Callable[[int, int], bool]) -> int:
    """The number of bands nearest ``n`` (more first) that a ``width`` x ``height`` region is
    cut into for each band to fit (``n`` when none does: the bands are cut again as they are
    sent). Fewer bands fit better where the image is sized by its longer side (a column piece
    gets narrower as it gets taller), more where it is sized by its pixels."""
    reach = dense().fit_search
    for k in (n, *(m for step in range(1, reach + 1) for m in (n + step, n - step) if m >= 1)):
        if fits(width, math.ceil(height / k)):
            return k
    return n


def image_ink(image: bytes) -> tuple[Any, int, int]:
    """``(ink, width, height)``: the darkness of an encoded image's grey copy at most
    ``analysis_side`` pixels long, and the image's size in pixels."""
    from PIL import Image

    with Image.open(io.BytesIO(image)) as img:
        width, height = img.size
        if img.format == "JPEG":  # decode no larger than the analysis needs
            img.draft("L", (dense().analysis_side, dense().analysis_side))
        grey = img.convert("L")
    return ink_of(grey), width, height


def plan_grid(ink: Any, width: int, height: int, count: int, columns: int | None = None,
              reach_pitches: float | None = None) -> list[Segment]:
    """The tiles of a ``width`` x ``height`` page whose ink (darkness, any scale) is ``ink``
    (``columns`` 1: bands only), each reaching ``reach_pitches`` line pitches past its cuts."""
    if reach_pitches is None:
        reach_pitches = dense().line_reach
    rows, cols = ink.shape
    sx, sy = width / cols, height / rows  # page pixels per ink pixel
    if columns is None:
        columns, bands = grid_shape(width, height, count)
    else:
        bands = max(1, min(count, dense().max_tiles))
    cuts = [0, *band_cuts(ink, bands), rows]
    pitch = line_pitch(ink) if len(cuts) > 2 else None
    tiles: list[Segment] = []
    for top, bottom in pairwise(cuts):
        if pitch is not None:
            reach = max(1, round(reach_pitches * pitch * sy))
        else:
            reach = max(round(dense().min_overlap * height), round(dense().overlap * (bottom - top) * sy))
        page_top = 0 if top == 0 else max(0, round(top * sy) - reach)
        page_bottom = height if bottom == rows else min(height, round(bottom * sy) + reach)
        splits = _gutter_cuts(ink[top:bottom], columns)
        margin = round(dense().gutter_margin * width)
        edges = [0] + [round(x * sx) for x in splits] + [width]
        for left, right in pairwise(edges):
            tiles.append(Segment(
                len(tiles),
                0 if left == 0 else max(0, left - margin),
                page_top,
                width if right == width else min(width, right + margin),
                page_bottom,
            ))  # fmt: skip
    return tiles


def band_cuts(ink: Any, bands: int) -> list[int]:
    """The rows of ``ink`` (in ink pixels, ascending, each once) at which its page is cut into
    ``bands`` bands: for each even split, the row with the least ink within ``cut_window`` of a
    band of it (the nearest of equally blank ones), so that a cut falls between two text lines."""
    rows = ink.shape[0]
    window = max(1, int(rows * dense().cut_window / bands))
    return sorted({_row_cut(ink, round(k * rows / bands), window) for k in range(1, bands)} - {0, rows})


def _row_cut(ink: Any, ideal: int, window: int) -> int:
    """The row nearest ``ideal`` (within ``window``) with the least ink: between two lines."""
    import numpy as np

    lo, hi = max(1, ideal - window), min(ink.shape[0] - 1, ideal + window)
    if hi <= lo:
        return ideal
    profile = ink[lo:hi].sum(axis=1)
    least = profile.min()
    candidates = np.flatnonzero(profile <= least + 1e-6) + lo
    return int(candidates[np.argmin(np.abs(candidates - ideal))])


def _gutter_cuts(band: Any, columns: int) -> list[int]:
    """Where to split a band into up to ``columns`` tiles: the centres of its gutters nearest
    to the even splits (in ink pixels); splits with no gutter near are left out."""
    import numpy as np

    if columns < 2 or band.shape[0] == 0:
        return []
    cols = band.shape[1]
    profile = band.sum(axis=0)
    blank = profile <= dense().blank * max(float(profile.max()), 1e-6)
    gutters: list[tuple[int, int]] = []  # [start, end) of each run of blank columns inside the page
    start = None
    for x, empty in enumerate(np.append(blank, False)):
        if empty and start is None:
            start = x
        elif not empty and start is not None:
            if start > 0 and x < cols and x - start >= max(1, dense().min_gutter * cols):
                gutters.append((start, x))
            start = None
    cuts: list[int] = []
    tile = cols / columns
    for j in range(1, columns):
        ideal = j * tile
        # The widest gutter near the split, then the nearest: a word space of a large headline
        # may line up with a gutter below it and open a narrow channel; the gutters between
        # columns of body text are wider.
        near = [(-((b - a) // 2), abs((a + b) / 2 - ideal), (a + b) // 2) for a, b in gutters
                if abs((a + b) / 2 - ideal) <= dense().snap * tile]  # fmt: skip
        if near:
            cut = min(near)[2]
            if cut not in cuts:
                cuts.append(cut)
    return sorted(cuts)


def text_lines(ink: Any) -> int:
    """How many text lines ``ink`` (a piece's darkness) holds: the most runs of inked rows in any
    of ``line_strips`` vertical strips (a strip mostly within one column of text), a row inked
    above the strip's floor (its ``strip_floor_percentile`` row)."""
    import numpy as np

    rows, cols = ink.shape
    if rows == 0 or cols == 0:
        return 0
    strips = max(1, min(dense().line_strips, cols // dense().min_strip_px))
    most = 0
    for k in range(strips):
        strip = ink[:, k * cols // strips:(k + 1) * cols // strips]
        # Above the strip's own floor: a scan's paper is grey with noise in every row, which
        # would leave no row blank and every line merged into one.
        profile = strip.sum(axis=1)
        profile = profile - float(np.percentile(profile, dense().strip_floor_percentile))
        inked = profile > dense().blank * max(float(profile.max()), 1e-6)
        starts = np.flatnonzero(inked[1:] & ~inked[:-1]).size + int(inked[0])
        most = max(most, starts)
    return most


def line_pitch(ink: Any) -> float | None:
    """The distance between consecutive text lines of ``ink`` (in its rows): the median gap
    between the starts of runs of inked rows, over the ``line_strips`` vertical strips
    that hold at least ``pitch_min_lines`` lines; None when none does (a picture, a page of a few lines)."""
    import numpy as np

    cols = ink.shape[1]
    strips = max(1, min(dense().line_strips, cols // dense().min_strip_px))
    gaps: list[float] = []
    for k in range(strips):
        profile = ink[:, k * cols // strips:(k + 1) * cols // strips].sum(axis=1)
        inked = profile > dense().blank * max(float(profile.max()), 1e-6)
        starts = np.flatnonzero(inked[1:] & ~inked[:-1]) + 1
        if starts.size >= dense().pitch_min_lines:
            gaps.extend(np.diff(starts).tolist())
    return float(np.median(gaps)) if gaps else None


def split_piece(image: bytes, piece: Segment, *, across: bool = True, min_side: int = 0) -> tuple[list[Segment], str]:
    """``piece`` of a page (its image ``image``, any scale) cut in two, in page pixels, and how
    (see the module docstring): at its widest gutter near the middle when ``across`` and it is
    wider than tall; else between two text lines near its middle, each half reaching about a
    line into the other (a line the cut grazes is whole in one), where its ink shows lines
    believably (:func:`believed_lines`); else by pixels, at the blankest row near its middle,
    each half reaching ``overlap`` of the piece into the other. ``([], why)`` only when a half
    would be under ``min_cut_side`` or ``min_side`` page pixels (the family's smallest readable
    side): how many lines the ink shows decides where a piece is cut, never whether. A wide
    page's segment is never cut across its lines' length (:func:`llm_ocr.sources.wide.split_at_gutter`)."""
    ink, _, _ = image_ink(image)
    least = max(dense().min_cut_side, min_side)
    lines = text_lines(ink)
    rows, cols = ink.shape
    sx, sy = piece.width / cols, piece.height / rows  # page pixels per ink pixel
    if across and piece.width > piece.height and piece.width >= 2 * least:
        gutters = _gutter_cuts(ink, 2)
        if gutters:
            x = piece.left + round(gutters[0] * sx)
            margin = max(dense().min_margin_px, round(dense().gutter_margin * piece.width))
            halves = [Segment(0, piece.left, piece.top, min(piece.right, x + margin), piece.bottom),
                      Segment(1, max(piece.left, x - margin), piece.top, piece.right, piece.bottom)]
            return halves, f"cut in two at a gutter ({lines} text lines)"
    if piece.height < 2 * least:
        return [], f"{piece.height} px tall, too small to cut: a half would be under {least} px (min_cut_side)"
    # The blankest row near the middle, but none so near an edge that a half is under ``least``.
    cut = _row_cut(ink, rows // 2, max(1, min(int(rows * dense().cut_window), rows // 2 - math.ceil(least / sy))))
    middle = piece.top + round(cut * sy)
    if believed_lines(lines, piece, ink) >= 2:
        # About one line's pitch, in page pixels (grain may split a line in two runs: the rows'
        # period, where they have one, is the surer).
        pitch = max(rows / lines, line_pitch_of_rows(ink.sum(axis=1)) or 0)
        reach = max(1, round(pitch * sy))
        how = f"cut in two between text lines ({lines} text lines)"
    else:
        reach = max(1, round(dense().overlap * piece.height))
        counted = f"{lines} text line{'s' if lines != 1 else ''}"
        how = (f"cut in two by pixels ({counted} found in its ink, too few for a piece "
               f"{piece.width} x {piece.height} px: lines merged or hidden, as on a scan)")
    reach = min(reach, int(piece.height * dense().max_half_reach))
    halves = [Segment(0, piece.left, piece.top, piece.right, min(piece.bottom, middle + reach)),
              Segment(1, piece.left, max(piece.top, middle - reach), piece.right, piece.bottom)]
    if min(h.height for h in halves) < least or max(h.height for h in halves) >= piece.height:
        return [], f"{piece.height} px tall, too small to cut: a half would be under {least} px (min_cut_side)"
    return halves, how


def believed_lines(lines: int, piece: Segment, ink: Any) -> int:
    """``lines`` (counted in ``piece``'s ink ``ink``) when believable, else 0: their pitch (the
    piece's height over them) at most ``max_pitch_share`` of its width, and, where the ink's
    rows repeat at a line pitch (:func:`llm_ocr.sources.density.line_pitch`), at least
    ``min_believed_share`` of the lines that pitch fits in the piece. A band of a scanned
    newspaper 1,351 px tall counted as one or two lines, or as seven where its rows repeat
    every 17 px, is a count that failed (grain or the other side's print between the lines,
    lines merged), not a piece of so few."""
    if lines < 1 or piece.height / lines > dense().max_pitch_share * piece.width:
        return 0
    pitch = line_pitch_of_rows(ink.sum(axis=1)) if ink.shape[0] else None
    if pitch is not None and lines < dense().min_believed_share * ink.shape[0] / pitch:
        return 0
    return lines
