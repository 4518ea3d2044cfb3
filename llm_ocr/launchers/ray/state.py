"""What a Ray launch's job log says about each shard, as :class:`JobState`.

One Ray Job runs every shard of a launch (:mod:`llm_ocr.launchers.ray.driver`); its driver prints
one event line per shard event (``llm-ocr-ray {"event": "start", "shard": 3, ...}``) and each
shard's output as ``[shard 3] LINE``. The Ray Jobs API gives the job's status (``PENDING``,
``RUNNING``, ``STOPPED``, ``SUCCEEDED``, ``FAILED``: ``ray.job_submission.JobStatus``) and its log
(``JobSubmissionClient.get_job_logs``); a shard's state is the job's, refined by the shard's own
events:

- no event yet: queued (``pending``) while the job runs;
- ``start``: ``running``; ``lost`` (its actor died) or ``retry``: ``pending`` again, for the next
  actor that frees up;
- ``exit`` with status 0: ``succeeded``; 1 (some pages failed) or a final ``failed``: ``failed``;
  an exit after ``ray job stop``, or ``stopped`` (the job was stopped before it ran): ``cancelled``;
- a job that ended (stopped, failed, or its driver died) before the shard's last event: the
  shard is ``cancelled`` (stopped) or ``failed``, with the job's message.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from typing import Any

from llm_ocr.launchers.core.adapter import TERMINAL_PHASES, JobState, Phase
from llm_ocr.launchers.ray.driver import EVENT_PREFIX, FINAL_CODES, shard_prefix

#: Ray Jobs' statuses (``ray.job_submission.JobStatus``) by phase.
JOB_PHASES: dict[str, Phase] = {
    "PENDING": "pending",
    "RUNNING": "running",
    "STOPPED": "cancelled",
    "SUCCEEDED": "succeeded",
    "FAILED": "failed",
}


def parse_events(log: str) -> list[dict[str, Any]]:
    """The driver's events in a job log, in order (a torn or foreign line is skipped)."""
    events = []
    for line in log.splitlines():
        if line.startswith(EVENT_PREFIX):
            try:
                event = json.loads(line[len(EVENT_PREFIX):])
            except ValueError:
                continue
            if isinstance(event, dict) and "event" in event:
                events.append(event)
    return events


def shard_lines(log: str, shard: int) -> list[str]:
    """Shard ``shard``'s output lines in a job log, and its events (as printed)."""
    prefix = shard_prefix(shard)
    lines = []
    for line in log.splitlines():
        if line.startswith(prefix):
            lines.append(line[len(prefix):])
        elif line.startswith(EVENT_PREFIX) and any(e.get("shard") == shard for e in parse_events(line)):
            lines.append(line)
    return lines


def shard_state(job: JobState, events: Iterable[dict[str, Any]], shard: int, *, now: float | None = None) -> JobState:
    """Shard ``shard``'s state within ``job`` (the Ray Job's own state) from the job's ``events``."""
    mine = [e for e in events if e.get("shard") == shard]
    running_s = _run_seconds(mine, now if now is not None else time.time())
    if job.phase == "pending":  # the driver has not started: every shard waits with it
        return JobState(job.job_id, "pending", job.raw, job.message, None)
    state = _from_events(job.job_id, mine, running_s)
    if state.phase in ("pending", "running") and job.phase in TERMINAL_PHASES:
        # The job ended before this shard did: stopped (ray job stop), or its driver failed.
        phase: Phase = "cancelled" if job.phase == "cancelled" else "failed"
        where = f"attempt {int(mine[-1].get('attempt', 1))} " if mine else "first attempt "
        why = (f"the launch's Ray job ended ({job.raw or job.phase}) before this shard's {where}did"
               + (f": {job.message}" if job.message else ""))
        return JobState(job.job_id, phase, job.raw, why, running_s)
    return state


def _from_events(job_id: str, mine: list[dict[str, Any]], running_s: float | None) -> JobState:
    if not mine:
        return JobState(job_id, "pending", "QUEUED", None, None)
    last = mine[-1]
    attempt = int(last.get("attempt") or max((int(e.get("attempt", 1)) for e in mine), default=1))
    kind = last["event"]
    if kind == "start":
        return JobState(job_id, "running", f"RUNNING (attempt {attempt}, actor {last.get('actor')})", None, running_s)
    if kind in ("lost", "retry"):
        return JobState(job_id, "pending", f"RETRYING (after attempt {attempt})", last.get("why"), running_s)
    if kind == "stopped":
        return JobState(job_id, "cancelled", "STOPPED", last.get("why"), running_s)
    if kind == "failed":
        return JobState(job_id, "failed", f"FAILED (attempt {attempt})", last.get("why"), running_s)
    if kind == "exit":
        code = int(last.get("code", -1))
        why = last.get("why") or ""
        if code == 0:
            return JobState(job_id, "succeeded", f"EXITED 0 (attempt {attempt})", None, running_s)
        if why == "stopped":
            return JobState(job_id, "cancelled", f"STOPPED (attempt {attempt}, exit {code})",
                            "stopped by `llm-ocr jobs cancel` (ray job stop)", running_s)
        message = f"attempt {attempt} exited {code}" + (f" ({why})" if why else "")
        if code in FINAL_CODES:
            return JobState(job_id, "failed", f"EXITED {code} (attempt {attempt})", message, running_s)
        return JobState(job_id, "pending", f"EXITED {code} (attempt {attempt})", message, running_s)
    return JobState(job_id, "unknown", kind.upper(), None, running_s)


def _run_seconds(events: list[dict[str, Any]], now: float) -> float | None:
    """Seconds the shard's attempts ran: each start to its exit (or loss), and a running one to ``now``."""
    total, started, seen = 0.0, None, False
    for event in events:
        kind = event.get("event")
        if kind == "start":
            started = float(event["time"])
        elif started is not None and kind in ("exit", "lost"):
            total += float(event["time"]) - started
            started, seen = None, True
    if started is not None:
        total += max(0.0, now - started)
        seen = True
    return round(total, 3) if seen else None
