"""Extract: a page image → the model family's answer → Markdown, layout blocks, figure crops.

The per-page work is :func:`extract_page`; the runner feeds it pages and writes its rows. How a
page is asked and how the answer is read is the family's recipe (:mod:`llm_ocr.vlm.families`):
one request for most families, several for some (MinerU's layout pass, then one request per
block; olmOCR-2's page turned and read again). A page longer than 1:3 is read in segments,
a page whose text is longer than one answer in tiles or bands as its family's recipe says, a
piece whose answer still runs out cut in two and read again: :mod:`llm_ocr.stages.pieces`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from llm_ocr.options import ExtractOptions, RenderOptions, dense
from llm_ocr.records import Figure, PageResult
from llm_ocr.sources.base import DocumentRef, PageFailure, PageImage
from llm_ocr.sources.pieces import Region
from llm_ocr.sources.segments import plan_segments
from llm_ocr.sources.wide import plan_wide
from llm_ocr.stages.attempts import UNFINISHED, Answer, ask_until_whole
from llm_ocr.stages.furniture import mark_labelled
from llm_ocr.stages.pieces.plan import TilePlan, may_be_long, tiles_after, tiles_always, tiles_at_once, tiling_allowed
from llm_ocr.stages.pieces.rate import Coverage, RateBook, coverage
from llm_ocr.stages.pieces.read import Reader, Stitch
from llm_ocr.stages.space import place
from llm_ocr.vlm.box import Box
from llm_ocr.vlm.client import ChatResult, EndpointDown, RequestFailed, VlmClient
from llm_ocr.vlm.families.base import BodyFor, Family, PageInput, Reading, Retries

log = logging.getLogger(__name__)

#: The token DeepSeek-OCR ends a page with; kept in ``raw``, removed from ``markdown``.
EOS_TOKEN = "<｜end▁of▁sentence｜>"  # noqa: S105 - a model token, not a password


#: Renders regions of a page from its source: ``(document, page, regions) -> [(image, mime, w, h)]``.
RenderRegions = Callable[[DocumentRef, int, list[Region]], Awaitable[list[tuple[bytes, str, int, int] | None]]]


@dataclass
class ExtractContext:
    """What every page of a run shares."""

    client: VlmClient
    recipe: Family
    options: ExtractOptions
    max_tokens: int
    crop: Callable[[bytes, Sequence[Box]], Awaitable[list[bytes]]]
    #: Turns or resizes an encoded image in a worker: (image, rotate, size, min_side) -> (bytes, w, h).
    transform: Callable[..., Awaitable[tuple[bytes, int, int]]] | None = None
    #: The permits the pieces (segments, tiles) of every page take while they are asked: as many
    #: as the run's pages in flight, apart from them (a page holds its slot while its pieces
    #: wait for theirs, so one limit for both could deadlock); None: no limit.
    piece_limit: AbstractAsyncContextManager[Any] | None = None
    #: Stitches a long page's figures from its pieces in a worker (None: on a thread).
    stitch: Stitch | None = None
    #: The server's context length (``max_model_len``), when it says: what is left of it beside
    #: ``max_tokens`` bounds the image of each piece of a dense page.
    context: int | None = None
    #: Renders regions of a page (fractions of it) from its source, each as a page of its own at
    #: the family's resolution, in a worker: (document, page, regions) -> [(image, mime, w, h)].
    #: The tiles and bands of a dense page are rendered so (None: cut from the page image).
    render_regions: RenderRegions | None = None
    #: The answer tokens per character of text estimate this run's pages showed: what dense
    #: pages are planned with (:mod:`llm_ocr.stages.pieces.rate`).
    rates: RateBook = field(default_factory=RateBook)
    #: A stronger model reads again the pages this run leaves truncated (``--escalate-to``): a
    #: whole page's answer that runs out without repeating itself and that no text layer
    #: vouches for is left to it, neither asked again hotter nor cut into pieces (:func:`_whole`).
    escalates: bool = False


class _Tools:
    """What a family's :meth:`~llm_ocr.vlm.families.base.Family.read` may do for one page."""

    def __init__(self, ctx: ExtractContext, stop_when_long: bool = False,
                 long_if: Callable[[ChatResult], bool] | None = None) -> None:
        self.ctx = ctx
        self.stop_when_long = stop_when_long
        self.long_if = long_if

    async def ask(self, body_for: BodyFor, retries: Retries) -> Answer:
        options = self.ctx.options
        return await ask_until_whole(
            self.ctx.client,
            self.ctx.recipe,
            body_for,
            retries=options.truncation_retries,
            temperature_step=options.retry_temperature_step,
            cut_loops=options.cut_loops,
            schedule=retries,
            stop_when_long=self.stop_when_long,
            long_if=self.long_if,
        )

    async def crop(self, image: bytes, boxes: Sequence[Box]) -> list[bytes]:
        return await self.ctx.crop(image, boxes)

    async def transform(
        self, image: bytes, *, rotate: int = 0, size: tuple[int, int] | None = None, min_side: int = 0
    ) -> tuple[bytes, int, int]:
        if self.ctx.transform is None:
            raise RuntimeError("this Extract context cannot transform images")
        return await self.ctx.transform(image, rotate, size, min_side)


