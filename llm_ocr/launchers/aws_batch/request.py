"""The requests of an AWS Batch launch (``RegisterJobDefinition``, ``SubmitJob``), and Batch's limits on them.

Pure functions: shard specs in, request bodies out. The shapes (every field's name, type, enum and
which are required) are read from the installed botocore's service model for ``batch`` (the model
boto3 sends the requests with) by :func:`request_problems`; that model states no value limits for
Batch, so the ones the API reference states are written out here, each with its source
(https://docs.aws.amazon.com/batch/latest/APIReference/): an array job has 2 to 10,000 children
(``ArrayProperties.size``), a retry strategy 1 to 10 attempts and at most 5 ``evaluateOnExit``
entries whose ``onStatusReason``/``onReason`` are at most 512 letters, digits, spaces, periods and
colons with an optional final ``*`` (``EvaluateOnExit``), a timeout at least 60 seconds
(``JobTimeout``), and job and job-definition names 1 to 128 letters, digits, hyphens and
underscores starting with a letter or digit (``SubmitJob``, ``RegisterJobDefinition``).

What the two bodies hold, and why:

- the job definition (registered once per image and settings: :func:`same_definition` finds an
  identical active revision to reuse) has the container command, the image, the job role, the
  resource requirements of one instance (:data:`HARDWARE`), the plain environment every shard shares,
  the secrets *by reference* (``secrets[].valueFrom``: a Secrets Manager or SSM Parameter Store
  ARN the ECS agent resolves with the execution role, never a value), the retry strategy
  (:func:`retry_strategy`) and the per-attempt timeout;
- the job submission is one array job of the shards to run (``arrayProperties.size``; a single
  shard is a plain job: Batch refuses arrays of one) with what differs per launch in
  ``containerOverrides.environment``: the launch id and the task -> shard map
  (``LLM_OCR_TASK_SHARDS``: child ``AWS_BATCH_JOB_ARRAY_INDEX`` i runs the i-th shard listed).
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from llm_ocr.container.shard_index import NUM_SHARDS_ENV, TASK_SHARDS_ENV, format_ranges, task_shards_value
from llm_ocr.costs import AWS_BATCH_HARDWARE, Hardware
from llm_ocr.launchers.core.spec import LAUNCH_LABEL, SHARD_LABEL, ShardSpec

#: ``ArrayProperties.size``: "between 2 and 10,000" (API reference, ``ArrayProperties``).
MIN_ARRAY, MAX_ARRAY = 2, 10_000
#: ``RetryStrategy.attempts``: 1 to 10; ``evaluateOnExit``: at most 5 entries (``RetryStrategy``).
MAX_ATTEMPTS, MAX_EVALUATE = 10, 5
#: ``JobTimeout.attemptDurationSeconds``: "The minimum value for the timeout is 60 seconds."
MIN_TIMEOUT_S = 60
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$")
#: ``onStatusReason``/``onReason``: letters, numbers, periods, colons, white space, optional final ``*``.
_REASON = re.compile(r"^[A-Za-z0-9.:\s]{0,512}\*?$")
_EXIT_CODE = re.compile(r"^[0-9]{0,512}\*?$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: Batch reserves variable names starting with ``AWS_BATCH`` (API reference, ``ContainerProperties.environment``).
_RESERVED_ENV = "AWS_BATCH"

#: The retry strategy's conditions, in the order Batch evaluates them (the first that matches wins;
#: https://docs.aws.amazon.com/batch/latest/userguide/job_retries.html). A child whose EC2 host went
#: away (a Spot reclamation: status reason "Host EC2 (instance i-...) terminated."; the pattern is
#: aws-cdk-lib's ``batch.Reason.SPOT_INSTANCE_RECLAIMED``) or whose task failed to start (the user
#: guide's own example) runs again and resumes from its parts; anything else, the shard's own error
#: included, ends the child: a relaunch runs it again.
EVALUATE_ON_EXIT: tuple[dict[str, str], ...] = (
    {"onStatusReason": "Host EC2*", "action": "RETRY"},
    {"onStatusReason": "Task failed to start", "action": "RETRY"},
    {"onReason": "*", "action": "EXIT"},
)
STAGE_TAG = "llm-ocr-stage"


@dataclass(frozen=True)
class Instance:
    """An EC2 instance type a Batch compute environment runs shards on, and its resources."""

    name: str
    gpus: int
    vcpus: int
    memory_gib: int
    #: The vLLM preset of one of its GPUs (llm_ocr.gpu_presets), None when sized from the GPU found.
    gpu_preset: str | None
    accelerator: str

    def memory_mib(self) -> int:
        """The ``MEMORY`` a job asks for to fit on one such instance: 90% of it, in steps of 256 MiB.
        The ECS agent registers less memory than the instance has (the OS and the agent keep some:
        "Compute resource memory management" in the AWS Batch user guide); a job asking for all of it
        would never be placed."""
        return int(self.memory_gib * 1024 * 0.9) // 256 * 256

    def hardware(self, price_per_hour: float | None) -> Hardware:
        """As the launcher core's :class:`~llm_ocr.costs.Hardware`: at ``price_per_hour`` when
        given, else at the built-in on-demand price (:data:`~llm_ocr.costs.AWS_BATCH_HARDWARE`)."""
        built_in = AWS_BATCH_HARDWARE[self.name]
        if price_per_hour is None:
            return built_in
        return dataclasses.replace(built_in, price_per_hour=price_per_hour, listed=True,
                                   price_note="your price, given with --price-per-hour")


#: vCPUs and GiB of memory of each instance type llm-ocr sizes Batch jobs for (EC2 instance type
#: pages); its GPUs, GPU preset, accelerator and prices are :data:`llm_ocr.costs.AWS_BATCH_HARDWARE`'s.
_RESOURCES: dict[str, tuple[int, int]] = {
    "g6e.xlarge": (4, 32), "g6e.2xlarge": (8, 64), "g6.xlarge": (4, 16), "g6.2xlarge": (8, 32),
    "g5.xlarge": (4, 16), "g5.2xlarge": (8, 32), "p4d.24xlarge": (96, 1152), "p5.48xlarge": (192, 2048),
    "m5.large": (2, 8), "m5.xlarge": (4, 16),
}
#: The instance types llm-ocr sizes Batch jobs for: a shard asks for the whole instance, so the
#: compute environment places one shard per instance.
HARDWARE: dict[str, Instance] = {
    name: Instance(name, hw.gpus, vcpus, memory, hw.gpu_preset, hw.accelerator)
    for name, (vcpus, memory) in _RESOURCES.items() for hw in (AWS_BATCH_HARDWARE[name],)
}
DEFAULT_GPU_INSTANCE = "g6e.xlarge"
DEFAULT_CPU_INSTANCE = "m5.xlarge"


@functools.lru_cache(maxsize=1)
def service_model() -> Any:
    """botocore's AWS Batch service model (the installed botocore's)."""
    import botocore.session

    return botocore.session.get_session().get_service_model("batch")


def definition_name(stage: str) -> str:
    """``llm-ocr-run``: one job definition name per stage, a revision per image and settings."""
    return f"llm-ocr-{stage}"


def job_name(stage: str, launch_id: str) -> str:
    """``llm-ocr-run-20261123-192825-9f3c``."""
    return f"llm-ocr-{stage}-{launch_id}"


def resource_requirements(instance: Instance) -> list[dict[str, str]]:
    """``GPU`` (when it has one), ``VCPU`` and ``MEMORY`` (MiB) of one shard: one whole instance."""
    found = [{"type": "GPU", "value": str(instance.gpus)}] if instance.gpus else []
    return [*found, {"type": "VCPU", "value": str(instance.vcpus)},
            {"type": "MEMORY", "value": str(instance.memory_mib())}]


def retry_strategy(attempts: int) -> dict[str, Any]:
    """``attempts`` tries of a child, retried only on a lost host (:data:`EVALUATE_ON_EXIT`)."""
    return {"attempts": attempts, "evaluateOnExit": [dict(entry) for entry in EVALUATE_ON_EXIT]}


#: Variables that differ per launch or per shard: sent with the submission, not in the definition.
PER_LAUNCH_ENV = ("LLM_OCR_LAUNCH_ID", TASK_SHARDS_ENV, NUM_SHARDS_ENV, "LLM_OCR_SHARD_INDEX")


def definition_body(
    spec: ShardSpec,
    instance: Instance,
    *,
    stage: str,
    job_role: str | None,
    execution_role: str | None,
    secret_refs: dict[str, str],
    region: str,
) -> dict[str, Any]:
    """The exact ``RegisterJobDefinition`` body shared by every shard of ``spec``'s launch."""
    env = {"AWS_DEFAULT_REGION": region, **{k: v for k, v in spec.env.items() if k not in PER_LAUNCH_ENV}}
    container: dict[str, Any] = {
        "image": spec.image,
        "command": list(spec.command),
        "resourceRequirements": resource_requirements(instance),
        "environment": [{"name": k, "value": v} for k, v in sorted(env.items())],
    }
    if job_role:
        container["jobRoleArn"] = job_role
    if execution_role:
        container["executionRoleArn"] = execution_role
    if secret_refs:
        container["secrets"] = [{"name": k, "valueFrom": v} for k, v in sorted(secret_refs.items())]
    return {
        "jobDefinitionName": definition_name(stage),
        "type": "container",
        "platformCapabilities": ["EC2"],
        "containerProperties": container,
        "retryStrategy": retry_strategy(spec.attempts),
        "timeout": {"attemptDurationSeconds": spec.timeout_s},
    }


