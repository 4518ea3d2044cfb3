"""Which shard this process is, as the platform it runs on tells it."""

from __future__ import annotations

import json
import os
from pathlib import Path

SAGEMAKER_RESOURCE_CONFIG = Path("/opt/ml/config/resourceconfig.json")
#: Replaces :data:`SAGEMAKER_RESOURCE_CONFIG` (tests run several "hosts" on one machine).
RESOURCE_CONFIG_ENV = "LLM_OCR_SAGEMAKER_RESOURCE_CONFIG"
#: Set by ``llm-ocr launch sagemaker`` on every Processing job: the shards its hosts run, in host
#: order (``"0-99"``, ``"3,7,12-40"``), and the launch's shard count. Without them the hosts are
#: shards 0..len(hosts)-1 of len(hosts). They let one launch span several jobs (over 100 hosts)
#: and a relaunch run only the unfinished shards.
HOST_SHARDS_ENV = "LLM_OCR_HOST_SHARDS"
HOST_NUM_SHARDS_ENV = "LLM_OCR_HOST_NUM_SHARDS"


class PlatformError(ValueError):
    """What the platform says about this process's shard is inconsistent."""


def detect_shard(resource_config: Path | None = None) -> tuple[int, int, str]:
    """``(num_shards, shard_index, where_from)`` from the environment, else ``(1, 0, "default")``.

    Cloud Run Jobs set ``CLOUD_RUN_TASK_COUNT``/``CLOUD_RUN_TASK_INDEX``; SageMaker Processing
    has no variable but lists the hosts in ``resourceconfig.json`` (``algo-1``...); Hugging Face
    Jobs have no job arrays, so the launcher passes ``LLM_OCR_NUM_SHARDS``/``LLM_OCR_SHARD_INDEX``
    (read by the option resolver before this is consulted). :class:`PlatformError` when the
    launcher's host-to-shard map does not fit the hosts SageMaker lists.
    """
    env = os.environ
    if "CLOUD_RUN_TASK_COUNT" in env:
        return int(env["CLOUD_RUN_TASK_COUNT"]), int(env.get("CLOUD_RUN_TASK_INDEX", "0")), "Cloud Run"
    if resource_config is None:
        resource_config = Path(env.get(RESOURCE_CONFIG_ENV) or SAGEMAKER_RESOURCE_CONFIG)
    if resource_config.exists():
        try:
            config = json.loads(resource_config.read_text())
            hosts = sorted(config["hosts"], key=lambda h: (len(h), h))
            index = hosts.index(config["current_host"])
        except (ValueError, KeyError, OSError):
            return 1, 0, "default"
        return (*_host_shard(index, len(hosts)), "SageMaker")
    return 1, 0, "default"


def _host_shard(index: int, hosts: int) -> tuple[int, int]:
    """``(num_shards, shard)`` of host ``index`` of ``hosts`` under the launcher's map, if any."""
    spec = os.environ.get(HOST_SHARDS_ENV)
    if not spec:
        return hosts, index
    try:
        shards = expand_ranges(spec)
        total = int(os.environ[HOST_NUM_SHARDS_ENV])
    except (KeyError, ValueError) as exc:
        raise PlatformError(f"{HOST_SHARDS_ENV}={spec!r} needs {HOST_NUM_SHARDS_ENV}, and both must be numbers: {exc}") from exc
    if len(shards) != hosts or not all(0 <= s < total for s in shards):
        raise PlatformError(
            f"{HOST_SHARDS_ENV}={spec!r} names {len(shards)} shard(s) of {total}, but the job has {hosts} host(s): "
            "relaunch with `llm-ocr launch sagemaker` rather than editing the job's environment"
        )
    return total, shards[index]


def expand_ranges(text: str) -> list[int]:
    """``"3,7,12-14"`` -> ``[3, 7, 12, 13, 14]`` (``ValueError`` on anything else)."""
    numbers: list[int] = []
    for part in text.split(","):
        first, sep, last = part.strip().partition("-")
        low, high = int(first), int(last) if sep else int(first)
        if high < low:
            raise ValueError(f"range {part!r} runs backwards")
        numbers.extend(range(low, high + 1))
    return numbers


def compact_ranges(numbers: list[int]) -> str:
    """``[3, 7, 12, 13, 14]`` -> ``"3,7,12-14"`` (the inverse of :func:`expand_ranges`)."""
    spans: list[list[int]] = []
    for n in numbers:
        if spans and n == spans[-1][1] + 1:
            spans[-1][1] = n
        else:
            spans.append([n, n])
    return ",".join(f"{a}-{b}" if b > a else str(a) for a, b in spans)
