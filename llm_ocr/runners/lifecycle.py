"""The shard lifecycle: what every stage's run over one shard does, written once.

:func:`run_stage` takes a :class:`ShardStage` through these steps, in this order:

1. resolve the shard and read the completion markers; a shard they say is settled ends here;
2. the stage's own checks that write nothing (``check``: a schema, the upstream stage);
3. check that the output is writable, before any GPU time is spent;
4. ``resume``: scan what earlier runs wrote (which pages are done), then clear the markers;
5. ``work``: open the endpoint (:meth:`Shard.connect`, the one place a runner opens one) and
   run the pages through writers and a progress reporter (:class:`PageWork`), with the errors
   that stop a run mapped to a message that says completed pages are saved;
6. :func:`finish`: an interrupted run ends with exit code 3; a run whose upstream was not
   complete, or whose rows do not reconcile with its input, gets no marker; otherwise the GPU
   cost is added, the markers are written, and the exit code says whether pages failed;
7. ``then``: what follows a marked run in the same process (``llm-ocr run`` assembles).

A stage supplies only what differs: which folders it writes (:attr:`ShardStage.writes`), when
earlier markers settle it, its checks, its resume scan and its work. Adding a stage is a small
module: a :class:`ShardStage` subclass whose ``work`` builds a :class:`PageWork` and runs an
intake through a handler (see :mod:`.describe`, the smallest).
"""

from __future__ import annotations

import asyncio
import logging
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any, ClassVar, cast

from llm_ocr.costs import gpu_cost
from llm_ocr.options import ClientOptions, JobOptions, ServerOptions, StealOptions
from llm_ocr.outcomes import ExitCode, RunError
from llm_ocr.planning.rates import run_estimate
from llm_ocr.records import page_schema
from llm_ocr.runners.groups import GroupWork, group_work, groups_finished
from llm_ocr.runners.page_flow import FlowSettings, Intake, ItemT, PageFlow, PageHandler, RefT, flow_settings
from llm_ocr.runners.progress import ProgressReporter, RunCounters
from llm_ocr.runners.shard import ShardOutcome, check_writable, in_flight_for_endpoint, resolve_shard
from llm_ocr.runners.workers import WorkerPool, default_workers
from llm_ocr.serving.in_flight import AdaptiveInFlight, InFlightLimit, RunLimits, adapting
from llm_ocr.serving.open import Endpoint, open_endpoint
from llm_ocr.sources import InputError, InputPlan
from llm_ocr.storage import Storage
from llm_ocr.storage.parts import PartWriter, RowSink, ShardIndex, ShardLayoutError, scan_shard
from llm_ocr.storage.state import clear_marker, progress_writer, read_marker, write_marker
from llm_ocr.storage.stores import StorageError
from llm_ocr.storage.upstream import UnreadablePart
from llm_ocr.vlm.client import EndpointDown
from llm_ocr.vlm.families import family_for

log = logging.getLogger("llm_ocr")

Markers = Mapping[str, "dict[str, Any] | None"]


