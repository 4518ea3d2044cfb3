"""The CPU engine through the commands users run: ``llm-ocr extract``, ``bench-accuracy`` and
``llm-ocr run`` with figures, each a subprocess reading through the engine's server (one per test
session, tests/fixtures/cpu_engine.py). Its requests in-process are tests/engines/test_cpu_engine.py.
"""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any

import pytest

from llm_ocr.bench.accuracy import word_recall
from llm_ocr.testing import CpuServer
from tests.conftest import read_stage, run_cli
from tests.cpu_engine_pages import PARAGRAPHS, SCALE, TITLE, known_page


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return known_page(tmp_path_factory.mktemp("cpu-page"))


def test_extract_end_to_end_on_the_cpu_engine(cpu_engine: CpuServer, page: dict[str, Any], tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = run_cli(
        "extract", str(page["pdf"]), "--output", str(out), "--endpoint", cpu_engine.base_url,
        "--workers", "0", "--progress", "log", timeout=120,
    )
    assert result.returncode == 0, result.stderr
    (row,) = read_stage(out, "extract")
    assert row["status"] == "ok", row["error"]
    expected = " ".join(w for w, _ in page["words"])
    assert word_recall(expected, row["markdown"]) >= 0.95
    assert row["markdown"].startswith(f"# {TITLE}")


def test_bench_accuracy_command_against_the_engine(cpu_engine: CpuServer, page: dict[str, Any], tmp_path: Path) -> None:
    report = tmp_path / "bench.json"
    result = run_cli("bench-accuracy", str(page["pdf"]), "--engine-url", cpu_engine.base_url, "--json", str(report), timeout=120)
    assert result.returncode == 0, result.stderr
    assert re.search(r"1 pages at 144 DPI \(jpeg\), CER \d+\.\d\d%, word recall \d+\.\d\d%", result.stdout)
    summary = json.loads(report.read_text())["summary"]
    assert summary["pages"] == 1 and summary["word_recall"] >= 0.95 and summary["cer"] <= 0.05


# ---------------------------------------------------------------------------------------------
# Figures: a generated report with a chart at a known place, run through the whole pipeline

FIGURE_PT = (72.0, 300.0, 360.0, 216.0)  # x, y (from the bottom), width, height in PDF points
FIGURE_WORDS = ["Kestrel", "Osprey", "Plover"]  # drawn as pixels inside the chart only
CAPTION = "Figure 7: Birds counted at the marsh in April."


def _chart_png() -> bytes:
    """A chart that fills its whole image with ink (a tinted background), so its true box is
    the image's: bars and three large labels."""
    from PIL import Image, ImageDraw

    image = Image.new("RGB", (600, 360), "#e3ecf7")
    draw = ImageDraw.Draw(image)
    draw.rectangle([0, 0, 599, 359], outline="#1f3b5c", width=4)
    for i, (word, value) in enumerate(zip(FIGURE_WORDS, (5, 8, 3))):
        x = 60 + i * 180
        draw.rectangle([x, 290 - value * 28, x + 90, 290], fill="#4e79a7")
        draw.text((x + 45, 305), word, fill="black", font_size=34, anchor="mt")
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def _figure_pdf(path: Path) -> None:
    from reportlab.lib.pagesizes import letter
    from reportlab.lib.utils import ImageReader
    from reportlab.pdfgen import canvas

    pdf = canvas.Canvas(str(path), pagesize=letter)
    pdf.setFont("Helvetica-Bold", 22)
    pdf.drawString(72, 720, "Marsh Survey")
    pdf.setFont("Helvetica", 12)
    pdf.drawString(72, 680, "The volunteers walked the marsh path every morning and counted the birds.")
    pdf.drawString(72, 662, "They wrote each count into a notebook before breakfast.")
    x, y, w, h = FIGURE_PT
    pdf.drawImage(ImageReader(io.BytesIO(_chart_png())), x, y, width=w, height=h)
    pdf.setFont("Helvetica-Oblique", 11)
    pdf.drawString(x, y - 20, CAPTION)
    pdf.setFont("Helvetica", 12)
    pdf.drawString(72, 240, "Next spring the same walk will be repeated on the same days.")
    pdf.showPage()
    _page_pdf_onto(pdf)  # page 2: text only
    pdf.save()


def _page_pdf_onto(pdf: Any) -> None:
    pdf.setFont("Helvetica-Bold", 26)
    pdf.drawString(72, 700, TITLE)
    pdf.setFont("Helvetica", 15)
    for i, text in enumerate(PARAGRAPHS):
        pdf.drawString(72, 650 - 40 * i, text[:70])
    pdf.showPage()


def test_figure_is_found_cropped_captioned_and_described_and_a_text_page_has_none(cpu_engine: CpuServer, tmp_path: Path) -> None:
    path = tmp_path / "marsh.pdf"
    _figure_pdf(path)
    out = tmp_path / "out"
    result = run_cli(
        "run", str(path), "--output", str(out), "--endpoint", cpu_engine.base_url, "--export-markdown",
        "--workers", "0", "--progress", "log", timeout=300,
    )
    assert result.returncode == 0, result.stderr
    first, second = sorted(read_stage(out, "describe"), key=lambda r: r["page"])
    assert first["status"] == second["status"] == "ok", (first["error"], second["error"])

    # The figure's box is where the image was drawn (4 pt of slack: the crop keeps a margin).
    (figure,) = first["figures"]
    x, y, w, h = FIGURE_PT
    page_height = 792.0
    truth = [x * SCALE, (page_height - y - h) * SCALE, (x + w) * SCALE, (page_height - y) * SCALE]
    assert all(abs(a - b) <= 4 * SCALE for a, b in zip(figure["bbox"], truth)), (figure["bbox"], truth)
    from PIL import Image

    with Image.open(io.BytesIO(figure["image"]["bytes"])) as crop:
        x1, y1, x2, y2 = figure["bbox"]
        assert crop.size == (x2 - x1, y2 - y1)

    # Its caption is an image_caption block right after it; its labels are not body text.
    labels = [b["label"] for b in first["blocks"]]
    assert labels.index("image_caption") == labels.index("image") + 1
    assert not any(word in first["markdown"] for word in FIGURE_WORDS)
    after_link = first["markdown"].split("![](figure:p1-f1)")[1]
    assert after_link.lstrip().startswith(CAPTION)

    # Describe: the caption found beside it and the text inside it, each labelled.
    caption_line, text_line = figure["description"].split("\n")
    assert caption_line == f"Caption: {CAPTION}"
    assert text_line.startswith("Text in the figure: ") and all(word in text_line for word in FIGURE_WORDS)

    # The text-only page has no figure.
    assert second["figures"] == [] and "image" not in [b["label"] for b in second["blocks"]]
    assert "![" not in second["markdown"]

    # The exported document: the figure, the text read inside it, then the caption, once: the
    # description's "Caption:" line quotes the page's own caption line and is not repeated.
    markdown = (out / "markdown" / "marsh.pdf.md").read_text()
    link = markdown.index("](figures/")
    assert link < markdown.index("> **Figure:** Text in the figure: ") < markdown.index(f"\n{CAPTION}")
    assert markdown.count(f"\n{CAPTION}") == 1 and "Caption: Figure 7" not in markdown[link:]
