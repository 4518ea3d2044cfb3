"""The Cloud Run Job a launch keeps and the execution it runs: request bodies and their checks.

Pure functions, no API call: :func:`job_body` is the ``Job`` that ``JobsClient.create_job`` /
``update_job`` send (camelCase JSON, as google-cloud-run 0.16's REST transport serialises it),
:func:`run_body` the body of ``POST .../jobs/J:run`` (``RunJobRequest.Overrides``), and
:func:`template_changed` whether the job on Cloud Run must be updated before it runs.

What goes where (docs/facts.md#google-cloud-run-jobs; google-cloud-run 0.16 ``types/job.py``,
``task_template.py``, ``k8s_min.py``, ``vendor_settings.py``):

- the job's template holds everything but the launch: image, command and args, resources
  (``limits["nvidia.com/gpu"] = "1"``, CPU, memory), ``node_selector.accelerator = "nvidia-l4"``,
  ``gpu_zonal_redundancy_disabled``, the plain env, the secrets as Secret Manager references
  (``EnvVar.value_source.secret_key_ref``, never a value), the code volume (a Cloud Storage
  bucket mounted read-only), ``max_retries``, ``timeout``, ``parallelism`` and ``task_count``.
  A digest of it rides in an annotation, so a launch that changes nothing does not update the job;
- the execution's overrides carry what differs per launch: ``task_count``, ``timeout``, the
  container's ``args`` and the env naming the launch and the shard of each task
  (:data:`llm_ocr.container.shard_index.TASK_SHARDS_ENV`; tasks are numbered 0..k-1 whatever shards they run).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any

from llm_ocr.container.shard_index import TASK_SHARDS_ENV, task_shards_value
from llm_ocr.launchers.core.spec import LaunchError, ShardSpec

#: The one container of a task (ContainerOverride names it).
CONTAINER = "llm-ocr"
CODE_VOLUME = "llm-ocr-code"
#: Annotation holding the digest of the template the launcher last wrote.
TEMPLATE_ANNOTATION = "llm-ocr/template-sha256"
#: Env set per execution, never in the template (it would change the template every launch).
LAUNCH_ENV = ("LLM_OCR_LAUNCH_ID",)

#: GPU types Cloud Run offers jobs (``node_selector.accelerator``), with the GPU preset.
GPU_TYPES: dict[str, str] = {"nvidia-l4": "l4-24gb"}
#: vCPU -> (min, max) GiB of memory a task may have (Cloud Run docs, "Configure CPU limits for jobs").
MEMORY_GIB_BY_CPU: dict[int, tuple[float, float]] = {1: (0.5, 4), 2: (0.5, 8), 4: (2, 16), 6: (4, 24), 8: (4, 32)}
MAX_CPU, MAX_MEMORY_GIB = 8, 32
#: An L4 task needs at least this much (docs/facts.md#google-cloud-run-jobs).
GPU_MIN_CPU, GPU_MIN_MEMORY_GIB = 4, 16
#: Tasks per execution at most (docs/facts.md#google-cloud-run-jobs).
MAX_TASKS = 10_000
#: A task's retries at most (``maxRetries``: 0..10, Cloud Run docs, "Configure max retries for jobs").
MAX_RETRIES = 10

_JOB_ID = re.compile(r"^[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?$")
#: A service account's email: NAME@PROJECT.iam.gserviceaccount.com (NAME 6-30 characters in the
#: IAM docs; Cloud Run takes the email), or a Google-managed account such as the default compute one.
_SERVICE_ACCOUNT = re.compile(r"^[a-z][a-z0-9-]{4,61}[a-z0-9]@[a-z0-9-]+(\.iam)?\.gserviceaccount\.com$"
                              r"|^\d+-compute@developer\.gserviceaccount\.com$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_MEMORY = re.compile(r"^(\d+(?:\.\d+)?)(Gi|Mi|G|M)$")


@dataclass(frozen=True)
class TaskResources:
    """What one task gets: a GPU type (None: CPU only), vCPUs and memory."""

    gpu: str | None
    cpu: int
    memory_gib: float

    @property
    def limits(self) -> dict[str, str]:
        """``Container.resources.limits``."""
        limits = {"cpu": str(self.cpu), "memory": f"{self.memory_gib:g}Gi"}
        if self.gpu:
            limits["nvidia.com/gpu"] = "1"
        return limits


def task_resources(gpu: str | None, cpu: int | None, memory: str | None, *, needs_model: bool,
                   stage: str) -> TaskResources:
    """The checked resources of a task; :class:`LaunchError` naming what Cloud Run accepts."""
    gpu = gpu if gpu is not None else ("nvidia-l4" if needs_model else "none")
    if gpu.lower() in ("", "none", "cpu"):
        if needs_model:
            raise LaunchError(
                f"llm-ocr {stage} serves a model in each task, which needs a GPU: drop --gpu none (default nvidia-l4) "
                "or pass --endpoint URL of a server the tasks can reach"
            )
        gpu_type = None
    elif gpu in GPU_TYPES:
        gpu_type = gpu
    else:
        raise LaunchError(f"--gpu {gpu!r} is not a GPU Cloud Run Jobs offer: choose {', '.join(GPU_TYPES)} (or none "
                          "for a CPU task)")
    cpu = cpu if cpu is not None else (8 if gpu_type else 2)
    memory_gib = parse_memory(memory) if memory is not None else (32.0 if gpu_type else 8.0)
    if cpu > MAX_CPU or memory_gib > MAX_MEMORY_GIB:
        raise LaunchError(f"--cpu {cpu} --memory {memory_gib:g}Gi: a Cloud Run task has at most {MAX_CPU} vCPU and "
                          f"{MAX_MEMORY_GIB} GiB")
    if cpu not in MEMORY_GIB_BY_CPU:
        raise LaunchError(f"--cpu {cpu}: Cloud Run tasks take {', '.join(map(str, MEMORY_GIB_BY_CPU))} vCPU")
    low, high = MEMORY_GIB_BY_CPU[cpu]
    if not low <= memory_gib <= high:
        raise LaunchError(f"--memory {memory_gib:g}Gi with --cpu {cpu}: Cloud Run needs {low:g} to {high:g} GiB for "
                          f"{cpu} vCPU")
    if gpu_type and (cpu < GPU_MIN_CPU or memory_gib < GPU_MIN_MEMORY_GIB):
        raise LaunchError(
            f"--gpu {gpu_type} needs at least {GPU_MIN_CPU} vCPU and {GPU_MIN_MEMORY_GIB} GiB (got {cpu} vCPU, "
            f"{memory_gib:g} GiB); the default 8 vCPU / 32 GiB leaves room for the model download, which Cloud Run "
            "keeps in memory"
        )
    return TaskResources(gpu_type, cpu, memory_gib)


def parse_memory(text: str) -> float:
    """``"32Gi"`` -> 32.0 GiB (also ``Mi``, and decimal ``G``/``M``); :class:`LaunchError` otherwise."""
    match = _MEMORY.match(str(text).strip())
    if not match:
        raise LaunchError(f"--memory {text!r}: write it like 16Gi or 512Mi")
    value, unit = float(match.group(1)), match.group(2)
    factor = {"Gi": 1.0, "Mi": 1 / 1024, "G": 1e9 / 2**30, "M": 1e6 / 2**30}[unit]
    return round(value * factor, 4)


def check_job_id(job_id: str) -> str:
    """A valid Cloud Run job name, or :class:`LaunchError`."""
    if not _JOB_ID.match(job_id):
        raise LaunchError(
            f"--job-name {job_id!r}: a Cloud Run job name has lowercase letters, digits and dashes, starts with a "
            "letter, does not end with a dash, and has at most 63 characters"
        )
    return job_id


def check_service_account(email: str) -> str:
    """A service account email Cloud Run accepts as a task's identity, or :class:`LaunchError`."""
    if not _SERVICE_ACCOUNT.match(email):
        raise LaunchError(
            f"--service-account {email!r} is not a service account email: write NAME@PROJECT.iam.gserviceaccount.com "
            "(or PROJECT_NUMBER-compute@developer.gserviceaccount.com, the default compute one)"
        )
    return email


