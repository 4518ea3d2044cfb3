"""Reading a PDF page's text layer and judging whether it reads as language (the fallback text)."""

from __future__ import annotations

from pathlib import Path

import pytest
from reportlab.pdfgen import canvas

from llm_ocr.sources.text_layer import MIN_WORDS, english_words, judge_text_layer, read_text_layer
from tests.docs import make_pdf, make_shifted_pdf

PROSE = [
    "Proceedings of the International Conference on Document Analysis and Recognition.",
    "We describe a method that reads scanned pages and returns their text with the layout kept.",
    "The results show that the approach works on books, journals and reports alike.",
]


def test_a_born_digital_page_is_usable_and_says_how_it_was_judged(tmp_path: Path) -> None:
    lines = make_pdf(tmp_path / "a.pdf", pages=2, seed=3)
    layer = read_text_layer(str(tmp_path / "a.pdf"), 2)
    assert layer.usable
    assert all(line in layer.text for line in lines[1])  # page 2's own lines, not page 1's
    assert lines[0][0] not in layer.text
    assert layer.note.startswith("PDF text layer: ") and "English dictionary words" in layer.note


def test_a_caesar_shifted_text_layer_is_refused_with_the_reason(tmp_path: Path) -> None:
    # The page shows "Proceedings of the ..."; its ToUnicode map says "Oqnbddchmfr ne sgd ...".
    make_shifted_pdf(tmp_path / "shifted.pdf", [PROSE])
    layer = read_text_layer(str(tmp_path / "shifted.pdf"), 1)
    assert not layer.usable and layer.text is None
    assert "rejected" in layer.note and "dictionary words" in layer.note and "shifted" in layer.note
    # The same words with a correct map are accepted: the shift, not the wording, is refused.
    make_shifted_pdf(tmp_path / "straight.pdf", [PROSE], shift=0)
    assert read_text_layer(str(tmp_path / "straight.pdf"), 1).usable


@pytest.mark.parametrize("shift", [-2, -1, 1, 3])
def test_shifted_english_of_any_offset_scores_far_below_the_threshold(shift: int) -> None:
    def caesar(text: str) -> str:
        def one(c: str) -> str:
            if c.islower():
                return chr((ord(c) - 97 + shift) % 26 + 97)
            if c.isupper():
                return chr((ord(c) - 65 + shift) % 26 + 65)
            return c

        return "".join(one(c) for c in text)

    assert judge_text_layer(" ".join(PROSE)).usable
    assert not judge_text_layer(caesar(" ".join(PROSE))).usable


def test_a_page_without_text_says_so(tmp_path: Path) -> None:
    pdf = canvas.Canvas(str(tmp_path / "blank.pdf"))
    pdf.rect(100, 100, 200, 200, fill=1)  # ink, but no text: a scan looks like this
    pdf.showPage()
    pdf.save()
    layer = read_text_layer(str(tmp_path / "blank.pdf"), 1)
    assert not layer.usable and layer.note.startswith("no PDF text layer")


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("".join(chr(0xE000 + i % 200) for i in range(300)), "private-use code points"),
        ("The result \ufffd\ufffd of the \ufffd method \ufffd " * 10, "replacement characters"),
        ("\x03\x11\x1f\x07 text " * 40, "control or unassigned code points"),
        ("12 34 56 78 90 %% ## 11 22 33 44 55 66 77 88 99 ab", "are letters"),
        ("Results of the method.", "fewer than"),
        ("Пример текста на русском языке который нельзя проверить словарём английских слов здесь", "plain ASCII"),
    ],
)
def test_garbage_and_uncheckable_layers_are_refused_naming_why(text: str, reason: str) -> None:
    layer = judge_text_layer(text)
    assert not layer.usable and reason in layer.note, layer.note


def test_ligatures_and_pdfium_hyphen_markers_do_not_count_against_a_layer() -> None:
    text = "The ﬁrst ﬁgure shows the eﬀect of the method on docu\x02\r\nments and their ﬁnal layout in print."
    layer = judge_text_layer(text)
    assert layer.usable and "first figure" in layer.text and "\x02" not in layer.text and "\r" not in layer.text


def test_the_shipped_word_list_is_real_english() -> None:
    words = english_words()
    assert 30_000 < len(words) < 60_000
    assert {"proceedings", "the", "document", "analysis", "recognition"} <= words
    assert not {"opnbddchmfr", "sgd", "hmsdqm"} & words
    assert MIN_WORDS >= 5


def test_an_unreadable_file_is_a_rejection_not_an_exception(tmp_path: Path) -> None:
    (tmp_path / "broken.pdf").write_bytes(b"%PDF-1.7\n" + b"\x00" * 64)
    layer = read_text_layer(str(tmp_path / "broken.pdf"), 1)
    assert not layer.usable and "could not read it" in layer.note
