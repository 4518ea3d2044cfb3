"""The ``CreateProcessingJob`` request of a SageMaker launch, and SageMaker's limits on it.

Pure functions: shard specs in, request bodies out. The limits are read from the installed
botocore's SageMaker service model (the same model boto3 sends the request with), not typed
here: the GPU instance types Processing accepts (``ProcessingInstanceType``), the most instances
one job may have (``ProcessingInstanceCount``: 100), and every length, count, range and pattern
of the request's fields (``Environment``: at most 100 entries of at most 256 characters;
``ContainerArguments``: at most 100 of at most 256; ``MaxRuntimeInSeconds``: 1..777600). botocore
itself only checks minimums before sending; :func:`request_problems` checks the rest, so a
request SageMaker would refuse is refused here, before anything is uploaded or submitted.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from typing import Any

from llm_ocr.container.shard_index import TASK_SHARDS_ENV, format_ranges, task_shards_value
from llm_ocr.launchers.core.spec import LAUNCH_LABEL, SHARD_LABEL, ShardSpec, Target

OPERATION = "CreateProcessingJob"
#: Where a Processing job's inputs are downloaded; the job's ML storage volume.
PROCESSING_ROOT = "/opt/ml/processing"
#: Where the llm-ocr wheel lands in the container (a ``ProcessingInput`` from S3).
CODE_LOCAL_PATH = f"{PROCESSING_ROOT}/input/code"
CODE_INPUT_NAME = "llm-ocr-code"
#: The model's weights (~7 GB) go to the job's storage volume, not the container's root disk.
HF_HOME = f"{PROCESSING_ROOT}/hf-home"
STAGE_TAG = "llm-ocr-stage"


@functools.lru_cache(maxsize=1)
def service_model() -> Any:
    """botocore's SageMaker service model (the installed botocore's)."""
    import botocore.session

    return botocore.session.get_session().get_service_model("sagemaker")


def processing_instance_types() -> frozenset[str]:
    """Every instance type SageMaker Processing accepts (``ProcessingInstanceType``)."""
    return frozenset(service_model().shape_for("ProcessingInstanceType").enum)


def training_instance_types() -> frozenset[str]:
    """Every instance type SageMaker Training accepts (to say "training only" when refusing)."""
    return frozenset(service_model().shape_for("TrainingInstanceType").enum)


def max_instances_per_job() -> int:
    """The most instances one Processing job may have (``ProcessingInstanceCount`` max)."""
    return int(service_model().shape_for("ProcessingInstanceCount").metadata.get("max", 100))


def max_runtime_s() -> int:
    """The longest ``MaxRuntimeInSeconds`` SageMaker accepts."""
    return int(service_model().shape_for("ProcessingMaxRuntimeInSeconds").metadata.get("max", 777600))


def env_value_limit() -> int:
    """The longest value an ``Environment`` entry may hold."""
    return int(service_model().shape_for("ProcessingEnvironmentValue").metadata.get("max", 256))


# --------------------------------------------------------------------------------------------
# Grouping shards into jobs


def group_shards(shards: Sequence[int], num_shards: int, cap: int, value_limit: int | None = None) -> list[list[int]]:
    """``shards`` (sorted) of ``num_shards`` in runs of at most ``cap`` per job, each run's
    task-to-shard map (``"200:0-99"``, ``"200:3,7,12-40"``) short enough for one ``Environment`` value."""
    limit = value_limit or env_value_limit()
    groups: list[list[int]] = []
    for shard in sorted(shards):
        if groups and len(groups[-1]) < cap and len(task_shards_value(num_shards, [*groups[-1], shard])) <= limit:
            groups[-1].append(shard)
        else:
            groups.append([shard])
    return groups


def job_name(stage: str, launch_id: str, part: int, parts: int) -> str:
    """``llm-ocr-run-20261123-192825-9f3c`` (``-p2`` and so on when a launch needs several jobs)."""
    base = f"llm-ocr-{stage}-{launch_id}"
    return base if parts == 1 else f"{base}-p{part + 1:0{len(str(parts))}d}"


def job_environment(spec: ShardSpec, shards: Sequence[int], region: str, secret_ids: dict[str, str]) -> dict[str, str]:
    """The ``Environment`` of the job running ``shards``: the spec's plain variables, the region,
    where the model's weights go, the host -> shard map, and the names (never the values) of
    the secrets the job fetches at start (:mod:`llm_ocr.container.aws_secrets`)."""
    from llm_ocr.container.aws_secrets import PREFIX

    env = {
        "AWS_DEFAULT_REGION": region,
        "HF_HOME": HF_HOME,
        **spec.env,
        TASK_SHARDS_ENV: task_shards_value(spec.num_shards, shards),
    }
    env.update({f"{PREFIX}{name}": secret_id for name, secret_id in sorted(secret_ids.items())})
    return env


# --------------------------------------------------------------------------------------------
# The request


def processing_job_body(
    name: str,
    specs: Sequence[ShardSpec],
    target: Target,
    env: dict[str, str],
    *,
    stage: str,
    role: str,
    volume_gb: int,
    code_uri: str | None,
) -> dict[str, Any]:
    """The exact ``CreateProcessingJob`` body of one job running ``specs`` (one per host).

    The container command is split where Docker splits it: ``ContainerEntrypoint`` is everything
    up to and including ``llm-ocr`` (the wheel install, if any), ``ContainerArguments`` the plain
    ``llm-ocr`` arguments. The output is not a ``ProcessingOutput``: llm-ocr writes it straight
    to its URL, so a rerun sees the parts written before.
    """
    first = specs[0]
    entry = len(target.run_prefix) + 1
    shards = [spec.shard_index for spec in specs]
    body: dict[str, Any] = {
        "ProcessingJobName": name,
        "RoleArn": role,
        "AppSpecification": {
            "ImageUri": first.image,
            "ContainerEntrypoint": first.command[:entry],
            "ContainerArguments": first.command[entry:],
        },
        "ProcessingResources": {
            "ClusterConfig": {"InstanceCount": len(specs), "InstanceType": first.hardware, "VolumeSizeInGB": volume_gb},
        },
        "StoppingCondition": {"MaxRuntimeInSeconds": first.timeout_s},
        "Environment": env,
    }
    if code_uri:
        body["ProcessingInputs"] = [{
            "InputName": CODE_INPUT_NAME,
            "AppManaged": False,
            "S3Input": {
                "S3Uri": code_uri,
                "LocalPath": CODE_LOCAL_PATH,
                "S3DataType": "S3Prefix",
                "S3InputMode": "File",
                "S3DataDistributionType": "FullyReplicated",
            },
        }]
    body["Tags"] = [
        {"Key": LAUNCH_LABEL, "Value": first.labels[LAUNCH_LABEL]},
        {"Key": SHARD_LABEL, "Value": _shards_tag(shards, first.num_shards)},
        {"Key": STAGE_TAG, "Value": stage},
    ]
    return body


def _shards_tag(shards: Sequence[int], num_shards: int) -> str:
    """``"3 7 12-40 of 200"``: tag values allow spaces but no commas; at most 256 characters."""
    suffix = f" of {num_shards}"
    text = format_ranges(shards, " ")
    return (text if len(text) + len(suffix) <= 256 else text[: 253 - len(suffix)] + "...") + suffix


def request_problems(body: dict[str, Any], operation: str = OPERATION) -> list[str]:
    """Where ``body`` breaks the limits of ``operation``'s input shape (empty when it fits)."""
    problems: list[str] = []
    _check(service_model().operation_model(operation).input_shape, body, "", problems)
    return problems


