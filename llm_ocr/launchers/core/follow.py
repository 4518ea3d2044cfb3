"""Follow a launch: read what its record, OUT and the platform say, wait, show logs, cancel.

A launch's status is made in two steps. :func:`read_launch` fetches: which stage and how many
shards (from the launch record, else from OUT's completion markers), the markers each shard
needs, the markers and progress files OUT holds, and the platform's word on each shard's job.
:func:`~llm_ocr.launchers.core.table.status_table` then formats those facts as the table, with no
I/O of its own. :func:`collect_status` does both; :func:`wait_for` does it until every shard
ends. The platform is reached through the registry by the record's platform name
(:func:`follower`), never by importing its room.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

from llm_ocr.container.shard_index import format_ranges
from llm_ocr.launchers import platform_class
from llm_ocr.launchers.core.adapter import JobState, Platform
from llm_ocr.launchers.core.record import LaunchRecord
from llm_ocr.launchers.core.spec import LaunchError
from llm_ocr.launchers.core.table import LaunchFacts, LaunchStatus, status_table
from llm_ocr.stage_table import STAGE_FOLDERS, STAGES
from llm_ocr.storage import Storage
from llm_ocr.storage.state import marker_layouts, markers_by_shard, read_progress

log = logging.getLogger("llm_ocr")


def follower(record: LaunchRecord) -> Platform:
    """The adapter that follows ``record``'s jobs (by its platform's name, from what it saved)."""
    return platform_class(record.platform).from_record(record.info)


def storage_for(output: str, storage_options: dict[str, Any] | None = None) -> Storage:
    """The output location as a :class:`Storage`."""
    return Storage(output, storage_options or {})


# --------------------------------------------------------------------------------------------
# Fetching


def read_launch(
    out: Storage,
    record: LaunchRecord | None,
    *,
    num_shards: int | None = None,
    stage: str | None = None,
    platform: Platform | None = None,
    cache: dict[str, dict[str, Any]] | None = None,
) -> LaunchFacts:
    """What a launch's table is made of, read from ``record``, OUT and the platform (without a
    record, from whatever OUT's markers and progress files say).

    ``cache`` keeps the markers read so far (a poller passes the same dict every time)."""
    stage, num_shards = _layout(out, record, stage, num_shards)
    needed = _needed_markers(out, record, stage, num_shards)
    # Escalate's markers say how a run's pages were routed and escalated, even where not needed.
    read = (*needed, *(("escalate",) if stage == "run" and "escalate" not in needed else ()))
    primary = STAGES[stage].primary
    # The jobs' states first, OUT after: a job writes its markers before it exits, so one seen
    # ended has them in the reads that follow. The other order let a job end between the two
    # reads on a busy machine and show as ended without a marker ("no marker", a final state:
    # `wait` stopped there and called the launch failed).
    jobs = _job_states(record, platform) if record is not None else {}
    return LaunchFacts(
        output=out.url,
        stage=stage,
        num_shards=num_shards,
        needed=needed,
        markers={s: markers_by_shard(out, s, num_shards, cache) for s in read},
        progress={shard: data for (name, shard), data in read_progress(out, num_shards).items() if name == primary},
        jobs=jobs,
        launch_id=record.launch_id if record else None,
        platform=record.platform if record else None,
        hardware=record.hardware if record else None,
        gpus=record.gpus if record else 1,
        price_per_hour=record.price_per_hour if record else None,
    )


def _layout(out: Storage, record: LaunchRecord | None, stage: str | None, num_shards: int | None) -> tuple[str, int]:
    """The launch's stage and shard count: the record's, else those given, else the one shard
    count OUT's completion markers are for."""
    if record is not None:
        return record.stage, record.num_shards
    if num_shards is None:
        layouts = set().union(*(marker_layouts(out, s) for s in STAGE_FOLDERS))
        if len(layouts) != 1:
            found = (f" and markers for several shard counts {sorted(layouts)}" if layouts
                     else " and no completion markers")
            raise LaunchError(f"{out.url} has no launch record{found}: nothing to show (was it launched with "
                              "`llm-ocr launch`?)")
        num_shards = layouts.pop()
    return stage or "run", num_shards


