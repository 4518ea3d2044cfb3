"""Launchers: run the plain ``llm-ocr`` CLI as N shard jobs on a cloud platform and follow them.

What belongs here:

- the platform-neutral core: turning ``INPUT... --output OUT`` plus stage options into one
  :class:`~llm_ocr.launchers.spec.ShardSpec` per shard (:mod:`.plan`), the code shipped with
  the jobs (:mod:`.wheel`, :mod:`.command`), timeouts sized from page counts (:mod:`.sizing`),
  the launch record kept beside the output (:mod:`.record`), the status table with its totals
  and costs (:mod:`.table`), and submit / wait / logs / cancel / relaunch (:mod:`.core`);
- one thin adapter per platform implementing :class:`~llm_ocr.launchers.adapter.Platform`
  (``hf_jobs.py`` today; ``sagemaker.py`` and ``cloud_run.py`` next). An adapter turns shard
  specs into its API's request bodies, submits them, and reports job states, logs and
  cancellation. It decides how shards map to jobs (one job per shard on Hugging Face Jobs, one
  job for all shards where the platform has job arrays); everything else is the core's.

What it may import: :mod:`llm_ocr.storage`, :mod:`llm_ocr.storage.state`, :mod:`llm_ocr.config`,
:mod:`llm_ocr.costs`, :mod:`llm_ocr.storage.stores`, :mod:`llm_ocr.storage.access` and :mod:`llm_ocr.sources`
(to check inputs before anything is submitted), and the container side's contracts the jobs are
configured for: :mod:`llm_ocr.container.shard_index` (how a task finds its shard) and
:mod:`llm_ocr.container.aws_secrets`
(secrets fetched by name). Never the runners, the pipeline or the model servers' internals: a
launcher only builds and submits job specs that run the same CLI inside a container, and reads
what those runs leave in ``OUT/_state``. Platform SDKs
(``huggingface_hub``, ``boto3``, ``google-cloud-run``, ``kubernetes``) are imported inside the adapters only.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from llm_ocr.launchers.adapter import Platform

#: Platform name (as typed after ``llm-ocr launch``) -> "module:class" of its adapter.
PLATFORMS: dict[str, str] = {
    "hf-jobs": "llm_ocr.launchers.hf_jobs:HfJobs",
    "sagemaker": "llm_ocr.launchers.sagemaker:SageMaker",
    "cloud-run": "llm_ocr.launchers.cloud_run:CloudRun",
    "slurm": "llm_ocr.launchers.slurm:Slurm",
    "k8s": "llm_ocr.launchers.k8s:Kubernetes",
    "ray": "llm_ocr.launchers.ray_cluster:Ray",
}


def platform_class(name: str) -> type[Platform]:
    """The adapter class of platform ``name``; ``ValueError`` naming the known ones otherwise."""
    try:
        target = PLATFORMS[name]
    except KeyError:
        raise ValueError(f"unknown platform {name!r}; choose one of {', '.join(sorted(PLATFORMS))}") from None
    module, _, cls = target.partition(":")
    return getattr(importlib.import_module(module), cls)
