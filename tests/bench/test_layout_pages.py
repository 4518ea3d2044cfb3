"""The generated text-and-figure pages of ``llm-ocr bench-accuracy --corpus``: the figure boxes
they record are where the charts' ink is, and the scores count figures and the lowest page."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pypdfium2 as pdfium

from llm_ocr.bench.accuracy import PageScore, summarise
from llm_ocr.bench.layout_pages import CORPORA, make_corpus, match_figures


def _ink(path: Path, scale: float) -> np.ndarray:
    image = pdfium.PdfDocument(str(path))[0].render(scale=scale).to_pil().convert("L")
    return np.asarray(image) < 200


def test_each_set_tags_its_pages_and_the_figure_boxes_hold_the_charts_ink(tmp_path: Path) -> None:
    for name in CORPORA:
        pages = make_corpus(name, tmp_path / name)
        kinds = {p.kind for p in pages}
        assert kinds == {"text", "figures"}
        assert all(p.figures for p in pages if p.kind == "figures")
        assert not any(p.figures for p in pages if p.kind == "text")
        for page in pages:
            if page.kind != "figures" or page.size[1] > 2000:  # the long strip: checked by its shape below
                continue
            ink = _ink(page.path, 1.0)
            inside = np.zeros_like(ink)
            for x1, y1, x2, y2 in page.figures:
                assert 0 <= x1 < x2 <= page.size[0] and 0 <= y1 < y2 <= page.size[1]
                inside[int(y1) : int(y2) + 1, int(x1) : int(x2) + 1] = True
                # Most of a box is the chart's: its bars, wedges or curves and axes are ink.
                assert ink[int(y1) : int(y2), int(x1) : int(x2)].mean() > 0.01, (page.path.name, page.figures)
    layout = {p.path.name: p for p in make_corpus("layout", tmp_path / "again")}
    assert layout["well-log-234x14295.pdf"].size == (234, 14295) and len(layout["well-log-234x14295.pdf"].figures) == 3
    assert layout["book-page-180x300.pdf"].size == (180, 300)


def test_figures_are_matched_once_and_the_lowest_page_is_reported() -> None:
    drawn = [(0.0, 0.0, 100.0, 100.0), (200.0, 0.0, 300.0, 100.0)]
    found = [(5.0, 5.0, 95.0, 105.0), (0.0, 0.0, 100.0, 100.0), (400.0, 400.0, 500.0, 500.0)]
    assert match_figures(drawn, found) == (1, 2)  # one drawn figure found; a copy and a stray match none
    scores = [
        PageScore("a.pdf", 1, 100, 0, 100, 99, 1.0),
        PageScore("b.pdf", 1, 100, 40, 100, 40, 1.0, kind="figures", figures=2, figures_drawn=1, figures_found=1),
        PageScore("c.pdf", 1, 100, 10, 300, 270, 1.0),
    ]
    summary = summarise(scores, 3.0)
    assert summary["word_recall"] == (99 + 40 + 270) / 500 and summary["min_recall"] == 0.4
    assert summary["min_recall_page"] == "b.pdf p1"
    assert summary["text_word_recall"] == (99 + 270) / 400 and summary["text_min_recall"] == 0.9
    assert (summary["figures_drawn"], summary["figures_found"], summary["figures_unmatched"]) == (1, 1, 1)
