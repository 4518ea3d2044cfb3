"""The one row of a page read in pieces: its joined text and blocks, figures, status and cost.

Serves every case (:mod:`.plan`): a long page's segments, a dense page's tiles or bands. The
pieces' readings (:mod:`.read`) are joined (:mod:`.join`), the figures they located cropped (from
the page image, or stitched from the pieces rendered from the source), and the row says what
every piece cost (the answers that ran out and were read again included), which pieces failed
or ran out or was joined to its neighbour unverified, and why the page was cut.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from llm_ocr.records import Figure, PageResult
from llm_ocr.sources.base import DocumentRef, PageImage
from llm_ocr.sources.pieces import stitch_figures
from llm_ocr.sources.segments import Segment
from llm_ocr.stages.attempts import UNFINISHED
from llm_ocr.stages.pieces.join import Piece, blocks_of, figures_to_page, markdown_of, to_page
from llm_ocr.vlm.client import RequestFailed
from llm_ocr.vlm.families.base import AnswerLike, Reading

if TYPE_CHECKING:
    from llm_ocr.stages.pieces.plan import TilePlan
    from llm_ocr.stages.pieces.read import Job, PieceReadings, Reader


@dataclass
class _Collected:
    """What the pieces' readings say, piece by piece, before they are joined."""

    per_segment: list[list[Piece]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    raw: list[str] = field(default_factory=list)


def _collect(segments: list[Segment], readings: list[Reading | RequestFailed], kind: str) -> _Collected:
    """Each piece's blocks (page pixels), raw answer, repairs, loop cuts and failure."""
    got = _Collected()
    for segment, reading in zip(segments, readings):
        where = (f"{kind} {segment.index + 1}/{len(segments)} "
                 f"[{segment.top}:{segment.bottom}, {segment.left}:{segment.right}]")
        if isinstance(reading, RequestFailed):
            got.failures.append(f"{where}: {reading}")
            got.per_segment.append([])
            continue
        got.raw.append(f"<--- {where} --->\n{reading.raw}")
        blocks, found = blocks_of(reading, segment)
        got.per_segment.append(blocks)
        got.warnings += [f"{where}: {w}" for w in (reading.notes + found)[:2]]
        cut = "; ".join(n for a in reading.answers for n in a.notes)
        if cut:
            got.notes.append(f"{where}: {cut}")
    return got


async def _figures(joined: list[Piece], item: PageImage, job: Job, reader: Reader,
                   scale: tuple[float, float]) -> list[Figure]:
    """The figures the joined blocks located, cropped from the page image or stitched from the
    pieces rendered from the source (a crop that fails is said in the figure, never loses the page)."""
    located = [f for p in joined for f in p.figures]
    if not located:
        return []
    placed = figures_to_page(located, *scale)
    rendered = job.rendered
    try:
        if rendered is not None:
            shown = [(p.segment, p.image) for p in rendered.pieces]
            boxes = [f.bbox for f in located]
            stitch = reader.stitch
            crops = await (stitch(shown, boxes) if stitch else asyncio.to_thread(stitch_figures, shown, boxes))
        else:
            crops = await reader.crop(item.image, [f.bbox for f in located])
        return [f.record(image=c) for f, c in zip(placed, crops)]
    except Exception as exc:  # noqa: BLE001 - a bad crop must not lose the page's text
        return [f.record(error=f"crop failed: {exc}") for f in placed]


def _status(got: _Collected, done: list[AnswerLike], pieces: int, kind: str,
            read_all: PieceReadings, joined: list[Piece]) -> tuple[str, str | None]:
    """The row's status and error: ``error`` when a piece failed, ``truncated`` when one looped
    or ran out or a join of the ``joined`` blocks could not be verified, with the repairs made
    to the answers."""
    unfinished = [a for a in done if a.result.finish_reason in UNFINISHED]
    unverified = [p.unverified for p in joined if p.unverified]
    status = "error" if got.failures else "truncated" if unfinished or unverified else "ok"
    error = None
    if got.failures:
        failed = "; ".join(got.failures[:3])
        error = f"{len(got.failures)} of {pieces} {kind}s failed (text of the others kept): {failed}"
    elif unfinished:
        error = f"{len(unfinished)} of {pieces} {kind}s looped or hit max_tokens; their text up to the loop kept"
        if read_all.kept_long:
            error += ": " + "; ".join(n for n in read_all.notes if n.endswith("kept"))[:1000]
    if unverified:  # a seam whose text may be doubled or lost: never silently ok
        joins = (f"{len(unverified)} join(s) of {kind}s could not be verified ({'; '.join(unverified[:3])}); "
                 f"text of every {kind} kept")
        error = f"{error}; {joins}" if error else joins
    if got.warnings:
        repairs = "; ".join(got.warnings[:5])
        error = f"{error}; {repairs}" if error else f"output repaired: {repairs}"
    return status, error


async def page_row(ref: DocumentRef, item: PageImage, num_pages: int | None, job: Job, read_all: PieceReadings,
                   reader: Reader, started: float) -> PageResult:
    """The row of ``item`` from its pieces' readings ``read_all``, joined as ``job`` says."""
    segments = [segment for segment, _ in read_all.leaves]
    readings = [reading for _, reading in read_all.leaves]
    got = _collect(segments, readings, job.kind)
    done = [a for r in readings if isinstance(r, Reading) for a in r.answers]
    notes = read_all.notes + got.notes
    joined = job.join(segments, got.per_segment, item.page)
    rendered = job.rendered
    scale = (item.width / rendered.width, item.height / rendered.height) if rendered is not None else (1.0, 1.0)
    figures = await _figures(joined, item, job, reader, scale)
    status, error = _status(got, done, len(segments), job.kind, read_all, joined)
    unfinished = [a for a in done if a.result.finish_reason in UNFINISHED]
    finish = next((a.result.finish_reason for a in unfinished), "stop" if done else None)
    placed = to_page(joined, *scale)
    cost = _cost(done + read_all.spent, readings, looped=bool(got.notes))
    return PageResult(
        doc_id=ref.doc_id,
        doc_index=ref.index,
        page=item.page,
        source=ref.source,
        num_pages=num_pages,
        markdown=markdown_of(placed),
        raw="\n".join(got.raw),
        figures=figures,
        blocks=[p.block.record() for p in placed],
        width=item.width,
        height=item.height,
        status=status,  # type: ignore[arg-type]
        error=error,
        finish_reason=finish,
        latency_s=round(time.monotonic() - started, 4),
        cut_reason="; ".join(notes) if notes else None,
        segments=len(segments),
        model=reader.model,
        prompt_tokens=cost.prompt_tokens,
        completion_tokens=cost.completion_tokens,
        attempts=cost.attempts,
        cut_tokens=cost.cut_tokens,
    )


@dataclass(frozen=True)
class _Cost:
    prompt_tokens: int
    completion_tokens: int
    attempts: int
    cut_tokens: int | None


def _cost(paid: list[AnswerLike], readings: list[Reading | RequestFailed], looped: bool) -> _Cost:
    """The row's tokens and attempts: of every answer ``paid`` for (the answers that ran out and
    whose pieces were read again in halves too), and of the failed requests; ``cut_tokens``
    counts repetition cut, as for a page read whole."""
    return _Cost(
        sum(a.result.prompt_tokens or 0 for a in paid),
        sum(a.result.completion_tokens or 0 for a in paid),
        sum(a.attempts for a in paid) + sum(f.attempts for f in readings if isinstance(f, RequestFailed)),
        sum(a.cut_tokens for a in paid) if looped else None,
    )


def with_plan(row: PageResult, plan: TilePlan, planned: int, kind: str, first: Reading | None,
              unsourced: str | None) -> PageResult:
    """A dense page's row saying why it was cut (``plan``) into ``planned`` pieces of ``kind``,
    and why its pieces were not rendered from the source (``unsourced``), with the cost and text
    of the whole page's reading that ran out first (``first``), if there was one."""
    if unsourced:
        row = replace(row, error=f"{row.error}; {unsourced}" if row.error else unsourced)
    pieces = f"{planned} {kind}s"
    if row.segments and row.segments != planned:
        pieces += f" ({row.segments} pieces once cut again)"
    how = f"read in {pieces} at once" if first is None else f"read again in {pieces}"
    detail = f" ({plan.detail})" if plan.detail else ""
    notes = [f"{plan.why}: {how}{detail}"] + ([row.cut_reason] if row.cut_reason else [])
    if first is None:
        return replace(row, cut_reason="; ".join(notes))
    whole = first.answers
    return replace(
        row,
        raw=f"<--- whole page: ran to max_tokens --->\n{first.raw}\n{row.raw}",
        cut_reason="; ".join(notes),
        prompt_tokens=(row.prompt_tokens or 0) + sum(a.result.prompt_tokens or 0 for a in whole),
        completion_tokens=(row.completion_tokens or 0) + sum(a.result.completion_tokens or 0 for a in whole),
        attempts=row.attempts + sum(a.attempts for a in whole),
    )
