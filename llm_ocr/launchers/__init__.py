"""Launchers: run the plain ``llm-ocr`` CLI as N shard jobs on a cloud platform and follow them.

One room per concern (``tests/test_layers.py`` checks what imports what):

- ``core/``: everything a launch does whatever the platform: the Python API (``llm_ocr.launch``,
  ``Launch``), the contract a platform implements (:class:`~llm_ocr.launchers.core.adapter.Platform`),
  the launch's options and job specs, planning, submitting, following, the launch record, the
  status table, timeouts, images, the shipped wheel, the dry run's estimate (:mod:`.core`);
- one room per platform: ``hf_jobs/``, ``sagemaker/``, ``cloud_run/``, ``slurm/``, ``k8s/``,
  ``ray/``, ``aws_batch/``, each its adapter (``adapter.py``) and what only that platform needs: its request body,
  batch script, manifest or driver, and how it reads its jobs' states. An adapter turns shard specs
  into its API's request bodies, submits them, and reports job states, logs and cancellation; it
  decides how shards map to jobs (one job per shard on Hugging Face Jobs, one job for all shards
  where the platform has job arrays); everything else is the core's.

Platform rooms import the core, never each other; the core reaches a platform only by its name,
through :data:`PLATFORMS` below. Platform SDKs (``huggingface_hub``, ``boto3``,
``google-cloud-run``, ``kubernetes``, ``ray``) are imported inside the adapters only, when used.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from llm_ocr.launchers.core.adapter import Platform

#: Platform name (as typed after ``llm-ocr launch``) -> "module:class" of its adapter.
PLATFORMS: dict[str, str] = {
    "hf-jobs": "llm_ocr.launchers.hf_jobs.adapter:HfJobs",
    "sagemaker": "llm_ocr.launchers.sagemaker.adapter:SageMaker",
    "cloud-run": "llm_ocr.launchers.cloud_run.adapter:CloudRun",
    "slurm": "llm_ocr.launchers.slurm.adapter:Slurm",
    "k8s": "llm_ocr.launchers.k8s.adapter:Kubernetes",
    "ray": "llm_ocr.launchers.ray.adapter:Ray",
    "aws-batch": "llm_ocr.launchers.aws_batch.adapter:AwsBatch",
}


def platform_class(name: str) -> type[Platform]:
    """The adapter class of platform ``name``; ``ValueError`` naming the known ones otherwise."""
    try:
        target = PLATFORMS[name]
    except KeyError:
        raise ValueError(f"unknown platform {name!r}; choose one of {', '.join(sorted(PLATFORMS))}") from None
    module, _, cls = target.partition(":")
    return getattr(importlib.import_module(module), cls)
