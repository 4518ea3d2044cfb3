"""Describe over one shard: ``OUT/extract`` rows (``OUT/escalate``'s when it holds any) → figure
descriptions → ``OUT/describe``.

Every page row of the shard is written again (figures or not, failed pages unchanged), so
``OUT/describe`` is a complete superset of ``OUT/extract``. The rows go through the same page
flow as Extract's (:class:`~llm_ocr.runners.page_flow.PageFlow`, fed by
:class:`~llm_ocr.runners.page_flow.UpstreamRows`): a page's figures are sent as soon as the page
is read and a request slot is free, and rows leave in input order through the same bounded
reorder window. The figure requests in flight are sized like Extract's pages: ``--max-in-flight``,
else the launched server's preset, else from the endpoint's ``/metrics`` while the run goes; the
pages held at once are twice that.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

from llm_ocr.options import ClientOptions, DescribeOptions, ServerOptions, StageSpec
from llm_ocr.outcomes import ExitCode, RunError
from llm_ocr.records import PageResult
from llm_ocr.runners.bad_pages import describe_settles, quarantined_in
from llm_ocr.runners.lifecycle import (
    Finished,
    Markers,
    PageWork,
    Shard,
    ShardStage,
    StageResult,
    note_documents,
    run_stage,
    stage_endpoint,
)
from llm_ocr.runners.page_flow import PageHandler, UpstreamRows
from llm_ocr.runners.reuse import Reuse
from llm_ocr.runners.shard import ShardOutcome
from llm_ocr.serving.in_flight import InFlightLimit
from llm_ocr.serving.open import Endpoint
from llm_ocr.stages.describe import DescribeContext, SchemaError, describe_extra_body, describe_page, load_schema
from llm_ocr.storage import Storage
from llm_ocr.storage.parts import ShardIndex
from llm_ocr.storage.upstream import iter_shard_rows, stage_has_parts, upstream_complete
from llm_ocr.vlm.recipes import DESCRIBE_PROMPT, clamp_max_tokens

log = logging.getLogger("llm_ocr")


def page_source(out: Storage) -> str:
    """The page rows a later stage reads: Escalate's when it has written any (each page's reading
    that is used), else Extract's."""
    return "escalate" if stage_has_parts(out.child("escalate")) else "extract"


def resolve_schema(options: DescribeOptions, storage_options: dict[str, Any]) -> dict[str, Any] | None:
    """The ``--describe-schema`` as a checked JSON schema, or None; a bad one stops the run early."""
    if not options.describe_schema:
        return None
    try:
        return load_schema(options.describe_schema, storage_options)
    except SchemaError as exc:
        raise RunError(str(exc)) from exc


@asynccontextmanager
async def describe_endpoint(
    shard: Shard,
    options: DescribeOptions,
    client: ClientOptions,
    server: ServerOptions | None = None,
    *,
    main: Endpoint | None = None,
) -> AsyncIterator[Endpoint]:
    """The endpoint that writes descriptions.

    ``--describe-endpoint`` wins; else the run's endpoint (``main`` when the caller has it open
    already — same model: the very same client, so ``llm-ocr run`` loads no second model);
    else ``--endpoint``, or a server launched with ``server`` options.
    """
    job = shard.job
    secret = options.describe_api_key or job.api_key
    async with stage_endpoint(
        shard, client, server, url=options.describe_endpoint, model=options.describe_model or job.model,
        api_key=secret.get_secret_value() if secret else None, main=main, log_prefix="server-describe",
    ) as endpoint:
        yield endpoint


async def describe_context(
    endpoint: Endpoint, options: DescribeOptions, schema: dict[str, Any] | None, limit: InFlightLimit,
    context_length: Callable[[], Awaitable[int | None]] | None = None,
) -> DescribeContext:
    """What every figure of a Describe run on ``endpoint`` shares; ``limit`` bounds its requests.
    ``context_length``: where the served model's context length is read (None: asked of ``endpoint``)."""
    client = endpoint.client
    return DescribeContext(
        client=client,
        prompt=options.describe_prompt or DESCRIBE_PROMPT,
        max_tokens=clamp_max_tokens(options.describe_max_tokens, await (context_length or client.max_model_len)()),
        temperature=options.describe_temperature,
        extra_body=describe_extra_body(client.model),
        schema=schema,
        redescribe=options.redescribe,
        limit=limit,
    )


