"""What every stage's shard runner shares: the shard, its outcome, signals, the output check.

A shard's run ends with a :class:`ShardOutcome`: its :class:`~llm_ocr.outcomes.ExitCode` (0 every
page ok or truncated; 1 finished but some pages failed; 2 could not run; 3 interrupted by SIGTERM
or SIGINT: completed rows are kept, rerun the same command to resume) and its stats.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from llm_ocr.container.shard_index import PlatformError, detect_shard
from llm_ocr.options import JobOptions
from llm_ocr.outcomes import ExitCode, RunError
from llm_ocr.serving.in_flight import AdaptiveInFlight, AdaptivePolicy, InFlightLimit, in_flight_control
from llm_ocr.serving.open import Endpoint, EndpointError
from llm_ocr.sources import InputError
from llm_ocr.storage import Storage
from llm_ocr.storage.access import check_output
from llm_ocr.storage.sinks import close_all as close_sinks
from llm_ocr.storage.stores import StorageError
from llm_ocr.vlm.client import EndpointDown

log = logging.getLogger("llm_ocr")

#: Requests in flight when neither --max-in-flight nor a GPU preset says otherwise.
DEFAULT_IN_FLIGHT = 64


@dataclass
class ShardOutcome:
    """How one shard's run ended."""

    exit_code: ExitCode
    #: The stats of the completion marker (for ``run``: by stage folder); read them typed with
    #: :func:`llm_ocr.outcomes.stage_stats`.
    stats: dict[str, Any] = field(default_factory=dict)
    #: Why a run could not run (exit code 2), for the caller to report or raise.
    error: BaseException | None = None
    #: ``error`` is a bug, not one of the failures the message explains (:data:`COULD_NOT_RUN`).
    unexpected: bool = False
    #: The user interrupted the run (Ctrl-C, a notebook's stop button): the Python API raises
    #: ``KeyboardInterrupt`` once the run has stopped.
    interrupted_by_user: bool = False

    def __post_init__(self) -> None:
        self.exit_code = ExitCode(self.exit_code)  # a runner's plain 0..3 too; any other number is a bug


def resolve_shard(job: JobOptions) -> tuple[int, int]:
    """``(num_shards, shard_index)`` from options, else the platform, else ``(1, 0)``.

    ``--num-shards`` (``LLM_OCR_NUM_SHARDS``) is also the count for a platform that gives only an
    index (a Kubernetes pod, a Slurm array with ids not 0..N-1): the index is still the platform's."""
    if job.num_shards is not None and job.shard_index is not None:
        if job.shard_index >= job.num_shards:
            raise RunError(f"--shard-index {job.shard_index} is out of range for --num-shards {job.num_shards}")
        return job.num_shards, job.shard_index  # given in full: the platform's variables are not read
    try:
        num_shards, index, where = detect_shard(num_shards=job.num_shards)
    except PlatformError as exc:  # an index without a count, or a launcher's list that does not fit the tasks
        raise RunError(str(exc)) from exc
    shard_index = job.shard_index if job.shard_index is not None else index
    if shard_index >= num_shards:
        raise RunError(f"--shard-index {shard_index} is out of range for --num-shards {num_shards}")
    if where != "default" and job.shard_index is None:
        log.info("shard %d of %d (from %s)", shard_index, num_shards, where)
    return num_shards, shard_index


def in_flight_for_endpoint(
    job: JobOptions, endpoint: Endpoint, *, adapt: bool = True
) -> tuple[InFlightLimit, AdaptiveInFlight | None]:
    """The run's in-flight limit: ``--max-in-flight``, else the launched server's preset, else
    sized from the endpoint's ``/metrics`` while the run goes (from 64; fixed at 64 without them,
    or when not ``adapt``)."""
    overloads = lambda: getattr(endpoint.client, "overloaded", 0)  # noqa: E731
    sent = lambda: getattr(endpoint.client, "sending", None)  # noqa: E731
    return in_flight_control(
        job.max_in_flight, endpoint.suggested_in_flight, endpoint.metrics if adapt else None, overloads,
        AdaptivePolicy(start=DEFAULT_IN_FLIGHT),
        sent,
    )


