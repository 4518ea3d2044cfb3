"""What an answer that ran out says about its page, and the run's tokens per character."""

from __future__ import annotations

import random

from llm_ocr.dense_knobs import DenseOptions
from llm_ocr.sources.density import TextEstimate
from llm_ocr.stages.pieces.rate import RateBook, coverage
from tests.docs import paragraph


def _page(lines: int = 40) -> str:
    rng = random.Random(4)
    return "\n".join(paragraph(rng) for _ in range(lines))


def _grounded(text: str) -> str:
    """``text`` as DeepSeek-OCR's grounding markup writes it, one block a line."""
    return "".join(f"<|ref|>text<|/ref|><|det|>[[87, {40 + i}, 793, {60 + i}]]<|/det|>\n{line}\n\n"
                   for i, line in enumerate(text.splitlines()))


def test_an_answer_that_ran_out_reading_its_page_reads_its_page() -> None:
    page = _page()
    layer = TextEstimate(len(page), "text layer", page)
    seen = coverage(_grounded(page[: len(page) * 2 // 3]), layer)  # cut two thirds in, mid-word
    assert seen.reads_page and seen.share is not None and 0.6 <= seen.share <= 0.7


def test_a_loop_the_watch_cannot_see_is_not_reading_its_page() -> None:
    page = _page()
    layer = TextEstimate(len(page), "text layer", page)
    start = _grounded(page[:300])
    counting = start + " ".join(f"{n}." for n in range(1, 2000))  # no repeated unit: the watch misses it
    assert not coverage(counting, layer).reads_page
    again = _grounded(page + "\n" + page[: len(page) // 2])  # the page read again from the top
    assert not coverage(again, layer).reads_page
    table = start + "".join(f"<tr><td>{n}</td><td>{n * 7 % 1000}</td></tr>" for n in range(600))
    assert not coverage(table, layer).reads_page


def test_without_a_text_layer_the_ink_bounds_the_answer() -> None:
    page = _page()
    ink = TextEstimate(len(page), "ink")
    assert coverage(page[:2000], ink).reads_page
    assert not coverage(page * 2, ink).reads_page  # more letters than the ink can hold
    assert not coverage(" ".join(str(n) for n in range(3000)), ink).reads_page  # digits: counting
    assert coverage("anything", None).reads_page  # nothing to compare with: as before, long


def test_the_run_rate_is_a_high_quantile_never_under_the_first_guess() -> None:
    book = RateBook()
    layer = TextEstimate(5000, "text layer")
    assert book.rate(layer) == DenseOptions().tokens_per_char  # nothing seen yet
    book.record(600, 3000, "text layer")  # 0.2: terser than the guess
    assert book.rate(layer) == DenseOptions().tokens_per_char
    for tokens in (3600, 3700, 3500, 3650, 3550, 3600, 3700, 3500, 3600):  # ~1.2 a character
        book.record(tokens, 3000, "text layer")
    assert 1.15 <= book.rate(layer) <= 1.25
    assert book.rate(TextEstimate(5000, "ink")) == DenseOptions().tokens_per_char  # ink estimates are kept apart
    book.record(5000, 300, "text layer")  # a page too small to say anything
    assert book.observations("text layer") == 10
