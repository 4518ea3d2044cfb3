"""Which shard this process is, as the platform it runs on tells it."""

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
#: it, task i of k is shard i of k.
TASK_SHARDS_ENV = "LLM_OCR_TASK_SHARDS"


class PlatformError(ValueError):
    """What the platform says about this process's shard is inconsistent."""


def detect_shard(resource_config: Path | None = None) -> tuple[int, int, str]:
    """``(num_shards, shard_index, where_from)`` from the environment, else ``(1, 0, "default")``.

    Cloud Run Jobs set ``CLOUD_RUN_TASK_COUNT``/``CLOUD_RUN_TASK_INDEX``; SageMaker Processing
    has no variable but lists the hosts in ``resourceconfig.json`` (``algo-1``...); Hugging Face
    Jobs have no job arrays, so the launcher passes ``LLM_OCR_NUM_SHARDS``/``LLM_OCR_SHARD_INDEX``
    (read by the option resolver before this is consulted). With :data:`TASK_SHARDS_ENV` set, the
    task's index picks its shard from that list; :class:`PlatformError` when the list does not fit
    the platform's task count.
    """
    env = os.environ
    if "CLOUD_RUN_TASK_COUNT" in env:
        return _mapped(int(env["CLOUD_RUN_TASK_COUNT"]), int(env.get("CLOUD_RUN_TASK_INDEX", "0")), "Cloud Run")
    if resource_config is None:
        resource_config = Path(env.get(RESOURCE_CONFIG_ENV) or SAGEMAKER_RESOURCE_CONFIG)
    if resource_config.exists():
        try:
            config = json.loads(resource_config.read_text())
            hosts = sorted(config["hosts"], key=lambda h: (len(h), h))  # algo-10 after algo-9
            host = hosts.index(config["current_host"])
        except (ValueError, KeyError, OSError):
            return 1, 0, "default"
        return _mapped(len(hosts), host, "SageMaker")
    return 1, 0, "default"


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
    """``"3,7,12-14"`` -> ``[3, 7, 12, 13, 14]``, the inverse of :func:`format_ranges` (``ValueError`` on anything
    else)."""
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
        return tasks, index, where
    num_shards, shards = parse_task_shards(value)
    if len(shards) != tasks or not 0 <= index < tasks:
        raise PlatformError(
            f"{TASK_SHARDS_ENV} lists {len(shards)} shard(s) but {where} runs {tasks} task(s) (this is task {index}): "
            "relaunch with `llm-ocr launch` rather than editing the job's environment"
        )
    return num_shards, shards[index], f"{where}, task {index} of {tasks}"
