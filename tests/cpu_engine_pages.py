"""A page the CPU engine's tests read: its words and their boxes known from its own text layer.
Used by tests/engines (requests in-process) and tests/e2e/engines (commands); the engine's server
is the ``cpu_engine`` fixture (tests/fixtures/cpu_engine.py).
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pypdfium2 as pdfium

SCALE = 2.0  # 144 DPI, the pipeline's rendering

TITLE = "Harbour Survey Results"
PARAGRAPHS = [
    "Divers counted mussels along the north wall and found twice as many as last spring.",
    "The south wall stayed bare after the storm, so the team will return in early June.",
]


def page_pdf(path: Path) -> None:
    """A letter page: :data:`TITLE`, then each of :data:`PARAGRAPHS` on two lines."""
    from reportlab.lib.pagesizes import letter
    from reportlab.pdfgen import canvas

    pdf = canvas.Canvas(str(path), pagesize=letter)
    pdf.setFont("Helvetica-Bold", 26)
    pdf.drawString(72, 700, TITLE)
    pdf.setFont("Helvetica", 15)
    y = 650
    for text in PARAGRAPHS:
        words_ = text.split()
        half = len(words_) // 2
        for line in (" ".join(words_[:half]), " ".join(words_[half:])):
            pdf.drawString(72, y, line)
            y -= 20
        y -= 24  # a blank line between paragraphs
    pdf.showPage()
    pdf.save()


def truth_words(path: Path) -> list[tuple[str, tuple[float, float, float, float]]]:
    """Words of page 1 with their boxes in pixels at SCALE (from the PDF's char boxes)."""
    pdf = pdfium.PdfDocument(str(path))
    page = pdf[0]
    height = page.get_height()
    textpage = page.get_textpage()
    out: list[tuple[str, tuple[float, float, float, float]]] = []
    word, boxes = "", []
    for i in range(textpage.count_chars()):
        ch = textpage.get_text_range(i, 1)
        if ch.strip():
            word += ch
            boxes.append(textpage.get_charbox(i))
            continue
        if word:
            out.append((word, _px(boxes, height)))
        word, boxes = "", []
    if word:
        out.append((word, _px(boxes, height)))
    pdf.close()
    return out


def _px(boxes: list[tuple[float, float, float, float]], page_height: float) -> tuple[float, float, float, float]:
    left = min(b[0] for b in boxes)
    bottom = min(b[1] for b in boxes)
    right = max(b[2] for b in boxes)
    top = max(b[3] for b in boxes)
    return (left * SCALE, (page_height - top) * SCALE, right * SCALE, (page_height - bottom) * SCALE)


def page_png(path: Path) -> tuple[bytes, int, int]:
    """Page 1 rendered at :data:`SCALE` as PNG bytes, with its width and height."""
    image = pdfium.PdfDocument(str(path))[0].render(scale=SCALE).to_pil().convert("RGB")
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue(), image.width, image.height


def known_page(folder: Path) -> dict[str, Any]:
    """The page as a PDF in ``folder``, its PNG at :data:`SCALE`, its size and its words."""
    path = folder / "page.pdf"
    page_pdf(path)
    data, width, height = page_png(path)
    return {"pdf": path, "png": data, "width": width, "height": height, "words": truth_words(path)}
