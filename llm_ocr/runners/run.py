"""``llm-ocr run``: Extract → Describe → Assemble over one shard, in one process, on one endpoint.

Each page goes from the OCR answer straight to its figure descriptions in memory (no second model
load, no storage round trip); its Extract row and its Describe row are written to ``OUT/extract``
and ``OUT/describe`` as the stages alone would write them. When the page flow is done, Assemble
runs over this shard's documents.

Resuming: both stage folders are scanned first. Pages Extract finished but Describe did not (a
kill between the two part writes, or an earlier ``llm-ocr extract``) are described from
``OUT/extract`` before the page flow starts; the flow then does the pages Extract lacks, writing
a Describe row only where Describe lacks one too, so every page is in each stage exactly once.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from llm_ocr.endpoint.in_flight import adapting
from llm_ocr.config import JobOptions
from llm_ocr.costs import gpu_cost
from llm_ocr.endpoint import Endpoint, ServerOptions, open_endpoint
from llm_ocr.runners.page_flow import FlowSettings, PageFlow
from llm_ocr.runners.progress import ProgressReporter, RunCounters
from llm_ocr.endpoint.quarantine import PageQuarantined
from llm_ocr.records import PageResult, page_schema
from llm_ocr.runners.assemble import assemble_documents, assemble_finished
from llm_ocr.runners.bad_pages import BadPages, describe_settles, marker_settles, note_kept, quarantined_in
from llm_ocr.runners.describe import DescribeFlow, describe_stats, make_context, open_describe_endpoint, resolve_schema
from llm_ocr.runners.inputs import shard_inputs
from llm_ocr.runners.shard import (
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_PAGES_FAILED,
    RunError,
    ShardOutcome,
    check_writable,
    in_flight_for_endpoint,
    reconciled,
    resolve_shard,
)
from llm_ocr.sources import DatasetOptions, InputError
from llm_ocr.sources.base import DocumentRef, PageFailure, PageImage, RenderOptions
from llm_ocr.stages.assemble import AssembleOptions
from llm_ocr.stages.describe import DescribeContext, DescribeOptions, describe_page
from llm_ocr.stages.extract import ExtractContext, ExtractOptions, extract_page, family_render
from llm_ocr.storage import Storage
from llm_ocr.storage.parts import PartWriter, ShardIndex, ShardLayoutError, scan_shard
from llm_ocr.storage.state import clear_marker, progress_writer, read_marker, write_marker
from llm_ocr.storage.stores import StorageError
from llm_ocr.storage.upstream import UnreadablePart, iter_shard_rows
from llm_ocr.vlm.client import ClientOptions, EndpointDown
from llm_ocr.vlm.families import family_for
from llm_ocr.runners.workers import WorkerPool, crop_figures, default_workers, transform_image

log = logging.getLogger("llm_ocr")


@dataclass
class RunJob:
    """Everything ``llm-ocr run`` needs."""

    inputs: list[str]
    job: JobOptions
    render: RenderOptions = field(default_factory=RenderOptions)
    dataset: DatasetOptions = field(default_factory=DatasetOptions)
    extract: ExtractOptions = field(default_factory=ExtractOptions)
    describe: DescribeOptions = field(default_factory=DescribeOptions)
    assemble: AssembleOptions = field(default_factory=AssembleOptions)
    client: ClientOptions = field(default_factory=ClientOptions)
    server: ServerOptions = field(default_factory=ServerOptions)


def _undescribed(extract: ShardIndex, describe: ShardIndex) -> int:
    return sum(len(pages - describe.done_pages.get(doc_id, set())) for doc_id, pages in extract.done_pages.items())


async def _run_page(
    ref: DocumentRef,
    item: PageImage | PageFailure,
    num_pages: int | None,
    *,
    extract: ExtractContext,
    describe: DescribeContext,
    described: dict[str, set[int]],
    counters: RunCounters,
    bad: BadPages,
) -> tuple[PageResult, PageResult | None]:
    """One page through Extract, then Describe: (Extract row, Describe row or None if it has one)."""
    page = await bad.fallback(ref, await extract_page(ref, item, num_pages, extract))
    return await _then_describe(page, describe, described, counters)


async def _then_describe(
    page: PageResult, describe: DescribeContext, described: dict[str, set[int]], counters: RunCounters
) -> tuple[PageResult, PageResult | None]:
    if page.page in described.get(page.doc_id, ()):
        return page, None
    result = await describe_page(page, describe)
    counters.pages[result.tally] += 1
    return page, result


async def _run_quarantined(
    ref: DocumentRef,
    item: PageImage | PageFailure,
    num_pages: int | None,
    exc: PageQuarantined,
    *,
    describe: DescribeContext,
    described: dict[str, set[int]],
    counters: RunCounters,
    bad: BadPages,
) -> tuple[PageResult, PageResult | None]:
    """A page convicted of crashing the server: its quarantine row, passed through Describe."""
    return await _then_describe(await bad.quarantined(ref, item, num_pages, exc), describe, described, counters)


@dataclass
class _Stages:
    """The two stage folders of the page flow with their resume indexes."""

    out: Storage
    shard: int
    num_shards: int
    extract: ShardIndex
    describe: ShardIndex

    @property
    def extract_stage(self) -> Storage:
        return self.out.child("extract")

    @property
    def describe_stage(self) -> Storage:
        return self.out.child("describe")


async def _page_flow(
    spec: RunJob,
    endpoint: Endpoint,
    describer: Endpoint,
    schema: dict[str, Any] | None,
    stages: _Stages,
    stop: asyncio.Event | None,
) -> tuple[RunCounters, RunCounters, DescribeContext]:
    job = spec.job
    shard, num_shards = stages.shard, stages.num_shards
    ex_counters = RunCounters("extract", shard, num_shards)
    de_counters = RunCounters("describe", shard, num_shards)
    workers = job.workers if job.workers is not None else default_workers()
    pool = WorkerPool(workers)
    ex_writer = PartWriter(
        stages.extract_stage, page_schema(), shard, num_shards, start_seq=stages.extract.next_seq, max_rows=job.part_rows
    )
    de_writer = PartWriter(
        stages.describe_stage, page_schema(), shard, num_shards, start_seq=stages.describe.next_seq, max_rows=job.part_rows
    )
    reporter = ProgressReporter(
        ex_counters, job.progress, job.progress_interval, poll_server=endpoint.metrics,
        on_tick=progress_writer(stages.out, "extract", shard, num_shards),
    )
    limit, controller = in_flight_for_endpoint(job, endpoint)
    in_flight = limit.limit
    settings = FlowSettings(
        max_in_flight=in_flight,
        prefetch_chunks=max(4, workers * 2),
        reorder_window=max(256, in_flight * 4),
        flush_interval=job.flush_interval,
        grace_period=job.grace_period,
        limit=limit,
    )
    dctx = await make_context(describer, spec.describe, schema, in_flight)
    reporter.start()
    try:
        missing = _undescribed(stages.extract, stages.describe)
        if missing:
            log.info("describing %d page(s) extracted earlier but not described yet", missing)
            catch_up = DescribeFlow(dctx, de_writer, stages.describe, de_counters, settings, stop)
            await catch_up.run(iter_shard_rows(stages.extract_stage, shard, num_shards))
            de_counters.docs_finished += len(catch_up.documents)
            de_counters.docs_seen = len(catch_up.documents)
        if stop is None or not stop.is_set():
            client = endpoint.client
            recipe = family_for(job.model, job.recipe).with_prompt(spec.extract.prompt)
            ectx = ExtractContext(
                client,
                recipe,
                spec.extract,
                recipe.max_tokens(spec.extract.max_tokens, await client.max_model_len()),
                partial(pool.run, crop_figures),
                partial(pool.run, transform_image),
            )
            bad = BadPages(endpoint.tracker, pool, spec.extract, job.storage_options)
            shared = {"describe": dctx, "described": stages.describe.done_pages, "counters": de_counters, "bad": bad}
            flow = PageFlow(
                pool=pool,
                render=family_render(spec.render, recipe),
                handler=bad.guard(partial(_run_page, extract=ectx, **shared), partial(_run_quarantined, **shared)),
                writer=[ex_writer, de_writer],
                index=stages.extract,
                counters=ex_counters,
                settings=settings,
                storage_options=job.storage_options,
                stop=stop,
            )
            documents = shard_inputs(spec.inputs, spec.dataset, job.storage_options, stages.out, num_shards, shard)
            async with adapting(controller):
                await flow.run(documents)
    except (EndpointDown, StorageError) as exc:
        raise RunError(f"{exc}; completed pages are saved, rerun to resume") from exc
    except (InputError, UnreadablePart) as exc:
        raise RunError(str(exc)) from exc
    finally:
        # Extract's part first: a Describe row never exists without its Extract row for long.
        await ex_writer.close()
        await de_writer.close()
        await reporter.stop()
        pool.close()
    de_counters.docs_finished += ex_counters.docs_finished
    # The page flow reaches every document of the shard, those the catch-up described included.
    de_counters.docs_seen = max(de_counters.docs_seen, ex_counters.docs_seen)
    return ex_counters, de_counters, dctx


async def run_shard(spec: RunJob, stop: asyncio.Event | None = None) -> ShardOutcome:
    """Run Extract, Describe and Assemble over this process's shard of the inputs."""
    job = spec.job
    num_shards, shard = resolve_shard(job)
    out = Storage(job.output, job.storage_options)
    markers = {
        name: await asyncio.to_thread(read_marker, out, name, shard, num_shards) for name in ("extract", "describe", "assemble")
    }
    if (
        marker_settles(markers["extract"], spec.extract)
        and describe_settles(markers["describe"], markers["extract"])
        and assemble_finished(markers["assemble"], spec.assemble)
    ):
        log.info("shard %d/%d already complete in every stage; nothing to do", shard + 1, num_shards)
        quarantined = quarantined_in(markers["extract"])
        return ShardOutcome(EXIT_PAGES_FAILED if quarantined else EXIT_OK, {name: marker for name, marker in markers.items()})
    schema = resolve_schema(spec.describe, job.storage_options)
    await asyncio.to_thread(check_writable, out)
    try:
        stages = _Stages(
            out,
            shard,
            num_shards,
            extract=await asyncio.to_thread(
                partial(scan_shard, out.child("extract"), shard, num_shards, keep_quarantined=not spec.extract.retry_quarantined)
            ),
            describe=await asyncio.to_thread(scan_shard, out.child("describe"), shard, num_shards),
        )
    except ShardLayoutError as exc:
        raise RunError(str(exc)) from exc
    note_kept(stages.extract)
    for name in ("extract", "describe"):
        if markers[name]:
            await asyncio.to_thread(clear_marker, out, name, shard, num_shards)

    preset: str | None = None
    async with open_endpoint(
        job.endpoint,
        job.model,
        api_key=job.api_key.get_secret_value() if job.api_key else None,
        client_options=spec.client,
        server_options=spec.server,
        recipe=job.recipe,
        out=out,
        log_name=f"server-{shard:05d}-of-{num_shards:05d}.log",
    ) as endpoint, open_describe_endpoint(job, spec.describe, spec.client, main=endpoint) as describer:
        ex_counters, de_counters, dctx = await _page_flow(spec, endpoint, describer, schema, stages, stop)
        preset = endpoint.preset

    ex_stats, de_stats = ex_counters.summary(), describe_stats(de_counters, dctx)
    ex_stats["pages"]["quarantined_earlier"] = stages.extract.kept_quarantined
    stats: dict[str, Any] = {"extract": ex_stats, "describe": de_stats}
    log.info(ex_counters.reconciliation())
    log.info(de_counters.reconciliation())
    if stop is not None and stop.is_set():
        log.warning("interrupted: %d page(s) saved this run; rerun the same command to resume", ex_counters.pages_done)
        return ShardOutcome(EXIT_INTERRUPTED, stats)
    # One server did both stages: the GPU time is the run's, recorded once, with Extract.
    ex_stats["gpu"] = gpu_cost(ex_stats["wall_time_s"], preset, job.gpu_price_per_hour)
    # Only Extract's pages seen are counted from the input (RunCounters.pages_found), so only
    # Extract's count can fail to reconcile here.
    reconciled(de_stats, de_counters)
    if not reconciled(ex_stats, ex_counters):
        return ShardOutcome(EXIT_PAGES_FAILED, stats)
    await asyncio.to_thread(write_marker, out, "extract", shard, num_shards, ex_stats)
    await asyncio.to_thread(write_marker, out, "describe", shard, num_shards, de_stats)
    # Assemble reads OUT/describe back: where writes are batched into commits (the Hub), the
    # parts just written must be committed first, or Assemble finds nothing to assemble.
    await asyncio.to_thread(out.flush)
    assembled = await assemble_documents(out, shard, num_shards, spec.assemble, job, stop, previous=markers["assemble"])
    stats["assemble"] = assembled.stats
    if assembled.exit_code == EXIT_INTERRUPTED:
        return ShardOutcome(EXIT_INTERRUPTED, stats)
    failed = (ex_counters.pages_failed or stages.extract.kept_quarantined or de_counters.pages_failed
              or assembled.exit_code != EXIT_OK)
    return ShardOutcome(EXIT_PAGES_FAILED if failed else EXIT_OK, stats)
