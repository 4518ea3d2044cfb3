"""Long pages end to end: a 1:13 strip read in segments by real OCR (the CPU engine) and by
the simulated server; every page one row, the strip's lines once each, in order."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from reportlab.pdfgen import canvas

from llm_ocr.sources.segments import plan_segments
from llm_ocr.testing import CpuServer, SimulatedServer
from tests.conftest import read_stage, run_cli
from tests.docs import make_pdf

STRIP_PT = (234, 3000)  # 468 x 6000 px at 144 DPI
WORDS = "harbour lantern orchard meadow copper willow granite saddle ferry quarry beacon thistle".split()


def make_strip(path: Path, lines: int = 60) -> list[str]:
    """A one-page PDF, 234 x 3000 pt, with ``lines`` numbered lines of big type."""
    c = canvas.Canvas(str(path), pagesize=STRIP_PT)
    c.setFont("Helvetica", 14)
    text = []
    for i in range(lines):
        line = f"Row {i:02d} {WORDS[i % len(WORDS)]} {WORDS[(i * 5 + 3) % len(WORDS)]}"
        c.drawString(18, STRIP_PT[1] - 30 - i * 48.5, line)
        text.append(line)
    c.showPage()
    c.save()
    return text


def extract(inputs: list[Path], out: Path, endpoint: str, *extra: str):
    return run_cli(
        "extract", *map(str, inputs), "--output", str(out), "--endpoint", endpoint, "--workers", "0", "--progress", "off",
        *extra, timeout=300,
    )  # fmt: skip


def row_numbers(markdown: str) -> list[int]:
    return [int(n) for n in re.findall(r"Row\s*(\d{2})", markdown)]


def test_real_ocr_reads_every_line_of_a_strip_once_in_order(tmp_path: Path) -> None:
    pytest.importorskip("rapidocr")
    lines = make_strip(tmp_path / "strip.pdf")
    with CpuServer("--threads", "1", offline=True) as engine:
        result = extract([tmp_path / "strip.pdf"], tmp_path / "out", engine.base_url)
        assert result.returncode == 0, result.stderr[-3000:]
    (row,) = read_stage(tmp_path / "out", "extract")
    assert (row["width"], row["height"]) == (468, 6000)
    assert row["segments"] == len(plan_segments(468, 6000)) >= 6
    found = row_numbers(row["markdown"])
    # Each line once and in order; OCR may misread a few numbers, never repeat or reorder many.
    assert len(found) >= 0.9 * len(lines) and len(set(found)) == len(found), found
    assert found == sorted(found)
    for block in row["blocks"]:
        for x1, y1, x2, y2 in block["boxes"]:
            assert 0 <= x1 < x2 <= 468 and 0 <= y1 < y2 <= 6000  # page pixels
    tops = [b["boxes"][0][1] for b in row["blocks"] if b["boxes"]]
    assert tops == sorted(tops) and tops[-1] > 5000  # down to the bottom of the strip


def test_strips_and_ordinary_pages_get_one_row_each(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    make_strip(tmp_path / "docs" / "strip.pdf")
    make_pdf(tmp_path / "docs" / "letter.pdf", pages=2)
    with SimulatedServer("--instant") as server:
        result = extract([tmp_path / "docs"], tmp_path / "out", server.base_url)
        requests = server.requests()
    assert result.returncode == 0, result.stderr[-3000:]
    rows = read_stage(tmp_path / "out", "extract")
    assert [(r["doc_id"], r["page"]) for r in rows] == [("letter.pdf", 1), ("letter.pdf", 2), ("strip.pdf", 1)]
    strip = rows[2]
    segments = plan_segments(468, 6000)
    assert strip["segments"] == len(segments) and rows[0]["segments"] is None
    assert len(requests) == 2 + len(segments)  # one request per segment, each its own image
    media = {r["body"]["messages"][0]["content"][0]["image_url"]["url"]["data_uri"] for r in requests}
    # Pages and segments alike rendered as the family renders a page (segments from the source).
    assert media == {"image/jpeg"}
    assert strip["status"] == "ok" and strip["markdown"]
    for block in strip["blocks"]:
        for x1, y1, x2, y2 in block["boxes"]:
            assert 0 <= x1 < x2 <= 468 and 0 <= y1 < y2 <= 6000