def check_writable(out: Storage) -> None:
    """Fail before any GPU time is spent if the output cannot be written."""
    try:
        check_output(out)  # llm_ocr.storage.access: names the store and what to set, no secrets
    except StorageError as exc:
        raise RunError(str(exc)) from exc


#: Failures that mean "could not run" (exit code 2): the message says what to do.
COULD_NOT_RUN = (RunError, InputError, EndpointError, StorageError)

ShardRun = Callable[[asyncio.Event], Awaitable[ShardOutcome]]


async def run_guarded(make: ShardRun, stop: asyncio.Event) -> ShardOutcome:
    """Await ``make(run_stop)``, the failures that stop a run turned into its outcome (exit code 2,
    the exception in :attr:`ShardOutcome.error`); then store what batched writes still queue
    (Hub commits), whatever happened, so an interrupted or failed run keeps its completed parts.
    A cancellation propagates (after the queued writes are stored).

    ``stop`` is the caller's (a signal, a cancel); the run gets an event of its own that follows
    it, which the run also sets itself to end its intake when it cannot go on (a dead endpoint, a
    store that fails). So ``stop`` says whether a stop was asked: an endpoint that fails after
    one is the stop reaching the model server too (Slurm signals every process of a task, a
    pod's containers stop together), and the run ends interrupted (exit 3), not unable to run.
    """
    run_stop = asyncio.Event()
    if stop.is_set():
        run_stop.set()
    following = asyncio.ensure_future(_follow(stop, run_stop))
    try:
        outcome = await make(run_stop)
    except COULD_NOT_RUN as exc:
        if stop.is_set() and _server_gone(exc):
            # The stop reached the model server too (Slurm signals every process of a task, a pod's
            # containers stop together): the run stopped as asked, and kept what it read.
            log.warning("the model server went away while the run was stopping (%s); completed parts are kept, "
                        "rerun the same command to resume", exc)
            outcome = ShardOutcome(ExitCode.INTERRUPTED)
        else:
            outcome = ShardOutcome(ExitCode.COULD_NOT_RUN, error=exc)
    except Exception as exc:  # noqa: BLE001 - a bug: reported with its traceback, parts are kept
        outcome = ShardOutcome(ExitCode.COULD_NOT_RUN, error=exc, unexpected=True)
    finally:
        following.cancel()
        stored = await asyncio.to_thread(_store_queued_writes)
    if stored is not None and outcome.exit_code in (ExitCode.OK, ExitCode.PAGES_FAILED):
        return ShardOutcome(ExitCode.COULD_NOT_RUN, outcome.stats, error=stored)
    return outcome


def _store_queued_writes() -> RunError | None:
    try:
        close_sinks()
    except Exception as exc:  # noqa: BLE001 - reported, the rerun redoes the pages
        return RunError(f"could not store the last queued files ({exc}); their pages will be redone on rerun")
    return None


async def _follow(asked: asyncio.Event, run_stop: asyncio.Event) -> None:
    await asked.wait()
    run_stop.set()


