"""Writes the bench of :mod:`tests.quality.cases` in olmOCR-bench's layout: ``pdfs/**.pdf`` drawn
with reportlab (text, two columns, a ruled table, formulas as text, a blank page) and one JSONL
file per category beside them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from reportlab.lib.pagesizes import letter
from reportlab.pdfgen import canvas

from tests.quality.cases import BENCH

WIDTH, HEIGHT = letter


def _draw(page: canvas.Canvas, spec: dict[str, Any]) -> None:
    top = HEIGHT - 72
    if "columns" in spec:
        for column, x in zip(spec["columns"], (72, 320), strict=True):
            page.setFont("Helvetica", 11)
            for i, line in enumerate(column):
                page.drawString(x, top - i * 16, line)
        return
    if "table" in spec:
        page.setFont("Helvetica-Bold", 13)
        page.drawString(72, top, spec["caption"])
        page.setFont("Helvetica", 11)
        widths, row_height, y0 = [140, 90, 90], 22, top - 30
        for r, row in enumerate(spec["table"]):
            x = 72
            for c, cell in enumerate(row):
                page.rect(x, y0 - (r + 1) * row_height, widths[c], row_height)
                page.drawString(x + 6, y0 - (r + 1) * row_height + 7, cell)
                x += widths[c]
        return
    for i, line in enumerate(spec["lines"]):
        if line.startswith("Page "):
            page.setFont("Helvetica", 9)
            page.drawString(WIDTH / 2 - 15, 40, line)
            continue
        page.setFont("Helvetica-Bold" if i < 2 else "Times-Roman", 14 if i < 2 else 12)
        page.drawString(72, top - i * 22, line)


def write_bench(root: Path) -> Path:
    """The bench under ``root`` (``root/pdfs`` and ``root/*.jsonl``); returns ``root``."""
    files: dict[str, list[dict[str, Any]]] = {}
    for pdf, spec in BENCH.items():
        path = root / "pdfs" / pdf
        path.parent.mkdir(parents=True, exist_ok=True)
        page = canvas.Canvas(str(path), pagesize=letter)
        page.setTitle(pdf)
        _draw(page, spec)
        page.showPage()
        page.save()
        files.setdefault(spec["category"], []).extend(spec["tests"])
    for category, tests in files.items():
        lines = [json.dumps(t) for t in tests]
        # A blank line between tests, as in olmOCR's own sample data: it must be skipped.
        (root / f"{category}.jsonl").write_text("\n\n".join(lines) + "\n", encoding="utf-8")
    return root
