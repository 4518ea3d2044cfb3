"""Extract over one shard: documents → page images → OCR rows in ``OUT/extract``.

The lifecycle (resume, markers, exit codes) is :mod:`.lifecycle`'s; this module supplies what
is Extract's own: its inputs, its resume scan, and the page handler.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable, Iterable
from functools import partial

from llm_ocr.options import ExtractOptions, RenderOptions, StageSpec, dense_options, using_dense
from llm_ocr.outcomes import ExitCode
from llm_ocr.records import PageResult
from llm_ocr.runners.bad_pages import BadPages, extract_settles, note_kept, note_retried
from llm_ocr.runners.cascade import ModelTally, first_reading, open_route
from llm_ocr.runners.dedup import PageReuse, copy_duplicates, dedup_stats, record_readings, shard_readings
from llm_ocr.runners.groups import GroupWork, groups_finished
from llm_ocr.runners.inputs import check_inputs, rows_round_robin
from llm_ocr.runners.lifecycle import Finished, Markers, PageWork, Shard, ShardStage, nothing_to_read, run_stage
from llm_ocr.runners.page_flow import DocumentPages, page_look_ahead
from llm_ocr.runners.reuse import Reuse
from llm_ocr.runners.shard import ShardOutcome
from llm_ocr.runners.shared_dedup import SharedReadings
from llm_ocr.runners.shared_pages import SharedPages
from llm_ocr.runners.workers import WorkerPool, crop_figures, render_page_regions, transform_image
from llm_ocr.serving.in_flight import InFlightLimit
from llm_ocr.serving.open import Endpoint
from llm_ocr.sources import InputPlan
from llm_ocr.sources.base import DocumentRef, PageFailure, PageImage
from llm_ocr.sources.pieces import stitch_figures
from llm_ocr.stages.extract import ExtractContext, family_render
from llm_ocr.stages.routes import RouteContext
from llm_ocr.storage.parts import ShardIndex
from llm_ocr.vlm.families import family_for

log = logging.getLogger("llm_ocr")


async def extract_context(
    endpoint: Endpoint, model: str, recipe: str | None, options: ExtractOptions, pool: WorkerPool,
    piece_limit: InFlightLimit | None = None, render: RenderOptions | None = None, escalates: bool = False,
    context_length: Callable[[], Awaitable[int | None]] | None = None,
) -> ExtractContext:
    """What every page of an Extract run on ``endpoint`` shares: the model family's recipe
    (from the served ``model`` name, or ``recipe`` for a fine-tune served under another name),
    and the limit the pieces of its pages (segments, tiles) are asked within. With the run's
    ``render`` options, the tiles and bands of dense pages are rendered from their source at
    the family's resolution (else cut from the page image). ``escalates``: a stronger model reads
    again the pages this run leaves truncated (``--escalate-to``). ``context_length``: where the
    served model's context length is read (a caller's memo, :class:`~llm_ocr.runners.reuse.ContextLength`;
    None: asked of the endpoint)."""
    client = endpoint.client
    family = family_for(model, recipe).with_prompt(options.prompt)
    context = await (context_length or client.max_model_len)()
    regions = partial(pool.run, render_page_regions, family_render(render, family)) if render is not None else None
    return ExtractContext(
        client,
        family,
        options,
        family.max_tokens(options.max_tokens, context),
        partial(pool.run, crop_figures),
        partial(pool.run, transform_image),
        piece_limit=piece_limit,
        stitch=partial(pool.run, stitch_figures),
        context=context,
        render_regions=regions,
        escalates=escalates,
    )


async def with_dense_options(options: ExtractOptions, work: Awaitable[Finished]) -> Finished:
    """``work`` with the knobs of reading pages in pieces this run sets (``--dense-option``,
    ``LLM_OCR_DENSE_*``) in force for every page it reads, written in its completion markers."""
    knobs = dense_options(options.dense_option, dict(os.environ))
    with using_dense(knobs):
        finished = await work
    for result in finished.results:
        result.stats["dense_options"] = knobs.model_dump()
    return finished


def page_aspect(options: ExtractOptions) -> float:
    """The aspect past which a page is rendered with its segments (0: none, ``--pieces off``)."""
    return 0.0 if options.pieces == "off" else options.max_page_aspect


class Extract(ShardStage):
    """Extract as a :class:`~llm_ocr.runners.lifecycle.ShardStage`."""

    writes = ("extract",)

    def __init__(self, spec: StageSpec, reuse: Reuse | None = None) -> None:
        self.spec = spec
        #: What the caller keeps open (the service's worker): its endpoint, limits and render pool.
        self.reuse = reuse or Reuse()
        self.documents: Iterable[DocumentRef] = iter(())
        self.index = ShardIndex()
        self.groups: GroupWork | None = None
        #: The shard's documents, when the listing counts them ahead (the progress's total).
        self.docs_total: int | None = None
        self.plan: InputPlan | None = None

    def settled(self, markers: Markers) -> ExitCode | None:
        return extract_settles(markers["extract"], self.spec.extract)

    async def check(self, shard: Shard, markers: Markers) -> None:
        # Before the output is probed: a missing INPUT creates nothing in OUT.
        self.plan = check_inputs(self.spec.inputs, self.spec.dataset, shard.job.storage_options, shard.out)

    async def resume(self, shard: Shard, markers: Markers) -> None:
        spec = self.spec
        keep = not spec.extract.retry_quarantined
        assert self.plan is not None, "check() plans the inputs"
        plan = self.plan
        # After the output was checked: this records the sharding rule in OUT.
        by_rows = rows_round_robin(plan, shard.out)
        self.groups = await shard.work_groups("extract", ["extract"], plan, by_rows, spec.steal, keep_quarantined=keep)
        if self.groups is not None:  # each group is scanned when it is taken
            self.documents = self.groups.documents()
            self.index = self.groups.indexes["extract"]
            return
        self.documents = plan.documents(shard.count, shard.index, by_rows=by_rows)
        self.docs_total = plan.shard_size(shard.count, shard.index, by_rows=by_rows)
        self.index = await shard.scan("extract", keep_quarantined=keep)
        note_retried(self.index)
        note_kept(self.index)

    async def work(self, shard: Shard) -> Finished:
        return await with_dense_options(self.spec.extract, self._work(shard))

    async def _work(self, shard: Shard) -> Finished:
        spec, job = self.spec, shard.job
        tally = ModelTally()
        groups = self.groups
        if (idle := await nothing_to_read(shard, groups, self.writes)) is not None:
            return idle
        async with self.reuse.endpoint_for(job.model, partial(shard.connect, spec.client, spec.server)) as endpoint, \
                PageWork(shard, endpoint, {"extract": self.index}, render=True, groups=groups,
                         **self.reuse.work_options(endpoint)) as work:
            assert work.pool is not None
            work.counters["extract"].docs_total = self.docs_total
            async with open_route(shard, spec, work.pool) as route:
                # The pieces of every page share a limit as large as the pages' (and following it).
                ctx = await extract_context(endpoint, job.model, job.recipe, spec.extract, work.pool,
                                            work.limits.pieces, spec.render, bool(spec.escalate.escalate_to),
                                            context_length=self.reuse.context_of(endpoint))
                bad = BadPages(endpoint.tracker, work.pool, spec.extract, job.storage_options)
                render = family_render(spec.render, ctx.recipe)  # the page image the family was trained on
                # Every page's text is estimated as it is rendered (a few ms): its row keeps it, a
                # run that may read dense pages in tiles decides with it, and the pages waiting
                # for a slot go longest first by it.
                # Documents are told apart by their bytes' sha256: in a static shard, the copies are
                # written after the shard's pages; with work groups, the hash is claimed across the
                # run's processes and each copy is written in its own group (docs/dedup.md). Not
                # with work groups on the Hub: there every claim is a commit, one per document.
                readings = await asyncio.to_thread(shard_readings, shard.out, spec.extract, job.storage_options) \
                    if spec.extract.dedup and (groups is None or not shard.out.batches_writes) else None
                shared = SharedReadings(readings, shard.out, groups, ["extract"], job.storage_options) \
                    if readings is not None and groups is not None else None
                intake = DocumentPages(self.documents, self.index, work.pool, render, job.storage_options,
                                       estimate_text=True, planned=groups.planned if groups else None,
                                       look_ahead=page_look_ahead(spec.extract.look_ahead, spec.extract.look_ahead_mb),
                                       max_aspect=page_aspect(spec.extract),
                                       estimate_ahead=spec.extract.estimate_ahead, paced=groups is not None,
                                       readings=shared or readings)
                handler = bad.guard(_extract_handler(ctx, bad, route, tally), bad.quarantined)
                reuse = PageReuse(handler, work.pool) if spec.extract.dedup else None
                # With work groups, a page's exact pixels are claimed across the run's processes too.
                across = SharedPages(reuse or handler, work.pool, shard.out, groups, ["extract"], shared.base.rows,
                                    job.storage_options) if shared is not None and groups is not None else None
                if shared is not None and across is not None:
                    shared.attached.append(across.attach)
                await work.run(intake, shared.handler(across or reuse or handler) if shared else reuse or handler,
                               ["extract"])
                if readings is not None and shared is None:  # the duplicates set aside: copied, or read after all
                    again = await copy_duplicates(work, readings, self.index, ["extract"], job.storage_options)
                    if again:
                        await work.run(intake.over(again), reuse or handler, ["extract"])
                if readings is not None:
                    await asyncio.to_thread(record_readings, shard.out, shard.index, shard.count, readings)
                layout_s = route.client.busy_seconds if route is not None else None
        kept = self.index.kept_quarantined
        accounting = tally.stats({job.model: endpoint.client.busy_seconds}, layout_s)
        result = work.result("extract", kept=kept, extra=accounting)
        result.stats["pages"]["quarantined_earlier"] = kept
        result.stats["dedup"] = {**dedup_stats(shared or readings, reuse), **(shared.stats() if shared else {}),
                                 **(across.stats() if across else {})}
        end = await groups_finished(groups, [result.stats], stopped=shard.stop.is_set())
        result.failed = result.failed or end.failed_elsewhere
        return Finished([result], preset=endpoint.preset, complete=end.complete)


async def extract_shard(spec: StageSpec, stop: asyncio.Event | None = None) -> ShardOutcome:
    """Run Extract over this process's shard of the inputs."""
    return await run_stage(Extract(spec), spec.job, stop)


def _extract_handler(
    ctx: ExtractContext, bad: BadPages, route: RouteContext | None, tally: ModelTally
) -> Callable[[DocumentRef, PageImage | PageFailure, int | None], Awaitable[PageResult]]:
    """Extract's page handler: a page's first reading (routed or the model's), with its fallback."""

    async def handle(ref: DocumentRef, item: PageImage | PageFailure, num_pages: int | None) -> PageResult:
        return tally.row(await bad.fallback(ref, await first_reading(ref, item, num_pages, ctx, route, tally)))

    return handle
