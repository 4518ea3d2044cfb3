"""``llm-ocr run``: Extract → Describe → Assemble over one shard, in one process, on one endpoint.

Each page goes from the OCR answer straight to its figure descriptions in memory (no second model
load, no storage round trip); its Extract row and its Describe row are written to ``OUT/extract``
and ``OUT/describe`` as the stages alone would write them. When the page flow is done and both
stages are marked complete, Assemble runs over this shard's documents; with ``--schema`` or
``--classes``, then Fields, on the same endpoint (a server launched for the run serves it too).

Resuming: both stage folders are scanned first. Pages Extract finished but Describe did not (a
kill between the two part writes, or an earlier ``llm-ocr extract``) are described from
``OUT/extract`` before the page flow starts; the flow then does the pages Extract lacks, writing
a Describe row only where Describe lacks one too, so every page is in each stage exactly once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any

from llm_ocr.options import StageSpec
from llm_ocr.outcomes import ExitCode, RunError
from llm_ocr.records import PageResult
from llm_ocr.runners.assemble import Assemble, assemble_finished, need_docling
from llm_ocr.runners.bad_pages import BadPages, describe_settles, extract_settles, note_kept, note_retried
from llm_ocr.runners.cascade import ModelTally, first_reading, open_route
from llm_ocr.runners.dedup import PageReuse, copy_duplicates, dedup_stats, record_readings, shard_readings
from llm_ocr.runners.describe import (
    Describe,
    describe_context,
    describe_endpoint,
    describe_handler,
    describe_result,
    resolve_schema,
)
from llm_ocr.runners.escalate import Escalate, escalation_spec
from llm_ocr.runners.extract import Extract, extract_context, page_aspect, with_dense_options
from llm_ocr.runners.fields import Fields, fields_wanted, launched_engine_refusal
from llm_ocr.runners.groups import GroupWork, groups_finished
from llm_ocr.runners.inputs import check_inputs, rows_round_robin
from llm_ocr.runners.lifecycle import Finished, Markers, PageWork, Shard, ShardStage, nothing_to_read, run_on
from llm_ocr.runners.page_flow import DocumentPages, PageRows, UpstreamRows, page_look_ahead
from llm_ocr.runners.progress import RunCounters
from llm_ocr.runners.reuse import Reuse
from llm_ocr.runners.shard import ShardOutcome
from llm_ocr.runners.shared_dedup import SharedReadings
from llm_ocr.runners.shared_pages import SharedPages
from llm_ocr.serving.open import Endpoint
from llm_ocr.serving.quarantine import PageQuarantined
from llm_ocr.sources import InputPlan
from llm_ocr.sources.base import DocumentRef, PageFailure, PageImage
from llm_ocr.stages.describe import DescribeContext, describe_page
from llm_ocr.stages.extract import ExtractContext, family_render
from llm_ocr.stages.routes import RouteContext
from llm_ocr.storage.parts import ShardIndex
from llm_ocr.storage.upstream import iter_shard_rows

log = logging.getLogger("llm_ocr")

STAGES = ("extract", "describe", "assemble")
#: What a Fields error adds in ``llm-ocr run``: the other stages' work is done and kept.
PAGES_KEPT = (
    "; Extract, Describe and Assemble are done and kept: `llm-ocr fields --output OUT` with the same --schema or "
    "--classes extracts the fields from them"
)


def _undescribed(extract: ShardIndex, describe: ShardIndex) -> int:
    return sum(len(pages - describe.done_pages.get(doc_id, set())) for doc_id, pages in extract.done_pages.items())


@dataclass
class _RunPages:
    """The page handler of ``llm-ocr run``'s flow: each page through Extract (or the text-layer
    route), then Describe, as ``(Extract row, Describe row or None if it has one)``."""

    extract: ExtractContext
    route: RouteContext | None
    tally: ModelTally
    describe: DescribeContext
    #: Pages Describe has rows of already, by document.
    described: dict[str, set[int]]
    #: Describe's counters (the flow counts the Extract rows).
    counters: RunCounters
    bad: BadPages
    #: Pages read this run whose Describe row an earlier run wrote (the page's Extract row was
    #: missing): Describe's "done earlier".
    described_earlier: int = 0

    async def read(
        self, ref: DocumentRef, item: PageImage | PageFailure, num_pages: int | None
    ) -> tuple[PageResult, PageResult | None]:
        """One page's rows."""
        first = await first_reading(ref, item, num_pages, self.extract, self.route, self.tally)
        return await self._then_describe(self.tally.row(await self.bad.fallback(ref, first)))

    async def quarantined(
        self, ref: DocumentRef, item: PageImage | PageFailure, num_pages: int | None, exc: PageQuarantined
    ) -> tuple[PageResult, PageResult | None]:
        """A page convicted of crashing the server: its quarantine row, passed through Describe."""
        return await self._then_describe(await self.bad.quarantined(ref, item, num_pages, exc))

    async def _then_describe(self, page: PageResult) -> tuple[PageResult, PageResult | None]:
        if page.page in self.described.get(page.doc_id, ()):
            self.described_earlier += 1
            return page, None
        result = await describe_page(page, self.describe)
        self.counters.pages[result.tally] += 1
        return page, result


