"""A PDF page's own text layer, and whether it can be trusted as a fallback.

When the model fails on a PDF page (an error row, or an answer cut off at ``max_tokens``), the
text the PDF carries for that page is better than a hole: searchable, if not laid out. But text
layers lie. A broken ``ToUnicode`` map shifts every letter ("Opnbddchmfr ne sgd" for
"Proceedings of the"), scans have none, and fonts without a Unicode map give glyph ids that
come out as control characters, private-use code points or U+FFFD. So a layer is only used when
it reads as language: enough words, mostly letters, almost no replacement, private-use or
control characters, and at least half of its longer words in an English word list (SCOWL,
shipped in ``data/``; see ``data/english-words.NOTICE``). A rejected layer says why.

:func:`read_text_layer` runs in a worker process (pypdfium2 is not thread-safe).
"""

from __future__ import annotations

import gzip
import importlib.resources
import re
import unicodedata
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import fsspec
from fsspec.implementations.local import LocalFileSystem

from llm_ocr.storage.stores import store_options

#: Fewer words than this on a page are too few to judge (and too little to be worth it).
MIN_WORDS = 10
#: Share of the words of 3+ ASCII letters that must be in the English word list.
MIN_DICTIONARY_RATE = 0.5
#: Share of non-space characters that must be letters (glyph-id garbage is mostly not).
MIN_LETTER_SHARE = 0.3
#: Share of non-space characters that may be U+FFFD, private-use, unassigned or control.
MAX_BAD_SHARE = 0.01
#: Longest fallback text kept per page (a pathological layer must not bloat a row).
MAX_CHARS = 200_000

_WORD = re.compile(r"[^\W\d_]{2,}")
# PDFium marks hyphens it generated at line ends and other non-text positions with these.
_PDFIUM_MARKERS = str.maketrans({"\x02": None, "\ufffe": None, "\x00": None})


@dataclass(frozen=True)
class TextLayer:
    """The verdict on one page's text layer: ``text`` when usable (else None), and why."""

    text: str | None
    note: str

    @property
    def usable(self) -> bool:
        """Whether the layer can stand in for the model's text."""
        return self.text is not None


@lru_cache(maxsize=1)
def english_words() -> frozenset[str]:
    """The shipped English word list (lower case, ~40,000 words with their inflections)."""
    data = importlib.resources.files("llm_ocr.sources").joinpath("data/english-words.txt.gz").read_bytes()
    return frozenset(gzip.decompress(data).decode("ascii").split())


def clean_text(raw: str) -> str:
    """PDFium's page text normalised: ligatures unfolded (NFKC), its markers dropped, ``\\n`` lines."""
    text = unicodedata.normalize("NFKC", raw.translate(_PDFIUM_MARKERS))
    lines = [line.rstrip() for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n")]
    return "\n".join(lines).strip()


def _reject(why: str) -> TextLayer:
    return TextLayer(None, f"PDF text layer rejected: {why}")


def judge_text_layer(raw: str) -> TextLayer:
    """Whether ``raw`` (a page's text layer) reads as English text; the note says why or why not."""
    text = clean_text(raw)
    chars = [c for c in text if not c.isspace()]
    if not chars:
        return TextLayer(None, "no PDF text layer on this page (a scan or an image-only page)")
    categories = [unicodedata.category(c) for c in chars]
    bad = {
        "replacement characters (U+FFFD): the font has no usable Unicode map": chars.count("\ufffd"),
        "private-use code points: glyph ids, not text": categories.count("Co"),
        "control or unassigned code points: glyph ids, not text": categories.count("Cc") + categories.count("Cn"),
    }
    for why, count in bad.items():
        if count / len(chars) > MAX_BAD_SHARE:
            return _reject(f"{count / len(chars):.0%} {why}")
    letters = sum(1 for c in categories if c.startswith("L"))
    if letters / len(chars) < MIN_LETTER_SHARE:
        return _reject(f"only {letters / len(chars):.0%} of its characters are letters (symbols or glyph-id garbage)")
    words = _WORD.findall(text)
    if len(words) < MIN_WORDS:
        return _reject(f"only {len(words)} word(s), fewer than {MIN_WORDS}: too little to check")
    checkable = [w.lower() for w in words if len(w) >= 3 and w.isascii()]
    if len(checkable) * 2 < len(words):
        return _reject("mostly words that are not plain ASCII: only English text layers can be checked")
    known = english_words()
    rate = sum(1 for w in checkable if w in known) / len(checkable)
    if rate < MIN_DICTIONARY_RATE:
        return _reject(
            f"only {rate:.0%} of its words are English dictionary words (a shifted or garbled font encoding, "
            "e.g. 'Opnbddchmfr' for 'Proceedings', or not English)"
        )
    note = f"PDF text layer: {len(words)} words, {rate:.0%} English dictionary words; not read by the model"
    if len(text) > MAX_CHARS:
        text = text[:MAX_CHARS]
        note += f"; cut to its first {MAX_CHARS:,} characters"
    return TextLayer(text, note)


def page_text(location: str, page: int, storage_options: dict[str, Any] | None = None) -> str:
    """The raw text layer of page ``page`` (1-based) of the PDF at ``location`` (path or URL)."""
    import pypdfium2 as pdfium

    fs, path = fsspec.core.url_to_fs(location, **store_options(location, storage_options))
    # PDFium reads a local file lazily by itself; a remote one is read whole (failed pages only).
    source: str | bytes = path if isinstance(fs, LocalFileSystem) else fs.cat_file(path)
    pdf = pdfium.PdfDocument(source)
    try:
        if not 1 <= page <= len(pdf):
            raise ValueError(f"page {page} is outside 1..{len(pdf)}")
        handle = pdf[page - 1]
        try:
            textpage = handle.get_textpage()
            try:
                return str(textpage.get_text_range())
            finally:
                textpage.close()
        finally:
            handle.close()
    finally:
        pdf.close()


def read_text_layer(location: str, page: int, storage_options: dict[str, Any] | None = None) -> TextLayer:
    """Read and judge the text layer of one PDF page; an unreadable file is a rejection, not an error."""
    import pypdfium2 as pdfium

    try:
        raw = page_text(location, page, storage_options)
    except (pdfium.PdfiumError, OSError, ValueError) as exc:
        return _reject(f"could not read it ({exc})")
    return judge_text_layer(raw)