@dataclass
class Shard:
    """One shard of one run: where it reads and writes, and the event that stops it."""

    job: JobOptions
    out: Storage
    index: int
    count: int
    stop: asyncio.Event = field(default_factory=asyncio.Event)

    @classmethod
    def resolve(cls, job: JobOptions, stop: asyncio.Event | None = None) -> Shard:
        """This process's shard of ``job`` (options, else the platform, else the only one)."""
        count, index = resolve_shard(job)
        return cls(job, Storage(job.output, job.storage_options), index, count, stop or asyncio.Event())

    @property
    def name(self) -> str:
        """``00003-of-00016``: how file names tell shards apart."""
        return f"{self.index:05d}-of-{self.count:05d}"

    def folder(self, stage: str) -> Storage:
        """The stage's folder of rows, ``OUT/STAGE``."""
        return self.out.child(stage)

    async def marker(self, stage: str) -> dict[str, Any] | None:
        """The stage's completion marker of this shard, if an earlier run wrote one."""
        return await asyncio.to_thread(read_marker, self.out, stage, self.index, self.count)

    async def scan(self, stage: str, *, keep_quarantined: bool = True) -> ShardIndex:
        """Which pages of this shard ``OUT/STAGE`` holds already (see :func:`scan_shard`)."""
        try:
            return await asyncio.to_thread(
                partial(scan_shard, self.folder(stage), self.index, self.count, keep_quarantined=keep_quarantined)
            )
        except ShardLayoutError as exc:
            raise RunError(str(exc)) from exc

    async def work_groups(
        self, flow: str, folders: Sequence[str], plan: InputPlan, by_rows: bool, options: StealOptions, *,
        keep_quarantined: bool,
    ) -> GroupWork | None:
        """This shard's work groups for a page flow writing ``folders`` (None: static shards;
        docs/stragglers.md)."""
        return await asyncio.to_thread(partial(
            group_work, self.out, flow, folders, self.index, self.count, plan, by_rows, options, page_schema(),
            keep_quarantined=keep_quarantined, stop=self.stop, max_rows=self.job.part_rows,
        ))

    def writer(self, stage: str, index: ShardIndex) -> PartWriter:
        """A writer of page rows into ``OUT/STAGE``, numbering parts after those ``index`` found."""
        return PartWriter(self.folder(stage), page_schema(), self.index, self.count, start_seq=index.next_seq,
                          max_rows=self.job.part_rows)

    @asynccontextmanager
    async def connect(
        self,
        client: ClientOptions,
        server: ServerOptions | None = None,
        *,
        url: str | None = None,
        model: str | None = None,
        api_key: str | None = None,
        log_prefix: str = "server",
        own_server: bool = False,
    ) -> AsyncIterator[Endpoint]:
        """The endpoint of this shard's requests: ``url`` (default ``--endpoint``, unless
        ``own_server``: a server of its own), or a server launched with ``server`` options when
        there is none, serving ``model`` (default ``--model``), its log in
        ``OUT/_state/logs/LOG_PREFIX-SHARD.log``. The one place a runner opens an endpoint."""
        job = self.job
        key = api_key if api_key is not None else (job.api_key.get_secret_value() if job.api_key else None)
        served = model or job.model
        async with open_endpoint(
            url if url is not None or own_server else job.endpoint,
            served,
            api_key=key,
            client_options=client,
            server_options=server,
            # --recipe names the family of --model (a fine-tune); another model goes by its name.
            recipe=job.recipe if served == job.model else None,
            out=self.out,
            log_name=f"{log_prefix}-{self.name}.log",
            stopping=self.stop.is_set,
        ) as endpoint:
            yield endpoint


@asynccontextmanager
async def stage_endpoint(
    shard: Shard,
    client: ClientOptions,
    server: ServerOptions | None,
    *,
    url: str | None,
    model: str,
    api_key: str | None,
    main: Endpoint | None,
    log_prefix: str,
) -> AsyncIterator[Endpoint]:
    """The endpoint of a stage whose model may be served apart (Describe, Fields).

    ``url`` (the stage's own endpoint option) wins; else the run's endpoint (``main`` when the
    caller has it open already — same model: the very same client, so ``llm-ocr run`` loads no
    second model); else ``--endpoint``, or a server launched with ``server`` options.
    """
    if url is None and main is not None and model == main.client.model:
        yield main
        return
    url = url or (main.client.base_url if main is not None else None)
    launch = server if url is None else None
    async with shard.connect(client, launch, url=url, model=model, api_key=api_key, log_prefix=log_prefix) as endpoint:
        yield endpoint


@dataclass
class StageResult:
    """What one stage folder's run did: its stats (the completion marker's content) and whether
    its pages failed; ``counters``: reconcile the rows with the input before marking."""

    stage: str
    stats: dict[str, Any]
    failed: bool = False
    counters: RunCounters | None = None


@dataclass
class Finished:
    """What a stage's work ended with, for :func:`finish`."""

    #: One per stage folder written, the first one the stage's own (its reconciliation gates
    #: the markers; the GPU cost is recorded in it).
    results: list[StageResult]
    #: The stage read an upstream stage that was not complete: no marker yet.
    complete: bool = True
    #: The endpoint's GPU preset when a model was used (None: no GPU to cost, or not known).
    preset: str | None = None
    uses_model: bool = True


