"""olmOCR-bench's text primitives: its normalisation and its repetition detector.

Both follow allenai/olmocr at commit f7cfe4c (``olmocr/bench/tests.py`` ``normalize_text``,
``olmocr/repeatdetect.py`` ``RepeatDetector``), so that a score here means what it means there.
"""

from __future__ import annotations

import re
import unicodedata

#: Typographic characters olmOCR-bench folds to ASCII (and the micro sign to Greek mu).
_FOLDS = {
    "\u2018": "'", "\u2019": "'", "\u201a": "'", "\u201c": '"', "\u201d": '"', "\u201e": '"', "\uff3f": "_",
    "\u2013": "-", "\u2014": "-", "\u2011": "-", "\u2012": "-", "\u2212": "-", "\u00b5": "\u03bc",
}  # fmt: skip
_FOLD_TABLE = str.maketrans(_FOLDS)


def normalize_text(text: str) -> str:
    """Text as olmOCR-bench compares it: ``<br>`` to a space, Markdown/HTML bold and italic
    markers dropped, whitespace runs to one space, NFC, dashes/quotes folded to ASCII."""
    text = re.sub(r"<br/?>", " ", text)
    text = re.sub(r"\*\*(.*?)\*\*", r"\1", text)
    text = re.sub(r"__(.*?)__", r"\1", text)
    text = re.sub(r"</?b>", "", text)
    text = re.sub(r"</?i>", "", text)
    # A second pass with paired markers, then single ones: "." stops at a newline, so an
    # asterisk on one line never pairs with one on another.
    text = re.sub(r"(\*\*|__)(.*?)\1", r"\2", text)
    text = re.sub(r"(\*|_)(.*?)\1", r"\2", text)
    text = re.sub(r"\s+", " ", text)
    text = unicodedata.normalize("NFC", text)
    return text.translate(_FOLD_TABLE)


def tail_repeats(text: str, max_ngram: int = 5) -> list[int]:
    """How many times the last n characters repeat back to back at the end of ``text``, for
    n = 1..``max_ngram`` (whitespace runs count as one space). ``"abcabc"`` gives ``[1, 1, 2, ...]``."""
    counts = [0] * max_ngram
    text = re.sub(r"\s+", " ", text)
    for size in range(1, max_ngram + 1):
        if len(text) < size:
            continue
        target = text[-size:]
        count = 0
        pos = len(text) - size
        while pos >= 0 and text[pos : pos + size] == target:
            count += 1
            pos -= size
        counts[size - 1] = count
    return counts
