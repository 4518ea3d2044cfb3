"""Dense pages cut into tiles whose edges fall between text columns and text lines."""

from __future__ import annotations

import io
from pathlib import Path

import pypdfium2 as pdfium
import pytest

from llm_ocr.bench.corpus import DENSE_COLUMNS, DENSE_GUTTER_PT, DENSE_PT, dense_pdf
from llm_ocr.sources.tiles import grid_shape, plan_tiles


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
    # Bands overlap, by a few lines.
    tops = sorted({t.top for t in tiles})
    bottoms = sorted({t.bottom for t in tiles})
    for top, bottom in zip(tops[1:], bottoms[:-1]):
        assert 48 <= bottom - top <= 400
    assert min(t.top for t in tiles) == 0 and max(t.bottom for t in tiles) == height
    assert min(t.left for t in tiles) == 0 and max(t.right for t in tiles) == width


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
    # Each band is cut between two lines: no line (12 px tall, every 24 px) is halved by a cut.
    cuts = [t.bottom for t in tiles[:-1]] + [t.top for t in tiles[1:]]
    for cut in cuts:
        assert (cut - 40) % 24 >= 12 or (cut - 40) % 24 == 0 or cut in (0, 1600), cut
