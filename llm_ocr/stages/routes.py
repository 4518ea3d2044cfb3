"""The text-layer route: a PDF page whose text layer is sound gets its row without a model request.

The page's text comes from its own text layer (:mod:`llm_ocr.sources.text_lines`, which also
judges the layer); its layout — reading order, paragraphs, headings, tables and figures — from the
CPU engine (docs/cpu-engine.md), which is sent the page image with those lines (``text_layer`` in
the request) and answers with DeepSeek-OCR's grounding markup, as it answers any page: it finds
the figures with its layout model and orders the given lines, and reads nothing itself. The
answer is parsed and its figures cropped exactly as a model's answer is, so the row is like any
other page row, with ``route = "text-layer"`` and no model or tokens.

A page whose layer is not sound, or that the CPU engine could not lay out, goes to the model,
and its row says why in ``route_note``.
"""

from __future__ import annotations

import logging
import re
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace

from llm_ocr.options import ExtractOptions
from llm_ocr.records import PageResult
from llm_ocr.sources.base import DocumentRef, PageImage
from llm_ocr.sources.text_lines import LayerPage
from llm_ocr.stages.attempts import UNFINISHED, Answer
from llm_ocr.stages.extract import ExtractContext, reading_to_page
from llm_ocr.stages.furniture import mark_labelled
from llm_ocr.stages.space import place
from llm_ocr.vlm.client import RequestFailed, VlmClient
from llm_ocr.vlm.families import family_named
from llm_ocr.vlm.families.base import Reading

log = logging.getLogger(__name__)

#: Reads and judges a PDF page's text layer in a worker: (location, page, width, height, image).
ReadLayer = Callable[[str, int, int, int, bytes], Awaitable[LayerPage]]

#: The family whose markup the CPU engine answers in (and whose parser reads it).
LAYOUT_FAMILY = "deepseek-ocr"
#: Share of the text layer's words a page's laid-out Markdown must hold. A real figure's labels
#: rarely hold a tenth of a page's words; a layout that loses more took running text for a figure.
MIN_KEPT = 0.9

_WORD = re.compile(r"\w+")


@dataclass
class RouteContext:
    """What every page of a run with ``--route text-layer`` shares."""

    #: The CPU engine that lays text-layer pages out.
    client: VlmClient
    read_layer: ReadLayer
    #: Crops figure boxes from a page image (in a worker).
    crop: Callable[..., Awaitable[list[bytes]]]
    max_tokens: int


async def layer_of(ref: DocumentRef, item: PageImage, ctx: RouteContext) -> LayerPage | None:
    """The verdict on the page's text layer (None: the page is not a PDF page)."""
    if ref.kind != "pdf":
        return None
    return await ctx.read_layer(ref.location, item.page, item.width, item.height, item.image)


async def route_page(
    ref: DocumentRef, item: PageImage, num_pages: int | None, layer: LayerPage, ctx: RouteContext
) -> PageResult | None:
    """The page's row from its sound text ``layer``, laid out by the CPU engine; None when it must
    go to the model after all (the layer is not sound, or the engine failed: logged)."""
    if not layer.sound:
        return None
    family = family_named(LAYOUT_FAMILY)
    started = time.monotonic()
    note = layer.note
    layout = result = None
    for figures in (True, False):
        body = family.body(item.image, item.mime, temperature=0.0, max_tokens=ctx.max_tokens)
        body.setdefault("extra_body", {})["text_layer"] = {"lines": [list(line) for line in layer.lines],
                                                           "figures": figures}
        try:
            result = await ctx.client.chat(body)
        except RequestFailed as exc:
            log.warning("the CPU engine could not lay out page %d of %s (%s); the model reads it", item.page,
                        ref.doc_id, exc)
            return None
        if result.finish_reason in UNFINISHED:
            log.warning("the CPU engine's layout of page %d of %s was cut off; the model reads it", item.page,
                        ref.doc_id)
            return None
        layout = family.parse(result.text, width=item.width, height=item.height, page=item.page)
        kept = kept_share(layer, layout.markdown)
        if kept >= MIN_KEPT:
            break
        # The layout model took lines of running text for a figure (it knows Chinese papers best):
        # the page is laid out again without figures rather than losing its text.
        note = (f"{layer.note}; without figures (the layout model's figures held {1 - kept:.0%} of the text "
                "layer's words)")
    assert layout is not None and result is not None
    reading = Reading(layout, [Answer(result, result.attempts)], result.text, item.image, item.width, item.height)
    tools = ExtractContext(ctx.client, family, ExtractOptions.model_validate({}), ctx.max_tokens, ctx.crop)
    row = await reading_to_page(ref, item, reading, num_pages, tools, time.monotonic() - started)
    # The CPU engine's token counts are estimates of what a model would spend: none was used.
    row = replace(row, model=None, prompt_tokens=None, completion_tokens=None, route="text-layer", route_note=note)
    return mark_labelled(place(row, item.pdf_page))


def kept_share(layer: LayerPage, markdown: str) -> float:
    """Share of the text layer's words (counted with repeats) that the laid-out Markdown holds:
    lines the layout took for a figure's inside are in its description, not in the page's text."""
    want = Counter(w.lower() for line in layer.lines for w in _WORD.findall(line[4]))
    have = Counter(w.lower() for w in _WORD.findall(markdown))
    total = sum(want.values())
    return sum(min(n, have[w]) for w, n in want.items()) / total if total else 1.0
