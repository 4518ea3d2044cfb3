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


def make_shifted_pdf(path: Path, pages: list[list[str]], shift: int = -1) -> None:
    """A PDF whose letters look right but whose text layer is Caesar-shifted by ``shift``.

    Written by hand: Helvetica with a ``/ToUnicode`` CMap that maps each letter's code to the
    letter ``shift`` places away, the broken map real PDFs carry ("Opnbddchmfr ne sgd" for
    "Proceedings of the"). The page renders correctly; its extracted text does not.
    """
    cmap = (
        "/CIDInit /ProcSet findresource begin 12 dict begin begincmap\n"
        "/CIDSystemInfo << /Registry (Adobe) /Ordering (UCS) /Supplement 0 >> def\n"
        "/CMapName /Shifted def /CMapType 2 def\n1 begincodespacerange <00> <FF> endcodespacerange\n"
        f"2 beginbfrange\n<41> <5A> <{0x41 + shift:04X}>\n<61> <7A> <{0x61 + shift:04X}>\nendbfrange\n"
        "endcmap CMapName currentdict /CMap defineresource pop end end\n"
    )
    n = len(pages)
    kids = " ".join(f"{5 + 2 * i} 0 R" for i in range(n))
    objects = [
        "<< /Type /Catalog /Pages 2 0 R >>",
        f"<< /Type /Pages /Kids [{kids}] /Count {n} >>",
        "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding /ToUnicode 4 0 R >>",
        f"<< /Length {len(cmap)} >>\nstream\n{cmap}endstream",
    ]
    for i, lines in enumerate(pages):
        escaped = [line.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)") for line in lines]
        content = "BT /F1 12 Tf 15 TL 72 720 Td\n" + "".join(f"({line}) '\n" for line in escaped) + "ET\n"
        objects.append(
            f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 3 0 R >> >> "
            f"/Contents {6 + 2 * i} 0 R >>"
        )
        objects.append(f"<< /Length {len(content)} >>\nstream\n{content}endstream")
    out = b"%PDF-1.4\n"
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += f"{number} 0 obj\n{body}\nendobj\n".encode("latin-1")
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    out += b"".join(f"{offset:010d} 00000 n \n".encode() for offset in offsets)
    out += f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode()
    path.write_bytes(out)
