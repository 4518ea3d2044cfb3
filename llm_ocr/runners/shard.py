"""What every stage's shard runner shares: the shard, exit codes, signals, the output check.

Exit codes (also in docs/stages.md): 0 every page ok or truncated; 1 finished but some pages
failed; 2 could not run (bad options, inputs, output or endpoint); 3 interrupted (SIGTERM or
SIGINT: completed rows are kept, rerun the same command to resume).
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from llm_ocr.endpoint.in_flight import AdaptiveInFlight, AdaptivePolicy, InFlightLimit, in_flight_control
from llm_ocr.config import JobOptions
from llm_ocr.endpoint import Endpoint, EndpointError
from llm_ocr.container.shard_index import PlatformError, detect_shard
from llm_ocr.runners.progress import RunCounters
from llm_ocr.sources import InputError
from llm_ocr.storage import Storage
from llm_ocr.storage.access import check_output
from llm_ocr.storage.sinks import close_all as close_sinks
from llm_ocr.storage.stores import StorageError

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
    try:
        num, index, where = detect_shard()
    except PlatformError as exc:  # a launcher's task-to-shard list that does not fit the platform's tasks
        raise RunError(str(exc)) from exc
    num_shards = job.num_shards if job.num_shards is not None else num
    shard_index = job.shard_index if job.shard_index is not None else (index if job.num_shards is None else 0)
    if shard_index >= num_shards:
        raise RunError(f"--shard-index {shard_index} is out of range for --num-shards {num_shards}")
    if where != "default" and job.num_shards is None:
        log.info("shard %d of %d (from %s)", shard_index, num_shards, where)
    return num_shards, shard_index


def in_flight_for_endpoint(job: JobOptions, endpoint: Endpoint) -> tuple[InFlightLimit, AdaptiveInFlight | None]:
    """The run's in-flight limit: ``--max-in-flight``, else the launched server's preset, else
    sized from the endpoint's ``/metrics`` while the run goes (from 64; fixed at 64 without them)."""
    overloads = lambda: getattr(endpoint.client, "overloaded", 0)  # noqa: E731
    return in_flight_control(
        job.max_in_flight, endpoint.suggested_in_flight, endpoint.metrics, overloads, AdaptivePolicy(start=DEFAULT_IN_FLIGHT)
    )


def check_writable(out: Storage) -> None:
    """Fail before any GPU time is spent if the output cannot be written."""
    try:
        check_output(out)  # llm_ocr.storage.access: names the store and what to set, no secrets
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
    except Exception:
        log.exception("the run failed unexpectedly; completed parts are kept, rerun to resume")
        return ShardOutcome(EXIT_COULD_NOT_RUN)