class ShardStage(ABC):
    """A stage as the lifecycle runs it (see the module docstring for the order of calls)."""

    #: The stage folders this stage writes rows to and marks complete, in marker order.
    writes: ClassVar[tuple[str, ...]]
    #: Markers read besides those of ``writes`` to decide whether the shard is settled (a stage
    #: may set its own in ``__init__``, from its options).
    reads: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        """How log lines name the stage."""
        return self.writes[0]

    @abstractmethod
    def settled(self, markers: Markers) -> ExitCode | None:
        """The exit code when earlier runs left nothing to do, else None."""

    def settled_stats(self, markers: Markers) -> dict[str, Any]:
        """The outcome's stats of a settled shard: the stage's marker."""
        return dict(markers.get(self.writes[0]) or {})

    async def check(self, shard: Shard, markers: Markers) -> None:  # noqa: B027 - optional: no checks by default
        """Checks that need no write (raise :class:`RunError`); the output is checked after."""

    @abstractmethod
    async def resume(self, shard: Shard, markers: Markers) -> None:
        """Learn what earlier runs did (the shard's indexes); the markers are cleared after."""

    @abstractmethod
    async def work(self, shard: Shard) -> Finished:
        """Do the shard's work."""

    async def then(self, shard: Shard, outcome: ShardOutcome, markers: Markers) -> ShardOutcome:
        """What follows a run that wrote its markers (default: nothing)."""
        return outcome


async def run_stage(stage: ShardStage, job: JobOptions, stop: asyncio.Event | None = None) -> ShardOutcome:
    """Run ``stage`` over this process's shard of ``job`` (the lifecycle, see the module docstring)."""
    return await run_on(Shard.resolve(job, stop), stage)


async def run_on(shard: Shard, stage: ShardStage, *, writable_checked: bool = False) -> ShardOutcome:
    """:func:`run_stage` on a resolved ``shard`` (``llm-ocr run`` assembles on its own shard)."""
    names = dict.fromkeys((*stage.writes, *stage.reads))
    markers = {name: await shard.marker(name) for name in names}
    code = stage.settled(markers)
    if code is not None:
        log.info("%s shard %d/%d already complete; nothing to do", stage.label, shard.index + 1, shard.count)
        return ShardOutcome(code, stage.settled_stats(markers))
    await stage.check(shard, markers)
    if not writable_checked:
        await asyncio.to_thread(check_writable, shard.out)
    await stage.resume(shard, markers)
    for name in stage.writes:
        if markers.get(name):
            await asyncio.to_thread(clear_marker, shard.out, name, shard.index, shard.count)
    outcome, marked = await finish(shard, await stage.work(shard))
    return await stage.then(shard, outcome, markers) if marked else outcome


async def finish(shard: Shard, done: Finished) -> tuple[ShardOutcome, bool]:
    """The outcome of a stage's work, and whether the markers were written (see the module docstring)."""
    results = done.results
    stats = results[0].stats if len(results) == 1 else {r.stage: r.stats for r in results}
    if shard.stop.is_set():
        counters = results[0].counters
        saved = f"{counters.pages_done} page(s) saved this run" if counters else "completed work is saved"
        log.warning("interrupted: %s; rerun the same command to resume", saved)
        return ShardOutcome(ExitCode.INTERRUPTED, stats), False
    if not done.complete:
        return ShardOutcome(ExitCode.PAGES_FAILED, stats), False
    first = results[0]
    if done.uses_model:
        # One server did every stage of the run: its GPU time is recorded once, with the first.
        first.stats["gpu"] = gpu_cost(first.stats["wall_time_s"], done.preset, shard.job.gpu_price_per_hour)
        # What `llm-ocr plan` would have estimated, beside the pages/s this run achieved.
        first.stats["estimate"] = run_estimate(family_for(shard.job.model, shard.job.recipe).name, done.preset)
    # Every result records whether every page of the input it reached got a row. A shard that
    # does not reconcile gets no completion marker: a rerun would skip it and lose the pages
    # without a row. The first result's verdict gates the markers (the other stages of one flow
    # count their pages from its rows, not from the input).
    for result in results:
        if result.counters is not None:
            result.stats["reconciled"] = result.counters.pages_left == 0
            if not result.stats["reconciled"]:
                log.error("the rows do not reconcile with the input (%s); no completion marker written, rerun to redo "
                          "the missing pages", result.counters.reconciliation())
    if first.counters is not None and not first.stats["reconciled"]:
        return ShardOutcome(ExitCode.PAGES_FAILED, stats), False
    for result in results:
        await asyncio.to_thread(write_marker, shard.out, result.stage, shard.index, shard.count, result.stats)
    return ShardOutcome(ExitCode.PAGES_FAILED if any(r.failed for r in results) else ExitCode.OK, stats), True


