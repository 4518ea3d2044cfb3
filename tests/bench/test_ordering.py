"""``llm-ocr bench --ordering``'s workloads are what they claim to be, and its rank correlation is
Spearman's (the sweep's runs themselves take minutes: ``docs/gpu-time.md`` has their figures)."""

from __future__ import annotations

from pathlib import Path

import pypdfium2 as pdfium
import pytest

from llm_ocr.bench.ordering import make_workload, spearman


def test_spearman_ranks_ties_by_their_mean_rank() -> None:
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    # Ranks (1.5, 1.5, 3, 4) against (1, 2, 3, 4): Pearson's of the ranks.
    assert spearman([5, 5, 7, 9], [1, 2, 3, 4]) == pytest.approx(0.9486833, abs=1e-6)
    assert spearman([1, 1, 1], [1, 2, 3]) is None


def text_lengths(folder: Path) -> list[int]:
    """Every page's text layer length, in input order."""
    lengths = []
    for path in sorted(folder.glob("*.pdf")):
        pdf = pdfium.PdfDocument(str(path))
        for index in range(len(pdf)):
            textpage = pdf[index].get_textpage()
            lengths.append(textpage.count_chars())
            textpage.close()
        pdf.close()
    return lengths


def test_the_workloads_hold_what_they_say(tmp_path: Path) -> None:
    last = make_workload(tmp_path, "longest last", 30, seed=1)
    lengths = text_lengths(last.client)
    assert len(lengths) == 30
    # Every page of 2 or 4 columns (over 4,000 characters here) after every page of one column.
    first_long = next(i for i, n in enumerate(lengths) if n > 5200)
    assert min(lengths[first_long:]) > 2500 and max(lengths[:first_long]) <= 5200, lengths
    scans = make_workload(tmp_path, "scans", 30, seed=1)
    old_ocr = make_workload(tmp_path, "scans, old OCR", 30, seed=1)
    originals = text_lengths(scans.originals)
    assert text_lengths(scans.client) == [0] * 30  # image-only pages
    ocr = text_lengths(old_ocr.client)
    # A layer on most pages, never longer than the page's text, and short of it on most.
    assert sum(n > 0 for n in ocr) >= 20 and all(n <= 1.02 * o + 50 for n, o in zip(ocr, originals))
    assert sum(n < 0.8 * o for n, o in zip(ocr, originals)) >= 15
