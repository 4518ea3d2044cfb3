"""The generated log sheets, encyclopedia print and label of ``llm-ocr bench-accuracy --corpus
sheets|strip-sweep``: the shapes they promise, and every word of their text layer on the page
(a word drawn past the edge is in the truth but on no image, and would count as missed)."""

from __future__ import annotations

from pathlib import Path

import pypdfium2 as pdfium

from llm_ocr.bench.sheet_pages import SWEEP_ASPECTS, SWEEP_FONT_SIZES, make_sheets


def test_the_sheets_have_their_shapes_and_all_their_text_on_the_page(tmp_path: Path) -> None:
    shapes = {}
    for name in ("sheets", "strip-sweep"):
        for page in make_sheets(name, tmp_path / name):
            pdf = pdfium.PdfDocument(str(page.path))
            width, height = pdf[0].get_size()
            shapes[page.path.name] = (width, height)
            text = pdf[0].get_textpage()
            assert text.count_chars() > 100, page.path.name
            for i in range(text.count_chars()):
                left, bottom, right, top = text.get_charbox(i)
                assert -0.5 <= left and right <= width + 0.5 and -0.5 <= bottom and top <= height + 0.5, (
                    page.path.name, text.get_text_range(i, 1))
    assert shapes["well-log-612x37332.pdf"] == (612, 37332)  # 8.5 in wide, 1:61
    assert shapes["label-144x72.pdf"] == (144, 72)
    assert sorted(round(h / w) for n, (w, h) in shapes.items() if n.startswith("well-log-1x")) == sorted(
        a for a in SWEEP_ASPECTS for _ in SWEEP_FONT_SIZES)