def parse_secret_refs(items: list[str]) -> dict[str, str]:
    """``["HF_TOKEN=hf-token", "KEY=projects/p/secrets/k:3"]`` -> name -> ``SECRET:VERSION``
    (version ``latest`` unless given)."""
    refs: dict[str, str] = {}
    for item in items:
        name, sep, ref = item.partition("=")
        if not sep or not _ENV_NAME.match(name) or not ref:
            raise LaunchError(f"--secret-ref {item!r}: write NAME=SECRET[:VERSION], e.g. HF_TOKEN=hf-token or "
                              "HF_TOKEN=hf-token:2")
        secret, version = _split_version(ref)
        refs[name] = f"{secret}:{version}"
    return refs


def _split_version(ref: str) -> tuple[str, str]:
    secret, sep, version = ref.rpartition(":")
    if sep and version and "/" not in version:
        return secret, version
    return ref, "latest"


@dataclass(frozen=True)
class CodeVolume:
    """The Cloud Storage folder holding the shipped wheel, mounted read-only in every task."""

    bucket: str
    folder: str
    mount_path: str


def job_body(spec: ShardSpec, *, command_words: int, resources: TaskResources, task_count: int, parallelism: int | None,
             service_account: str | None, code: CodeVolume | None) -> dict[str, Any]:
    """The ``Job`` JSON for ``spec`` (every shard's spec is the same but for its index), with
    the digest of its template in :data:`TEMPLATE_ANNOTATION`. ``command_words``: how many
    words of ``spec.command`` are the container's command (the code install, or ``llm-ocr``);
    the rest are its args."""
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": spec.image,
        "command": spec.command[:command_words],
        "args": spec.command[command_words:],
        "env": [{"name": k, "value": v} for k, v in spec.env.items() if k not in LAUNCH_ENV]
        + [_secret_env(name, ref) for name, ref in sorted(spec.secret_refs.items())],
        "resources": {"limits": resources.limits},
    }
    task: dict[str, Any] = {"containers": [container]}
    if code is not None:
        container["volumeMounts"] = [{"name": CODE_VOLUME, "mountPath": code.mount_path}]
        gcs: dict[str, Any] = {"bucket": code.bucket, "readOnly": True}
        if code.folder:
            gcs["mountOptions"] = [f"only-dir={code.folder}"]  # a gcsfuse flag: mount that folder only
        task["volumes"] = [{"name": CODE_VOLUME, "gcs": gcs}]
    task["maxRetries"] = max(spec.attempts - 1, 0)
    task["timeout"] = f"{spec.timeout_s}s"
    if service_account:
        task["serviceAccount"] = service_account
    if resources.gpu:
        task["nodeSelector"] = {"accelerator": resources.gpu}
        task["gpuZonalRedundancyDisabled"] = True  # cheaper, best-effort: a lost task is retried anyway
    template = {"parallelism": min(parallelism or task_count, task_count), "taskCount": task_count, "template": task}
    return {"annotations": {TEMPLATE_ANNOTATION: template_digest(template)}, "template": template}


