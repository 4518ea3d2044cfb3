"""Escalate over one shard: ``OUT/extract`` rows → the flagged pages read again by a stronger model → ``OUT/escalate``.

Every page row of the shard is written to ``OUT/escalate`` (as Describe writes every row), so it
holds exactly one row per page: the first reading where it tripped none of the ``--escalate-on``
signals (:mod:`llm_ocr.runners.escalation`), else the better of the two readings, with
``escalated_from``, ``escalation_reason`` and the reading set aside in ``other_reading``. Pages
the text-layer route read, document-level error rows and quarantined pages pass through. Describe
and Assemble read ``OUT/escalate`` whenever it holds rows (docs/routes.md, "Where the rows go").

Only flagged pages cost anything: their page is rendered again from its source (the way the
stronger model's family wants it) and sent. The stronger model's endpoint is ``--endpoint`` and
``--model`` of this stage (``llm-ocr escalate``), or ``--escalate-endpoint`` and ``--escalate-to``
of ``llm-ocr run``, which runs this stage between Extract and Describe.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from dataclasses import replace
from functools import partial
from typing import Any, Literal

from llm_ocr.options import StageSpec
from llm_ocr.outcomes import ExitCode, RunError
from llm_ocr.records import DOCUMENT_LEVEL_PAGE, OtherReading, PageResult, Route
from llm_ocr.runners.bad_pages import BadPages, note_kept, note_retried, quarantined_in
from llm_ocr.runners.cascade import ModelTally
from llm_ocr.runners.escalation import EscalationRule, describe, keep_second, reading_flags
from llm_ocr.runners.extract import extract_context
from llm_ocr.runners.lifecycle import Finished, Markers, PageWork, Shard, ShardStage, note_documents, run_stage
from llm_ocr.runners.page_flow import UpstreamRows
from llm_ocr.runners.reuse import Reuse
from llm_ocr.runners.shard import ShardOutcome
from llm_ocr.runners.workers import WorkerPool, crop_figures, rerender_page
from llm_ocr.serving.quarantine import PageQuarantined
from llm_ocr.sources.base import DocumentRef, PageFailure, PageImage
from llm_ocr.sources.listing import document_kind
from llm_ocr.sources.text_lines import layer_text
from llm_ocr.stages.extract import ExtractContext, extract_page, family_render
from llm_ocr.storage.parts import ShardIndex
from llm_ocr.storage.upstream import iter_shard_rows, stage_has_parts, upstream_complete
from llm_ocr.vlm.verifier import VerifierError, regions_of, verify_reading

log = logging.getLogger("llm_ocr")

#: Every signal but the verifier's: what two readings of a page are compared on.
COMPARED = ("error", "empty", "truncated", "looped", "repetition", "missing-text", "stray", "garbled", "short")
DESCRIBED_FIRST = (
    "OUT/describe already holds rows described from OUT/extract: escalation goes between Extract and Describe "
    "(docs/routes.md). Move OUT/describe and OUT/assemble (and OUT/_state/describe, OUT/_state/assemble) aside, "
    "escalate, then run llm-ocr describe and llm-ocr assemble again"
)


def escalation_spec(spec: StageSpec) -> StageSpec:
    """The spec of the Escalate stage ``llm-ocr run --escalate-to MODEL`` runs: ``--model`` is
    the stronger model, at ``--escalate-endpoint`` (None: a server launched for it)."""
    options = spec.escalate
    job = spec.job.model_copy(update={
        "model": options.escalate_to, "endpoint": options.escalate_endpoint, "recipe": None,
        "api_key": options.escalate_api_key or spec.job.api_key,
    })
    # The run's --prompt is the first model's: the stronger one is asked its own family's way.
    extract = spec.extract.model_copy(update={"prompt": None})
    server = spec.server
    if options.escalate_server_args is not None:
        server = server.model_copy(update={"server_args": options.escalate_server_args})
    return replace(spec, job=job, extract=extract, server=server)


def _signal_view(row: PageResult) -> dict[str, Any]:
    """The fields of a row the signals read (no figures, no bytes)."""
    return {
        "doc_id": row.doc_id, "page": row.page, "status": row.status, "markdown": row.markdown, "error": row.error,
        "finish_reason": row.finish_reason, "cut_reason": row.cut_reason, "quarantined": row.quarantined,
        "text_estimate": row.text_estimate,
    }  # fmt: skip


def _other(row: PageResult) -> OtherReading:
    return OtherReading(row.model, row.status, row.markdown, row.error, row.finish_reason, row.prompt_tokens,
                        row.completion_tokens, row.latency_s)


def _route(row: PageResult) -> Route:
    """A passed-through row's route (rows written before routes were the model's)."""
    return row.route or "model"


def _ref(row: PageResult) -> DocumentRef:
    """The document of an upstream row, as the page flow of Extract knew it."""
    source = row.source or ""
    kind: Literal["pdf", "image"] = "pdf" if document_kind(source) == "pdf" else "image"
    return DocumentRef(doc_id=row.doc_id, index=row.doc_index, source=source, kind=kind, location=source)


class Escalation:
    """The page handler of an Escalate flow: which rows go to the stronger model, and which
    reading each row keeps."""

    def __init__(
        self, spec: StageSpec, ctx: ExtractContext, bad: BadPages, pool: WorkerPool, tally: ModelTally
    ) -> None:
        self.ctx = ctx
        self.bad = bad
        self.pool = pool
        self.tally = tally
        self.rule = EscalationRule.of(spec.escalate)
        self.compared = replace(self.rule, signals=COMPARED)
        self.verifier = spec.escalate.escalate_verifier if "verifier" in self.rule.signals else None
        self.render = family_render(spec.render, ctx.recipe)  # the page image the stronger family wants
        self.storage_options = spec.job.storage_options
        self.image_column = spec.dataset.image_column
        #: Pages escalated by the signals they tripped (a page counts once per signal).
        self.signals: Counter[str] = Counter()
        self.escalated = 0
        self.kept_first = 0
        self._verifier_failed = False

    async def handle(self, ref: None, row: PageResult, num_pages: int | None) -> PageResult:
        """The row ``OUT/escalate`` gets for the upstream ``row``."""
        if row.page == DOCUMENT_LEVEL_PAGE or row.quarantined or row.used_route == "text-layer":
            return self.tally.row(row)
        page_ref = _ref(row)
        layer = await self.pool.run(layer_text, page_ref.location, row.page, self.storage_options) \
            if page_ref.kind == "pdf" else None
        flags = reading_flags(_signal_view(row), layer, self.rule)
        image: PageImage | PageFailure | None = None
        score = None
        if not flags and self.verifier is not None and row.status != "error":
            image = await self._image(row)
            score = await self._score(image, row)
            flags = reading_flags(_signal_view(row), layer, self.rule, verifier=score)
        if not flags:
            return self.tally.row(replace(row, route=_route(row)))
        self.signals.update(flags.keys())
        image = image or await self._image(row)
        reason = describe(flags)
        if isinstance(image, PageFailure):
            self.kept_first += 1
            return self.tally.row(replace(row, route=_route(row), escalated_from=row.model,
                                          escalation_reason=f"{reason}; {image.error}: the first reading is kept"))
        guarded = self.bad.guard(self._read, self._quarantined)
        second = await guarded(page_ref, image, num_pages)
        return self.tally.row(await self._choose(page_ref, row, second, flags, layer, score, reason))

    async def _read(self, ref: DocumentRef, item: PageImage, num_pages: int | None) -> PageResult:
        return await extract_page(ref, item, num_pages, self.ctx)

    async def _quarantined(
        self, ref: DocumentRef, item: PageImage, num_pages: int | None, exc: PageQuarantined
    ) -> PageResult:
        # The stronger model's server crashed on this page: its first reading stays (see _choose).
        return await self.bad.quarantined(ref, item, num_pages, exc)

    async def _image(self, row: PageResult) -> PageImage | PageFailure:
        return await self.pool.run(rerender_page, row.doc_id, row.source, self.render, self.storage_options,
                                   self.image_column, row.page, self.ctx.options.max_page_aspect)

    async def _score(self, image: PageImage | PageFailure, row: PageResult) -> float | None:
        """The verifier's score of a reading: its lowest region's, each region a block of the
        reading cropped from the page (None: it could not be asked; logged once)."""
        if isinstance(image, PageFailure) or self.verifier is None:
            return None
        regions = regions_of(row.blocks, row.width or image.width, row.height or image.height,
                             (image.width, image.height))

        async def crop(data: bytes, boxes: list[list[int]]) -> list[bytes]:
            return await self.pool.run(crop_figures, data, boxes)

        try:
            return await verify_reading(self.verifier, image.image, image.mime, row.markdown, regions, crop)
        except VerifierError as exc:
            if not self._verifier_failed:
                log.warning("%s; the verifier signal is skipped for the pages it cannot score", exc)
                self._verifier_failed = True
            return None

    async def _choose(
        self, ref: DocumentRef, first: PageResult, second: PageResult, flags: dict[str, str], layer: str | None,
        score: float | None, reason: str,
    ) -> PageResult:
        """The row of a page read twice: the stronger reading unless its signals weigh more."""
        model = self.ctx.client.model
        first_all = reading_flags(_signal_view(first), layer, self.compared, verifier=score)
        second_all = reading_flags(_signal_view(second), layer, self.compared)
        if not second.quarantined and keep_second(first_all, second_all):
            self.escalated += 1
            self.tally.read(second, used=True)
            chosen = replace(second, route="escalated", route_note=first.route_note, escalated_from=first.model,
                             escalation_reason=reason, other_reading=_other(first), text_estimate=first.text_estimate)
            return await self.bad.fallback(ref, chosen)
        self.kept_first += 1
        self.tally.read(second, used=False)
        why = second.error if second.status == "error" else describe(second_all)
        outcome = f"{reason}; {model}'s reading was not better ({why}): the first reading is kept"
        return replace(first, route=_route(first), escalated_from=first.model, other_reading=_other(second),
                       escalation_reason=outcome)

    def stats(self) -> dict[str, Any]:
        """What the marker records besides pages, routes and models."""
        return {"escalation": {"escalated": self.escalated, "kept_first": self.kept_first,
                               "signals": dict(self.signals.most_common())}}


class Escalate(ShardStage):
    """Escalate as a :class:`~llm_ocr.runners.lifecycle.ShardStage`."""

    writes = ("escalate",)
    reads = ("extract",)

    def __init__(self, spec: StageSpec, reuse: Reuse | None = None) -> None:
        self.spec = spec
        #: The stronger model's endpoint and limits, when the caller keeps them (the service's worker).
        self.reuse = reuse or Reuse()
        self.complete = False
        self.index = ShardIndex()

    def settled(self, markers: Markers) -> ExitCode | None:
        marker = markers["escalate"]
        if not marker or marker.get("pages", {}).get("error"):
            return None
        return ExitCode.PAGES_FAILED if quarantined_in(marker) else ExitCode.OK

    async def check(self, shard: Shard, markers: Markers) -> None:
        if not self.spec.escalate.signals:
            raise RunError("--escalate-on names no signal: no page would be escalated")
        source = shard.folder("extract")
        self.complete = await asyncio.to_thread(upstream_complete, shard.out, "extract", source, shard.index,
                                                shard.count)
        if not self.complete and not await asyncio.to_thread(stage_has_parts, source):
            raise RunError(f"nothing to escalate: {source.url} holds no Extract output; run llm-ocr extract first")
        described = await asyncio.to_thread(stage_has_parts, shard.folder("describe"))
        if described and not await asyncio.to_thread(stage_has_parts, shard.folder("escalate")):
            raise RunError(DESCRIBED_FIRST)

    async def resume(self, shard: Shard, markers: Markers) -> None:
        self.index = await shard.scan("escalate", keep_quarantined=True)
        note_retried(self.index)
        note_kept(self.index)
        if not self.complete:
            log.warning(
                "extract has not finished every shard this escalate shard reads: escalating the rows there are; "
                "rerun escalate once extract is done (no completion marker is written until then)"
            )

    async def work(self, shard: Shard) -> Finished:
        spec, job = self.spec, self.spec.job
        tally = ModelTally()
        secret = job.api_key.get_secret_value() if job.api_key else ""
        opener = partial(shard.connect, spec.client, spec.server, url=job.endpoint, model=job.model, api_key=secret,
                         log_prefix="server-escalate", own_server=True)
        async with self.reuse.endpoint_for(job.model, opener) as endpoint, \
                PageWork(shard, endpoint, {"escalate": self.index}, render=True,
                         **self.reuse.work_options(endpoint)) as work:
            assert work.pool is not None
            work.counters["escalate"].pages_found = 0  # counted from the rows read
            ctx = await extract_context(endpoint, job.model, job.recipe, spec.extract, work.pool, work.limits.pieces,
                                        context_length=self.reuse.context_of(endpoint))
            bad = BadPages(endpoint.tracker, work.pool, spec.extract, job.storage_options)
            escalation = Escalation(spec, ctx, bad, work.pool, tally)
            rows = UpstreamRows(iter_shard_rows(shard.folder("extract"), shard.index, shard.count), self.index)
            await work.run(rows, escalation.handle, ["escalate"])
            note_documents(work.counters["escalate"], work.documents["escalate"])
        extra = {**tally.stats({job.model: endpoint.client.busy_seconds}), **escalation.stats()}
        kept = self.index.kept_quarantined
        result = work.result("escalate", extra=extra, kept=kept)
        result.stats["pages"]["quarantined_earlier"] = kept
        return Finished([result], complete=self.complete, preset=endpoint.preset)


async def escalate_shard(spec: StageSpec, stop: asyncio.Event | None = None) -> ShardOutcome:
    """Run Escalate over this process's shard of ``OUT/extract``."""
    return await run_stage(Escalate(spec), spec.job, stop)
