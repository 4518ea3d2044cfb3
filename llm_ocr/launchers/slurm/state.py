"""What Slurm and the task records say about the tasks of a launch, as :class:`JobState`.

Two sources, the first that knows a task wins:

1. ``squeue -h -r -t all -j IDS -o FORMAT`` (squeue(1)): pending, running and recently ended
   tasks, one line each (``-r`` expands a pending array ``12_[3-9%2]``). Slurm forgets an ended
   job ``MinJobAge`` seconds after it ends (slurm.conf(5), default 300 s).
2. The task records the batch script appends (:mod:`llm_ocr.launchers.slurm.script`): start,
   exit status, requeue, per attempt. They outlive ``squeue`` and need no accounting database:
   ``sacct`` answers only where the site runs ``slurmdbd`` (``Slurm accounting storage is
   disabled`` otherwise), so it is not relied on.

A task that ``squeue`` no longer knows and whose last record is ``start`` ended without its
runner writing ``exit``: killed with the node, or with SIGKILL. One with no record never ran.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from llm_ocr.launchers.core.adapter import JobState, Phase
from llm_ocr.launchers.slurm.script import parse_slurm_time

#: ``squeue -o``: array job id, task id, job id, state, reason, time used, restarts... ``|``-separated.
SQUEUE_FORMAT = "%F|%K|%A|%T|%r|%M"

#: Job states (squeue(1), "JOB STATE CODES") by phase; anything else is "unknown".
_PHASES: dict[str, Phase] = {
    **dict.fromkeys(("PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "CONFIGURING", "RESV_DEL_HOLD",
                     "SPECIAL_EXIT"), "pending"),
    **dict.fromkeys(("RUNNING", "COMPLETING", "SIGNALING", "STAGE_OUT", "STOPPED", "SUSPENDED", "RESIZING"),
                    "running"),
    "COMPLETED": "succeeded",
    **dict.fromkeys(("FAILED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE", "PREEMPTED"),
                    "failed"),
    "CANCELLED": "cancelled",
}

#: Pending reasons that never clear by themselves (the request exceeds a limit, or names
#: something that does not exist): shown, so the user cancels and relaunches with other options.
HOPELESS_REASONS = ("PartitionTimeLimit", "PartitionConfig", "PartitionNodeLimit", "BadConstraints", "InvalidAccount",
                    "InvalidQOS", "ReqNodeNotAvail", "QOSMax", "AssocMax", "MaxGRES", "PartitionDown", "NodeDown")


def squeue_states(output: str) -> dict[str, JobState]:
    """``{"ARRAYJOB_TASK": JobState}`` from ``squeue -h -r -o SQUEUE_FORMAT`` output."""
    found = {}
    for line in output.splitlines():
        fields = line.strip().split("|")
        if len(fields) != 6 or not fields[1].isdigit():
            continue  # not an array task (or a header)
        array_id, task, _job_id, state, reason, used = fields
        state = state.split()[0] if state else ""  # "CANCELLED by 0" in some versions
        phase = _PHASES.get(state, "unknown")
        raw = state if reason in ("None", "", "(null)") else f"{state} ({reason})"
        message = None
        if phase == "pending" and reason.startswith(HOPELESS_REASONS):
            message = (f"will not start: {reason} (the request exceeds what the partition, QOS or account allows): "
                       "cancel it (llm-ocr jobs cancel OUT) and relaunch with other options")
        elif phase in ("failed", "cancelled"):
            message = raw
        running_s = parse_slurm_time(used) if used and phase != "pending" else None
        found[f"{array_id}_{task}"] = JobState(f"{array_id}_{task}", phase, raw, message, running_s)
    return found


def read_records(path: Path) -> list[dict[str, Any]]:
    """The events of one task (JSON lines; a torn last line is skipped)."""
    try:
        text = path.read_text()
    except OSError:
        return []
    events = []
    for line in text.splitlines():
        try:
            events.append(json.loads(line))
        except ValueError:
            continue
    return events


def record_state(job_id: str, events: Iterable[dict[str, Any]]) -> JobState:
    """A task's state from its records alone (``squeue`` no longer knows it)."""
    mine = [e for e in events if e.get("task") == job_id]
    if not mine:
        return JobState(job_id, "unknown", "UNKNOWN",
                        "not in squeue (ended more than the cluster's MinJobAge ago, or never ran) and no task record")
    last = mine[-1]
    attempt = int(last.get("attempt", 1))
    running_s = _run_seconds(mine)
    if last["event"] == "exit":
        code = int(last.get("code", -1))
        if code == 0:
            return JobState(job_id, "succeeded", f"COMPLETED (attempt {attempt})", None, running_s)
        why = f"attempt {attempt} exited {code}" + (f" ({last['stop']})" if last.get("stop") else "")
        return JobState(job_id, "failed", f"EXITED {code} (attempt {attempt})", why, running_s)
    if last["event"] == "requeue":
        return JobState(job_id, "unknown", f"REQUEUED (attempt {attempt})",
                        f"requeued after attempt {attempt} ({last.get('why')}) but no longer in squeue", running_s)
    return JobState(job_id, "failed", f"LOST (attempt {attempt})",
                    f"attempt {attempt} on {last.get('host', '?')} ended without recording its exit (node failure or "
                    "SIGKILL?); see its log", running_s)


def _run_seconds(events: list[dict[str, Any]]) -> float | None:
    """Seconds run over every attempt with both a start and an end (exit or requeue) recorded."""
    total, started = 0.0, None
    for event in events:
        if event.get("event") == "start":
            started = float(event["time"])
        elif started is not None and event.get("event") == "exit":
            total += float(event["time"]) - started
            started = None
    return total if total else None
