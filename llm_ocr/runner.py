"""Runs a stage over one shard: resume, the page flow, progress, signals, completion marker.

Exit codes (also in the README): 0 every page ok or truncated; 1 finished but some pages
failed; 2 could not run (bad options, inputs, output or endpoint); 3 interrupted (SIGTERM or
SIGINT: completed rows are kept, rerun the same command to resume).
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from llm_ocr.access import check_output
from llm_ocr.config import JobOptions
from llm_ocr.costs import gpu_cost
from llm_ocr.endpoint import Endpoint, EndpointError, ServerOptions, open_endpoint
from llm_ocr.parts import PartWriter, ShardIndex, ShardLayoutError, scan_shard
from llm_ocr.pipeline import FlowSettings, PageFlow
from llm_ocr.platform import detect_shard
from llm_ocr.progress import ProgressReporter, RunCounters
from llm_ocr.records import page_schema
from llm_ocr.sinks import close_all as close_sinks
from llm_ocr.runners.inputs import shard_inputs
from llm_ocr.sources import DatasetOptions, InputError
from llm_ocr.sources.base import DocumentRef, RenderOptions
from llm_ocr.stages.extract import ExtractContext, ExtractOptions, extract_page
from llm_ocr.state import clear_marker, read_marker, write_marker
from llm_ocr.storage import Storage
from llm_ocr.stores import StorageError
from llm_ocr.vlm.client import ClientOptions, EndpointDown
from llm_ocr.vlm.recipes import clamp_max_tokens, recipe_for
from llm_ocr.workers import WorkerPool, crop_figures, default_workers

log = logging.getLogger("llm_ocr")

EXIT_OK, EXIT_PAGES_FAILED, EXIT_COULD_NOT_RUN, EXIT_INTERRUPTED = 0, 1, 2, 3

#: Requests in flight when neither --max-in-flight nor a GPU preset says otherwise.
DEFAULT_IN_FLIGHT = 64


class RunError(Exception):
    """The run could not start or had to stop; the message says what to do."""


@dataclass
class ShardOutcome:
    """How one shard's run ended."""

    exit_code: int
    stats: dict[str, Any] = field(default_factory=dict)


def resolve_shard(job: JobOptions) -> tuple[int, int]:
    """``(num_shards, shard_index)`` from options, else the platform, else ``(1, 0)``."""
    num, index, where = detect_shard()
    num_shards = job.num_shards if job.num_shards is not None else num
    shard_index = job.shard_index if job.shard_index is not None else (index if job.num_shards is None else 0)
    if shard_index >= num_shards:
        raise RunError(f"--shard-index {shard_index} is out of range for --num-shards {num_shards}")
    if where != "default" and job.num_shards is None:
        log.info("shard %d of %d (from %s)", shard_index, num_shards, where)
    return num_shards, shard_index


def check_writable(out: Storage) -> None:
    """Fail before any GPU time is spent if the output cannot be written."""
    try:
        check_output(out)  # llm_ocr.access: names the store and what to set, no secrets
    except StorageError as exc:
        raise RunError(str(exc)) from exc