def _count_described(counters: RunCounters) -> Callable[[PageRows], None]:
    """Counts a copied Describe row in Describe's ``counters``, as a page it describes is (the
    flow counts only Extract's rows)."""

    def count(rows: PageRows) -> None:
        described = rows[1] if isinstance(rows, tuple) and len(rows) > 1 else None
        if described is not None and described.duplicate_of is not None:
            counters.pages[described.tally] += 1

    return count


def _copies_described(handler: Callable[[DocumentRef, PageImage | PageFailure, int | None], Awaitable[PageRows]],
                      counters: RunCounters) -> Callable[[DocumentRef, PageImage | PageFailure, int | None],
                                                         Awaitable[PageRows]]:
    """``handler`` with the Describe rows it copies (a page reused) counted in Describe's ``counters``."""
    count = _count_described(counters)

    async def handle(ref: DocumentRef, item: PageImage | PageFailure, num_pages: int | None) -> PageRows:
        rows = await handler(ref, item, num_pages)
        count(rows)
        return rows

    return handle


class Run(ShardStage):
    """``llm-ocr run`` as a :class:`~llm_ocr.runners.lifecycle.ShardStage`: one page flow writes
    Extract's and Describe's rows; :meth:`then` assembles."""

    writes = ("extract", "describe")
    reads: tuple[str, ...] = ("assemble",)
    label = "run"

    def __init__(self, spec: StageSpec, servers: AsyncExitStack | None = None, reuse: Reuse | None = None) -> None:
        self.spec = spec
        self.reuse = reuse or Reuse()
        #: Where the run's endpoint is kept open for Fields, until the caller closes it.
        self.servers = servers
        self.fields = Fields(spec) if fields_wanted(spec.fields) else None
        if self.fields is not None:
            self.reads = ("assemble", "fields")
        self.endpoint: Endpoint | None = None
        self.schema: dict[str, Any] | None = None
        self.plan: InputPlan | None = None
        self.documents: Iterable[DocumentRef] = iter(())
        self.extract = ShardIndex()
        self.describe = ShardIndex()
        self.tally = ModelTally()
        self.groups: GroupWork | None = None
        #: The shard's documents, when the listing counts them ahead (the progress's total).
        self.docs_total: int | None = None

    def _pages_settled(self, markers: Markers) -> ExitCode | None:
        """Extract's exit code when earlier runs left Extract, Describe and Assemble nothing to do."""
        code = extract_settles(markers["extract"], self.spec.extract)
        if code is None or not describe_settles(markers["describe"], markers["extract"]):
            return None
        return code if assemble_finished(markers["assemble"], self.spec.assemble) else None

    def settled(self, markers: Markers) -> ExitCode | None:
        code = self._pages_settled(markers)
        if code is None or self.fields is None:
            return code
        # The schema is checked here, before anything runs: a bad one stops the run at once.
        fields_code = self.fields.settled(markers)
        return None if fields_code is None else max(code, fields_code)

    def settled_stats(self, markers: Markers) -> dict[str, Any]:
        return {name: markers[name] for name in (*STAGES, *(("fields",) if self.fields else ()))}

    async def check(self, shard: Shard, markers: Markers) -> None:
        need_docling(self.spec.assemble)  # --chunks without docling-core: before any page is read
        # Before the output is probed: a missing INPUT creates nothing in OUT.
        self.plan = check_inputs(self.spec.inputs, self.spec.dataset, shard.job.storage_options, shard.out)
        self.schema = resolve_schema(self.spec.describe, shard.job.storage_options)
        if self.fields is not None:
            self.fields.plan  # noqa: B018 - loads and checks the schema: bad input stops the run before any page
            refusal = await asyncio.to_thread(launched_engine_refusal, self.spec)
            if refusal and self._pages_settled(markers) is not None:
                raise RunError(f"{refusal}{PAGES_KEPT}")  # nothing else to do: no server is launched
            if refusal:
                # Said now, not only after the pages are read: the pages are still worth reading.
                log.warning("%s. Extract, Describe and Assemble run first, then the run stops with this error", refusal)

    async def resume(self, shard: Shard, markers: Markers) -> None:
        spec = self.spec
        keep = not spec.extract.retry_quarantined
        assert self.plan is not None, "check() plans the inputs"
        plan = self.plan
        by_rows = rows_round_robin(plan, shard.out)  # after the output was checked: records the rule in OUT
        self.groups = await shard.work_groups("run", ["extract", "describe"], plan, by_rows, spec.steal,
                                              keep_quarantined=keep)
        if self.groups is not None:  # each group is scanned when it is taken
            self.documents = self.groups.documents()
            self.extract, self.describe = self.groups.indexes["extract"], self.groups.indexes["describe"]
            return
        self.documents = plan.documents(shard.count, shard.index, by_rows=by_rows)
        self.docs_total = plan.shard_size(shard.count, shard.index, by_rows=by_rows)
        self.extract = await shard.scan("extract", keep_quarantined=keep)
        self.describe = await shard.scan("describe")
        note_retried(self.extract)
        note_kept(self.extract)

    async def work(self, shard: Shard) -> Finished:
        return await with_dense_options(self.spec.extract, self._work(shard))

    async def _work(self, shard: Shard) -> Finished:
        spec = self.spec
        if self.fields is None and (idle := await nothing_to_read(shard, self.groups, self.writes)) is not None:
            return idle  # (Fields runs on this run's endpoint: it opens one anyway)
        shared = self.reuse.serving(spec.job.model)
        if shared is not None:
            self.endpoint = shared  # the caller's: open before this run, open after it
            return await self._pages(shard, shared)
        async with AsyncExitStack() as here:
            # Kept open for Fields (until the caller closes ``servers``), else closed after the pages.
            keeper = self.servers if self.fields is not None and self.servers is not None else here
            endpoint = self.endpoint = await keeper.enter_async_context(shard.connect(spec.client, spec.server))
            return await self._pages(shard, endpoint)

    async def _pages(self, shard: Shard, endpoint: Endpoint) -> Finished:
        spec, job = self.spec, shard.job
        indexes = {"extract": self.extract, "describe": self.describe}
        async with describe_endpoint(shard, spec.describe, spec.client, main=endpoint) as describer, \
                PageWork(shard, endpoint, indexes, render=True, groups=self.groups,
                         **self.reuse.work_options(endpoint)) as work:
            assert work.pool is not None
            # Figure requests have their own limit, as large as the pages' (RunLimits.figures).
            dctx = await describe_context(describer, spec.describe, self.schema, work.limits.figures,
                                          self.reuse.context_of(describer))
            missing = _undescribed(self.extract, self.describe)
            if missing:
                log.info("describing %d page(s) extracted earlier but not described yet", missing)
                rows = UpstreamRows(iter_shard_rows(shard.folder("extract"), shard.index, shard.count), self.describe)
                work.counters["describe"].pages_found = 0  # the rows read: the catch-up's total, once all are read
                await work.run(rows, describe_handler(dctx), ["describe"], limit=work.limits.describe_pages)
            caught_up_rows = work.counters["describe"].pages_done
            run_pages: _RunPages | None = None
            layout_s = None
            dedup: dict[str, Any] = {}
            if not shard.stop.is_set():
                work.counters["extract"].docs_total = self.docs_total
                async with open_route(shard, spec, work.pool) as route:
                    ectx = await extract_context(endpoint, job.model, job.recipe, spec.extract, work.pool,
                                                 work.limits.pieces, spec.render,
                                                 context_length=self.reuse.context_of(endpoint))
                    bad = BadPages(endpoint.tracker, work.pool, spec.extract, job.storage_options)
                    run_pages = _RunPages(ectx, route, self.tally, dctx, self.describe.done_pages,
                                          work.counters["describe"], bad)
                    guarded = bad.guard(run_pages.read, run_pages.quarantined)
                    reuse = PageReuse(guarded, work.pool) if spec.extract.dedup else None
                    # Documents told apart by their sha256: with work groups, across the run's
                    # processes by hash claims (not on the Hub: a commit each; docs/dedup.md).
                    readings = await asyncio.to_thread(shard_readings, shard.out, spec.extract,
                                                       job.storage_options) \
                        if spec.extract.dedup and (self.groups is None or not shard.out.batches_writes) else None
                    shared = SharedReadings(readings, shard.out, self.groups, ["extract", "describe"],
                                            job.storage_options) \
                        if readings is not None and self.groups is not None else None
                    # With work groups, a page's exact pixels are claimed across the run's processes too.
                    across = SharedPages(reuse or guarded, work.pool, shard.out, self.groups, ["extract", "describe"],
                                        shared.base.rows, job.storage_options) \
                        if shared is not None and self.groups is not None else None
                    if shared is not None and across is not None:
                        shared.attached.append(across.attach)
                    inner = shared.handler(across or reuse or guarded) if shared else reuse or guarded
                    handler = _copies_described(inner, work.counters["describe"])
                    # Every page's text is estimated as it is rendered (its row keeps it; the pages waiting
                    # for a slot go longest first by it).
                    look_ahead = page_look_ahead(spec.extract.look_ahead, spec.extract.look_ahead_mb)
                    pages = DocumentPages(self.documents, self.extract, work.pool,
                                          family_render(spec.render, ectx.recipe), job.storage_options,
                                          estimate_text=True, look_ahead=look_ahead,
                                          planned=self.groups.planned if self.groups else None,
                                          max_aspect=page_aspect(spec.extract),
                                          estimate_ahead=spec.extract.estimate_ahead, paced=self.groups is not None,
                                          readings=shared or readings)
                    await work.run(pages, handler, ["extract", "describe"])
                    if readings is not None and shared is None:  # the duplicates set aside: copied, or read after all
                        again = await copy_duplicates(work, readings, self.extract, ["extract", "describe"],
                                                      job.storage_options,
                                                      on_copy=_count_described(work.counters["describe"]))
                        if again:
                            await work.run(pages.over(again), handler, ["extract", "describe"])
                    if readings is not None:
                        await asyncio.to_thread(record_readings, shard.out, shard.index, shard.count, readings)
                    dedup = {**dedup_stats(shared or readings, reuse), **(shared.stats() if shared else {}),
                             **(across.stats() if across else {})}
                    layout_s = route.client.busy_seconds if route is not None else None
            if run_pages is not None:
                self._account_describe(work, caught_up_rows, run_pages.described_earlier)
        kept = self.extract.kept_quarantined
        accounting = self.tally.stats({job.model: endpoint.client.busy_seconds}, layout_s)
        ex = work.result("extract", kept=kept, extra=accounting)
        ex.stats["pages"]["quarantined_earlier"] = kept
        ex.stats["dedup"] = dedup
        de = describe_result(work, dctx)
        end = await groups_finished(self.groups, [ex.stats, de.stats], stopped=shard.stop.is_set())
        ex.failed = ex.failed or end.failed_elsewhere
        return Finished([ex, de], preset=endpoint.preset, complete=end.complete)

    def _account_describe(self, work: PageWork, caught_up_rows: int, described_earlier: int) -> None:
        """Count Describe's pages and documents from the page flow's input, as Extract's are.

        The flow reaches every page of the shard once (both lines say the same "pages seen"):
        a page Extract did earlier was either described by the catch-up (a Describe row this
        run) or described earlier too; a page read now was described now, or earlier when only
        its Extract row was missing. (Counting only the catch-up's skips made a rerun say
        "done earlier 1" for Extract and "done earlier 0" for Describe.)
        """
        extracted, described = work.counters["extract"], work.counters["describe"]
        caught_up = work.documents["describe"]
        described.pages_found = extracted.pages_found
        described.intake_done = extracted.intake_done
        described.pages_skipped = max(0, extracted.pages_skipped - caught_up_rows) + described_earlier
        # Documents Extract had whole before this run whose Describe rows the catch-up completed.
        completed = sum(1 for doc_id in caught_up if self.extract.is_document_done(doc_id))
        described.docs_seen = max(len(caught_up), extracted.docs_seen)
        described.docs_finished = extracted.docs_finished + completed
        described.docs_skipped = max(0, extracted.docs_skipped - completed)

    async def then(self, shard: Shard, outcome: ShardOutcome, markers: Markers) -> ShardOutcome:
        # Assemble reads OUT/describe back: where writes are batched into commits (the Hub), the
        # parts just written must be committed first, or Assemble finds nothing to assemble.
        await asyncio.to_thread(shard.out.flush)
        assembled = await run_on(shard, Assemble(self.spec), writable_checked=True)
        stats = {**outcome.stats, "assemble": assembled.stats}
        if assembled.exit_code == ExitCode.INTERRUPTED:
            return ShardOutcome(ExitCode.INTERRUPTED, stats)
        failed = outcome.exit_code != ExitCode.OK or assembled.exit_code != ExitCode.OK
        if self.fields is not None and assembled.stats:
            # Fields reads OUT/assemble back: batched writes (the Hub) must be committed first.
            await asyncio.to_thread(shard.out.flush)
            self.fields.main = self.endpoint
            # On the caller's endpoint, its requests take the caller's slots, as the pages did
            # (a slot each while at the model; the document's pages hold none by now).
            shared = self.reuse.limits if self.endpoint is self.reuse.endpoint else None
            self.fields.limit = shared.pages if shared is not None else None
            try:
                extracted = await run_on(shard, self.fields, writable_checked=True)
            except RunError as exc:
                raise RunError(f"{exc}{PAGES_KEPT}") from exc
            stats["fields"] = extracted.stats
            if extracted.exit_code == ExitCode.INTERRUPTED:
                return ShardOutcome(ExitCode.INTERRUPTED, stats)
            failed = failed or extracted.exit_code != ExitCode.OK
        return ShardOutcome(ExitCode.PAGES_FAILED if failed else ExitCode.OK, stats)


