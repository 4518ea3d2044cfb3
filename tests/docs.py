"""Documents made inside the tests: PDFs with a known text layer and figures, images, datasets."""

from __future__ import annotations

import io
import random
from pathlib import Path

from PIL import Image, ImageDraw
from reportlab.lib.pagesizes import letter
from reportlab.lib.utils import ImageReader
from reportlab.pdfgen import canvas

WORDS = (
    "archive batch caption column document engine figure graph header index journal kernel layout "
    "margin network output page quality render sample table unicode vector width yield zone"
).split()


def chart_png(seed: int, size: tuple[int, int] = (400, 240)) -> bytes:
    """A colourful bar chart, distinct per seed."""
    rng = random.Random(seed)
    image = Image.new("RGB", size, "white")
    draw = ImageDraw.Draw(image)
    for i in range(5):
        height = rng.randint(20, size[1] - 30)
        colour = tuple(rng.randint(0, 200) for _ in range(3))
        draw.rectangle([20 + i * 75, size[1] - 10 - height, 70 + i * 75, size[1] - 10], fill=colour)
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def paragraph(rng: random.Random, words: int = 14) -> str:
    """A deterministic line of words."""
    return " ".join(rng.choice(WORDS) for _ in range(words))


def make_pdf(path: Path, pages: int, seed: int = 0, figures: bool = True) -> list[str]:
    """A born-digital PDF; returns each page's text lines (what a perfect OCR would read)."""
    rng = random.Random(seed)
    pdf = canvas.Canvas(str(path), pagesize=letter)
    texts = []
    for number in range(1, pages + 1):
        lines = [f"Section {seed}.{number}"] + [paragraph(rng) for _ in range(4)]
        pdf.setFont("Helvetica-Bold", 16)
        pdf.drawString(72, 720, lines[0])
        pdf.setFont("Helvetica", 11)
        for i, line in enumerate(lines[1:]):
            pdf.drawString(72, 690 - i * 16, line)
        if figures and number % 2 == 1:
            pdf.drawImage(ImageReader(io.BytesIO(chart_png(seed * 100 + number))), 72, 380, width=300, height=180)
        pdf.showPage()
        texts.append(lines)
    pdf.save()
    return texts


def make_corpus(folder: Path, documents: int, pages: int = 2) -> dict[str, list[list[str]]]:
    """A folder of PDFs; returns {file name: page texts}."""
    folder.mkdir(parents=True, exist_ok=True)
    corpus = {}
    for i in range(documents):
        name = f"doc{i:03d}.pdf"
        corpus[name] = make_pdf(folder / name, pages, seed=i)
    return corpus
