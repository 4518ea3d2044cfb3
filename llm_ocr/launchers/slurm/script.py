"""The ``sbatch`` script of a Slurm launch: one job array whose task ids are the shards.

The script is plain bash a user can read, keep and resubmit (``sbatch FILE``): ``#SBATCH``
directives (sbatch(1)), the environment set-up the user asked for (``module load``, a venv, raw
lines), the plain environment of the shard specs, and a small runner around ``llm-ocr STAGE ...``:

- ``--array=SHARDS%K``: task ``SLURM_ARRAY_TASK_ID`` is shard ``SLURM_ARRAY_TASK_ID``, of
  ``LLM_OCR_NUM_SHARDS`` (:mod:`llm_ocr.container.shard_index`), so a relaunch is
  ``--array=3,7``;
- ``--requeue`` and ``--signal=B:USR1@S``: S seconds before the time limit Slurm sends USR1 to
  the batch shell only (``B:``); the runner then stops llm-ocr with one SIGTERM (it finishes the
  pages in flight and keeps its parts) and requeues its own task with ``scontrol requeue
  ARRAYJOB_TASK`` (never ``$SLURM_JOB_ID``: in the array's last task that id is the whole
  array's), which resumes from the parts. A task that crashed (exit status other than 0, 1 = some
  pages failed, or a stop Slurm asked for) is requeued the same way, up to the launch's attempts
  (``SLURM_RESTART_COUNT`` counts them). A SIGTERM from Slurm itself (``scancel``, a preemption,
  the time limit, ``scontrol requeue``) already reaches every process of the task, llm-ocr
  included, so the runner only notes it;
- ``--open-mode=append``: a requeued task's log continues the same file instead of truncating it;
- one JSON line per event (``start``, ``exit``, ``requeue``) in ``RECORDS/SHARD.jsonl``: what
  ``llm-ocr jobs status`` reads once ``squeue`` has forgotten the task (after the cluster's
  ``MinJobAge``), with no accounting database (``sacct``) needed.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

#: Exit statuses after which a task is not retried: 0 every page done, 1 done but some pages
#: failed (a rerun would redo only those: ``--retry-errors`` on a relaunch).
FINAL_EXIT_CODES = (0, 1)


@dataclass
class BatchScript:
    """What goes into one launch's script."""

    #: ``#SBATCH`` options as ``(flag, value)``; a value of None writes the bare flag.
    directives: list[tuple[str, str | None]]
    #: Shell lines run first (``module load X``, ``source VENV/bin/activate``...).
    setup: list[str]
    #: Exported before llm-ocr starts (no secret: those come with the environment sbatch copies).
    env: Mapping[str, str]
    #: ``llm-ocr STAGE ... --output OUT``, maybe behind ``srun --container-image=...``.
    command: Sequence[str]
    #: The folder of the task records (``SHARD.jsonl``).
    records: str
    #: Runs of a task at most, the first included.
    attempts: int
    #: Comment lines at the top (what launch wrote it).
    header: list[str] = field(default_factory=list)


def render(script: BatchScript) -> str:
    """The script's text."""
    lines = ["#!/bin/bash", *(f"# {line}" for line in script.header)]
    for flag, value in script.directives:
        lines.append(f"#SBATCH {flag}" if value is None else f"#SBATCH {flag}={value}")
    lines += ["set -uo pipefail", ""]
    if script.setup:
        lines += ["# Environment set-up", *script.setup, ""]
    lines += [f"export {name}={shlex.quote(value)}" for name, value in script.env.items()]
    lines += [
        "",
        f"attempts={script.attempts}",
        f"records={shlex.quote(script.records)}",
        _RUNNER.replace("@COMMAND@", shlex.join(script.command)).replace("@PROGRAM@", shlex.quote(script.command[0])),
    ]
    return "\n".join(lines)


# The runner. `wait` returns early (status > 128) whenever a trapped signal arrives, so it loops
# until the child has really exited; the USR1 handler then runs at once instead of after llm-ocr.
_RUNNER = r"""task="${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID}"
attempt=$(( ${SLURM_RESTART_COUNT:-0} + 1 ))
note() {  # one JSON line per event: what `llm-ocr jobs status` reads once squeue forgets the task
  printf '{"event": "%s", "task": "%s", "job_id": "%s", "attempt": %d, "time": %s%s}\n' \
    "$1" "$task" "${SLURM_JOB_ID}" "$attempt" "$(date +%s)" "${2:-}" >> "$records/${SLURM_ARRAY_TASK_ID}.jsonl"
}
stop=""
child=""
on_usr1() {  # --signal=B:USR1@S: the time limit is near; stop llm-ocr now, it keeps its parts
  stop="time limit"
  [[ -n $child ]] && kill -TERM "$child" 2>/dev/null
}
on_term() { stop=${stop:-"stopped by Slurm"}; }  # scancel, preemption, requeue: llm-ocr got it too
trap on_usr1 USR1
trap on_term TERM
note start ", \"host\": \"$(hostname)\", \"gpus\": \"${CUDA_VISIBLE_DEVICES:-}\""
if ! command -v @PROGRAM@ >/dev/null; then  # the set-up is wrong: a retry would not help
  echo "llm-ocr: @PROGRAM@ is not on PATH after the set-up above (PATH=$PATH)" >&2
  note exit ", \"code\": 127, \"stop\": \"\""
  exit 127
fi
@COMMAND@ &
child=$!
while :; do
  wait "$child"
  code=$?
  kill -0 "$child" 2>/dev/null || break
done
note exit ", \"code\": $code, \"stop\": \"$stop\""
if [[ $stop != "stopped by Slurm" ]] && (( code != 0 && code != 1 )); then
  if (( attempt < attempts )); then
    note requeue ", \"why\": \"${stop:-exit status $code}\""
    scontrol requeue "$task" && exit "$code"
    echo "llm-ocr: scontrol requeue $task failed: relaunch to resume" >&2
  else
    echo "llm-ocr: attempt $attempt of $attempts ended with status $code: relaunch to resume" >&2
  fi
fi
exit "$code"
"""


def slurm_time(seconds: int) -> str:
    """``--time`` for ``seconds``, rounded up to whole minutes (Slurm's unit): ``D-HH:MM:00``."""
    minutes = max(1, -(-seconds // 60))
    days, rest = divmod(minutes, 24 * 60)
    hours, mins = divmod(rest, 60)
    return f"{days}-{hours:02d}:{mins:02d}:00"


def parse_slurm_time(text: str) -> int | None:
    """Seconds in a Slurm duration (``sinfo``'s ``%l``, ``squeue``'s ``%M``): ``MM``, ``MM:SS``,
    ``HH:MM:SS``, ``D-HH``, ``D-HH:MM``, ``D-HH:MM:SS``; None for ``UNLIMITED``/``infinite``/``N/A``
    or anything else."""
    text = text.strip()
    days, dash, rest = text.rpartition("-") if "-" in text else ("", "", text)
    try:
        day_count = int(days) if dash else 0
        parts = [int(p) for p in rest.split(":")]
    except ValueError:
        return None
    if dash:  # D-HH[:MM[:SS]]
        parts += [0] * (3 - len(parts))
        hours, minutes, seconds = parts[:3]
    elif len(parts) == 1:  # minutes
        hours, minutes, seconds = 0, parts[0], 0
    elif len(parts) == 2:  # MM:SS
        hours, minutes, seconds = 0, parts[0], parts[1]
    elif len(parts) == 3:
        hours, minutes, seconds = parts
    else:
        return None
    return ((day_count * 24 + hours) * 60 + minutes) * 60 + seconds