async def cascade_shard(spec: StageSpec, stop: asyncio.Event | None = None, reuse: Reuse | None = None) -> ShardOutcome:
    """``llm-ocr run --escalate-to MODEL``: Extract (with its route), then Escalate with the
    stronger model, then Describe and Assemble over the escalated rows (and Fields, given a
    schema), each a stage of its own on this shard, each settled by its own marker (a rerun
    starts no server for a stage that is done).

    Each stage opens its server when it starts and stops it when done, so that a machine with one
    GPU runs one managed server at a time; Describe then serves ``--describe-model`` (default the
    first model) again: with ``--endpoint`` and ``--escalate-endpoint`` nothing is launched twice.

    ``reuse``: what the caller keeps open (the service's worker): the stages on its models take
    their requests' slots from its limits (Escalate from ``reuse.escalate``'s), as a plain run's do.
    """
    reuse = reuse or Reuse()
    fields = Fields(spec, main=reuse.endpoint, limit=reuse.limits.pages if reuse.limits is not None else None) \
        if fields_wanted(spec.fields) else None
    need_docling(spec.assemble)
    # Bad input stops the run before any page: the figure schema, the fields schema.
    resolve_schema(spec.describe, spec.job.storage_options)
    if fields is not None:
        fields.plan  # noqa: B018 - loads and checks the schema
        refusal = await asyncio.to_thread(launched_engine_refusal, spec)
        if refusal:
            raise RunError(refusal)
    shard = Shard.resolve(spec.job, stop)
    stages: list[tuple[str, ShardStage]] = [
        ("extract", Extract(spec, reuse)), ("escalate", Escalate(escalation_spec(spec), reuse.escalate)),
        ("describe", Describe(spec, reuse)),
        ("assemble", Assemble(spec)), *((("fields", fields),) if fields is not None else ()),
    ]
    stats: dict[str, Any] = {}
    failed = False
    for number, (name, stage) in enumerate(stages):
        if number:
            # The next stage reads back what this one wrote: batched writes (the Hub) are committed first.
            await asyncio.to_thread(shard.out.flush)
        try:
            done = await run_on(shard, stage, writable_checked=number > 0 or reuse.writable_checked)
        except RunError as exc:
            if name != "fields":
                raise
            raise RunError(f"{exc}{PAGES_KEPT}") from exc
        stats[name] = done.stats
        if done.exit_code == ExitCode.INTERRUPTED:
            return ShardOutcome(ExitCode.INTERRUPTED, stats)
        failed = failed or done.exit_code != ExitCode.OK
    return ShardOutcome(ExitCode.PAGES_FAILED if failed else ExitCode.OK, stats)


async def run_shard(spec: StageSpec, stop: asyncio.Event | None = None, reuse: Reuse | None = None) -> ShardOutcome:
    """Run Extract, Describe, Assemble (and Fields, given a schema) over this process's shard;
    with ``--escalate-to``, Escalate between Extract and Describe. ``reuse``: an endpoint and a
    render pool the caller keeps open (an escalating run's stages use them too, and the stronger
    model's, ``reuse.escalate``)."""
    if spec.escalate.escalate_to:
        return await cascade_shard(spec, stop, reuse)
    async with AsyncExitStack() as servers:  # a server kept open for Fields stops here, whatever happened
        return await run_on(Shard.resolve(spec.job, stop), Run(spec, servers, reuse),
                            writable_checked=reuse is not None and reuse.writable_checked)
