"""Which shard this process is, as the platform it runs on tells it.

Each engine numbers the tasks of one job in its own variables (all documented by the engine):

=========================  ===========================================  ======================================
platform                   index                                        count
=========================  ===========================================  ======================================
Slurm job array            ``SLURM_ARRAY_TASK_ID`` (the shard itself)   ``SLURM_ARRAY_TASK_COUNT`` when the
                                                                        ids are ``0-(N-1)``, else N given
Kubernetes Indexed Job     ``JOB_COMPLETION_INDEX``                     not passed to pods: N given
AWS Batch array job        ``AWS_BATCH_JOB_ARRAY_INDEX``                ``AWS_BATCH_JOB_ARRAY_SIZE``
Google Cloud Batch         ``BATCH_TASK_INDEX``                         ``BATCH_TASK_COUNT``
Cloud Run Jobs             ``CLOUD_RUN_TASK_INDEX``                     ``CLOUD_RUN_TASK_COUNT``
SageMaker Processing       the host's place in ``resourceconfig.json``  the number of hosts
=========================  ===========================================  ======================================

("N given": ``--num-shards`` or ``LLM_OCR_NUM_SHARDS``.)

Sources: sbatch(1) "OUTPUT ENVIRONMENT VARIABLES"; Kubernetes, "Jobs", Completion mode
(https://kubernetes.io/docs/concepts/workloads/controllers/job/#completion-mode); AWS Batch, "Job
environment variables" (https://docs.aws.amazon.com/batch/latest/userguide/job_env_vars.html);
Google Cloud Batch ``TaskGroup.task_environments`` (tasks get ``BATCH_TASK_INDEX`` and
``BATCH_TASK_COUNT``); Cloud Run and SageMaker in docs/facts.md.

A Slurm task's id *is* its shard: an array may list any ids (``--array=3,7`` relaunches shards 3
and 7), so its count is the shard count only when the ids are exactly ``0..COUNT-1``. A
Kubernetes pod never learns its Job's ``completions``. In both cases the shard count comes from
``--num-shards`` / ``LLM_OCR_NUM_SHARDS`` (the launchers set it; a user's own script or Job YAML
sets it too), and an index without any count is an error, never a guess.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

SAGEMAKER_RESOURCE_CONFIG = Path("/opt/ml/config/resourceconfig.json")
#: Replaces :data:`SAGEMAKER_RESOURCE_CONFIG` (tests run several "hosts" on one machine).
RESOURCE_CONFIG_ENV = "LLM_OCR_SAGEMAKER_RESOURCE_CONFIG"

#: ``N:SHARDS`` (e.g. ``20:1,5-7``): the shard each task of a platform's job array runs, task i
#: running the i-th shard listed, of N shards in all. The platform numbers its tasks 0..k-1
#: (Cloud Run's ``CLOUD_RUN_TASK_INDEX``, SageMaker's hosts ``algo-1``... in order) whatever
#: shards they are to run, so a launcher sets this when a job runs only some shards: a relaunch
#: of the unfinished ones, or one of several SageMaker jobs of a launch over 100 hosts. Without
#: it, task i of k is shard i of k. (Slurm needs none: its task ids are the shards.)
TASK_SHARDS_ENV = "LLM_OCR_TASK_SHARDS"

#: The shard count's variable, for the messages (the option resolver reads it as ``--num-shards``).
NUM_SHARDS_ENV = "LLM_OCR_NUM_SHARDS"


class PlatformError(ValueError):
    """What the platform says about this process's shard is inconsistent, or incomplete."""


