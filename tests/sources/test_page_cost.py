"""A page's cost read from its PDF before rendering: the text layer's length, or a scan's size.

Born-digital pages of 8 to 64 lines, then the same pages rasterised (grey JPEG at 150 and 300
DPI, bilevel CCITT G4 at 200 DPI), with and without an OCR layer that lost most of its lines.
The estimate must rank the pages as their text does and, for scans, land near the text's length
whatever the resolution and codec (so that scans and born-digital pages of one shard compare).
"""

from __future__ import annotations

import io
import random
from pathlib import Path

import pypdfium2 as pdfium
import pytest
from PIL import Image
from reportlab.lib.pagesizes import letter
from reportlab.lib.utils import ImageReader
from reportlab.pdfgen import canvas

from llm_ocr.options import RenderOptions
from llm_ocr.sources.base import DocumentRef
from llm_ocr.sources.page_cost import page_costs
from llm_ocr.sources.render import close_documents
from tests.docs import paragraph

LINES = [3, 8, 16, 32, 64]


def text_pdf(path: Path, lines_per_page: list[int], photo: bool = False) -> list[int]:
    """Pages of 8-point text (about 90 characters a line); returns each page's characters.
    With ``photo``, a grainy photograph covers the lower half of every page."""
    rng = random.Random(7)
    pdf = canvas.Canvas(str(path), pagesize=letter)
    chars = []
    for lines in lines_per_page:
        pdf.setFont("Helvetica", 8)
        texts = [paragraph(rng, words=14) for _ in range(lines)]
        for i, text in enumerate(texts):
            pdf.drawString(40, 760 - i * 9, text)
        if photo:
            grain = Image.effect_noise((600, 400), 60).convert("RGB")
            pdf.drawImage(ImageReader(grain), 40, 40, width=530, height=330)
        pdf.showPage()
        chars.append(sum(len(t) + 1 for t in texts))
    pdf.save()
    return chars


def scan_pdf(source: Path, target: Path, dpi: int, bilevel: bool = False) -> None:
    """``source`` rasterised into an image-only PDF (Pillow: grey as JPEG, bilevel as CCITT G4)."""
    pdf = pdfium.PdfDocument(str(source))
    images = []
    for index in range(len(pdf)):
        grey = pdf[index].render(scale=dpi / 72, grayscale=True).to_pil().convert("L")
        images.append(grey.point(lambda v: 255 if v > 160 else 0).convert("1") if bilevel else grey)
    pdf.close()
    images[0].save(target, "PDF", save_all=True, append_images=images[1:], resolution=dpi)


def ocr_pdf(scan: Path, target: Path, keep_lines: list[int]) -> None:
    """The pages of ``scan`` under an invisible text layer of ``keep_lines`` lines each (an OCR
    layer that lost the rest)."""
    rng = random.Random(3)
    pdf = pdfium.PdfDocument(str(scan))
    out = canvas.Canvas(str(target), pagesize=letter)
    for index, lines in enumerate(keep_lines):
        image = pdf[index].render(scale=1).to_pil()
        out.drawImage(ImageReader(image), 0, 0, width=letter[0], height=letter[1])
        text = out.beginText(40, 760)
        text.setTextRenderMode(3)  # invisible, as OCR layers are
        text.setFont("Helvetica", 8)
        for _ in range(lines):
            text.textLine(paragraph(rng, words=14))
        out.drawText(text)
        out.showPage()
    out.save()
    pdf.close()


def costs(path: Path, pages: int) -> list[int | None]:
    try:
        return page_costs(DocumentRef(path.name, 0, str(path), "pdf", str(path)), RenderOptions(),
                          list(range(1, pages + 1)))
    finally:
        close_documents()


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[int]]:
    folder = tmp_path_factory.mktemp("page-cost")
    chars = text_pdf(folder / "born.pdf", LINES)
    return folder, chars


def test_a_born_digital_page_costs_its_text_layers_length(pages: tuple[Path, list[int]]) -> None:
    folder, chars = pages
    estimates = costs(folder / "born.pdf", len(LINES))
    assert all(e is not None and 0.95 * c <= e <= 1.1 * c for e, c in zip(estimates, chars)), (estimates, chars)


@pytest.mark.parametrize(("dpi", "bilevel"), [(150, False), (300, False), (200, True)])
def test_a_scan_costs_about_its_texts_length_whatever_its_resolution_and_codec(
        pages: tuple[Path, list[int]], dpi: int, bilevel: bool) -> None:
    folder, chars = pages
    scan = folder / f"scan-{dpi}-{bilevel}.pdf"
    scan_pdf(folder / "born.pdf", scan, dpi, bilevel)
    estimates = costs(scan, len(LINES))
    assert estimates == sorted(estimates), estimates  # ranked as the text is
    # Near the text's length at each resolution and codec (0.63-0.9 of it measured): scans of
    # different scanners rank together, and with born-digital pages.
    assert all(e is not None and 0.6 * c <= e <= 1.5 * c for e, c in zip(estimates, chars)), (estimates, chars)


def test_an_ocr_layer_that_lost_lines_does_not_make_a_scan_look_short(pages: tuple[Path, list[int]]) -> None:
    folder, chars = pages
    scan = folder / "scan-for-ocr.pdf"
    scan_pdf(folder / "born.pdf", scan, 150)
    ocr = folder / "old-ocr.pdf"
    ocr_pdf(scan, ocr, keep_lines=[3, 8, 2, 2, 4])  # the 64-line page's layer holds 4 lines
    estimates = costs(ocr, len(LINES))
    assert estimates == sorted(estimates), estimates
    assert estimates[-1] is not None and estimates[-1] >= 0.6 * chars[-1]


def test_a_photograph_beside_the_text_is_not_taken_for_a_scan(tmp_path: Path) -> None:
    chars = text_pdf(tmp_path / "photo.pdf", [8, 32], photo=True)
    estimates = costs(tmp_path / "photo.pdf", 2)
    assert all(e is not None and 0.95 * c <= e <= 1.1 * c for e, c in zip(estimates, chars)), (estimates, chars)


def test_only_pdfs_are_read(tmp_path: Path) -> None:
    Image.new("RGB", (100, 100), "white").save(tmp_path / "page.png")
    image = DocumentRef("page.png", 0, "page.png", "image", str(tmp_path / "page.png"))
    row = DocumentRef("row", 0, "ds", "dataset_row", "ds", (io.BytesIO().getvalue(),))
    assert page_costs(image, RenderOptions(), [1]) == [None]
    assert page_costs(row, RenderOptions(), [1]) == [None]
