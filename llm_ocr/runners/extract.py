"""Runs Extract over one shard: resume, the page flow, progress, completion marker."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import partial

from llm_ocr.endpoint.in_flight import adapting
from llm_ocr.config import JobOptions
from llm_ocr.costs import gpu_cost
from llm_ocr.endpoint import Endpoint, ServerOptions, open_endpoint
from llm_ocr.runners.page_flow import FlowSettings, PageFlow
from llm_ocr.runners.progress import ProgressReporter, RunCounters
from llm_ocr.records import page_schema
from llm_ocr.runners.bad_pages import BadPages, marker_settles, note_kept, quarantined_in
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
from llm_ocr.sources.base import DocumentRef, RenderOptions
from llm_ocr.stages.extract import ExtractContext, ExtractOptions, extract_page, family_render
from llm_ocr.storage import Storage, StorageError
from llm_ocr.storage.parts import PartWriter, ShardIndex, ShardLayoutError, scan_shard
from llm_ocr.storage.state import clear_marker, progress_writer, read_marker, write_marker
from llm_ocr.vlm.client import ClientOptions, EndpointDown
from llm_ocr.vlm.families import family_for
from llm_ocr.runners.workers import WorkerPool, crop_figures, default_workers, transform_image

log = logging.getLogger("llm_ocr")


@dataclass
class ExtractJob:
    """Everything an Extract run needs."""

    inputs: list[str]
    job: JobOptions
    render: RenderOptions = field(default_factory=RenderOptions)
    dataset: DatasetOptions = field(default_factory=DatasetOptions)
    extract: ExtractOptions = field(default_factory=ExtractOptions)
    client: ClientOptions = field(default_factory=ClientOptions)
    server: ServerOptions = field(default_factory=ServerOptions)


async def extract_shard(spec: ExtractJob, stop: asyncio.Event | None = None) -> ShardOutcome:
    """Run Extract over this process's shard of the inputs."""
    job = spec.job
    num_shards, shard = resolve_shard(job)
    out = Storage(job.output, job.storage_options)
    stage = out.child("extract")
    marker = await asyncio.to_thread(read_marker, out, "extract", shard, num_shards)
    if marker_settles(marker, spec.extract):
        log.info("extract shard %d/%d already complete; nothing to do", shard + 1, num_shards)
        return ShardOutcome(EXIT_PAGES_FAILED if quarantined_in(marker) else EXIT_OK, marker)
    await asyncio.to_thread(check_writable, out)
    documents = shard_inputs(spec.inputs, spec.dataset, job.storage_options, out, num_shards, shard)
    try:
        index: ShardIndex = await asyncio.to_thread(
            partial(scan_shard, stage, shard, num_shards, keep_quarantined=not spec.extract.retry_quarantined)
        )
    except ShardLayoutError as exc:
        raise RunError(str(exc)) from exc
    if marker:
        await asyncio.to_thread(clear_marker, out, "extract", shard, num_shards)
    if index.dropped_error_rows:
        log.info("retrying %d failed page(s) from earlier runs", index.dropped_error_rows)
    note_kept(index)

    async with open_endpoint(
        job.endpoint,
        job.model,
        api_key=job.api_key.get_secret_value() if job.api_key else None,
        client_options=spec.client,
        server_options=spec.server,
        recipe=job.recipe,
        out=out,
        log_name=f"server-{shard:05d}-of-{num_shards:05d}.log",
    ) as endpoint:
        return await _extract_with(spec, endpoint, documents, out, stage, index, shard, num_shards, stop)


async def _extract_with(
    spec: ExtractJob,
    endpoint: Endpoint,
    documents: Iterable[DocumentRef],
    out: Storage,
    stage: Storage,
    index: ShardIndex,
    shard: int,
    num_shards: int,
    stop: asyncio.Event | None,
) -> ShardOutcome:
    job = spec.job
    client = endpoint.client
    counters = RunCounters("extract", shard, num_shards)
    limit, controller = in_flight_for_endpoint(job, endpoint)
    in_flight = limit.limit
    workers = job.workers if job.workers is not None else default_workers()
    pool = WorkerPool(workers)
    writer = PartWriter(stage, page_schema(), shard, num_shards, start_seq=index.next_seq, max_rows=job.part_rows)
    reporter = ProgressReporter(
        counters, job.progress, job.progress_interval, poll_server=endpoint.metrics,
        on_tick=progress_writer(out, "extract", shard, num_shards),
    )
    try:
        recipe = family_for(job.model, job.recipe).with_prompt(spec.extract.prompt)
        max_tokens = recipe.max_tokens(spec.extract.max_tokens, await client.max_model_len())
        ctx = ExtractContext(
            client, recipe, spec.extract, max_tokens, partial(pool.run, crop_figures), partial(pool.run, transform_image)
        )
        bad = BadPages(endpoint.tracker, pool, spec.extract, job.storage_options)
        flow = PageFlow(
            pool=pool,
            render=family_render(spec.render, recipe),
            handler=bad.guard(partial(_extract_handler, ctx=ctx, bad=bad)),
            writer=writer,
            index=index,
            counters=counters,
            settings=FlowSettings(
                max_in_flight=in_flight,
                prefetch_chunks=max(4, workers * 2),
                reorder_window=max(256, in_flight * 4),
                flush_interval=job.flush_interval,
                grace_period=job.grace_period,
                limit=limit,
            ),
            storage_options=job.storage_options,
            stop=stop,
        )
        reporter.start()
        try:
            async with adapting(controller):
                await flow.run(documents)
        except (EndpointDown, StorageError) as exc:
            await writer.close()
            raise RunError(f"{exc}; completed pages are saved, rerun to resume") from exc
        except InputError as exc:
            await writer.close()
            raise RunError(str(exc)) from exc
        await writer.close()
    finally:
        await reporter.stop()
        pool.close()
        # In the finally: a run stopped by a dead endpoint or store ends with the line too.
        log.info(counters.reconciliation())
    stats = counters.summary()
    stats["pages"]["quarantined_earlier"] = kept = index.kept_quarantined
    if stop is not None and stop.is_set():
        log.warning("interrupted: %d page(s) saved this run; rerun the same command to resume", counters.pages_done)
        return ShardOutcome(EXIT_INTERRUPTED, stats)
    stats["gpu"] = gpu_cost(stats["wall_time_s"], endpoint.preset, job.gpu_price_per_hour)
    if not reconciled(stats, counters):
        return ShardOutcome(EXIT_PAGES_FAILED, stats)
    await asyncio.to_thread(write_marker, out, "extract", shard, num_shards, stats)
    return ShardOutcome(EXIT_PAGES_FAILED if counters.pages_failed or kept else EXIT_OK, stats)


async def _extract_handler(ref, item, num_pages, *, ctx: ExtractContext, bad: BadPages):  # type: ignore[no-untyped-def]
    return await bad.fallback(ref, await extract_page(ref, item, num_pages, ctx))
