"""A dense page read in bands is planned column by column: on newspapers written here (reportlab,
rendered with PDFium as the pipeline renders them), every band lies inside one column or the
masthead above them, the bands come masthead first, then each column top to bottom, and the
bands of a column cover all its text lines; a one-column page keeps its full-width bands; a
table's narrow columns are not read apart."""

from __future__ import annotations

import io
from pathlib import Path

import pypdfium2 as pdfium
import pytest
from reportlab.pdfgen import canvas

from llm_ocr.sources.segments import Segment
from llm_ocr.stages.pieces.columns import column_regions
from llm_ocr.stages.pieces.cuts import image_ink, line_pitch, plan_bands, plan_grid
from tests.newspaper import GUTTER, MARGIN, PAGE, newspaper_pdf

#: Pixels per point of the renders (olmOCR-2's page: 1,288 px on the longer side).
SCALE = 1288 / PAGE[1]


def render(path: Path) -> tuple[bytes, list[tuple[float, float, float, float]]]:
    """The PDF's first page as PNG at :data:`SCALE`, and its text lines' boxes in its pixels."""
    pdf = pdfium.PdfDocument(str(path))
    try:
        page = pdf[0]
        height = page.get_size()[1]
        image = page.render(scale=SCALE).to_pil()
        textpage = page.get_textpage()
        lines = []
        for i in range(textpage.count_rects()):
            left, bottom, right, top = textpage.get_rect(i)
            lines.append((left * SCALE, (height - top) * SCALE, right * SCALE, (height - bottom) * SCALE))
        textpage.close()
    finally:
        pdf.close()
    buffer = io.BytesIO()
    image.save(buffer, "PNG")
    return buffer.getvalue(), lines


def column_of(x: float, columns: int) -> int:
    """Which of the newspaper's ``columns`` columns the page x (pixels) lies in (-1: a gutter)."""
    width = (PAGE[0] - 2 * MARGIN - (columns - 1) * GUTTER) / columns
    for k in range(columns):
        left = (MARGIN + k * (width + GUTTER)) * SCALE
        if left <= x <= left + width * SCALE:
            return k
    return -1


def inside(band: Segment, box: tuple[float, float, float, float]) -> bool:
    x1, y1, x2, y2 = box
    return band.left <= x1 + 1 and x2 - 1 <= band.right and band.top <= y1 + 1 and y2 - 1 <= band.bottom


@pytest.mark.parametrize("count", [2, 6, 12, 20])
@pytest.mark.parametrize("columns", [2, 5, 7])
def test_a_newspaper_is_read_masthead_first_then_column_by_column(tmp_path: Path, columns: int, count: int) -> None:
    newspaper_pdf(tmp_path / "p.pdf", seed=2, columns=columns)
    image, lines = render(tmp_path / "p.pdf")
    bands = plan_bands(image, count)
    assert [b.index for b in bands] == list(range(len(bands)))
    assert len(bands) >= columns  # a piece per column at least ...
    assert len(bands) <= max(count, columns + 1) + columns  # ... and about as many as asked for
    body = [box for box in lines if box[1] > 80 * SCALE]  # the masthead is 24 pt at 60 pt from the top
    order = []
    for box in body:
        # Every line whole in a band that lies in the line's column (not across a gutter).
        home = [b for b in bands if inside(b, box)]
        assert home, box
        assert all(column_of((b.left + b.right) / 2, columns) == column_of(box[0], columns) for b in home), (box, home)
        assert all(b.right - b.left < (PAGE[0] / columns + 2 * GUTTER) * SCALE for b in home)
        order.append((home[0].index, box[1], box[0]))
    # Read in band order, the lines come column by column, each top to bottom.
    read = [column_of(x, columns) for _, _, x in sorted(order)]
    assert read == sorted(read)
    masthead = [box for box in lines if box[1] <= 80 * SCALE]
    assert masthead and all(inside(bands[0], box) for box in masthead)


def test_a_tall_column_is_cut_no_taller_than_asked(tmp_path: Path) -> None:
    newspaper_pdf(tmp_path / "p.pdf", seed=2, columns=5)
    image, _ = render(tmp_path / "p.pdf")
    tallest = round(PAGE[0] * SCALE)  # no taller than the page is wide
    bands = plan_bands(image, 2, max_height=tallest)
    assert all(b.bottom - b.top <= tallest for b in bands)
    assert len(bands) > len(plan_bands(image, 2))


def test_a_page_of_one_column_keeps_its_full_width_bands(tmp_path: Path) -> None:
    newspaper_pdf(tmp_path / "p.pdf", seed=2, columns=1, figures=False)
    image, _ = render(tmp_path / "p.pdf")
    ink, width, height = image_ink(image)
    assert len(column_regions(ink, line_pitch(ink))) == 1
    for count in (2, 7):
        assert plan_bands(image, count, max_height=100) == plan_grid(ink, width, height, count, columns=1)


def test_a_table_of_narrow_columns_is_not_read_apart(tmp_path: Path) -> None:
    """A page-wide table of eight columns of figures: blank runs between them from top to
    bottom, but no column of text: one region, read in full-width bands (its rows whole)."""
    path = tmp_path / "table.pdf"
    pdf = canvas.Canvas(str(path), pagesize=PAGE)
    pdf.setFont("Helvetica", 8)
    y = PAGE[1] - 50
    row = 0
    while y > 40:
        for k in range(8):
            pdf.drawRightString(MARGIN + 60 + k * 90, y, f"{(row * 7919 + k * 104729) % 99991:,}.{k}")
        y -= 11
        row += 1
    pdf.showPage()
    pdf.save()
    image, _ = render(path)
    ink, _, _ = image_ink(image)
    assert len(column_regions(ink, line_pitch(ink))) == 1
    assert all(b.left == 0 and b.right > 0.99 * PAGE[0] * SCALE for b in plan_bands(image, 6))


def test_column_bands_are_as_many_as_make_each_fit(tmp_path: Path) -> None:
    """Where an image is sized by its longer side, a taller piece of a column makes fewer image
    tokens (it is sent narrower): the planner then cuts a column into fewer bands to fit, and
    into more where the image's tokens grow with its pixels."""
    newspaper_pdf(tmp_path / "p.pdf", seed=2, columns=5)
    image, _ = render(tmp_path / "p.pdf")
    asked = 16  # about three bands per column
    columns = [b for b in plan_bands(image, asked) if b.bottom > 100]  # the masthead's ends at 82
    tall = [b for b in plan_bands(image, asked, fits=lambda w, h: h >= 5 * w) if b.bottom > 100]
    assert all(b.bottom - b.top >= 5 * (b.right - b.left) for b in tall)
    assert len(tall) < len(columns)
    budget = 40_000  # page pixels of a band
    small = plan_bands(image, asked, fits=lambda w, h: w * h <= budget)
    assert all((b.right - b.left) * (b.bottom - b.top) <= 1.3 * budget for b in small)  # the bands' overlaps
    assert len(small) > len(plan_bands(image, asked))