def family_render(render: RenderOptions, family: Family) -> RenderOptions:
    """``render`` with the family's page image (DPI or longest side, format, pixel cap) for
    every field the user did not set: a page is sent the way the family was trained."""
    wanted = {k: v for k, v in family.rendering.options().items() if k not in render.model_fields_set}
    return render.model_copy(update=wanted) if wanted else render


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


async def read_page(page: PageImage, ctx: ExtractContext, *, stop_when_long: bool = False,
                    long_if: Callable[[ChatResult], bool] | None = None) -> Reading:
    """Read one page (or segment, or tile) image the family's way; raises :class:`RequestFailed`.

    With ``stop_when_long`` an answer that runs to ``max_tokens`` without repeating itself is not
    retried hotter (:func:`~llm_ocr.stages.attempts.ask_until_whole`): the page is long, and is
    read in tiles instead; with ``long_if`` too, only an answer it says read the page.

    An image the family's own client would resize before sending (Infinity-Parser2's: sides
    multiples of 32, :meth:`~llm_ocr.vlm.families.base.Rendering.sent_size`) is resized so first,
    in a worker: the reading's boxes and image are then that image's."""
    width, height = ctx.recipe.rendering.sent_size(page.width, page.height)
    image, mime = page.image, page.mime
    if (width, height) != (page.width, page.height):
        if ctx.transform is None:
            raise RuntimeError(f"{ctx.recipe.title} sends images resized, and this Extract context cannot resize")
        image, width, height = await ctx.transform(page.image, 0, (width, height), 0)
        mime = "image/png"
    source = PageInput(image, mime, width, height, page.page)
    return await ctx.recipe.read(source, _Tools(ctx, stop_when_long, long_if), ctx.max_tokens)


def tiles_dense_pages(ctx: ExtractContext) -> bool:
    """Whether this run may read dense pages in tiles (the option, and the family allows it):
    then its pages' text is estimated as they are rendered."""
    return tiling_allowed(ctx.recipe, ctx.options.tile_dense_pages)


def pieces_reader(ctx: ExtractContext) -> Reader:
    """The reader of this run's pieces (segments, tiles, bands): each read the family's way,
    stopping at an answer that runs out without repeating itself (it would only write the same
    text again hotter: the piece is cut again instead)."""
    retries = ctx.options.truncation_retries
    return Reader(
        read=lambda page: read_page(page, ctx, stop_when_long=True), crop=ctx.crop, model=ctx.client.model,
        limit=ctx.piece_limit, stitch=ctx.stitch, family=ctx.recipe,
        prompt_room=ctx.context - ctx.max_tokens if ctx.context else None, max_tokens=ctx.max_tokens,
        # The whole-page reading the cost bound is against: a first attempt and the retries.
        attempts=1 + (retries if retries is not None else ctx.recipe.retries.count),
    )


async def _tiled(
    ref: DocumentRef, item: PageImage, num_pages: int | None, plan: TilePlan | None, ctx: ExtractContext,
    first: Reading | None = None
) -> PageResult | None:
    """The page read in the tiles of ``plan`` (None: no plan, or it cannot be cut)."""
    if plan is None:
        return None
    sourced = partial(ctx.render_regions, ref, item.page) if ctx.render_regions is not None else None
    return await pieces_reader(ctx).tiles(ref, item, num_pages, plan, first=first, sourced=sourced)


async def extract_page(ref: DocumentRef, item: PageImage | PageFailure, num_pages: int | None,
                       ctx: ExtractContext) -> PageResult:
    """Turn one rendered page into its output row, its boxes placed in PDF points too when it is a
    PDF page (:func:`~llm_ocr.stages.space.place`) and the blocks its family labels page furniture
    marked (:func:`~llm_ocr.stages.furniture.mark_labelled`). Never raises for a page-level problem.

    :class:`EndpointDown` propagates: the run stops rather than failing every remaining page.
    """
    if isinstance(item, PageFailure):
        return failure_result(ref, item.page, item.error, num_pages)
    return mark_labelled(place(await _read(ref, item, num_pages, ctx), item.pdf_page))


