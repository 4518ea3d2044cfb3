"""Word-level differences between the Markdown of several runs, as HTML."""

from __future__ import annotations

import re
from difflib import SequenceMatcher

from llm_ocr.report.safe_html import esc

#: Pages longer than this (in words) are shown without highlighting (the diff is quadratic).
MAX_WORDS = 20_000

_TOKEN = re.compile(r"\s*\S+|\s+$")


def _tokens(text: str) -> tuple[list[str], list[str]]:
    """``text`` as (tokens with their leading whitespace, the bare words)."""
    tokens = _TOKEN.findall(text)
    return tokens, [t.strip() for t in tokens]


def changed_words(base: str, other: str) -> tuple[set[int], set[int]]:
    """Indices of ``base``'s words missing from ``other`` and of ``other``'s words not in ``base``."""
    _, a = _tokens(base)
    _, b = _tokens(other)
    missing: set[int] = set()
    added: set[int] = set()
    for tag, i1, i2, j1, j2 in SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag in ("delete", "replace"):
            missing.update(range(i1, i2))
        if tag in ("insert", "replace"):
            added.update(range(j1, j2))
    return missing, added


def highlighted(text: str, marked: set[int], css: str) -> str:
    """``text`` as HTML (whitespace kept by the caller's CSS) with words ``marked`` in ``<mark class=css>``."""
    tokens, _ = _tokens(text)
    parts = []
    for i, token in enumerate(tokens):
        word = token.lstrip()
        space = token[: len(token) - len(word)]
        parts.append(esc(space) + (f'<mark class="{css}">{esc(word)}</mark>' if i in marked and word else esc(word)))
    return "".join(parts)


def diff_columns(texts: list[str]) -> list[str]:
    """Each run's text as HTML: the first (the base) with the words some other run lacks marked
    ``llmocr-del``, every other with the words the base lacks marked ``llmocr-ins``."""
    if not texts:
        return []
    if any(len(_tokens(t)[1]) > MAX_WORDS for t in texts):
        return [esc(t) for t in texts]
    base = texts[0]
    base_missing: set[int] = set()
    columns = [""]
    for other in texts[1:]:
        missing, added = changed_words(base, other)
        base_missing |= missing
        columns.append(highlighted(other, added, "llmocr-ins"))
    columns[0] = highlighted(base, base_missing, "llmocr-del")
    return columns
