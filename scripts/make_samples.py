"""Regenerate the sample documents in ``samples/`` (needs the ``test`` extra for reportlab).

The samples are committed, so users never need to run this; it documents how they were made.
"""

from __future__ import annotations

import io
import sys
from pathlib import Path

from PIL import Image, ImageDraw
from reportlab.lib.pagesizes import letter
from reportlab.lib.utils import ImageReader
from reportlab.pdfgen import canvas

PARAGRAPHS = [
    ("Optical character recognition turns pictures of text into text that software can search, "
     "index and quote. Modern systems read a whole page at once and keep its layout."),
    ("This sample report exists so that a new user can run the pipeline on a real PDF within a "
     "minute of installing it. It has headings, paragraphs, a figure with a caption and a table."),
    ("Every page of every document appears exactly once in the output, with a status that says "
     "whether the text is complete, cut short, or missing because of an error."),
]


MACHINES = ["alpha", "beta", "gamma", "delta", "omega"]


def bar_chart(width: int = 600, height: int = 360) -> bytes:
    """A small bar chart drawn with Pillow, as PNG bytes: its labels are pixels, not PDF text,
    as in most figures (the OCR reads them; they belong to the figure, not to the body text)."""
    image = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(image)
    values = [3, 7, 5, 9, 4]
    colours = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f"]
    for i, (value, colour, name) in enumerate(zip(values, colours, MACHINES)):
        x = 70 + i * 105
        draw.rectangle([x, height - 50 - value * 30, x + 70, height - 50], fill=colour)
        draw.text((x + 35, height - 40), name, fill="black", font_size=24, anchor="mt")
    draw.line([50, height - 50, width - 20, height - 50], fill="black", width=3)
    draw.line([50, 20, 50, height - 50], fill="black", width=3)
    draw.text((62, 14), "pages per minute", fill="black", font_size=24)
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def write_wrapped(pdf: canvas.Canvas, text: str, x: float, y: float, width_chars: int = 90) -> float:
    """Draw ``text`` wrapped at a word boundary; return the y below it."""
    line = ""
    for word in text.split():
        if len(line) + len(word) + 1 > width_chars:
            pdf.drawString(x, y, line)
            y -= 15
            line = word
        else:
            line = f"{line} {word}".strip()
    if line:
        pdf.drawString(x, y, line)
        y -= 15
    return y - 10


def make_report(path: Path) -> None:
    """A two-page born-digital report with a figure and a table."""
    pdf = canvas.Canvas(str(path), pagesize=letter)
    pdf.setTitle("llm-ocr sample report")
    pdf.setFont("Helvetica-Bold", 20)
    pdf.drawString(72, 720, "A Sample Report for llm-ocr")
    pdf.setFont("Helvetica", 11)
    y = 690
    for paragraph in PARAGRAPHS:
        y = write_wrapped(pdf, paragraph, 72, y)
    pdf.drawImage(ImageReader(io.BytesIO(bar_chart())), 72, y - 230, width=360, height=216)
    pdf.setFont("Helvetica-Oblique", 10)
    pdf.drawString(72, y - 248, "Figure 1: Pages processed per minute on five machines.")
    pdf.showPage()
    pdf.setFont("Helvetica-Bold", 16)
    pdf.drawString(72, 720, "Results")
    pdf.setFont("Helvetica", 11)
    y = write_wrapped(pdf, "The table below lists the machines and their measured throughput in pages per second.", 72,
                      695)
    rows = [("Machine", "GPU", "Pages per second"), ("alpha", "A100", "2.3"), ("beta", "L40S", "1.9"),
            ("gamma", "L4", "0.8")]
    for row in rows:
        for col, cell in enumerate(row):
            pdf.drawString(72 + col * 150, y, cell)
        y -= 18
    y = write_wrapped(pdf, "Faster machines finish sooner, but the cheapest page is often on the smallest GPU.", 72,
                      y - 10)
    pdf.showPage()
    pdf.save()


def make_scan(path: Path) -> None:
    """A page image, as a scanner or camera would produce it."""
    image = Image.new("RGB", (1200, 900), "white")
    draw = ImageDraw.Draw(image)
    lines = ["Meeting notes", "", "Decided to process the archive in four shards.", "Each shard writes its own parts."]
    for i, text in enumerate(lines):
        draw.text((80, 80 + i * 60), text, fill="black", font_size=40 if i == 0 else 30)
    image.save(path, format="PNG")


def main() -> int:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "samples")
    out.mkdir(parents=True, exist_ok=True)
    make_report(out / "report.pdf")
    make_scan(out / "notes.png")
    print(f"wrote {out}/report.pdf and {out}/notes.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
