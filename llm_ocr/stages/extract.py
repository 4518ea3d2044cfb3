"""Extract: a page image → DeepSeek-OCR grounding output → Markdown, layout blocks, figure crops.

The per-page work is :func:`extract_page`; the runner feeds it pages and writes its rows.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from llm_ocr.options import ExtractOptions
from llm_ocr.records import Block, Figure, PageResult
from llm_ocr.sources.base import DocumentRef, PageFailure, PageImage
from llm_ocr.sources.segments import plan_segments
from llm_ocr.stages.attempts import UNFINISHED, Answer, ask_until_whole
from llm_ocr.stages.segmented import read_in_segments
from llm_ocr.vlm.client import ChatResult, EndpointDown, RequestFailed, VlmClient
from llm_ocr.vlm.grounding import parse_layout
from llm_ocr.vlm.recipes import ModelRecipe, image_messages

log = logging.getLogger(__name__)

#: The token DeepSeek-OCR ends a page with; kept in ``raw``, removed from ``markdown``.
EOS_TOKEN = "<｜end▁of▁sentence｜>"


@dataclass
class ExtractContext:
    """What every page of a run shares."""

    client: VlmClient
    recipe: ModelRecipe
    options: ExtractOptions
    max_tokens: int
    crop: Callable[[bytes, list[list[int]]], Awaitable[list[bytes]]]


def page_request(page: PageImage, ctx: ExtractContext, temperature: float) -> dict[str, Any]:
    """The chat-completion arguments for one page (model is added by the client)."""
    return {
        "messages": image_messages(page.image, page.mime, ctx.recipe.ocr_prompt),
        "max_tokens": ctx.max_tokens,
        "temperature": temperature,
        "extra_body": ctx.recipe.extra_body,
    }


def failure_result(ref: DocumentRef, page: int, error: str, num_pages: int | None, attempts: int = 0) -> PageResult:
    """An ``error`` row for a page (or, page 0, a document) that produced no model output."""
    return PageResult(
        doc_id=ref.doc_id,
        doc_index=ref.index,
        page=page,
        source=ref.source,
        num_pages=num_pages,
        status="error",
        error=error,
        attempts=attempts,
    )


async def _ask(page: PageImage, ctx: ExtractContext) -> Answer:
    """Ask the model, cutting loops and retrying pages that looped at rising temperatures."""
    return await ask_until_whole(
        ctx.client,
        ctx.recipe,
        lambda temperature: page_request(page, ctx, temperature),
        retries=ctx.options.truncation_retries,
        temperature_step=ctx.options.retry_temperature_step,
        cut_loops=ctx.options.cut_loops,
    )


async def extract_page(ref: DocumentRef, item: PageImage | PageFailure, num_pages: int | None, ctx: ExtractContext) -> PageResult:
    """Turn one rendered page into its output row. Never raises for a page-level problem.

    :class:`EndpointDown` propagates: the run stops rather than failing every remaining page.
    """
    if isinstance(item, PageFailure):
        return failure_result(ref, item.page, item.error, num_pages)
    segments = plan_segments(item.width, item.height, max_aspect=ctx.options.max_page_aspect)
    if segments:
        return await read_in_segments(
            ref, item, num_pages, segments, ask=lambda page: _ask(page, ctx), crop=ctx.crop, model=ctx.client.model
        )
    try:
        answer = await _ask(item, ctx)
    except RequestFailed as exc:
        return failure_result(ref, item.page, str(exc), num_pages, attempts=exc.attempts)
    except EndpointDown:
        raise
    return await result_to_page(ref, item, answer.result, answer.attempts, num_pages, ctx, answer=answer)


async def result_to_page(
    ref: DocumentRef,
    item: PageImage,
    result: ChatResult,
    attempts: int,
    num_pages: int | None,
    ctx: ExtractContext,
    answer: Answer | None = None,
) -> PageResult:
    """Parse the model's answer into a row, cropping the figures it located."""
    # parse_layout drops the EOS token itself, after capping the length (no full copy here).
    text = answer.text if answer is not None else result.text  # a cut loop: up to its first copy
    layout = parse_layout(text, width=item.width, height=item.height, page=item.page)
    status = "truncated" if result.finish_reason in UNFINISHED else "ok"
    error = None
    if status == "truncated" and result.loop is not None:
        error = f"repetition loop cut in every one of {attempts} attempt(s); text up to the loop kept ({result.loop.describe()})"
    elif status == "truncated":
        error = f"hit max_tokens ({ctx.max_tokens}) after {attempts} attempt(s): likely a repetition loop; partial text kept"
    elif not result.text.strip():
        error = "model returned no text"
    if layout.warnings:
        note = "; ".join(layout.warnings[:5])
        error = f"{error}; {note}" if error else f"output repaired: {note}"
    figures: list[Figure] = []
    if layout.figures:
        try:
            crops = await ctx.crop(item.image, [f.bbox for f in layout.figures])
            figures = [Figure(id=f.id, bbox=f.bbox, image=c) for f, c in zip(layout.figures, crops)]
        except Exception as exc:  # noqa: BLE001 - a bad crop must not lose the page's text
            log.warning("cropping figures of %s page %d failed: %s", ref.doc_id, item.page, exc)
            figures = [Figure(id=f.id, bbox=f.bbox, error=f"crop failed: {exc}") for f in layout.figures]
    return PageResult(
        doc_id=ref.doc_id,
        doc_index=ref.index,
        page=item.page,
        source=ref.source,
        num_pages=num_pages,
        markdown=layout.markdown,
        raw=result.text,
        figures=figures,
        blocks=[Block(label=b.label, boxes=b.boxes, text=b.text) for b in layout.blocks],
        width=item.width,
        height=item.height,
        status=status,
        error=error,
        finish_reason=result.finish_reason,
        prompt_tokens=result.prompt_tokens,
        completion_tokens=result.completion_tokens,
        latency_s=round(result.latency_s, 4),
        attempts=attempts,
        cut_tokens=answer.cut_tokens if answer is not None and answer.notes else None,
        cut_reason=answer.cut_reason if answer is not None else None,
        model=ctx.client.model,
    )