def _server_gone(exc: BaseException) -> bool:
    """Whether ``exc`` is (or was caused by) the endpoint going down or failing to start."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, (EndpointDown, EndpointError)):
            return True
        seen = seen.__cause__
    return False


def run_blocking(make: ShardRun, *, command_line: bool = False) -> ShardOutcome:
    """Run a shard coroutine to its outcome from synchronous code.

    Without a running event loop, on the main thread (a script, the command line), the run gets
    a loop here, and SIGINT (Ctrl-C) stops it gracefully: ``stop`` is set, so intake ends and the
    pages in flight finish; a second signal cancels the run at once. ``command_line`` adds SIGTERM
    (a platform stopping the job) and logs every failure, for the exit code. Where a loop is
    running already (Jupyter) or off the main thread, the run gets its own loop in a worker
    thread, and a ``KeyboardInterrupt`` that reaches this thread while it waits does the same.
    An interrupt from the user sets :attr:`ShardOutcome.interrupted_by_user`.
    """
    try:
        asyncio.get_running_loop()
        loop_running = True
    except RuntimeError:
        loop_running = False
    if loop_running or threading.current_thread() is not threading.main_thread():
        outcome = _run_in_thread(make)
    else:
        signals = (signal.SIGTERM, signal.SIGINT) if command_line else (signal.SIGINT,)
        outcome = _run_here(make, signals)
    if command_line and outcome.error is not None:
        if outcome.unexpected:
            log.error("the run failed unexpectedly; completed parts are kept, rerun to resume", exc_info=outcome.error)
        else:
            log.error("%s", outcome.error)
    return outcome


def _interrupted(by_user: bool) -> ShardOutcome:
    log.error("interrupted; completed parts are kept, rerun the same command to resume")
    return ShardOutcome(ExitCode.INTERRUPTED, interrupted_by_user=by_user)


def _run_here(make: ShardRun, signals: tuple[signal.Signals, ...]) -> ShardOutcome:
    by_user = False

    async def main() -> ShardOutcome:
        nonlocal by_user
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        task = asyncio.current_task()

        def on_signal(signum: int) -> None:
            nonlocal by_user
            by_user = by_user or signum == signal.SIGINT
            if stop.is_set() and task is not None:
                task.cancel()
                return
            log.warning("received %s: stopping intake, finishing pages in flight", signal.Signals(signum).name)
            stop.set()

        for signum in signals:
            loop.add_signal_handler(signum, on_signal, signum)
        try:
            return await run_guarded(make, stop)
        except asyncio.CancelledError:
            return _interrupted(by_user)
        finally:
            for signum in signals:
                loop.remove_signal_handler(signum)

    try:
        outcome = asyncio.run(main())
    except KeyboardInterrupt:  # before the handler was in place, or after it was removed
        return _interrupted(True)
    outcome.interrupted_by_user = outcome.interrupted_by_user or (by_user and outcome.exit_code == ExitCode.INTERRUPTED)
    return outcome


def _run_in_thread(make: ShardRun) -> ShardOutcome:
    started = threading.Event()
    state: dict[str, Any] = {}

    async def main() -> ShardOutcome:
        state["loop"], state["stop"], state["task"] = asyncio.get_running_loop(), asyncio.Event(), asyncio.current_task()  # noqa: E501 - not wrapped yet
        started.set()
        try:
            return await run_guarded(make, state["stop"])
        except asyncio.CancelledError:
            return _interrupted(True)

    finished = threading.Event()

    def target() -> None:
        try:
            state["outcome"] = asyncio.run(main())
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread
            state["error"] = exc
        finally:
            started.set()
            finished.set()

    threading.Thread(target=target, name="llm-ocr-run", daemon=True).start()
    interrupts = 0
    # An Event, not Thread.join: a join that a KeyboardInterrupt breaks into can leave the thread
    # marked as ended while it still runs.
    while not finished.is_set():
        try:
            finished.wait(0.25)
        except KeyboardInterrupt:
            interrupts += 1
            started.wait()
            _signal_run(state, interrupts)
    if "error" in state:
        raise state["error"]
    outcome: ShardOutcome = state["outcome"]
    if interrupts:
        outcome.interrupted_by_user = True
    return outcome


def _signal_run(state: dict[str, Any], interrupts: int) -> None:
    """The first interrupt stops the run in the worker thread gracefully, the next cancels it."""
    loop = state.get("loop")
    if loop is None:
        return
    if interrupts == 1:
        log.warning("interrupted: stopping intake, finishing pages in flight (interrupt again to cancel them)")
        action = state["stop"].set
    else:
        action = state["task"].cancel
    try:
        loop.call_soon_threadsafe(action)
    except RuntimeError:  # the loop has just closed: the run is over
        pass