def _needed_markers(out: Storage, record: LaunchRecord | None, stage: str, num_shards: int) -> tuple[str, ...]:
    """The completion markers a shard needs: the record says; without one, a ``run`` whose shards
    have Fields markers ran with a schema."""
    if record is not None:
        return record.needed_markers()
    needed = STAGES[stage].markers
    if stage == "run" and num_shards in marker_layouts(out, "fields"):
        needed = (*needed, "fields")
    return needed


def _job_states(record: LaunchRecord, platform: Platform | None) -> dict[int, JobState]:
    """The state of each launched shard's job, by shard: ``unknown`` when the platform cannot say
    (the markers and progress files still tell a lot)."""
    states: dict[str, JobState] = {}
    try:
        platform = platform or follower(record)
        states = platform.states(record.current_jobs())
    except Exception as exc:  # noqa: BLE001 - markers and progress still tell a lot
        log.warning("could not read the jobs' states from %s: %s", record.platform, exc)
    by_shard = {}
    for shard in range(record.num_shards):
        job = record.job_of_shard(shard)
        if job is None:
            continue
        known = states.get(job["job_id"])
        by_shard[shard] = platform.shard_phase(known, shard) if (known and platform) else JobState(job["job_id"],
                                                                                                  "unknown")
    return by_shard


# --------------------------------------------------------------------------------------------
# Following


def collect_status(
    out: Storage,
    record: LaunchRecord | None,
    *,
    num_shards: int | None = None,
    stage: str | None = None,
    platform: Platform | None = None,
    cache: dict[str, dict[str, Any]] | None = None,
) -> LaunchStatus:
    """The table of a launch (or, without a record, of whatever OUT's markers and progress say):
    :func:`read_launch`, then :func:`~llm_ocr.launchers.core.table.status_table`."""
    return status_table(read_launch(out, record, num_shards=num_shards, stage=stage, platform=platform, cache=cache))


def wait_for(
    out: Storage,
    record: LaunchRecord,
    *,
    interval: float = 15.0,
    timeout: float | None = None,
    on_update: Callable[[LaunchStatus], None] | None = None,
) -> LaunchStatus:
    """Poll until every shard is final (done, failed, cancelled); ``TimeoutError`` after ``timeout``."""
    platform = follower(record)
    deadline = None if timeout is None else time.monotonic() + timeout
    cache: dict[str, dict[str, Any]] = {}
    while True:
        status = collect_status(out, record, platform=platform, cache=cache)
        if on_update is not None:
            on_update(status)
        if status.finished:
            return status
        if deadline is not None and time.monotonic() >= deadline:
            raise TimeoutError(f"launch {record.launch_id} still running after {timeout:.0f}s")
        time.sleep(interval)


def shard_logs(record: LaunchRecord, shard: int, *, follow: bool = False, tail: int | None = None) -> Iterator[str]:
    """Log lines of ``shard``'s latest job."""
    if not 0 <= shard < record.num_shards:
        raise LaunchError(
            f"--shard {shard} is out of range: launch {record.launch_id} has {record.num_shards} shard(s)"
        )
    job = record.job_of_shard(shard)
    if job is None:
        raise LaunchError(f"shard {shard} has no job in launch {record.launch_id} "
                          f"({record.skipped.get(str(shard), 'not launched')})")
    return follower(record).logs(job, shard, follow=follow, tail=tail)


def cancel_jobs(record: LaunchRecord, shards: set[int] | None = None) -> list[str]:
    """Cancel the latest jobs of ``shards`` (default: all) that have not ended; their ids."""
    platform = follower(record)
    jobs = [j for j in record.current_jobs() if shards is None or shards & set(j["shards"])]
    wider = [j for j in jobs if shards is not None and set(j["shards"]) - shards]
    if wider:  # a job array (one Cloud Run execution for all shards) stops as a whole
        raise LaunchError(
            f"job {wider[0]['job_id']} runs shards {format_ranges(sorted(wider[0]['shards']), ', ')} together and "
            f"cannot stop only some of them: cancel it whole with `llm-ocr jobs cancel {record.output}`"
        )
    states = platform.states(jobs)
    live = [j for j in jobs if (s := states.get(j["job_id"])) is None or s.phase in ("pending", "running", "unknown")]
    return platform.cancel(live) if live else []