async def _read(ref: DocumentRef, item: PageImage, num_pages: int | None, ctx: ExtractContext) -> PageResult:
    """The row of a rendered page: read in segments, in tiles, or whole."""
    mode = ctx.options.pieces  # auto, off (every page whole), always (in pieces where a plan exists)
    if mode != "off" and (row := await _segmented(ref, item, num_pages, ctx)):
        return row
    tiling = mode != "off" and tiles_dense_pages(ctx)
    rate = ctx.rates.rate(item.text_estimate)
    # Tiles keep the complete part of an answer that runs out: planned from the usual rate.
    planned = ctx.rates.rate(item.text_estimate, dense().keeps_complete_quantile) if ctx.recipe.dense_tiles else rate
    plan = tiles_at_once(item, ctx.max_tokens, planned)
    if mode == "always" and plan is None:
        plan = tiles_always(item, ctx.max_tokens, planned)
    if tiling and (row := await _tiled(ref, item, num_pages, plan, ctx)):
        return row
    return await _whole(ref, item, num_pages, ctx, tiling, (rate, planned))


async def _segmented(
    ref: DocumentRef, item: PageImage, num_pages: int | None, ctx: ExtractContext
) -> PageResult | None:
    """A long page read in segments (None: the page is not long, or is a wide one without gutters)."""
    if item.pieces is not None:  # a long page: its segments were rendered with it, from the source
        return await pieces_reader(ctx).segments(ref, item, num_pages, [p.segment for p in item.pieces.pieces],
                                                 item.pieces)
    segments = plan_segments(item.width, item.height, max_aspect=ctx.options.max_page_aspect)
    if segments and item.width > item.height:  # a wide page: cut between its columns, or read whole
        segments = await asyncio.to_thread(plan_wide, item.image, item.width, item.height, ctx.options.max_page_aspect)
    if not segments:
        return None
    # A long page rendered without its pieces (an image handed in by a caller that did not ask
    # for them): cut from its image, which is at least as sharp as the model reads it only when
    # the page was not shrunk to fit the family's size.
    return await pieces_reader(ctx).segments(ref, item, num_pages, segments)


async def _whole(ref: DocumentRef, item: PageImage, num_pages: int | None, ctx: ExtractContext, tiling: bool,
                 rates: tuple[float, float]) -> PageResult:
    """The page read whole; with ``tiling``, read again in tiles when its answer ran out without
    repeating itself and was reading the page (``rates``: the tokens a character it is judged
    and planned with)."""
    rate, planned = rates
    started = time.monotonic()
    covered: list[Coverage] = []
    unvouched: list[str] = []

    def long_if(result: ChatResult) -> bool:
        """An answer that ran out unrepeated is long when the page may hold that much, or when
        its words are the page's own text (the estimate's rate may be wrong for this model).
        With a stronger model after this one, only the page's text layer can say so: an
        answer it does not vouch for ends the asking (no hotter retry), and is not cut."""
        seen = coverage(_markdown(ctx.recipe, result.text, item), item.text_estimate)
        covered.append(seen)
        if ctx.escalates and not (seen.reads_page and _has_text_layer(item)):
            unvouched.append(seen.why)
            return True
        return tiling and (seen.reads_page or may_be_long(item, ctx.max_tokens, rate))

    try:
        reading = await read_page(item, ctx, stop_when_long=tiling or ctx.escalates, long_if=long_if)
    except RequestFailed as exc:
        return failure_result(ref, item.page, str(exc), num_pages, attempts=exc.attempts)
    except EndpointDown:
        raise
    if unvouched and any(getattr(a, "long", False) for a in reading.answers):
        # A weak model's long, unrepeated answer that may not be the page (it invents one) costs
        # a whole max_tokens again per retry and up to cost_bound times that in pieces: the
        # stronger model reads the page once instead (issue #47, docs/routes.md).
        reading.notes.append(f"ran to max_tokens without repeating itself, and no text layer vouches for it "
                             f"({unvouched[-1]}): neither retried nor cut, left to the stronger model")
        latency = time.monotonic() - started
        return await reading_to_page(ref, item, reading, num_pages, ctx, latency)
    _observe(ctx.rates, item, reading, covered[-1] if covered else None)
    plan = tiles_after(reading, item, ctx.max_tokens, planned, covered[-1] if covered else None)
    if tiling and (row := await _tiled(ref, item, num_pages, plan, ctx, reading)):
        return row
    latency = reading.answers[0].result.latency_s if len(reading.answers) == 1 else time.monotonic() - started
    return await reading_to_page(ref, item, reading, num_pages, ctx, latency)


