"""Runs Describe over one shard: ``OUT/extract`` rows → figure descriptions → ``OUT/describe``.

Every page row of the shard is written again (figures or not, failed pages unchanged), so
``OUT/describe`` is a complete superset of ``OUT/extract``. Figure requests are issued as soon as
a page is read and a slot is free; rows leave in input order through the same bounded reorder
window as Extract's.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from llm_ocr.config import JobOptions
from llm_ocr.costs import gpu_cost
from llm_ocr.endpoint import Endpoint, ServerOptions, open_endpoint
from llm_ocr.runners.page_flow import FlowSettings, OrderedRows, acquire_unless_stopped, iterate_in_thread
from llm_ocr.runners.progress import ProgressReporter, RunCounters
from llm_ocr.records import PageResult, page_schema
from llm_ocr.runners.bad_pages import describe_settles, quarantined_in
from llm_ocr.runners.shard import (
    DEFAULT_IN_FLIGHT,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_PAGES_FAILED,
    RunError,
    ShardOutcome,
    check_writable,
    reconciled,
    resolve_shard,
)
from llm_ocr.stages.describe import (
    DescribeContext,
    DescribeOptions,
    SchemaError,
    describe_extra_body,
    describe_page,
    load_schema,
)
from llm_ocr.storage import Storage
from llm_ocr.storage.parts import PartWriter, ShardIndex, ShardLayoutError, scan_shard
from llm_ocr.storage.state import clear_marker, progress_writer, read_marker, write_marker
from llm_ocr.storage.stores import StorageError
from llm_ocr.storage.upstream import UnreadablePart, iter_shard_rows, stage_has_parts, upstream_complete
from llm_ocr.vlm.client import ClientOptions, EndpointDown
from llm_ocr.vlm.recipes import DESCRIBE_PROMPT, clamp_max_tokens

log = logging.getLogger("llm_ocr")


@dataclass
class DescribeJob:
    """Everything a Describe run needs."""

    job: JobOptions
    describe: DescribeOptions = field(default_factory=DescribeOptions)
    client: ClientOptions = field(default_factory=ClientOptions)
    server: ServerOptions = field(default_factory=ServerOptions)


def resolve_schema(options: DescribeOptions, storage_options: dict[str, Any]) -> dict[str, Any] | None:
    """The ``--describe-schema`` as a checked JSON schema, or None; a bad one stops the run early."""
    if not options.describe_schema:
        return None
    try:
        return load_schema(options.describe_schema, storage_options)
    except SchemaError as exc:
        raise RunError(str(exc)) from exc


@asynccontextmanager
async def open_describe_endpoint(
    job: JobOptions,
    options: DescribeOptions,
    client_options: ClientOptions,
    *,
    main: Endpoint | None = None,
    server_options: ServerOptions | None = None,
    out: Storage | None = None,
    log_name: str = "server-describe.log",
) -> AsyncIterator[Endpoint]:
    """The endpoint that writes descriptions.

    ``--describe-endpoint`` wins; else the job's endpoint (``main`` when the caller has it open
    already — same model: the very same client, so ``llm-ocr run`` loads no second model).
    """
    model = options.describe_model or job.model
    secret = options.describe_api_key or job.api_key
    api_key = secret.get_secret_value() if secret else None
    if options.describe_endpoint:
        async with open_endpoint(options.describe_endpoint, model, api_key=api_key, client_options=client_options) as endpoint:
            yield endpoint
    elif main is not None and model == main.client.model:
        yield main
    elif main is not None:
        async with open_endpoint(main.client.base_url, model, api_key=api_key, client_options=client_options) as endpoint:
            yield endpoint
    else:
        async with open_endpoint(
            job.endpoint,
            model,
            api_key=api_key,
            client_options=client_options,
            server_options=server_options,
            recipe=job.recipe if model == job.model else None,
            out=out,
            log_name=log_name,
        ) as endpoint:
            yield endpoint


async def make_context(
    endpoint: Endpoint, options: DescribeOptions, schema: dict[str, Any] | None, max_in_flight: int
) -> DescribeContext:
    """The shared per-run state of Describe on an open endpoint."""
    client = endpoint.client
    return DescribeContext(
        client=client,
        prompt=options.describe_prompt or DESCRIBE_PROMPT,
        max_tokens=clamp_max_tokens(options.describe_max_tokens, await client.max_model_len()),
        temperature=options.describe_temperature,
        extra_body=describe_extra_body(client.model),
        schema=schema,
        redescribe=options.redescribe,
        limit=asyncio.Semaphore(max_in_flight),
    )


class DescribeFlow:
    """Describes the pages of an iterable of upstream rows and writes every row in order."""

    def __init__(
        self,
        ctx: DescribeContext,
        writer: PartWriter,
        done: ShardIndex,
        counters: RunCounters,
        settings: FlowSettings,
        stop: asyncio.Event | None = None,
    ) -> None:
        self.ctx = ctx
        self.writer = writer
        self.done = done
        self.counters = counters
        self.settings = settings
        self.stop = stop or asyncio.Event()
        self.ordered = OrderedRows(writer, settings.reorder_window)
        # Pages held at once (read, waiting for their figures): bounds memory, and is larger
        # than the request limit so figure slots never idle while a page waits to be read.
        self._pages = asyncio.Semaphore(settings.max_in_flight * 2)
        self._tasks: set[asyncio.Task[None]] = set()
        self._fatal: BaseException | None = None
        self.documents: set[str] = set()

    async def run(self, rows: Iterable[dict[str, Any]]) -> None:
        """Process every row not done yet; returns when all rows are handed to the writer."""
        flusher = asyncio.create_task(self._flush_periodically())
        seq = 0
        try:
            async for row in iterate_in_thread(rows):  # type: ignore[arg-type]
                if self.stop.is_set() or self._fatal is not None:
                    break
                if self.counters.pages_found is not None:  # counted from the input rows
                    self.counters.pages_found += 1
                if row["page"] in self.done.done_pages.get(row["doc_id"], ()):
                    self.counters.pages_skipped += 1
                    continue
                if not await acquire_unless_stopped(self._pages, self.stop):  # as PageFlow: SIGTERM ends the wait
                    break
                task = asyncio.create_task(self._handle(row, seq))
                seq += 1
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
            await self._wait_tasks()
        finally:
            flusher.cancel()
            try:
                await flusher
            except asyncio.CancelledError:
                pass
            await self.ordered.drain()
        if self._fatal is not None:
            raise self._fatal

    async def _flush_periodically(self) -> None:
        while True:
            await asyncio.sleep(self.settings.flush_interval)
            await self.writer.flush()

    async def _handle(self, row: dict[str, Any], seq: int) -> None:
        self.counters.in_flight += 1
        out: dict[str, Any] | None = None
        try:
            page = await describe_page(PageResult.from_row(row), self.ctx)
            self.counters.pages[page.tally] += 1
            out = page.to_row()
            self.documents.add(page.doc_id)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # noqa: BLE001 - e.g. EndpointDown: stop the whole flow
            if self._fatal is None:
                self._fatal = exc
                self.stop.set()
        finally:
            self.counters.in_flight -= 1
            self._pages.release()
            await self.ordered.put(seq, out)

    async def _wait_tasks(self) -> None:
        if not self._tasks:
            return
        timeout = self.settings.grace_period if self.stop.is_set() else None
        _, pending = await asyncio.wait(set(self._tasks), timeout=timeout)
        for task in pending:
            task.cancel()
        if pending:
            log.warning("abandoned %d page(s) still in flight after the %.0fs grace period", len(pending), timeout)
            await asyncio.gather(*pending, return_exceptions=True)


def in_flight_for(job: JobOptions, endpoint: Endpoint) -> int:
    """Requests in flight: --max-in-flight, else what the launched server suggests (as Extract)."""
    return job.max_in_flight or endpoint.suggested_in_flight or DEFAULT_IN_FLIGHT


def flow_settings(job: JobOptions, in_flight: int) -> FlowSettings:
    """Flow knobs from the job options (the same rules as Extract's)."""
    return FlowSettings(
        max_in_flight=in_flight,
        reorder_window=max(256, in_flight * 4),
        flush_interval=job.flush_interval,
        grace_period=job.grace_period,
    )


def describe_stats(counters: RunCounters, ctx: DescribeContext) -> dict[str, Any]:
    """The stats a Describe shard records: pages by status plus what happened to figures."""
    counters.prompt_tokens, counters.completion_tokens = ctx.counts.prompt_tokens, ctx.counts.completion_tokens
    stats = counters.summary()
    stats["figures"] = ctx.counts.as_dict()
    return stats


async def describe_shard(spec: DescribeJob, stop: asyncio.Event | None = None) -> ShardOutcome:
    """Run Describe over this process's shard of ``OUT/extract``."""
    job = spec.job
    num_shards, shard = resolve_shard(job)
    out = Storage(job.output, job.storage_options)
    source, stage = out.child("extract"), out.child("describe")
    marker = await asyncio.to_thread(read_marker, out, "describe", shard, num_shards)
    if describe_settles(marker, await asyncio.to_thread(read_marker, out, "extract", shard, num_shards)):
        log.info("describe shard %d/%d already complete; nothing to do", shard + 1, num_shards)
        return ShardOutcome(EXIT_PAGES_FAILED if quarantined_in(marker) else EXIT_OK, marker)
    schema = resolve_schema(spec.describe, job.storage_options)
    complete = await asyncio.to_thread(upstream_complete, out, "extract", source, shard, num_shards)
    if not complete and not await asyncio.to_thread(stage_has_parts, source):
        raise RunError(f"nothing to describe: {source.url} holds no Extract output; run llm-ocr extract first")
    await asyncio.to_thread(check_writable, out)
    try:
        index = await asyncio.to_thread(scan_shard, stage, shard, num_shards)
    except ShardLayoutError as exc:
        raise RunError(str(exc)) from exc
    if marker:
        await asyncio.to_thread(clear_marker, out, "describe", shard, num_shards)
    if not complete:
        log.warning(
            "extract has not finished every shard this describe shard reads: describing the rows there "
            "are; rerun describe once extract is done (no completion marker is written until then)"
        )

    counters = RunCounters("describe", shard, num_shards, pages_found=0)  # rows read are counted
    async with open_describe_endpoint(
        job,
        spec.describe,
        spec.client,
        server_options=spec.server,
        out=out,
        log_name=f"server-describe-{shard:05d}-of-{num_shards:05d}.log",
    ) as endpoint:
        in_flight = in_flight_for(job, endpoint)
        ctx = await make_context(endpoint, spec.describe, schema, in_flight)
        writer = PartWriter(stage, page_schema(), shard, num_shards, start_seq=index.next_seq, max_rows=job.part_rows)
        reporter = ProgressReporter(
            counters, job.progress, job.progress_interval, poll_server=endpoint.metrics,
            on_tick=progress_writer(out, "describe", shard, num_shards),
        )
        flow = DescribeFlow(ctx, writer, index, counters, flow_settings(job, in_flight), stop)
        reporter.start()
        try:
            await flow.run(iter_shard_rows(source, shard, num_shards))
        except (EndpointDown, StorageError) as exc:
            raise RunError(f"{exc}; completed pages are saved, rerun to resume") from exc
        except UnreadablePart as exc:
            raise RunError(str(exc)) from exc
        finally:
            await writer.close()
            await reporter.stop()
    counters.docs_seen = counters.docs_finished = len(flow.documents)
    stats = describe_stats(counters, ctx)
    log.info(counters.reconciliation())
    if stop is not None and stop.is_set():
        log.warning("interrupted: %d page(s) saved this run; rerun the same command to resume", counters.pages_done)
        return ShardOutcome(EXIT_INTERRUPTED, stats)
    if not complete:
        return ShardOutcome(EXIT_PAGES_FAILED, stats)
    stats["gpu"] = gpu_cost(stats["wall_time_s"], endpoint.preset, job.gpu_price_per_hour)
    if not reconciled(stats, counters):
        return ShardOutcome(EXIT_PAGES_FAILED, stats)
    await asyncio.to_thread(write_marker, out, "describe", shard, num_shards, stats)
    return ShardOutcome(EXIT_PAGES_FAILED if counters.pages_failed else EXIT_OK, stats)
