"""What a Job and its pods say about the shards they run, as :class:`JobState`.

Pure functions over the API's JSON (``GET .../jobs/NAME`` and ``GET .../pods?labelSelector=
batch.kubernetes.io/job-name=NAME``; field meanings from the Kubernetes API reference, "Job
v1 batch" and "Pod v1 core"):

- an index listed in the Job's ``status.completedIndexes`` succeeded, one in
  ``status.failedIndexes`` failed for good (its ``backoffLimitPerIndex`` spent, or a
  ``FailIndex`` rule matched);
- otherwise its latest pod (by creation) says: pending (with the reason a container waits for:
  an image that cannot be pulled or a Secret that does not exist never clears by itself), running,
  or failed and about to be replaced by the Job controller;
- a Job that ended (``Complete``/``Failed`` conditions) or is being deleted decides for the
  indexes it never finished; a Job that is gone (``llm-ocr jobs cancel`` deletes it, and so may its
  ``ttlSecondsAfterFinished``) leaves them cancelled: the completion markers still say which
  shards finished.

An index's running time is the sum of its pods' container run times (every attempt is paid for).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime, timezone
from typing import Any

from llm_ocr.container.shard_index import expand_ranges
from llm_ocr.launchers.core.adapter import JobState, Phase

#: The label (and annotation) a Job's controller puts on each pod: its completion index.
INDEX_LABEL = "batch.kubernetes.io/job-completion-index"
#: The label selecting a Job's pods (Kubernetes 1.27 and later; ``job-name`` before).
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
#: Failures of the index before this pod was made, counted and ignored (set with backoffLimitPerIndex).
FAILURES_ANNOTATION = "batch.kubernetes.io/job-index-failure-count"
IGNORED_ANNOTATION = "batch.kubernetes.io/job-index-ignored-failure-count"
#: Why a container waits, when it will wait forever without a change from the user.
HOPELESS_WAITING = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull",
                    "CreateContainerConfigError", "CreateContainerError")


def parse_time(text: str | None) -> float | None:
    """Seconds since the epoch of an RFC 3339 time as the API writes them (``2026-11-25T10:00:00Z``)."""
    if not text:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def indexes(text: str | None) -> set[int]:
    """``"0-2,5"`` (``completedIndexes``, ``failedIndexes``) -> ``{0, 1, 2, 5}``."""
    return set(expand_ranges(text)) if text else set()


def _condition(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if condition.get("type") == kind and condition.get("status") == "True":
            return condition
    return None


def job_state(name: str, job: dict[str, Any] | None, now: float) -> JobState:
    """The whole Job's state (``job`` None: it no longer exists)."""
    if job is None:
        return JobState(name, "cancelled", "DELETED", "the Job no longer exists (deleted by `llm-ocr jobs cancel` or "
                                                      "kubectl, or by its ttlSecondsAfterFinished)")
    status = job.get("status") or {}
    started = parse_time(status.get("startTime"))
    ended = parse_time(status.get("completionTime"))
    running = (ended or now) - started if started else None
    counts = (f"{status.get('succeeded', 0)}/{(job.get('spec') or {}).get('completions')} succeeded, "
              f"{status.get('failed', 0)} pod(s) failed, {status.get('active', 0)} active")
    phase: Phase
    message = None
    if (job.get("metadata") or {}).get("deletionTimestamp"):
        phase, raw = "cancelled", "DELETING"
    elif _condition(job, "Complete"):
        phase, raw = "succeeded", "Complete"
    elif failed := _condition(job, "Failed"):
        phase, raw = "failed", f"Failed ({failed.get('reason', '')})"
        message = failed.get("message") or failed.get("reason")
    elif (job.get("spec") or {}).get("suspend"):
        phase, raw = "pending", "Suspended"
    elif status.get("active") or started:
        phase, raw = "running", "Running"
    else:
        phase, raw = "pending", "Pending"
    return JobState(name, phase, f"{raw}: {counts}", message, running)


def index_of(pod: dict[str, Any]) -> int | None:
    """The completion index a pod runs (its label, else its annotation)."""
    meta = pod.get("metadata") or {}
    value = (meta.get("labels") or {}).get(INDEX_LABEL) or (meta.get("annotations") or {}).get(INDEX_LABEL)
    return int(value) if value is not None and str(value).isdigit() else None


def attempt_order(pod: dict[str, Any]) -> tuple[int, str, str]:
    """Sorts an index's pods oldest first: by the failures the controller had counted when it made
    each (its annotations; creation times have whole seconds only), then by creation."""
    meta = pod.get("metadata") or {}
    notes = meta.get("annotations") or {}
    earlier = sum(int(notes.get(key) or 0) for key in (FAILURES_ANNOTATION, IGNORED_ANNOTATION)
                  if str(notes.get(key) or 0).isdigit())
    return earlier, str(meta.get("creationTimestamp") or ""), str(meta.get("name") or "")


