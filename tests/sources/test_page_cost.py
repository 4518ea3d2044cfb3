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
from llm_ocr.runners.cost_scale import CostScale
from llm_ocr.sources.base import DocumentRef
from llm_ocr.sources.page_cost import SCAN, TEXT, page_costs, page_estimates
from llm_ocr.sources.render import close_documents
from tests.docs import paragraph

LINES = [3, 8, 16, 32, 64]


def text_pdf(path: Path, lines_per_page: list[int], photo: bool = False, size: float = 8) -> list[int]:
    """Pages of ``size``-point text (about 90 characters a line); returns each page's characters.
    With ``photo``, a grainy photograph covers the lower half of every page."""
    rng = random.Random(7)
    pdf = canvas.Canvas(str(path), pagesize=letter)
    chars = []
    for lines in lines_per_page:
        pdf.setFont("Helvetica", size)
        texts = [paragraph(rng, words=14) for _ in range(lines)]
        for i, text in enumerate(texts):
            pdf.drawString(40, 760 - i * (size + 1), text)
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


def test_small_type_in_a_scan_looks_short_alone_and_ranks_with_its_text_on_one_scale(
        pages: tuple[Path, list[int]], tmp_path: Path) -> None:
    """A scan's estimate is its image's bytes over what a character costs, and a character of
    5-point type costs about a third of the ink of an 8-point one: read alone, the longest small-type
    scan ranks with born-digital pages of half its text (the ordering benchmark's long scans
    missed the first round so). On the run's one scale it ranks with the born-digital page of
    its own rank."""
    folder, chars = pages
    small = tmp_path / "small.pdf"
    small_chars = text_pdf(small, LINES, size=5)
    scan = tmp_path / "small-scan.pdf"
    scan_pdf(small, scan, 150)
    born = page_estimates(DocumentRef("born.pdf", 0, "born.pdf", "pdf", str(folder / "born.pdf")), RenderOptions(),
                          list(range(1, len(LINES) + 1)))
    scans = page_estimates(DocumentRef("scan.pdf", 0, "scan.pdf", "pdf", str(scan)), RenderOptions(),
                           list(range(1, len(LINES) + 1)))
    close_documents()
    assert all(e is not None and e.source == TEXT for e in born) and all(e is not None and e.source == SCAN
                                                                           for e in scans)
    assert scans[-1] is not None and born[-2] is not None
    longest_scan, half_as_long = scans[-1], born[-2]
    assert small_chars[-1] > 1.8 * chars[-2]
    assert longest_scan.chars < half_as_long.chars, (longest_scan, half_as_long)  # the scale's error, read alone
    scale = CostScale()
    scale.add([e for e in [*born, *scans] if e is not None])
    assert scale.value(longest_scan) >= 0.95 * born[-1].chars  # type: ignore[union-attr]
    ranked = sorted(scans, key=lambda e: scale.value(e))  # type: ignore[arg-type, return-value]
    assert ranked == scans  # the scans' own order kept
