"""The SageMaker launcher's pieces: which shard a host is, grouping shards into jobs, SageMaker's
limits on the request, job states, and secrets fetched by name (against moto's Secrets Manager)."""

from __future__ import annotations

import json
import random
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from llm_ocr.container.aws_secrets import SecretFetchError, fetch_into_environment
from llm_ocr.container.shard_index import PlatformError, detect_shard, expand_ranges, format_ranges, task_shards_value
from llm_ocr.launchers.sagemaker.adapter import _state
from llm_ocr.launchers.sagemaker.request import group_shards, request_problems
from tests.launchers.common import llm_ocr
from tests.launchers.sagemaker_common import REGION
from tests.storage_servers import AWS_TEST_ENV, shared_moto
from tests.waiting import HANG_GUARD_S


def _resource_config(tmp_path: Path, current: str, hosts: int) -> Path:
    path = tmp_path / "resourceconfig.json"
    names = [f"algo-{k}" for k in range(1, hosts + 1)]
    random.Random(hosts).shuffle(names)  # SageMaker's order is not promised: sorting is llm-ocr's
    path.write_text(json.dumps({"current_host": current, "hosts": names}))
    return path


def test_a_host_is_its_place_among_the_hosts_or_the_launchers_map_says_which_shard(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LLM_OCR_TASK_SHARDS", raising=False)
    monkeypatch.delenv("CLOUD_RUN_TASK_COUNT", raising=False)
    assert detect_shard(tmp_path / "absent.json") == (1, 0, "default")
    # algo-10 sorts after algo-9, not after algo-1.
    monkeypatch.setenv("LLM_OCR_SAGEMAKER_RESOURCE_CONFIG", str(_resource_config(tmp_path, "algo-10", 12)))
    assert detect_shard() == (12, 9, "SageMaker")
    # A relaunch of shards 3, 7, 12 and 13 of 20: host algo-3 is shard 12.
    monkeypatch.setenv("LLM_OCR_SAGEMAKER_RESOURCE_CONFIG", str(_resource_config(tmp_path, "algo-3", 4)))
    monkeypatch.setenv("LLM_OCR_TASK_SHARDS", "20:3,7,12-13")
    assert detect_shard() == (20, 12, "SageMaker, task 2 of 4")
    # A map that does not fit the hosts stops the run rather than guessing.
    monkeypatch.setenv("LLM_OCR_TASK_SHARDS", "20:3,7")
    with pytest.raises(PlatformError, match="lists 2 shard"):
        detect_shard()


def test_shards_are_grouped_in_jobs_of_at_most_the_cap_each_map_fitting_one_variable() -> None:
    every_other = list(range(0, 800, 2))  # a relaunch of scattered shards: a long map
    groups = group_shards(every_other, 800, cap=100, value_limit=256)
    assert [s for g in groups for s in g] == every_other  # each shard once, in order
    assert all(len(g) <= 100 and len(task_shards_value(800, g)) <= 256 for g in groups)
    assert len(groups) > 4  # the 256-character limit, not only the cap, split them
    assert [len(g) for g in group_shards(list(range(250)), 250, cap=100)] == [100, 100, 50]
    for numbers in (every_other, [5], [0, 1, 2, 9, 11, 12]):
        assert expand_ranges(format_ranges(numbers)) == numbers


def _body(**changes: object) -> dict:
    body = {
        "ProcessingJobName": "llm-ocr-run-20261123-000000-abcd",
        "RoleArn": "arn:aws:iam::123456789012:role/r",
        "AppSpecification": {"ImageUri": "img", "ContainerEntrypoint": ["llm-ocr"], "ContainerArguments": ["run"]},
        "ProcessingResources": {"ClusterConfig": {"InstanceCount": 2, "InstanceType": "ml.g6e.xlarge", "VolumeSizeInGB": 50}},
        "StoppingCondition": {"MaxRuntimeInSeconds": 3600},
        "Environment": {"A": "1"},
    }
    body.update(changes)
    return body


def test_request_limits_come_from_botocores_model() -> None:
    assert request_problems(_body()) == []
    problems = request_problems(_body(
        Environment={f"V{i}": "x" * (300 if i == 0 else 1) for i in range(101)},
        ProcessingResources={"ClusterConfig": {"InstanceCount": 101, "InstanceType": "ml.p4d.24xlarge", "VolumeSizeInGB": 50}},
        StoppingCondition={"MaxRuntimeInSeconds": 800_000},
        ProcessingJobName="bad_name",
    ))
    text = "\n".join(problems)
    assert "Environment has 101 entries; SageMaker allows at most 100" in text
    assert "Environment['V0'] is 300 characters long; SageMaker allows at most 256" in text
    assert "InstanceCount is 101; SageMaker allows 1..100" in text
    assert "InstanceType 'ml.p4d.24xlarge' is not one of SageMaker's values" in text
    assert "MaxRuntimeInSeconds is 800000; SageMaker allows 1..777600" in text
    assert "ProcessingJobName 'bad_name' does not match" in text
    assert len(problems) == 6


def test_job_states_from_describe() -> None:
    now = datetime.now(timezone.utc)
    provisioning = _state({"ProcessingJobName": "j", "ProcessingJobStatus": "InProgress"})
    assert (provisioning.phase, provisioning.running_s) == ("pending", None)
    running = _state({"ProcessingJobName": "j", "ProcessingJobStatus": "InProgress", "ProcessingStartTime": now - timedelta(seconds=90)})
    assert running.phase == "running" and 89 <= running.running_s < 120
    failed = _state({"ProcessingJobName": "j", "ProcessingJobStatus": "Failed", "FailureReason": "AlgorithmError: x",
                     "ProcessingStartTime": now - timedelta(seconds=600), "ProcessingEndTime": now - timedelta(seconds=60)})
    assert (failed.phase, failed.message, failed.running_s) == ("failed", "AlgorithmError: x", 540.0)
    stopped = _state({"ProcessingJobName": "j", "ProcessingJobStatus": "Stopped", "ExitMessage": "MaxRuntimeExceeded"})
    assert (stopped.phase, stopped.message) == ("cancelled", "MaxRuntimeExceeded")


def test_secrets_are_fetched_by_name_and_a_missing_one_stops_the_job_with_what_to_grant(tmp_path: Path) -> None:
    import boto3

    moto = shared_moto()
    client = boto3.client("secretsmanager", endpoint_url=moto.url, region_name=REGION,
                          aws_access_key_id="k", aws_secret_access_key="s")
    client.create_secret(Name="llm-ocr/hf-token", SecretString="hf_valueOne1234567890")
    client.create_secret(Name="llm-ocr/keys", SecretString=json.dumps({"openai": "sk-valueTwo1234567890"}))
    environ = {"LLM_OCR_AWS_SECRET_HF_TOKEN": "llm-ocr/hf-token", "LLM_OCR_AWS_SECRET_LLM_OCR_API_KEY": "llm-ocr/keys#openai"}
    assert fetch_into_environment(environ, client) == ["HF_TOKEN", "LLM_OCR_API_KEY"]
    assert environ["HF_TOKEN"] == "hf_valueOne1234567890" and environ["LLM_OCR_API_KEY"] == "sk-valueTwo1234567890"
    with pytest.raises(SecretFetchError, match=r"llm-ocr/keys.*not a JSON object with the key 'other'"):
        fetch_into_environment({"LLM_OCR_AWS_SECRET_X": "llm-ocr/keys#other"}, client)

    # In a job: `llm-ocr` fetches before any command runs, and stops when it cannot.
    env = {**AWS_TEST_ENV, "AWS_ENDPOINT_URL": moto.url, "LLM_OCR_AWS_SECRET_HF_TOKEN": "llm-ocr/absent",
           "PATH": "/usr/bin:/bin"}
    done = llm_ocr("assemble", "--output", str(tmp_path / "out"), env=env)
    assert done.returncode == 2
    assert "cannot read AWS Secrets Manager secret 'llm-ocr/absent' for HF_TOKEN (ResourceNotFoundException)" in done.stderr
    assert "secretsmanager:GetSecretValue" in done.stderr
    assert not (tmp_path / "out").exists()  # nothing ran


def test_build_and_push_creates_the_repository_logs_in_builds_and_pushes(tmp_path: Path) -> None:
    """sagemaker/build_and_push.sh with stand-ins for the aws and docker CLIs that record their calls."""
    import os
    import subprocess

    from tests.conftest import REPO

    shims, calls = tmp_path / "bin", tmp_path / "calls.txt"
    shims.mkdir()
    (shims / "aws").write_text(
        '#!/bin/sh\necho "aws $*" >> "$CALLS"\n'
        'case "$*" in *get-caller-identity*) echo 123456789012;; *describe-repositories*) exit 254;;'
        ' *get-login-password*) echo ecr-password;; esac\n'
    )
    (shims / "docker").write_text('#!/bin/sh\necho "docker $*" >> "$CALLS"\ncase "$*" in login*) cat >> "$CALLS";; esac\n')
    for shim in shims.iterdir():
        shim.chmod(0o755)
    env = {"PATH": f"{shims}{os.pathsep}/usr/bin{os.pathsep}/bin", "CALLS": str(calls)}
    script = str(REPO / "sagemaker" / "build_and_push.sh")
    done = subprocess.run(["bash", script, "eu-west-1"], capture_output=True, text=True, env=env, timeout=HANG_GUARD_S)
    assert done.returncode == 0, done.stderr
    image = "123456789012.dkr.ecr.eu-west-1.amazonaws.com/llm-ocr:0.1.0"
    assert done.stdout == image + "\n"  # only the URI on stdout: `--image "$(sagemaker/build_and_push.sh R)"`
    registry = image.split("/")[0]
    lines = calls.read_text().splitlines()
    # The two sides of `aws ecr get-login-password | docker login` start together: either order.
    lines[3:5] = sorted(lines[3:5])
    assert lines == [
        "aws sts get-caller-identity --query Account --output text",
        "aws ecr describe-repositories --repository-names llm-ocr --region eu-west-1",
        "aws ecr create-repository --repository-name llm-ocr --region eu-west-1",
        "aws ecr get-login-password --region eu-west-1",
        f"docker login --username AWS --password-stdin {registry}",
        "ecr-password",  # what docker login read on stdin
        f"docker build --platform linux/amd64 -f {REPO}/sagemaker/Dockerfile -t {image} {REPO}",
        f"docker push {image}",
    ]
    usage = subprocess.run(["bash", script], capture_output=True, text=True, env=env, timeout=HANG_GUARD_S)
    assert usage.returncode == 2 and "usage:" in usage.stderr
