"""Fallback text: a failed or cut-off PDF page carries the PDF's own text layer, marked as such.

The model's text (partial, or none) stays in ``markdown``/``raw``; the text layer goes to
``fallback_text`` only when :func:`llm_ocr.sources.text_layer.judge_text_layer` finds it usable,
and ``fallback_note`` says why it was used or rejected. Assemble shows it after a visible note,
in a fenced block: it is the PDF's claim about the page, not a reading of it, and Markdown or
HTML in it must not come alive.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from dataclasses import replace

from llm_ocr.records import DOCUMENT_LEVEL_PAGE, PageResult
from llm_ocr.sources.base import DocumentRef
from llm_ocr.sources.text_layer import TextLayer

#: Reads and judges page N of a PDF at a location (in a worker process: see the runners).
ReadTextLayer = Callable[[str, int], Awaitable[TextLayer]]

_FENCES = re.compile(r"`{3,}")


def wants_fallback(ref: DocumentRef, page: PageResult) -> bool:
    """Whether the page is a PDF page the model did not read in full (error or truncated)."""
    return ref.kind == "pdf" and page.page != DOCUMENT_LEVEL_PAGE and page.status in ("error", "truncated")


async def with_fallback(ref: DocumentRef, page: PageResult, read: ReadTextLayer) -> PageResult:
    """``page`` with the verdict on its text layer (and the text, if usable) when it wants one."""
    if not wants_fallback(ref, page):
        return page
    layer = await read(ref.location, page.page)
    return replace(page, fallback_text=layer.text, fallback_note=layer.note)


def fallback_markdown(page: PageResult) -> str | None:
    """The visible note and the fallback text Assemble places on the page, or None."""
    if not page.fallback_text:
        return None
    what = ("the model could not read this page" if page.status == "error"
            else "the model's text of this page is cut off")
    note = (
        f"> **Fallback text (page {page.page}):** {what}; below is the text layer the PDF itself carries, "
        "unverified and without layout."
    )
    longest = max((len(m) for m in _FENCES.findall(page.fallback_text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{note}\n\n{fence}text\n{page.fallback_text}\n{fence}"


def append_fallback(text: str, page: PageResult) -> str:
    """``text`` (a page's Markdown or its failure comment) followed by its fallback, if any."""
    block = fallback_markdown(page)
    return f"{text}\n\n{block}" if block else text
