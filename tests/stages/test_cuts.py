"""Dense pages cut into tiles whose edges fall between text columns and text lines: on the
benchmark's 7-column page (rendered), and on a page's ink laid out here so that the even splits
would halve a line and a narrow channel lies nearer to a split than the gutter."""

from __future__ import annotations

import io

import numpy as np
import pypdfium2 as pdfium
import pytest

from llm_ocr.bench.corpus import DENSE_COLUMNS, DENSE_GUTTER_PT, DENSE_PT, dense_pdf
from llm_ocr.options import DenseOptions
from llm_ocr.sources.segments import Segment
from llm_ocr.stages.pieces.cuts import band_cuts, grid_shape, plan_grid, plan_tiles, split_piece


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> tuple[bytes, list[tuple[float, float, float, float]]]:
    """The dense page at 144 DPI as JPEG, and its text lines' boxes in page pixels."""
    path = tmp_path_factory.mktemp("tiles") / "dense.pdf"
    dense_pdf(path, seed=4)
    pdf = pdfium.PdfDocument(str(path))
    try:
        image = pdf[0].render(scale=2).to_pil().convert("RGB")
        textpage = pdf[0].get_textpage()
        lines = []
        for i in range(textpage.count_rects()):
            left, bottom, right, top = textpage.get_rect(i)
            lines.append((left * 2, (DENSE_PT[1] - top) * 2, right * 2, (DENSE_PT[1] - bottom) * 2))
        textpage.close()
    finally:
        pdf.close()
    buffer = io.BytesIO()
    image.save(buffer, "JPEG", quality=90)
    return buffer.getvalue(), lines


def test_grid_shapes_are_as_square_as_the_page_allows() -> None:
    assert grid_shape(1584, 2448, 1) == (1, 1)
    assert grid_shape(1584, 2448, 4) == (2, 2)
    assert grid_shape(1584, 2448, 8) == (2, 4)  # tiles of 792 x 612
    assert grid_shape(2448, 1584, 8) == (4, 2)  # the same page turned
    assert grid_shape(1224, 1584, 2) == (1, 2)  # Letter: two bands, not two tall strips


@pytest.mark.parametrize("count", [2, 4, 8, 12])
def test_tiles_cover_the_page_and_cut_no_text_line_of_any_column(page: tuple[bytes, list], count: int) -> None:
    image, lines = page
    width, height = 1584, 2448
    tiles = plan_tiles(image, count)
    assert len(tiles) >= count * 0.6 and [t.index for t in tiles] == list(range(len(tiles)))
    # Every text line lies wholly inside at least one tile: none is cut in two by every tile
    # that shows it, so some tile reads it whole.
    for x0, y0, x1, y1 in lines:
        assert any(t.left <= x0 and x1 <= t.right and t.top <= y0 and y1 <= t.bottom for t in tiles), (x0, y0, x1, y1)
    # Vertical cuts fall in the gutters between the columns (the masthead and the headlines
    # cross some gutters: those bands are cut elsewhere or not at all).
    gutters = [(36 + c * ((DENSE_PT[0] - 72 - (DENSE_COLUMNS - 1) * DENSE_GUTTER_PT) / DENSE_COLUMNS + DENSE_GUTTER_PT) - DENSE_GUTTER_PT) * 2
               for c in range(1, DENSE_COLUMNS)]  # fmt: skip
    for tile in tiles:
        for edge in (tile.left, tile.right):
            if 0 < edge < width:
                assert any(g - 20 <= edge <= g + 2 * DENSE_GUTTER_PT + 20 for g in gutters), (edge, gutters)
    # Tiles overlap by three quarters of a line pitch each way of the cut (the page's 7 pt line
    # pitch is 14 px): enough for every line above to be whole in one of them, not a share of
    # the page, since what both show is read twice.
    tops = sorted({t.top for t in tiles})
    bottoms = sorted({t.bottom for t in tiles})
    for top, bottom in zip(tops[1:], bottoms[:-1]):
        assert 14 <= bottom - top <= 2 * 14
    assert min(t.top for t in tiles) == 0 and max(t.bottom for t in tiles) == height
    assert min(t.left for t in tiles) == 0 and max(t.right for t in tiles) == width


# A page's ink on a 1000 x 1200 grid (page pixels: twice that): text lines 12 rows tall every
# 24 rows from row 6, so that the even splits into three bands (rows 400 and 800) fall inside a
# line; three columns whose gutters are not at the even splits (333 and 667): 40 wide at 300-340
# and 30 wide at 700-730; the middle column has an 8-wide channel at 660-668 (two short runs of
# words, a word space that lines up), nearer to the split than the gutter; a headline across
# the first two columns at the top.
LINE_FROM, LINE_PITCH, LINE_HEIGHT = 6, 24, 12
COLUMNS = [(20, 300), (340, 660), (668, 700), (730, 980)]
HEADLINE = (20, 60, 20, 700)  # rows, columns


def ink_page() -> np.ndarray:
    ink = np.zeros((1200, 1000), dtype=np.float32)
    for top in range(LINE_FROM, 1200 - LINE_HEIGHT, LINE_PITCH):
        if top + LINE_HEIGHT > HEADLINE[0] and top < HEADLINE[1] + 10:
            continue  # the headline stands there (in its columns) and a gap under it
        for left, right in COLUMNS:
            ink[top : top + LINE_HEIGHT, left:right] = 1.0
    ink[HEADLINE[0] : HEADLINE[1], HEADLINE[2] : HEADLINE[3]] = 1.0
    return ink