@asynccontextmanager
async def interruptible() -> AsyncIterator[asyncio.Event]:
    """An event set by SIGTERM/SIGINT; a second signal cancels the run at once."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    main = asyncio.current_task()

    def on_signal(signum: int) -> None:
        if stop.is_set() and main is not None:
            main.cancel()
            return
        log.warning("received %s: stopping intake, finishing pages in flight", signal.Signals(signum).name)
        stop.set()

    installed = []
    for signum in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(signum, on_signal, signum)
            installed.append(signum)
        except (NotImplementedError, RuntimeError):  # not the main thread (e.g. in a notebook)
            pass
    try:
        yield stop
    finally:
        for signum in installed:
            loop.remove_signal_handler(signum)


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
    if marker and marker.get("pages", {}).get("error", 0) == 0:
        log.info("extract shard %d/%d already complete; nothing to do", shard + 1, num_shards)
        return ShardOutcome(EXIT_OK, marker)
    await asyncio.to_thread(check_writable, out)
    documents = shard_inputs(spec.inputs, spec.dataset, job.storage_options, out, num_shards, shard)
    try:
        index: ShardIndex = await asyncio.to_thread(scan_shard, stage, shard, num_shards)
    except ShardLayoutError as exc:
        raise RunError(str(exc)) from exc
    if marker:
        await asyncio.to_thread(clear_marker, out, "extract", shard, num_shards)
    if index.dropped_error_rows:
        log.info("retrying %d failed page(s) from earlier runs", index.dropped_error_rows)

    async with open_endpoint(
        job.endpoint,
        job.model,
        api_key=job.api_key.get_secret_value() if job.api_key else None,
        client_options=spec.client,
        server_options=spec.server,
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
    in_flight = job.max_in_flight or endpoint.suggested_in_flight or DEFAULT_IN_FLIGHT
    workers = job.workers if job.workers is not None else default_workers()
    pool = WorkerPool(workers)
    writer = PartWriter(stage, page_schema(), shard, num_shards, start_seq=index.next_seq, max_rows=job.part_rows)
    reporter = ProgressReporter(counters, job.progress, job.progress_interval, poll_server=endpoint.metrics)
    try:
        max_tokens = clamp_max_tokens(spec.extract.max_tokens, await client.max_model_len())
        recipe = recipe_for(job.model).with_prompt(spec.extract.prompt)
        ctx = ExtractContext(client, recipe, spec.extract, max_tokens, partial(pool.run, crop_figures))
        flow = PageFlow(
            pool=pool,
            render=spec.render,
            handler=partial(_extract_handler, ctx=ctx),
            writer=writer,
            index=index,
            counters=counters,
            settings=FlowSettings(
                max_in_flight=in_flight,
                prefetch_chunks=max(4, workers * 2),
                reorder_window=max(256, in_flight * 4),
                flush_interval=job.flush_interval,
                grace_period=job.grace_period,
            ),
            storage_options=job.storage_options,
            stop=stop,
        )
        reporter.start()
        try:
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
    if stop is not None and stop.is_set():
        log.warning("interrupted: %d page(s) saved this run; rerun the same command to resume", counters.pages_done)
        return ShardOutcome(EXIT_INTERRUPTED, stats)
    stats["gpu"] = gpu_cost(stats["wall_time_s"], endpoint.preset, job.gpu_price_per_hour)
    if not reconciled(stats, counters):
        return ShardOutcome(EXIT_PAGES_FAILED, stats)
    await asyncio.to_thread(write_marker, out, "extract", shard, num_shards, stats)
    return ShardOutcome(EXIT_PAGES_FAILED if counters.pages["error"] else EXIT_OK, stats)


def reconciled(stats: dict[str, Any], counters: RunCounters) -> bool:
    """Record in ``stats`` whether every page of the input the run reached got a row.

    A shard that does not reconcile must get no completion marker: a rerun would skip it and
    the pages without a row would be lost; without the marker the rerun redoes them.
    """
    stats["reconciled"] = counters.pages_left == 0
    if not stats["reconciled"]:
        log.error(
            "the rows do not reconcile with the input (%s); no completion marker written, rerun to redo the missing pages",
            counters.reconciliation(),
        )
    return stats["reconciled"]


def _extract_handler(ref, item, num_pages, *, ctx: ExtractContext):  # type: ignore[no-untyped-def]
    return extract_page(ref, item, num_pages, ctx)


def run_sync(make: Callable[[asyncio.Event], Awaitable[ShardOutcome]]) -> ShardOutcome:
    """Run a shard coroutine on one event loop with signal handling; map failures to exit codes."""

    async def main() -> ShardOutcome:
        async with interruptible() as stop:
            return await make(stop)

    outcome = _run_and_map(main)
    # Batched writes (Hub commits) still queued: store them whatever happened, so an interrupted
    # or failed run keeps its completed parts. A failure here makes a clean run "could not run".
    try:
        close_sinks()
    except Exception as exc:  # noqa: BLE001 - reported, the rerun redoes the pages
        log.error("could not store the last queued files (%s); their pages will be redone on rerun", exc)
        if outcome.exit_code in (EXIT_OK, EXIT_PAGES_FAILED):
            return ShardOutcome(EXIT_COULD_NOT_RUN, outcome.stats)
    return outcome


def _run_and_map(main: Callable[[], Awaitable[ShardOutcome]]) -> ShardOutcome:
    try:
        return asyncio.run(main())  # type: ignore[arg-type]
    except RunError as exc:
        log.error("%s", exc)
        return ShardOutcome(EXIT_COULD_NOT_RUN)
    except (InputError, EndpointError) as exc:
        log.error("%s", exc)
        return ShardOutcome(EXIT_COULD_NOT_RUN)
    except StorageError as exc:
        log.error("%s", exc)
        return ShardOutcome(EXIT_COULD_NOT_RUN)
    except (KeyboardInterrupt, asyncio.CancelledError):
        log.error("interrupted; completed parts are kept, rerun the same command to resume")
        return ShardOutcome(EXIT_INTERRUPTED)
    except Exception:  # noqa: BLE001 - a bug or an unforeseen failure: show it, exit "could not run"
        log.exception("the run failed unexpectedly; completed parts are kept, rerun to resume")
        return ShardOutcome(EXIT_COULD_NOT_RUN)