def detect_shard(resource_config: Path | None = None, num_shards: int | None = None) -> tuple[int, int, str]:
    """``(num_shards, shard_index, where_from)`` from the environment, else ``(num_shards or 1, 0, "default")``.

    ``num_shards`` is the count the user or a launcher gave (``--num-shards``,
    ``LLM_OCR_NUM_SHARDS``): it wins over the platform's, and is required where the platform
    passes an index without a usable count (see the module docstring). With
    :data:`TASK_SHARDS_ENV` set, a task's index picks its shard from that list.
    :class:`PlatformError` when the platform's variables do not add up.
    """
    env = os.environ
    found = _slurm(num_shards) or _indexed(num_shards)
    if found is not None:
        return found
    if resource_config is None:
        resource_config = Path(env.get(RESOURCE_CONFIG_ENV) or SAGEMAKER_RESOURCE_CONFIG)
    if resource_config.exists():
        try:
            config = json.loads(resource_config.read_text())
            hosts = sorted(config["hosts"], key=lambda h: (len(h), h))  # algo-10 after algo-9
            host = hosts.index(config["current_host"])
        except (ValueError, KeyError, OSError):
            return num_shards or 1, 0, "default"
        return _given(_mapped(len(hosts), host, "SageMaker"), num_shards)
    return num_shards or 1, 0, "default"


#: (index variable, count variable or None, platform) of the engines whose tasks are 0..k-1.
_INDEXED = (
    ("JOB_COMPLETION_INDEX", None, "Kubernetes Indexed Job"),
    ("AWS_BATCH_JOB_ARRAY_INDEX", "AWS_BATCH_JOB_ARRAY_SIZE", "AWS Batch array job"),
    ("BATCH_TASK_INDEX", "BATCH_TASK_COUNT", "Google Cloud Batch"),
    ("CLOUD_RUN_TASK_INDEX", "CLOUD_RUN_TASK_COUNT", "Cloud Run"),
)


def _slurm(num_shards: int | None) -> tuple[int, int, str] | None:
    """A Slurm array task: its id is its shard; the count is the array's only for ``--array=0-(N-1)``."""
    env = os.environ
    if "SLURM_ARRAY_TASK_ID" not in env:
        return None
    index = _number("SLURM_ARRAY_TASK_ID")
    where = f"Slurm array task {index}"
    if num_shards is not None:
        return _in_range(num_shards, index, where)
    count = _number("SLURM_ARRAY_TASK_COUNT") if "SLURM_ARRAY_TASK_COUNT" in env else None
    low, high = env.get("SLURM_ARRAY_TASK_MIN"), env.get("SLURM_ARRAY_TASK_MAX")
    dense = count is not None and low == "0" and high == str(count - 1)
    if not dense:
        raise PlatformError(
            f"SLURM_ARRAY_TASK_ID={index} is the shard index, but the array's ids ({low or '?'}-{high or '?'}, "
            f"{count if count is not None else 'unknown'} task(s)) are not 0..N-1, so they do not say how many shards "
            f"there are: set {NUM_SHARDS_ENV}=N (or --num-shards N) in the batch script, or submit with --array=0-(N-1)"
        )
    assert count is not None
    return count, index, where


def _indexed(num_shards: int | None) -> tuple[int, int, str] | None:
    """Kubernetes, AWS Batch, Google Cloud Batch or Cloud Run: task i of k (or of a launcher's list)."""
    env = os.environ
    for index_name, count_name, platform in _INDEXED:
        if index_name not in env:
            continue
        index = _number(index_name)
        count = _number(count_name) if count_name and count_name in env else None
        if count is None:
            # Kubernetes passes no count; a launcher's list or the user's N says it.
            listed = env.get(TASK_SHARDS_ENV)
            if listed:
                return _given(_mapped(len(parse_task_shards(listed)[1]), index, platform), num_shards)
            if num_shards is None:
                missing = f"{count_name} is not set" if count_name else "a Job does not pass its completions to pods"
                raise PlatformError(
                    f"{index_name}={index} gives this task's index but not the shard count ({missing}): set "
                    f"{NUM_SHARDS_ENV}=N (or --num-shards N) in the {platform}'s environment"
                )
            return _in_range(num_shards, index, platform)
        return _given(_mapped(count, index, platform), num_shards)
    return None