def submit_body(spec: ShardSpec, shards: Sequence[int], *, stage: str, job_queue: str) -> dict[str, Any]:
    """The exact ``SubmitJob`` body of the launch running ``shards`` (``jobDefinition`` by name:
    :meth:`~llm_ocr.launchers.aws_batch.adapter.AwsBatch.submit` puts in the revision it registered or reused)."""
    launch_id = spec.labels[LAUNCH_LABEL]
    env = {"LLM_OCR_LAUNCH_ID": launch_id}
    if len(shards) == 1:  # a plain job: no array index, so the shard is told
        env.update({NUM_SHARDS_ENV: str(spec.num_shards), "LLM_OCR_SHARD_INDEX": str(shards[0])})
    else:
        env[TASK_SHARDS_ENV] = task_shards_value(spec.num_shards, shards)
    body: dict[str, Any] = {
        "jobName": job_name(stage, launch_id),
        "jobQueue": job_queue,
        "jobDefinition": definition_name(stage),
        "containerOverrides": {"environment": [{"name": k, "value": v} for k, v in env.items()]},
        "propagateTags": True,
        "tags": {LAUNCH_LABEL: launch_id, SHARD_LABEL: f"{format_ranges(shards, ' ')} of {spec.num_shards}"[:256],
                 STAGE_TAG: stage},
    }
    if len(shards) > 1:
        body["arrayProperties"] = {"size": len(shards)}
    return body


