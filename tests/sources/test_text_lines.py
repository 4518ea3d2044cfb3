"""When a PDF page's text layer may stand for the page (the text-layer route, docs/routes.md), and
where its lines are in the rendered page."""

from __future__ import annotations

import io
import random
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from reportlab.lib.pagesizes import letter
from reportlab.pdfgen import canvas

from llm_ocr.options import RenderOptions
from llm_ocr.sources.base import DocumentRef, PageImage
from llm_ocr.sources.render import close_documents, render_pages
from llm_ocr.sources.text_lines import judge_layer, layer_page, layer_text, math_characters
from tests.docs import make_pdf, make_shifted_pdf, paragraph

PROSE = (
    "The committee met on Tuesday to review the annual report. Members discussed the budget for the coming year "
    "and agreed that the library should extend its opening hours during the examination period."
)


def _render(path: Path, page: int = 1) -> PageImage:
    ref = DocumentRef(doc_id=path.name, index=0, source=str(path), kind="pdf", location=str(path))
    (item,) = render_pages(ref, RenderOptions(), page, page)
    assert isinstance(item, PageImage)
    return item


def _layer(path: Path, page: int = 1):  # type: ignore[no-untyped-def]
    item = _render(path, page)
    try:
        return layer_page(str(path), page, item.width, item.height, item.image), item
    finally:
        close_documents()


def _rotated_pdf(path: Path, rotation: int, upright: bool = True) -> list[str]:
    """A page with /Rotate ``rotation`` whose text reads upright when it is shown (drawn turned
    the other way, as landscape pages stored in portrait are), or, not ``upright``, sideways."""
    rng = random.Random(rotation)
    lines = [paragraph(rng, 10) for _ in range(12)]
    pdf = canvas.Canvas(str(path), pagesize=letter)
    pdf.setFont("Helvetica", 11)
    # In the turned space: where the first line starts and the baseline of the shown page's top.
    turn, x, top = {0: (0, 72, 702), 90: (90, 72, -90), 180: (180, -540, -90), 270: (-90, -720, 522)}[
        rotation if upright else 0]
    pdf.rotate(turn)
    for i, line in enumerate(lines):
        pdf.drawString(x, top - i * 18, line)
    pdf.setPageRotation(rotation)
    pdf.showPage()
    pdf.save()
    return lines


@pytest.mark.parametrize("rotation", [0, 90, 180, 270])
def test_each_line_lies_on_its_ink_in_the_rendered_page(tmp_path: Path, rotation: int) -> None:
    lines = _rotated_pdf(tmp_path / "page.pdf", rotation)
    layer, item = _layer(tmp_path / "page.pdf")
    assert layer.sound, layer.note
    assert [line[4] for line in layer.lines] == lines
    ink = np.asarray(Image.open(io.BytesIO(item.image)).convert("L")) < 128
    for x1, y1, x2, y2, text in layer.lines:
        inside = ink[int(y1):int(y2) + 1, int(x1):int(x2) + 1].sum()
        assert inside > 0.9 * 0.02 * len(text) * 11, (text, rotation)  # the glyphs' ink is in the box
    # All the page's ink is in some line's box (nothing drawn lies outside the lines).
    covered = np.zeros_like(ink)
    for x1, y1, x2, y2, _ in layer.lines:
        covered[max(0, int(y1) - 2):int(y2) + 3, max(0, int(x1) - 2):int(x2) + 3] = True
    assert (ink & ~covered).sum() < 0.01 * ink.sum()


@pytest.mark.parametrize("rotation", [90, 180, 270])
def test_text_shown_sideways_or_upside_down_is_not_sound(tmp_path: Path, rotation: int) -> None:
    _rotated_pdf(tmp_path / "page.pdf", rotation, upright=False)
    layer, _ = _layer(tmp_path / "page.pdf")
    assert not layer.sound and "not upright on the rendered page" in layer.note


def test_a_born_digital_page_is_sound_and_its_heading_is_taller(tmp_path: Path) -> None:
    make_pdf(tmp_path / "doc.pdf", pages=1, seed=2)
    layer, _ = _layer(tmp_path / "doc.pdf")
    assert layer.sound and "laid out by the CPU engine" in layer.note
    heading, body = layer.lines[0], layer.lines[1]
    assert heading[4] == "Section 2.1"
    # Boxes from the font size (16 pt against 11 pt), not the glyphs: the heading stands out.
    assert (heading[3] - heading[1]) / (body[3] - body[1]) == pytest.approx(16 / 11, rel=0.02)


def test_a_scan_with_an_invisible_ocr_layer_is_not_sound(tmp_path: Path) -> None:
    make_pdf(tmp_path / "doc.pdf", pages=1, seed=3, figures=False)
    scan = _render(tmp_path / "doc.pdf")
    close_documents()
    path = tmp_path / "ocred.pdf"
    pdf = canvas.Canvas(str(path), pagesize=letter)
    pdf.drawImage(ImageReaderFromBytes(scan.image), 0, 0, width=letter[0], height=letter[1])
    text = pdf.beginText(72, 700)
    text.setTextRenderMode(3)  # invisible: what OCR tools lay over a scanned image
    text.setFont("Helvetica", 11)
    for line in PROSE.split(". "):
        text.textLine(line)
    pdf.drawText(text)
    pdf.showPage()
    pdf.save()
    layer, _ = _layer(path)
    assert not layer.sound
    assert "invisible" in layer.note and "render mode 3" in layer.note
    assert layer.text is not None  # it still reads as English: the no-truth signals may use it


def test_a_shifted_layer_is_not_sound(tmp_path: Path) -> None:
    make_shifted_pdf(tmp_path / "shifted.pdf", [[PROSE[:90], PROSE[90:]]])
    layer, _ = _layer(tmp_path / "shifted.pdf")
    assert not layer.sound and "dictionary words" in layer.note
    assert layer_text(str(tmp_path / "shifted.pdf"), 1) is None


def test_the_rules_on_what_was_read() -> None:
    line = (10.0, 10.0, 500.0, 30.0, PROSE)
    assert judge_layer(PROSE, [line], 0.1, 4, 0, None).sound
    # A page that is mostly an image: a scan whose few words of real text are not the page.
    assert "an image covers 85%" in judge_layer(PROSE, [line], 0.85, 4, 0, None).note
    # Formulas: a text layer holds their glyphs out of order and cannot write LaTeX.
    maths = PROSE + " ∑ ∫ ≤ ≥ α β γ ∂ ∇ ∞ ≈"
    assert math_characters(maths) == 11
    assert "mathematical characters" in judge_layer(maths, [(*line[:4], maths)], 0.0, 4, 0, None).note
    assert judge_layer(PROSE + " ± ×", [line], 0.0, 4, 0, None).sound  # a stray sign is no formula
    # The ink promises far more text than the layer holds: text drawn as outlines is missing.
    assert "its ink looks like ~2,000 characters" in judge_layer(PROSE, [line], 0.0, 4, 0, 2000).note
    assert judge_layer(PROSE, [line], 0.0, 4, 0, 300).sound


class ImageReaderFromBytes:
    """reportlab's ImageReader over encoded bytes (it wants a file-like object)."""

    def __new__(cls, data: bytes):  # type: ignore[no-untyped-def]
        from reportlab.lib.utils import ImageReader

        return ImageReader(io.BytesIO(data))