def _check(shape: Any, value: Any, path: str, problems: list[str]) -> None:
    meta = shape.metadata
    where = path or "the request"
    kind = shape.type_name
    if kind == "structure":
        for name in shape.required_members:
            if name not in value:
                problems.append(f"{where} lacks {name}")
        for name, member in shape.members.items():
            if name in value:
                _check(member, value[name], f"{path}.{name}" if path else name, problems)
        return
    if kind in ("list", "map"):
        if "max" in meta and len(value) > meta["max"]:
            problems.append(f"{where} has {len(value)} entries; SageMaker allows at most {meta['max']}")
        if kind == "list":
            for i, item in enumerate(value):
                _check(shape.member, item, f"{path}[{i}]", problems)
        else:
            for key, item in value.items():
                _check(shape.key, key, f"{path} key {key!r}", problems)
                _check(shape.value, item, f"{path}[{key!r}]", problems)
        return
    if kind == "string":
        if "max" in meta and len(value) > meta["max"]:
            problems.append(f"{where} is {len(value)} characters long; SageMaker allows at most {meta['max']}")
        if getattr(shape, "enum", None) and value not in shape.enum:
            problems.append(f"{where} {value!r} is not one of SageMaker's values")
        pattern = _pattern(meta.get("pattern"))
        if pattern is not None and not pattern.fullmatch(value):
            problems.append(f"{where} {value!r} does not match SageMaker's pattern {meta['pattern']}")
    elif kind in ("integer", "long"):
        if ("min" in meta and value < meta["min"]) or ("max" in meta and value > meta["max"]):
            problems.append(f"{where} is {value}; SageMaker allows {meta.get('min')}..{meta.get('max')}")


@functools.lru_cache(maxsize=256)
def _pattern(text: str | None) -> re.Pattern[str] | None:
    """A model pattern Python's ``re`` can run (the Java ``\\p{..}`` classes cannot: skipped)."""
    if not text:
        return None
    try:
        return re.compile(text)
    except re.error:
        return None
