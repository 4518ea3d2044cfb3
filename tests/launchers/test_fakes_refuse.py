"""The fakes refuse what the real services refuse (values, not only names) and deliver what
they deliver: Cloud Run's retry range, GPU zonal redundancy, service accounts and labels;
SageMaker's input distribution (each host gets what SageMaker would give it)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from llm_ocr.launchers.cloud_run.job import CodeVolume, job_body, task_resources
from llm_ocr.launchers.core.spec import ShardSpec
from tests.fakes.fake_cloud_run import ApiError, FakeCloudRun
from tests.fakes.fake_sagemaker import check_create_request
from tests.launchers.sagemaker_common import REGION, ROLE, aws_world
from tests.waiting import HANG_GUARD_S


def _gpu_job(**task: Any) -> dict[str, Any]:
    spec = ShardSpec(0, 2, "llm-ocr-run-00000-of-00002", "img:1", ["python3", "-c", "x", "/w.whl", "llm-ocr", "run"],
                     {"A": "1"}, {}, "nvidia-l4", 3600, 4, {})
    body = job_body(spec, command_words=4, resources=task_resources(None, None, None, needs_model=True, stage="run"),
                    task_count=2, parallelism=None, service_account=None, code=CodeVolume("b", "code", "/code"))
    body = copy.deepcopy(body)
    body["template"]["template"].update(task)
    return body


def test_the_launchers_job_passes() -> None:
    FakeCloudRun._validate(_gpu_job())
    FakeCloudRun._validate(_gpu_job(serviceAccount="ocr-jobs@my-proj.iam.gserviceaccount.com", maxRetries=10))


@pytest.mark.parametrize(("change", "message"), [
    ({"maxRetries": 11}, "maxRetries must be between 0 and 10"),
    ({"maxRetries": -1}, "maxRetries must be between 0 and 10"),
    ({"gpuZonalRedundancyDisabled": False}, "gpuZonalRedundancyDisabled: true"),
    ({"gpuZonalRedundancyDisabled": "yes"}, "gpuZonalRedundancyDisabled: true"),
    ({"serviceAccount": "ocr-jobs"}, "is not a service account email"),
    ({"serviceAccount": "someone@gmail.com"}, "is not a service account email"),
])
def test_cloud_run_refuses_values_it_does_not_accept(change: dict[str, Any], message: str) -> None:
    with pytest.raises(ApiError, match=message):
        FakeCloudRun._validate(_gpu_job(**change))


@pytest.mark.parametrize("labels", [{"Launch": "x"}, {"run.googleapis.com/x": "y"}, {"ok": "Not Allowed"}, {"a" * 64: "x"}])
def test_cloud_run_refuses_labels_google_cloud_does_not_accept(labels: dict[str, str]) -> None:
    body = _gpu_job()
    body["labels"] = labels
    with pytest.raises(ApiError, match="labels"):
        FakeCloudRun._validate(body)


def _processing(inputs: list[dict[str, Any]], hosts: int = 2) -> dict[str, Any]:
    listing = "import os; d = os.environ['INPUT']; print('FILES', sorted(os.listdir(d)) if os.path.isdir(d) else None)"
    return {
        "ProcessingJobName": "inputs-test",
        "RoleArn": ROLE,
        "AppSpecification": {"ImageUri": "img:1", "ContainerEntrypoint": ["python3", "-c", listing]},
        "ProcessingResources": {"ClusterConfig": {"InstanceCount": hosts, "InstanceType": "ml.m5.xlarge", "VolumeSizeInGB": 5}},
        "StoppingCondition": {"MaxRuntimeInSeconds": 600},
        "Environment": {"INPUT": "/opt/ml/processing/input/code"},
        "ProcessingInputs": inputs,
    }


def _input(**changes: Any) -> dict[str, Any]:
    source = {"S3Uri": "s3://ocr/code/", "LocalPath": "/opt/ml/processing/input/code", "S3DataType": "S3Prefix",
              "S3InputMode": "File", "S3DataDistributionType": "FullyReplicated"}
    app_managed = changes.pop("AppManaged", False)
    source.update(changes)
    return {"InputName": "code", "AppManaged": app_managed, "S3Input": source}


@pytest.mark.parametrize(("source", "expected"), [
    ({}, [["llm_ocr.whl"], ["llm_ocr.whl"]]),  # FullyReplicated: every host gets every object
    ({"S3DataDistributionType": "ShardedByS3Key"}, [["llm_ocr.whl"], []]),  # one object reaches one host
    ({"AppManaged": True}, [[], []]),  # the application fetches it: SageMaker downloads nothing
    ({"S3InputMode": "Pipe"}, [[], []]),  # streamed through a FIFO, no files
])
def test_sagemaker_delivers_inputs_as_the_distribution_type_says(tmp_path: Path, source: dict[str, Any],
                                                                 expected: list[list[str]]) -> None:
    import boto3

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    with aws_world(tmp_path / "jobs", corpus) as world:
        world.moto.client().put_object(Bucket="ocr", Key="code/llm_ocr.whl", Body=b"wheel")
        client = boto3.client("sagemaker", endpoint_url=world.sagemaker.url, region_name=REGION,
                              aws_access_key_id="test-admin", aws_secret_access_key="test-admin")
        client.create_processing_job(**_processing([_input(**source)]))
        world.sagemaker.wait_all(timeout=60)
        (job,) = world.sagemaker.jobs.values()
        listed = [next(line for line in host.lines if line.startswith("FILES")) for host in job.hosts]
    assert listed == [f"FILES {files}" for files in expected]


def test_sagemaker_refuses_distribution_values_it_does_not_know() -> None:
    body = _processing([_input(S3DataDistributionType="Sharded"), _input(S3InputMode="FastFile")])
    problems = " ".join(check_create_request(body))
    assert "S3DataDistributionType 'Sharded' is not one of" in problems and "S3InputMode 'FastFile'" in problems
    assert not check_create_request(_processing([_input()]))


def test_the_launchers_wheel_input_reaches_every_host() -> None:
    from llm_ocr.costs import Hardware
    from llm_ocr.launchers.core.spec import Target
    from llm_ocr.launchers.sagemaker import request as req

    spec = ShardSpec(0, 4, "n", "img:1", ["python3", "-c", "x", "/w.whl", "llm-ocr", "run"], {}, {}, "ml.g6.xlarge",
                     600, 1, {"llm-ocr-launch": "L", "llm-ocr-shard": "s"})

    target = Target(Hardware("ml.g6.xlarge", 1, None, None), "img:1", ["python3", "-c", "x", "/w.whl"], {})
    body = req.processing_job_body("n", [spec, spec], target, {}, stage="run", role=ROLE, volume_gb=50,
                                   code_uri="s3://ocr/code/")
    (code,) = body["ProcessingInputs"]
    assert code["S3Input"]["S3DataDistributionType"] == "FullyReplicated" and code["S3Input"]["S3InputMode"] == "File"
    assert code["AppManaged"] is False  # and the e2e tests run 2 to 4 hosts, each installing this input's wheel


@pytest.mark.parametrize(("flags", "message"), [
    (["--served-modle-name", "x"], "unrecognized arguments: --served-modle-name"),  # not a vLLM flag
    (["--max-num-seqs", "many"], "argument --max-num-seqs: invalid int value: 'many'"),
    (["--limit-mm-per-prompt", "image=1"], "argument --limit-mm-per-prompt"),  # vLLM reads it as JSON
])
def test_the_fake_vllm_refuses_what_vllms_parser_refuses(flags: list[str], message: str) -> None:
    import subprocess
    import sys

    from tests.fakes.container import FAKES

    done = subprocess.run([sys.executable, str(FAKES / "fake_vllm.py"), "serve", "m", "--port", "1", *flags],
                          capture_output=True, text=True, timeout=HANG_GUARD_S, env={"FAKE_VLLM_MODE": "hang"})
    assert done.returncode == 2 and message in done.stderr


def test_a_container_run_leaves_nothing_behind_it_started_even_in_a_session_of_its_own() -> None:
    """What a fake container's main process started dies with it (tests/fakes/container.py), as in
    a real container: here an orphan in its own session (as llm-ocr's model server is), which
    neither the main process's group nor its process tree reaches once the main has exited."""
    import os
    import subprocess
    import sys

    import psutil

    from tests.fakes.container import Descendants
    from tests.waiting import wait_until

    seen = Descendants()
    orphan_maker = ("import subprocess, sys\n"
                    "child = subprocess.Popen([sys.executable, '-c', 'import time\\nwhile True: time.sleep(60)'], "
                    "start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
                    "print(child.pid, flush=True)\n")
    main = subprocess.run([sys.executable, "-c", orphan_maker], env=seen.marked(dict(os.environ)), capture_output=True,
                          text=True, timeout=HANG_GUARD_S, check=True)
    orphan = psutil.Process(int(main.stdout))
    try:
        assert orphan.is_running() and orphan.ppid() != os.getpid()  # outlived its parent, re-parented
        seen.kill()
        wait_until(lambda: not orphan.is_running() or orphan.status() == psutil.STATUS_ZOMBIE, "the orphan is killed")
    finally:
        if orphan.is_running():
            orphan.kill()