def _has_text_layer(item: PageImage) -> bool:
    """Whether the page's text estimate is its text layer's (an answer can be checked against it)."""
    return item.text_estimate is not None and item.text_estimate.text is not None


def _markdown(family: Family, text: str, item: PageImage) -> str:
    """An answer as ``family`` parses it (its Markdown: no boxes, no markup), else as it came."""
    try:
        return family.parse(text, width=item.width, height=item.height, page=item.page).markdown
    except Exception:  # noqa: BLE001 - a hint for the long-or-loop decision: never fail a page for it
        return text


def _observe(rates: RateBook, item: PageImage, reading: Reading, covered: Coverage | None) -> None:
    """What the whole page's reading says about the run's tokens per character: a finished
    answer wrote the page's estimated text; a long one the share of it ``covered`` says."""
    estimate = item.text_estimate
    if estimate is None or not reading.answers:
        return
    last = reading.answers[-1]
    tokens = last.result.completion_tokens or 0
    if getattr(last, "long", False):
        if covered is not None and covered.share:
            rates.record(tokens, round(covered.share * estimate.chars), estimate.source)
    elif last.result.finish_reason not in UNFINISHED:
        rates.record(tokens, estimate.chars, estimate.source)


def reading_status(reading: Reading, max_tokens: int) -> tuple[str, str | None, str | None]:
    """``(status, error, finish_reason)`` of a page from the answers it took and the notes
    its reading left (a page turned, output repaired)."""
    answers = reading.answers
    unfinished = [a for a in answers if a.result.finish_reason in UNFINISHED]
    error = None
    if unfinished:
        status, first = "truncated", unfinished[0]
        where = f" in {len(unfinished)} of {len(answers)} requests" if len(answers) > 1 else ""
        if first.result.loop is not None:
            error = (
                f"repetition loop cut in every one of {first.attempts} attempt(s){where}; text up to the loop kept "
                f"({first.result.loop.describe()})"
            )
        else:
            error = (
                f"hit max_tokens ({max_tokens}) after {first.attempts} attempt(s){where}: likely a repetition loop; "
                "partial text kept"
            )
        finish = first.result.finish_reason
    else:
        status, finish = "ok", answers[-1].result.finish_reason if answers else None
        if not any(a.result.text.strip() for a in answers):
            error = "model returned no text"
    warnings = reading.layout.warnings[:5]
    if warnings:
        note = "; ".join(warnings)
        error = f"{error}; {note}" if error else f"output repaired: {note}"
    if reading.notes:
        note = "; ".join(reading.notes)
        error = f"{error}; {note}" if error else note
    return status, error, finish


async def reading_to_page(
    ref: DocumentRef,
    item: PageImage,
    reading: Reading,
    num_pages: int | None,
    ctx: ExtractContext,
    latency_s: float,
) -> PageResult:
    """The row of a page read whole: its layout, the figures it located cropped from the image
    their boxes refer to, and what the answers cost."""
    layout = reading.layout
    status, error, finish = reading_status(reading, ctx.max_tokens)
    figures: list[Figure] = []
    if layout.figures:
        try:
            crops = await ctx.crop(reading.image, [f.bbox for f in layout.figures])
            figures = [f.record(image=c) for f, c in zip(layout.figures, crops)]
        except Exception as exc:  # noqa: BLE001 - a bad crop must not lose the page's text
            log.warning("cropping figures of %s page %d failed: %s", ref.doc_id, item.page, exc)
            figures = [f.record(error=f"crop failed: {exc}") for f in layout.figures]
    answers = reading.answers
    notes = [n for a in answers for n in a.notes]
    return PageResult(
        doc_id=ref.doc_id,
        doc_index=ref.index,
        page=item.page,
        source=ref.source,
        num_pages=num_pages,
        markdown=layout.markdown,
        raw=reading.raw,
        figures=figures,
        blocks=[b.record() for b in layout.blocks],
        width=reading.width,
        height=reading.height,
        turned=reading.turned,
        status=status,  # type: ignore[arg-type]
        error=error,
        finish_reason=finish,
        prompt_tokens=_total(a.result.prompt_tokens for a in answers),
        completion_tokens=_total(a.result.completion_tokens for a in answers),
        latency_s=round(latency_s, 4),
        attempts=sum(a.attempts for a in answers),
        cut_tokens=sum(a.cut_tokens for a in answers) if notes else None,
        cut_reason="; ".join(notes) if notes else None,
        model=ctx.client.model,
    )


def _total(values: Iterable[int | None]) -> int | None:
    """The sum of the known values (None when none is known)."""
    known = [v for v in values if v is not None]
    return sum(known) if known else None