def same_definition(wanted: dict[str, Any], found: dict[str, Any]) -> bool:
    """Whether an active revision ``found`` (``DescribeJobDefinitions``) is ``wanted``: every field
    ``wanted`` sets has the same value there (Batch adds defaults of its own: ``volumes: []``...)."""
    return _subset(wanted, found)


def _subset(wanted: Any, found: Any) -> bool:
    if isinstance(wanted, dict):
        return isinstance(found, dict) and all(k in found and _subset(v, found[k]) for k, v in wanted.items()
                                               if k != "jobDefinitionName")
    if isinstance(wanted, list):
        if not isinstance(found, list) or len(wanted) != len(found):
            return False
        key = _sort_key
        return all(_subset(a, b) for a, b in zip(sorted(wanted, key=key), sorted(found, key=key), strict=True))
    return bool(wanted == found)


def _sort_key(item: Any) -> str:
    """Lists of name/value objects come back in Batch's order, not ours; everything else keeps its order."""
    if isinstance(item, dict) and ("name" in item or "type" in item):
        return str(item.get("name", item.get("type", "")))
    return ""


# --------------------------------------------------------------------------------------------
# Checks: the service model's shapes, then Batch's documented values


def request_problems(body: dict[str, Any], operation: str) -> list[str]:
    """Where ``body`` breaks ``operation``'s input shape or Batch's documented limits (empty when it fits)."""
    problems: list[str] = []
    _check(service_model().operation_model(operation).input_shape, body, "", problems)
    if operation == "SubmitJob":
        _check_name(body.get("jobName", ""), "jobName", problems)
        size = body.get("arrayProperties", {}).get("size")
        if size is not None and not MIN_ARRAY <= size <= MAX_ARRAY:
            problems.append(f"arrayProperties.size is {size}; an array job has {MIN_ARRAY} to {MAX_ARRAY} children")
    if operation == "RegisterJobDefinition":
        _check_name(body.get("jobDefinitionName", ""), "jobDefinitionName", problems)
        container = body.get("containerProperties", {})
        for item in container.get("environment", []):
            if not _ENV_NAME.match(item.get("name", "")) or item["name"].startswith(_RESERVED_ENV):
                problems.append(f"environment variable {item.get('name')!r}: a variable name not starting with "
                                f"{_RESERVED_ENV}")
        for item in container.get("resourceRequirements", []):
            if not str(item.get("value", "")).isdigit() or int(item["value"]) < 1:
                problems.append(f"resourceRequirements {item.get('type')} is {item.get('value')!r}; a whole "
                                "number >= 1")
    retry = body.get("retryStrategy")
    if retry is not None:
        if not 1 <= retry.get("attempts", 1) <= MAX_ATTEMPTS:
            problems.append(f"retryStrategy.attempts is {retry.get('attempts')}; Batch allows 1 to {MAX_ATTEMPTS}")
        entries = retry.get("evaluateOnExit", [])
        if len(entries) > MAX_EVALUATE:
            problems.append(f"retryStrategy.evaluateOnExit has {len(entries)} entries; Batch allows {MAX_EVALUATE}")
        for entry in entries:
            for key, pattern in (("onStatusReason", _REASON), ("onReason", _REASON), ("onExitCode", _EXIT_CODE)):
                if key in entry and not pattern.match(entry[key]):
                    problems.append(f"retryStrategy.evaluateOnExit {key} {entry[key]!r} is not a Batch glob")
    timeout = body.get("timeout", {}).get("attemptDurationSeconds")
    if timeout is not None and timeout < MIN_TIMEOUT_S:
        problems.append(f"timeout.attemptDurationSeconds is {timeout}; Batch's minimum is {MIN_TIMEOUT_S}")
    return problems


