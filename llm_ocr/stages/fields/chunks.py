"""Splitting a document into the parts its requests carry.

A document's Markdown is cut at page boundaries (Assemble records where each page starts, in
``page_starts``) and consecutive pages are packed into one request while they fit the model's
context; a document that fits is sent whole, in one request. A page that alone does not fit is
cut (the row's ``error`` says so). With page images, each request carries
``--fields-pages-per-request`` pages.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from llm_ocr.dense_knobs import dense
from llm_ocr.stages.fields.prompts import Chunk


@dataclass(frozen=True)
class PageText:
    """A run of the document's text: the pages it covers (one, or every page when the document
    does not say where its pages start) and the text."""

    pages: tuple[int, ...]
    text: str


def estimate_tokens(text: str) -> int:
    """Tokens ``text`` takes at most, roughly: at the one first guess of tokens per character in
    force (the ``tokens_per_char`` knob, :func:`llm_ocr.dense_knobs.dense`), above what English
    text and Markdown tokenize to (about 4 characters a token), so that an estimate errs towards
    smaller requests."""
    return math.ceil(len(text) * dense().tokens_per_char)


def split_pages(markdown: str, page_starts: list[int] | None, num_pages: int) -> list[PageText]:
    """The document's text per page, from Assemble's ``page_starts`` (character offsets where
    each page's text begins); without them, the whole text as one run of every page."""
    everything = tuple(range(1, max(num_pages, 1) + 1))
    if not page_starts or len(page_starts) != num_pages or sorted(page_starts) != list(page_starts):
        return [PageText(everything, markdown)]
    ends = list(page_starts[1:]) + [len(markdown)]
    return [PageText((n,), markdown[start:end]) for n, (start, end) in enumerate(zip(page_starts, ends), start=1)]


def text_chunks(pages: list[PageText], max_tokens: int | None) -> list[Chunk]:
    """Consecutive pages packed into requests of at most ``max_tokens`` of text each (None: one
    request for the whole document)."""
    if max_tokens is None:
        return [Chunk([n for p in pages for n in p.pages], "".join(p.text for p in pages))]
    budget = max(1, int(max_tokens / dense().tokens_per_char))  # characters
    chunks: list[Chunk] = []
    current: list[PageText] = []
    size = 0
    for page in pages:
        if current and size + len(page.text) > budget:
            chunks.append(Chunk([n for p in current for n in p.pages], "".join(p.text for p in current)))
            current, size = [], 0
        current.append(page)
        size += len(page.text)
    if current:
        chunks.append(Chunk([n for p in current for n in p.pages], "".join(p.text for p in current)))
    for chunk in chunks:
        if chunk.text is not None and len(chunk.text) > budget:
            kept = chunk.text[:budget]
            chunk.cut = (
                f"{chunk.describe(max(chunk.pages))} hold {len(chunk.text):,} characters; only the first "
                f"{budget:,} fit the model's context (--fields-max-input-tokens)"
            )
            chunk.text = kept
    return chunks


def image_chunks(num_pages: int, per_request: int) -> list[list[int]]:
    """Page numbers grouped ``per_request`` at a time."""
    numbers = list(range(1, num_pages + 1))
    return [numbers[i : i + per_request] for i in range(0, len(numbers), max(1, per_request))]


def pages_text(pages: list[PageText], numbers: list[int]) -> str:
    """The text of the given pages (a run covering several pages counts if it covers any)."""
    wanted = set(numbers)
    return "".join(p.text for p in pages if wanted & set(p.pages))