def describe_result(work: PageWork, ctx: DescribeContext, stage: str = "describe") -> StageResult:
    """The result of a Describe flow: pages by status plus what happened to figures."""
    counters = work.counters[stage]
    counters.prompt_tokens, counters.completion_tokens = ctx.counts.prompt_tokens, ctx.counts.completion_tokens
    return work.result(stage, extra={"figures": ctx.counts.as_dict()})


def describe_handler(ctx: DescribeContext) -> PageHandler[None, PageResult]:
    """Describe's page handler (for :class:`~llm_ocr.runners.page_flow.UpstreamRows`): each
    upstream row with its figures described."""

    async def handle(ref: None, page: PageResult, num_pages: int | None) -> PageResult:
        return await describe_page(page, ctx)

    return handle


class Describe(ShardStage):
    """Describe as a :class:`~llm_ocr.runners.lifecycle.ShardStage`."""

    writes = ("describe",)
    reads = ("extract", "escalate")

    def __init__(self, spec: StageSpec, reuse: Reuse | None = None) -> None:
        self.spec = spec
        #: What the caller keeps open (the service's worker): its endpoint, limits and render pool.
        self.reuse = reuse or Reuse()
        self.schema: dict[str, Any] | None = None
        self.complete = False
        self.index = ShardIndex()
        #: The stage folder read: Escalate's when it holds rows (its readings replace Extract's).
        self.source = "extract"

    def settled(self, markers: Markers) -> ExitCode | None:
        marker = markers["describe"]
        if not describe_settles(marker, markers["escalate"] or markers["extract"]):
            return None
        return ExitCode.PAGES_FAILED if quarantined_in(marker) else ExitCode.OK

    async def check(self, shard: Shard, markers: Markers) -> None:
        self.schema = resolve_schema(self.spec.describe, shard.job.storage_options)
        self.source = await asyncio.to_thread(page_source, shard.out)
        source = shard.folder(self.source)
        self.complete = await asyncio.to_thread(upstream_complete, shard.out, self.source, source, shard.index,
                                                shard.count)
        if not self.complete and not await asyncio.to_thread(stage_has_parts, source):
            raise RunError(f"nothing to describe: {source.url} holds no Extract output; run llm-ocr extract first")

    async def resume(self, shard: Shard, markers: Markers) -> None:
        self.index = await shard.scan("describe")
        if not self.complete:
            log.warning(
                "%s has not finished every shard this describe shard reads: describing the rows there "
                "are; rerun describe once %s is done (no completion marker is written until then)", self.source,
                self.source,
            )

    async def work(self, shard: Shard) -> Finished:
        spec = self.spec
        async with describe_endpoint(shard, spec.describe, spec.client, spec.server, main=self.reuse.endpoint) \
                as endpoint, PageWork(shard, endpoint, {"describe": self.index}, **self.reuse.work_options(endpoint)) \
                as work:
            work.counters["describe"].pages_found = 0  # counted from the rows read
            ctx = await describe_context(endpoint, spec.describe, self.schema, work.limit,
                                         self.reuse.context_of(endpoint))
            rows = UpstreamRows(iter_shard_rows(shard.folder(self.source), shard.index, shard.count), self.index)
            await work.run(rows, describe_handler(ctx), ["describe"], limit=work.limits.describe_pages)
            note_documents(work.counters["describe"], work.documents["describe"])
        return Finished([describe_result(work, ctx)], complete=self.complete, preset=endpoint.preset)


async def describe_shard(spec: StageSpec, stop: asyncio.Event | None = None) -> ShardOutcome:
    """Run Describe over this process's shard of ``OUT/extract``."""
    return await run_stage(Describe(spec), spec.job, stop)