class PageWork:
    """A page stage's machinery on an open endpoint: counters and a part writer per stage folder,
    the progress reporter (of the first), the in-flight limit sized for the endpoint, and the
    render workers; :meth:`run` runs a :class:`PageFlow`.

    Used as ``async with PageWork(...) as work``: on the way out the writers are closed (in the
    order of ``indexes``: a later stage's row never exists without the earlier one's for long),
    progress is stopped, the workers are closed and each stage's reconciliation line is logged;
    the errors that stop a run become a :class:`RunError` that says what was kept.
    ``progress_file`` False: no progress file under ``OUT/_state`` (the service's worker, whose
    queue says how each document goes).
    """

    def __init__(
        self, shard: Shard, endpoint: Endpoint, indexes: Mapping[str, ShardIndex], *, render: bool = False,
        groups: GroupWork | None = None, pool: WorkerPool | None = None, adapt: bool = True,
        limits: RunLimits | None = None, progress_file: bool = True,
    ) -> None:
        job = shard.job
        self.shard = shard
        self.endpoint = endpoint
        self.indexes = dict(indexes)
        first = next(iter(self.indexes))
        self.counters = {name: RunCounters(name, shard.index, shard.count) for name in self.indexes}
        #: Work groups (docs/stragglers.md): rows go to the groups' parts, claims are renewed.
        self.groups = groups
        self.writers: dict[str, RowSink] = {
            name: groups.writer(name) if groups is not None else shard.writer(name, index)
            for name, index in self.indexes.items()
        }
        self.reporter = ProgressReporter(
            self.counters[first], job.progress, job.progress_interval, poll_server=endpoint.metrics,
            on_tick=progress_writer(shard.out, first, shard.index, shard.count) if progress_file else None,
        )
        # ``limits`` (the service's worker): the caller's, shared by every run it makes at once,
        # fixed for the caller's lifetime; no run sizes them from /metrics for itself, each
        # polling the server twice a second. ``adapt`` False: fixed at the run's own size.
        self.controller: AdaptiveInFlight | None
        if limits is not None:
            self.limit, self.controller = limits.pages, None
        else:
            self.limit, self.controller = in_flight_for_endpoint(job, endpoint, adapt=adapt)
        #: The limits of the run's requests: pages, pieces of pages, figures (see :class:`RunLimits`).
        self.limits = limits or RunLimits.following(self.limit)
        #: A pool the caller keeps open across runs (the service's worker) is used, not closed.
        self._own_pool = pool is None
        self.pool: WorkerPool | None
        if render and pool is not None:
            self.workers, self.pool = pool.workers, pool
        else:
            self.workers = (job.workers if job.workers is not None else default_workers()) if render else 0
            self.pool = WorkerPool(self.workers) if render else None
        #: Documents that got a row in each flow run, by the flow's first stage folder.
        self.documents: dict[str, set[str]] = {name: set() for name in self.indexes}

    def settings(self, limit: InFlightLimit | None = None) -> FlowSettings:
        """The flow's knobs: :func:`flow_settings` for ``limit`` (default: the run's)."""
        job = self.shard.job
        return flow_settings(limit or self.limit, flush_interval=job.flush_interval, grace_period=job.grace_period,
                             workers=self.workers)

    async def run(
        self,
        intake: Intake[RefT, ItemT],
        handler: PageHandler[RefT, ItemT],
        writes: Sequence[str],
        *,
        limit: InFlightLimit | None = None,
    ) -> None:
        """Run the pages of ``intake`` through ``handler`` (one that takes what the intake gives),
        writing its rows to ``writes`` (the first one's counters count them) with at most ``limit``
        pages in flight (default: the run's limit, sized from the endpoint's ``/metrics`` while the
        flow runs)."""
        flow = PageFlow(
            handler=handler,
            writer=[self.writers[name] for name in writes],
            counters=self.counters[writes[0]],
            settings=self.settings(limit),
            stop=self.shard.stop,
        )
        self.reporter.show(self.counters[writes[0]], "+".join(writes))  # which stage runs, on screen
        if self.groups is not None:  # a group is claimed when this flow has room for it, started as it is sent
            self.groups.room.slots = lambda: flow.slot_use
            flow.admit = cast(Callable[[RefT], Awaitable[bool]], self.groups.admit)  # pages of documents
            flow.preferred = cast(Callable[[RefT], bool], self.groups.started)
            flow.page_key = self.groups.page_key
            flow.left_out = cast(Callable[[RefT, Any], bool], self.groups.left_out)
            flow.returned = cast(Callable[[RefT, Any, bool], None], self.groups.returned)
            self.groups.cancel_pages = flow.cancel_pages
            flow.in_render_order = cast(Callable[[RefT], bool], self.groups.read_second)
        async with adapting(self.controller):
            await flow.run(intake)
        self.documents[writes[0]] |= flow.documents

    def result(self, stage: str, *, extra: Mapping[str, Any] | None = None, kept: int = 0) -> StageResult:
        """The :class:`StageResult` of stage folder ``stage``: its counters' summary plus
        ``extra``; failed when a page failed this run, or ``kept`` quarantined rows are kept."""
        counters = self.counters[stage]
        stats = counters.summary()
        stats.update(extra or {})
        return StageResult(stage, stats, failed=bool(counters.pages_failed or kept), counters=counters)

    async def __aenter__(self) -> PageWork:
        self.reporter.start()
        if self.groups is not None:
            self.groups.start()
        return self

    async def __aexit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        try:
            try:
                try:
                    for writer in self.writers.values():
                        await writer.close()
                finally:
                    if self.groups is not None:  # groups not finished are released for others
                        await self.groups.close()
            finally:
                await self.reporter.stop()
                if self.pool is not None and self._own_pool:
                    self.pool.close()
                # Also after a dead endpoint or store: the run ends with the accounting lines.
                for counters in self.counters.values():
                    log.info(counters.reconciliation())
        except BaseException:
            if exc is None:
                raise
        if isinstance(exc, (EndpointDown, StorageError)):
            raise RunError(f"{exc}; completed pages are saved, rerun to resume") from exc
        if isinstance(exc, (InputError, UnreadablePart)):
            raise RunError(str(exc)) from exc


async def nothing_to_read(shard: Shard, groups: GroupWork | None, folders: Sequence[str]) -> Finished | None:
    """With work groups, when every group of the shard is done and no other shard has one free:
    the work's end without an endpoint (no model server is launched for nothing), its markers
    counting no page read here; else None."""
    if groups is None or not await asyncio.to_thread(groups.nothing_to_read):
        return None
    log.info("every page group of this shard is done (no other shard has a free one): nothing to read, no endpoint "
             "opened")
    results = []
    for name in folders:
        counters = RunCounters(name, shard.index, shard.count)
        counters.pages_found = 0
        results.append(StageResult(name, counters.summary(), counters=counters))
        log.info(counters.reconciliation())  # every run ends with its accounting lines, this one too
    end = await groups_finished(groups, [r.stats for r in results], stopped=shard.stop.is_set())
    results[0].failed = end.failed_elsewhere
    return Finished(results, complete=end.complete, uses_model=False)


def note_documents(counters: RunCounters, documents: Iterable[str]) -> None:
    """Count the documents of a flow over upstream rows: those that got a row this run (such a
    flow cannot tell a finished document from one whose other pages were done earlier)."""
    seen = set(documents)
    counters.docs_seen = counters.docs_finished = len(seen)