def _secret_env(name: str, ref: str) -> dict[str, Any]:
    secret, version = _split_version(ref)
    return {"name": name, "valueSource": {"secretKeyRef": {"secret": secret, "version": version}}}


def run_body(spec: ShardSpec, *, command_words: int, shards: list[int]) -> dict[str, Any]:
    """The body of ``POST .../jobs/J:run``: the per-launch overrides."""
    env = {k: spec.env[k] for k in LAUNCH_ENV if k in spec.env}
    env[TASK_SHARDS_ENV] = task_shards_value(spec.num_shards, shards)
    return {"overrides": {
        "containerOverrides": [{"name": CONTAINER, "args": spec.command[command_words:],
                                "env": [{"name": k, "value": v} for k, v in env.items()]}],
        "taskCount": len(shards),
        "timeout": f"{spec.timeout_s}s",
    }}


def template_digest(template: dict[str, Any]) -> str:
    """SHA-256 of a template's canonical JSON."""
    return hashlib.sha256(json.dumps(template, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def template_changed(desired: dict[str, Any], current: dict[str, Any]) -> bool:
    """Whether the job on Cloud Run (``current``, its JSON) differs from ``desired``: another
    template digest (something was added, changed or removed since the launcher wrote it), or a
    field the launcher sets that differs (someone edited the job by hand since)."""
    wanted = desired["annotations"][TEMPLATE_ANNOTATION]
    if (current.get("annotations") or {}).get(TEMPLATE_ANNOTATION) != wanted:
        return True
    return not _contains(current.get("template") or {}, desired["template"])


def _contains(current: Any, desired: Any) -> bool:
    """``desired`` is ``current`` but for fields the server adds (output-only, defaults)."""
    if isinstance(desired, dict):
        return isinstance(current, dict) and all(k in current and _contains(current[k], v) for k, v in desired.items())
    if isinstance(desired, list):
        return isinstance(current, list) and len(current) == len(desired) and all(map(_contains, current, desired))
    return bool(current == desired or str(current) == str(desired))