def in_a_line(row: int) -> bool:
    return (row - LINE_FROM) % LINE_PITCH < LINE_HEIGHT


def test_bands_are_cut_between_two_text_lines() -> None:
    ink = ink_page()
    assert in_a_line(400) and in_a_line(800)  # the even splits would halve a line
    cuts = band_cuts(ink, 3)
    assert len(cuts) == 2
    for cut, ideal in zip(cuts, (400, 800)):
        assert not in_a_line(cut) and ink[cut].sum() == 0, cut
        assert abs(cut - ideal) < LINE_PITCH  # the gap nearest to the even split
    # The tiles reach across the cut into the neighbouring band by a few lines.
    tiles = plan_grid(ink, 2000, 2400, 9)
    bands = sorted({(t.top, t.bottom) for t in tiles})
    assert len(bands) == 3
    for (_, upper_bottom), (lower_top, _), cut in zip(bands, bands[1:], cuts):
        assert lower_top < 2 * cut < upper_bottom and upper_bottom - lower_top >= 2 * 48


def test_columns_are_cut_at_the_widest_gutter_near_a_split_and_not_under_a_headline_across_it() -> None:
    tiles = plan_grid(ink_page(), 2000, 2400, 9)  # 3 x 3 tiles of 667 x 800
    margin = round(DenseOptions().gutter_margin * 2000)
    by_band: dict[int, list[int]] = {}
    for tile in tiles:
        if tile.left > 0:
            by_band.setdefault(tile.top, []).append((tile.left + margin) // 2)  # the cut, in ink pixels
    first, *others = [by_band.get(top, []) for top in sorted({t.top for t in tiles})]
    # Under the headline the first gutter is crossed: that band is cut only at the second one
    # (its centre, 715), not at the narrow channel (664) nearer to the split at 667.
    assert first == [715]
    for cuts in others:
        assert cuts == [320, 715]
    for tile in tiles:  # every tile spans the band's columns it holds, edge to edge
        assert (tile.right == 2000) or (tile.right - margin) // 2 in (320, 715)


def test_a_page_without_gutters_is_cut_into_bands_only() -> None:
    # A single column of text lines across the whole width: no gutter to cut at.
    from PIL import Image, ImageDraw

    image = Image.new("L", (1200, 1600), 255)
    draw = ImageDraw.Draw(image)
    for y in range(40, 1560, 24):
        draw.rectangle((40, y, 1160, y + 12), fill=30)
    buffer = io.BytesIO()
    image.save(buffer, "PNG")
    tiles = plan_tiles(buffer.getvalue(), 6)
    assert all(t.left == 0 and t.right == 1200 for t in tiles) and len(tiles) >= 2


def _crop(image: bytes, tile: Segment) -> bytes:
    from PIL import Image

    with Image.open(io.BytesIO(image)) as img:
        buffer = io.BytesIO()
        img.crop(tuple(tile.box)).save(buffer, "PNG")
    return buffer.getvalue()


def test_a_piece_that_ran_out_is_cut_in_two_between_text_lines_or_at_a_gutter(page: tuple[bytes, list]) -> None:
    """The adaptive split: a tall piece of one column is cut between two of its lines, each half
    reaching into the other, every line whole in one half; a wide piece across columns is cut
    at a gutter; a piece of a few lines is cut too; one whose halves would be too small to read
    is not, and says so."""
    image, lines = page
    column = Segment(0, 68, 500, 68 + 190, 1500)  # most of the first column, 1,000 px tall
    halves, how = split_piece(_crop(image, column), column)
    assert len(halves) == 2 and "between text lines" in how, how
    top, bottom = halves
    assert top.top == column.top and bottom.bottom == column.bottom and bottom.top < top.bottom
    assert 0.25 * column.height < top.bottom - column.top < 0.8 * column.height
    inside = [ln for ln in lines if column.left <= ln[0] and ln[2] <= column.right and column.top <= ln[1]
              and ln[3] <= column.bottom]  # fmt: skip
    assert len(inside) > 50
    for _, y0, _, y1 in inside:
        assert any(h.top <= y0 and y1 <= h.bottom for h in halves), (y0, y1)
    wide = Segment(0, 0, 700, 1584, 1100)  # every column, below the masthead and the headlines
    halves, how = split_piece(_crop(image, wide), wide)
    assert len(halves) == 2 and "gutter" in how, how
    cut = (halves[0].right + halves[1].left) / 2
    assert halves[0].left == 0 and halves[1].right == 1584 and halves[1].left < halves[0].right
    crossing = [ln for ln in lines if wide.top <= ln[1] and ln[3] <= wide.bottom and ln[0] < cut < ln[2]]
    assert not crossing and 300 < cut < 1300, (cut, crossing[:3])  # in a gutter, no line halved
    # A few lines are still cut between two of them: the answer that ran out says the piece
    # holds more than one answer, whatever its lines' count (issue 47).
    few = Segment(0, 68, 1000, 68 + 190, 1000 + 100)  # about six lines of 6 pt at 144 DPI
    halves, how = split_piece(_crop(image, few), few)
    assert len(halves) == 2 and "between text lines" in how, how
    assert all(DenseOptions().min_cut_side <= h.height < few.height for h in halves), halves
    # Only a piece whose halves would be too small to read is kept whole.
    thin = Segment(0, 68, 1000, 68 + 190, 1000 + DenseOptions().min_cut_side)
    halves, how = split_piece(_crop(image, thin), thin)
    assert halves == [] and "too small to cut" in how, how