def _check_name(name: str, field: str, problems: list[str]) -> None:
    if not _NAME.match(name):
        problems.append(f"{field} {name!r}: 1 to 128 letters, digits, hyphens and underscores, starting with a "
                        "letter or digit")


def _check(shape: Any, value: Any, path: str, problems: list[str]) -> None:
    """``value`` against a botocore shape: required members, unknown members, types and enums."""
    where = path or "the request"
    kind = shape.type_name
    if kind == "structure":
        if not isinstance(value, dict):
            problems.append(f"{where} must be an object")
            return
        problems += [f"{where} lacks {name}" for name in shape.required_members if name not in value]
        problems += [f"{where} has no field {name!r} in Batch's model" for name in value if name not in shape.members]
        for name, member in shape.members.items():
            if name in value:
                _check(member, value[name], f"{path}.{name}" if path else name, problems)
    elif kind == "list":
        if not isinstance(value, list):
            problems.append(f"{where} must be a list")
            return
        for i, item in enumerate(value):
            _check(shape.member, item, f"{path}[{i}]", problems)
    elif kind == "map":
        if not isinstance(value, dict):
            problems.append(f"{where} must be an object")
            return
        for key, item in value.items():
            _check(shape.value, item, f"{path}[{key!r}]", problems)
    elif kind == "string":
        if not isinstance(value, str):
            problems.append(f"{where} must be a string")
        elif getattr(shape, "enum", None) and value not in shape.enum:
            problems.append(f"{where} {value!r} is not one of {', '.join(shape.enum)}")
    elif kind in ("integer", "long"):
        if not isinstance(value, int) or isinstance(value, bool):
            problems.append(f"{where} must be a whole number")
    elif kind == "boolean" and not isinstance(value, bool):
        problems.append(f"{where} must be true or false")