def _given(found: tuple[int, int, str], num_shards: int | None) -> tuple[int, int, str]:
    """The platform's ``found`` shard, the count being the user's ``num_shards`` when given."""
    count, index, where = found
    if num_shards is None or num_shards == count:
        return found
    if os.environ.get(TASK_SHARDS_ENV):
        raise PlatformError(
            f"{TASK_SHARDS_ENV} is for {count} shard(s) but --num-shards is {num_shards}: "
            "relaunch with `llm-ocr launch` rather than editing the job's environment"
        )
    return _in_range(num_shards, index, where)


def _in_range(num_shards: int, index: int, where: str, counted_by: str = "") -> tuple[int, int, str]:
    if not 0 <= index < num_shards:
        raise PlatformError(
            f"{where} gives index {index}, out of range for {num_shards} shard(s) (the count from "
            f"{counted_by or NUM_SHARDS_ENV + ' / --num-shards'}): the indexes must be 0..{num_shards - 1}"
        )
    return num_shards, index, where


def _number(name: str) -> int:
    value = os.environ[name]
    try:
        number = int(value)
    except ValueError:
        raise PlatformError(f"{name}={value!r} is not a whole number") from None
    if number < 0:
        raise PlatformError(f"{name}={value!r} is negative")
    return number


def task_shards_value(num_shards: int, shards: Sequence[int]) -> str:
    """The :data:`TASK_SHARDS_ENV` value for tasks running ``shards`` of ``num_shards``: ``20:1,5-7``."""
    return f"{num_shards}:{format_ranges(shards)}"


def format_ranges(numbers: Sequence[int], sep: str = ",") -> str:
    """``0-3,7,9-10`` for [0, 1, 2, 3, 7, 9, 10] (runs of consecutive numbers as ``first-last``)."""
    spans: list[list[int]] = []
    for n in numbers:
        if spans and n == spans[-1][1] + 1:
            spans[-1][1] = n
        else:
            spans.append([n, n])
    return sep.join(f"{a}-{b}" if b > a else str(a) for a, b in spans)


def expand_ranges(text: str) -> list[int]:
    """``"3,7,12-14"`` -> ``[3, 7, 12, 13, 14]``, the inverse of :func:`format_ranges` (``ValueError`` on
    anything else)."""
    numbers: list[int] = []
    for part in text.split(","):
        first, sep, last = part.strip().partition("-")
        low, high = int(first), int(last) if sep else int(first)
        if high < low:
            raise ValueError(f"range {part!r} runs backwards")
        numbers.extend(range(low, high + 1))
    return numbers


def parse_task_shards(value: str) -> tuple[int, list[int]]:
    """``(num_shards, shards)`` from a :data:`TASK_SHARDS_ENV` value (:class:`PlatformError` if malformed)."""
    total, sep, listed = value.partition(":")
    try:
        shards = expand_ranges(listed)
        num_shards = int(total)
    except ValueError:
        raise PlatformError(f"{TASK_SHARDS_ENV}={value!r} is not N:SHARDS (e.g. 20:1,5-7)") from None
    if not sep or not shards or any(not 0 <= s < num_shards for s in shards):
        raise PlatformError(f"{TASK_SHARDS_ENV}={value!r}: shards must be listed and lie in 0..N-1")
    return num_shards, shards


def _mapped(tasks: int, index: int, where: str) -> tuple[int, int, str]:
    """Task ``index`` of ``tasks`` as a shard, through :data:`TASK_SHARDS_ENV` when it is set."""
    value = os.environ.get(TASK_SHARDS_ENV)
    if not value:
        return _in_range(tasks, index, where, "the platform's task count")
    num_shards, shards = parse_task_shards(value)
    if len(shards) != tasks or not 0 <= index < tasks:
        raise PlatformError(
            f"{TASK_SHARDS_ENV} lists {len(shards)} shard(s) but {where} runs {tasks} task(s) (this is task {index}): "
            "relaunch with `llm-ocr launch` rather than editing the job's environment"
        )
    return num_shards, shards[index], f"{where}, task {index} of {tasks}"
