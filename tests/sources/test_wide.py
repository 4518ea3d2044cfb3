"""Where a wide page is cut: only at gutters between its columns, else nowhere (issue 47).

The end-to-end reading of wide images is tests/stages/test_wide_pages.py; here the plan, from a
PDF page and an image as a run renders them, and the cut of a wide piece whose answer ran out.
"""

from __future__ import annotations

from itertools import pairwise
from pathlib import Path

from reportlab.pdfgen import canvas

from llm_ocr.options import RenderOptions
from llm_ocr.sources.base import DocumentRef
from llm_ocr.sources.render import render_pages
from llm_ocr.sources.segments import Segment
from llm_ocr.sources.wide import split_at_gutter
from tests.fakes.crop_adversary import draw_page

COLUMNS = [["Invoice 2231 paid", "Invoice 2232 due"], ["Carrier north seven", "Carrier south nine"],
           ["Balance forward", "Credit note issued"]]


def wide_pdf(path: Path, columns: list[list[str]], gap: float) -> list[tuple[float, float]]:
    """A 900 x 90 pt page of ``columns`` of 10 pt lines, ``gap`` pt between them; returns each
    column's ``(left, right)`` in points."""
    pdf = canvas.Canvas(str(path), pagesize=(900, 90))
    pdf.setFont("Helvetica", 10)
    spans, x = [], 20.0
    for column in columns:
        for i, line in enumerate(column):
            pdf.drawString(x, 60 - 14 * i, line)
        right = x + max(pdf.stringWidth(line, "Helvetica", 10) for line in column)
        spans.append((x, right))
        x = right + gap
    pdf.save()
    return spans


def pieces_of(path: Path, kind: str):
    (page,) = render_pages(DocumentRef("w", 0, "w", kind, str(path)), RenderOptions(), 1, 1, max_aspect=3.0)
    return page


def test_a_wide_pdf_page_is_cut_at_its_gutters_only(tmp_path: Path) -> None:
    spans = wide_pdf(tmp_path / "columns.pdf", COLUMNS, gap=150)
    page = pieces_of(tmp_path / "columns.pdf", "pdf")
    assert page.pieces is not None
    segments = [p.segment for p in page.pieces.pieces]
    assert len(segments) >= 2
    for a, b in pairwise(segments):
        assert a.right == b.left  # they meet, without overlapping
        cut = a.right / page.pieces.scale  # in points
        assert any(right < cut < left for (_, right), (left, _) in pairwise(spans)), (cut, spans)


def test_a_wide_page_without_gutters_is_read_whole(tmp_path: Path) -> None:
    wide_pdf(tmp_path / "line.pdf", [["Then the quick brown fox jumps over the lazy dog and on and on " * 2]], gap=0)
    assert pieces_of(tmp_path / "line.pdf", "pdf").pieces is None
    image = draw_page("fox", [[["Then the quick brown fox jumps over the lazy dog."]]], size=36, height=200)
    (tmp_path / "fox.png").write_bytes(image.png)
    assert pieces_of(tmp_path / "fox.png", "image").pieces is None


def test_a_wide_piece_is_cut_again_only_at_a_gutter() -> None:
    line = draw_page("fox", [[["Then the quick brown fox jumps over the lazy dog."]]], size=36, height=200)
    width, height = line.size
    halves, why = split_at_gutter(line.png, Segment(0, 100, 0, 100 + width, height))
    assert halves == [] and "no gutter" in why
    form = draw_page("form", [[[t] for t in c] for c in COLUMNS], size=20, gutter=120, height=150)
    width, height = form.size
    halves, _ = split_at_gutter(form.png, Segment(0, 0, 0, width, height))
    assert len(halves) == 2 and halves[0].right == halves[1].left
    x = halves[0].right
    for drawn in form.lines:  # the cut crosses no line
        assert not drawn.left < x < drawn.right, (drawn.text, x)