def index_states(job: JobState, job_json: dict[str, Any] | None, pods: Iterable[dict[str, Any]],
                 shards: Sequence[int], now: float) -> dict[int, JobState]:
    """The state of each shard the Job runs (index i runs ``shards[i]``), from the Job and its pods."""
    status = (job_json or {}).get("status") or {}
    completed, failed = indexes(status.get("completedIndexes")), indexes(status.get("failedIndexes"))
    by_index: dict[int, list[dict[str, Any]]] = {}
    for pod in pods:
        index = index_of(pod)
        if index is not None:
            by_index.setdefault(index, []).append(pod)
    found = {}
    for index, shard in enumerate(shards):
        mine = sorted(by_index.get(index, []), key=attempt_order)
        found[shard] = _index_state(f"{job.job_id} index {index}", index, mine, job, completed, failed, now)
    return found


def _index_state(name: str, index: int, pods: list[dict[str, Any]], job: JobState, completed: set[int],
                 failed: set[int], now: float) -> JobState:
    attempt = len(pods)
    running_s = sum(_run_seconds(pod, now) for pod in pods) or None
    last = pods[-1] if pods else None
    tag = f"attempt {attempt}" if attempt else "no pod yet"
    if index in completed:
        return JobState(name, "succeeded", f"Succeeded ({tag})", None, running_s)
    if index in failed:
        return JobState(name, "failed", f"Failed ({tag})", f"{tag}: {why(last)}" if last else "failed", running_s)
    if job.phase in ("succeeded", "failed", "cancelled"):
        # The Job ended (or is being deleted) without finishing this index.
        phase: Phase = "cancelled" if job.phase == "cancelled" else "failed"
        why_job = job.message or job.raw
        return JobState(name, phase, f"{job.raw.split(':')[0]} ({tag})", why_job, running_s)
    if last is None:
        return JobState(name, "pending", "Pending (no pod yet)", None, running_s)
    pod_phase = (last.get("status") or {}).get("phase")
    if pod_phase == "Running" or pod_phase == "Succeeded":  # a success the controller has not counted yet
        return JobState(name, "running", f"{pod_phase} ({tag})", None, running_s)
    if pod_phase == "Failed":
        return JobState(name, "pending", f"Retrying ({tag} failed)", f"{tag}: {why(last)}; the Job starts another",
                        running_s)
    waiting = _waiting(last)
    if waiting and waiting[0] in HOPELESS_WAITING:
        return JobState(name, "pending", f"Pending ({waiting[0]})",
                        f"will not start: {waiting[0]}: {waiting[1]} (fix it, then cancel and relaunch)", running_s)
    unscheduled = _unschedulable(last)
    raw = f"Pending ({waiting[0]})" if waiting else "Pending (Unschedulable)" if unscheduled else "Pending"
    return JobState(name, "pending", raw, unscheduled, running_s)


def why(pod: dict[str, Any]) -> str:
    """Why a pod ended: its container's exit status and reason, else the pod's own reason."""
    status = pod.get("status") or {}
    for container in [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]:
        terminated = (container.get("state") or {}).get("terminated")
        if terminated and terminated.get("exitCode"):
            reason = terminated.get("reason") or ""
            detail = f" ({reason})" if reason and reason != "Error" else ""
            return f"container {container.get('name')} exited {terminated['exitCode']}{detail}"
    disruption = _condition(pod, "DisruptionTarget")
    if disruption:
        return f"disrupted: {disruption.get('reason')}: {disruption.get('message', '')}".rstrip(": ")
    if status.get("reason"):
        return f"{status['reason']}: {status.get('message', '')}".rstrip(": ")
    return f"pod {status.get('phase', 'ended')}"


def _waiting(pod: dict[str, Any]) -> tuple[str, str] | None:
    status = pod.get("status") or {}
    for container in [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]:
        waiting = (container.get("state") or {}).get("waiting")
        if waiting and waiting.get("reason") not in (None, "PodInitializing"):
            return str(waiting["reason"]), str(waiting.get("message") or "")
    return None


def _unschedulable(pod: dict[str, Any]) -> str | None:
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            return str(condition.get("message") or condition.get("reason") or "not scheduled")
    return None


def _run_seconds(pod: dict[str, Any], now: float) -> float:
    """Seconds the pod's containers ran (init containers included)."""
    status = pod.get("status") or {}
    total = 0.0
    for container in [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]:
        state = container.get("state") or {}
        if "terminated" in state:
            ended = state["terminated"]
            start, end = parse_time(ended.get("startedAt")), parse_time(ended.get("finishedAt"))
        elif "running" in state:
            start, end = parse_time(state["running"].get("startedAt")), now
        else:
            continue
        if start is not None and end is not None:
            total += max(0.0, end - start)
    return total


def now_utc() -> float:
    """The current time, as :func:`parse_time` counts it."""
    return datetime.now(timezone.utc).timestamp()
