"""Which shard this process is, as the platform it runs on tells it."""

from __future__ import annotations

import json
import os
from pathlib import Path

SAGEMAKER_RESOURCE_CONFIG = Path("/opt/ml/config/resourceconfig.json")


def detect_shard(resource_config: Path = SAGEMAKER_RESOURCE_CONFIG) -> tuple[int, int, str]:
    """``(num_shards, shard_index, where_from)`` from the environment, else ``(1, 0, "default")``.

    Cloud Run Jobs set ``CLOUD_RUN_TASK_COUNT``/``CLOUD_RUN_TASK_INDEX``; SageMaker Processing
    has no variable but lists the hosts in ``resourceconfig.json`` (``algo-1``...); Hugging Face
    Jobs have no job arrays, so the launcher passes ``LLM_OCR_NUM_SHARDS``/``LLM_OCR_SHARD_INDEX``
    (read by the option resolver before this is consulted).
    """
    env = os.environ
    if "CLOUD_RUN_TASK_COUNT" in env:
        return int(env["CLOUD_RUN_TASK_COUNT"]), int(env.get("CLOUD_RUN_TASK_INDEX", "0")), "Cloud Run"
    if resource_config.exists():
        try:
            config = json.loads(resource_config.read_text())
            hosts = sorted(config["hosts"], key=lambda h: (len(h), h))
            return len(hosts), hosts.index(config["current_host"]), "SageMaker"
        except (ValueError, KeyError, OSError):
            pass
    return 1, 0, "default"
