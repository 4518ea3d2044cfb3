"""The AWS Batch launcher's pieces, offline: its requests against botocore's model and Batch's
limits, job definition reuse, which shard a child runs on a relaunch, the container's S3 signature
against botocore's, and the fake Batch's refusals (tests/fakes/fake_batch.py)."""

from __future__ import annotations

import datetime
import json
from typing import Any

import pytest

import llm_ocr
from llm_ocr.container import s3_fetch
from llm_ocr.container.shard_index import detect_shard
from llm_ocr.launchers.aws_batch import request as req
from llm_ocr.launchers.core.spec import LaunchError, ShardSpec
from tests.fakes.fake_batch import FakeBatch

ROLE = "arn:aws:iam::123456789012:role/llm-ocr-batch-job"
EXEC_ROLE = "arn:aws:iam::123456789012:role/llm-ocr-batch-exec"
SECRET = "arn:aws:secretsmanager:us-east-1:123456789012:secret:llm-ocr/hf-token-AbCdEf"
IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/llm-ocr:1"


def _dry_run(**options: Any) -> dict[str, Any]:
    given = {"output": "s3://ocr/2024", "num_shards": 3, "job_queue": "llm-ocr-gpu", "job_role": ROLE,
             "region": "us-east-1", "image": IMAGE, "dry_run": True, "offline": True, **options}
    return llm_ocr.launch("aws-batch", "s3://scans/2024", **given).plan.to_json()


def test_the_dry_run_is_one_array_job_whose_requests_fit_botocores_model_and_batchs_limits(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    import boto3

    def no_call(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("--dry-run --offline made an AWS client")

    monkeypatch.setattr(boto3.session.Session, "client", no_call)
    plan = _dry_run(instance_type="g6.xlarge", aws_secret=[f"HF_TOKEN={SECRET}"], execution_role=EXEC_ROLE,
                    env={"LLM_OCR_NOTE": "x"})
    (bodies,) = plan["requests"]
    definition, submission = bodies["registerJobDefinition"], bodies["submitJob"]
    assert req.request_problems(definition, "RegisterJobDefinition") == []
    assert req.request_problems(submission, "SubmitJob") == []
    container = definition["containerProperties"]
    # One g6.xlarge per child (1 L4, 4 vCPU, 16 GiB less the agent's share), GPU counted.
    assert container["resourceRequirements"] == [{"type": "GPU", "value": "1"}, {"type": "VCPU", "value": "4"},
                                                 {"type": "MEMORY", "value": "14592"}]
    # The secret by reference only; the per-launch values ride with the submission, not the definition.
    assert container["secrets"] == [{"name": "HF_TOKEN", "valueFrom": SECRET}]
    names = {e["name"] for e in container["environment"]}
    assert "HF_TOKEN" not in names and "LLM_OCR_LAUNCH_ID" not in names and "LLM_OCR_NOTE" in names
    # llm-ocr saves its in-flight pages before Batch's SIGKILL, 30 s after its SIGTERM.
    assert int({e["name"]: e["value"] for e in container["environment"]}["LLM_OCR_GRACE_PERIOD"]) < 30
    assert submission["arrayProperties"] == {"size": 3}
    assert {"name": "LLM_OCR_TASK_SHARDS", "value": "3:0-2"} in submission["containerOverrides"]["environment"]
    # Retried on a lost host (first match wins), never on the shard's own exit.
    strategy = definition["retryStrategy"]
    assert strategy["evaluateOnExit"][0] == {"onStatusReason": "Host EC2*", "action": "RETRY"}
    assert strategy["evaluateOnExit"][-1] == {"onReason": "*", "action": "EXIT"} and strategy["attempts"] == 3
    assert definition["timeout"]["attemptDurationSeconds"] >= 60
    assert [job["env"]["LLM_OCR_TASK_SHARDS"] for job in plan["jobs"]] == ["3:0-2"] * 3


@pytest.mark.parametrize(("options", "message"), [
    ({"secret": ["HF_TOKEN"]}, "--aws-secret NAME=ARN"),
    ({"aws_secret": [f"HF_TOKEN={SECRET}"]}, "needs --execution-role"),
    ({"aws_secret": ["HF_TOKEN=llm-ocr/hf-token"], "execution_role": EXEC_ROLE}, "write NAME=ARN"),
    ({"instance_type": "m5.xlarge"}, "has no GPU"),
    ({"job_queue": None}, "no job queue"),
    ({"image": None, "job_role": None}, "pass --job-role"),
])
def test_what_batch_could_not_run_is_refused_before_anything_is_sent(options: dict[str, Any], message: str) -> None:
    with pytest.raises(LaunchError, match=message):
        _dry_run(**options)


def test_requests_batch_would_refuse_are_named() -> None:
    spec = ShardSpec(0, 3, "n", IMAGE, ["llm-ocr", "run"], {"A": "1"}, {}, "g6.xlarge", 30, 11, {"llm-ocr-launch": "x"})
    definition = req.definition_body(spec, req.HARDWARE["g6.xlarge"], stage="run", job_role=ROLE, execution_role=None,
                                     secret_refs={}, region="us-east-1")
    definition["retryStrategy"]["evaluateOnExit"].insert(0, {"onStatusReason": "Host EC2 (i-1)*", "action": "RETRY"})
    problems = " | ".join(req.request_problems(definition, "RegisterJobDefinition"))
    assert "attempts is 11" in problems and "minimum is 60" in problems and "'Host EC2 (i-1)*'" in problems
    single = req.submit_body(spec, [0], stage="run", job_queue="q")
    assert "arrayProperties" not in single and req.request_problems(single, "SubmitJob") == []
    wide = req.submit_body(spec, list(range(req.MAX_ARRAY + 1)), stage="run", job_queue="q")
    assert "10001" in " ".join(req.request_problems(wide, "SubmitJob"))
    assert "no field 'jobQueueName'" in " ".join(req.request_problems({**single, "jobQueueName": "q"}, "SubmitJob"))


def test_a_relaunch_child_runs_the_shard_its_index_names(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = ShardSpec(0, 3, "n", IMAGE, ["llm-ocr"], {}, {}, "g6.xlarge", 60, 3, {"llm-ocr-launch": "x"})
    body = req.submit_body(spec, [0, 2], stage="run", job_queue="q")
    for item in body["containerOverrides"]["environment"]:
        monkeypatch.setenv(item["name"], item["value"])
    monkeypatch.setenv("AWS_BATCH_JOB_ARRAY_SIZE", str(body["arrayProperties"]["size"]))
    monkeypatch.setenv("AWS_BATCH_JOB_ARRAY_INDEX", "1")
    assert detect_shard()[:2] == (3, 2)
    # One shard left: a plain job (Batch has no array of one), told its shard.
    single = {e["name"]: e["value"] for e in req.submit_body(spec, [1], stage="run", job_queue="q")
              ["containerOverrides"]["environment"]}
    assert single["LLM_OCR_SHARD_INDEX"] == "1" and single["LLM_OCR_NUM_SHARDS"] == "3"


def test_an_active_revision_is_reused_only_when_every_field_sent_is_the_same() -> None:
    spec = ShardSpec(0, 3, "n", IMAGE, ["llm-ocr", "run"], {"A": "1", "B": "2"}, {}, "g6.xlarge", 3600, 3, {})
    wanted = req.definition_body(spec, req.HARDWARE["g6.xlarge"], stage="run", job_role=ROLE, execution_role=None,
                                 secret_refs={}, region="us-east-1")
    found = json.loads(json.dumps(wanted))
    found["containerProperties"]["environment"].reverse()  # Batch's order, and its defaults
    found["containerProperties"].update(volumes=[], mountPoints=[], ulimits=[])
    found.update(revision=4, status="ACTIVE")
    assert req.same_definition(wanted, found)
    found["containerProperties"]["image"] = IMAGE + "-old"
    assert not req.same_definition(wanted, found)


@pytest.mark.parametrize("token", ["", "session-token-value"])
def test_the_containers_s3_signature_is_botocores(token: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import botocore.auth
    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    now = datetime.datetime(2026, 11, 26, 10, 15, 0, tzinfo=datetime.timezone.utc)
    url = s3_fetch.object_url("ocr", "2024/_state/code/wheels/ab/llm_ocr-0.1.0-py3-none-any.whl", "eu-west-1", {})
    assert url == "https://ocr.s3.eu-west-1.amazonaws.com/2024/_state/code/wheels/ab/llm_ocr-0.1.0-py3-none-any.whl"
    ours = s3_fetch.signed_headers(url, "eu-west-1", ("AKIDEXAMPLE", "secret/key+1", token), now)

    request = AWSRequest(method="GET", url=url, headers={"x-amz-content-sha256": s3_fetch.EMPTY_SHA256})
    signer = S3SigV4Auth(Credentials("AKIDEXAMPLE", "secret/key+1", token or None), "s3", "eu-west-1")
    monkeypatch.setattr(botocore.auth, "get_current_datetime", lambda: now.replace(tzinfo=None))
    signer.add_auth(request)
    assert ours["Authorization"] == request.headers["Authorization"]


def test_the_containers_fetch_program_is_code_only() -> None:
    program = s3_fetch.program()
    compile(program, "fetch", "exec")
    assert '"""' not in program and "def program" not in program and program.endswith("main(sys.argv[1:])\n")


@pytest.mark.parametrize(("operation", "body", "message"), [
    ("submit_job", {"jobName": "j", "jobQueue": "nope", "jobDefinition": "d"}, "does not exist"),
    ("submit_job", {"jobName": "j", "jobQueue": "llm-ocr-gpu", "jobDefinition": "d", "arrayProperties": {"size": 1}},
     "2 to 10000"),
    ("submit_job", {"jobName": "bad name", "jobQueue": "llm-ocr-gpu", "jobDefinition": "d"}, "128 letters"),
    ("register_job_definition", {"jobDefinitionName": "d", "type": "container", "containerProperties": {
        "image": "i", "resourceRequirements": [{"type": "GPU", "value": "0.5"}]}}, "a whole number"),
    ("register_job_definition", {"jobDefinitionName": "d", "type": "container", "containerProperties": {"image": "i"},
                                 "retryStrategy": {"evaluateOnExit": [{"onReason": "*", "action": "EXIT"}]}},
     "needs attempts"),
])
def test_the_fake_refuses_what_batch_refuses(operation: str, body: dict[str, Any], message: str) -> None:
    import boto3
    from botocore.config import Config

    with FakeBatch("http://127.0.0.1:9") as fake:  # nothing runs: moto is never reached
        client = boto3.client("batch", endpoint_url=fake.url, region_name="us-east-1", aws_access_key_id="k",
                              aws_secret_access_key="s", config=Config(retries={"max_attempts": 0}))
        with pytest.raises(client.exceptions.ClientException, match=message):
            getattr(client, operation)(**body)
        assert fake.requests == []


def test_children_are_followed_logged_and_terminated_through_the_adapter(tmp_path: Any,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Against the fake Batch (children that print and wait) and moto's CloudWatch: each shard's
    state is its own child's, its log is its child's stream, and a cancel ends both children."""
    from llm_ocr.launchers.aws_batch.adapter import AwsBatch
    from llm_ocr.launchers.core.spec import PlannedJob
    from tests.storage_servers import AWS_TEST_ENV, MotoS3
    from tests.waiting import wait_until

    moto = MotoS3()
    try:
        with FakeBatch(moto.url, workdir=tmp_path, grace_s=5) as fake:
            for key, value in {**AWS_TEST_ENV, "AWS_ENDPOINT_URL": moto.url, "AWS_ENDPOINT_URL_BATCH": fake.url}.items():
                monkeypatch.setenv(key, value)
            child = "import os, time; print('child', os.environ['AWS_BATCH_JOB_ARRAY_INDEX'], flush=True); time.sleep(3600)"
            spec = ShardSpec(0, 5, "n", IMAGE, ["python3", "-c", child], {}, {}, "g6.xlarge", 600, 1,
                             {"llm-ocr-launch": "x"})
            adapter = AwsBatch(region="us-east-1", job_queue="llm-ocr-gpu")
            definition = req.definition_body(spec, req.HARDWARE["g6.xlarge"], stage="run", job_role=ROLE,
                                             execution_role=None, secret_refs={}, region="us-east-1")
            submission_body = req.submit_body(spec, [1, 4], stage="run", job_queue="llm-ocr-gpu")  # a relaunch
            planned = [PlannedJob([1, 4], {"registerJobDefinition": definition, "submitJob": submission_body}, [])]
            (submission,) = adapter.submit(planned, None)  # type: ignore[arg-type]
            job = {"job_id": submission.job_id, "shards": [1, 4]}
            wait_until(lambda: all(c.lines for c in fake.jobs[submission.job_id].children), "both children print")
            state = adapter.states([job])[submission.job_id]
            assert [adapter.shard_phase(state, s).phase for s in (1, 4)] == ["running", "running"]
            assert adapter.shard_phase(state, 4).job_id == f"{submission.job_id}:1"
            wait_until(lambda: "child 1" in "\n".join(adapter.logs(job, 4)), "shard 4's line in CloudWatch")
            assert adapter.cancel([job]) == [submission.job_id]
            fake.wait_all(timeout=120)
            state = adapter.states([job])[submission.job_id]
            assert [adapter.shard_phase(state, s).phase for s in (1, 4)] == ["cancelled", "cancelled"]
            # Following an ended child's log returns its lines, then ends.
            assert list(adapter.logs(job, 1, follow=True)) == ["child 0"]
    finally:
        moto.stop()


def test_the_dry_run_prices_its_instance_and_plans_every_batch_gpu_type_on_demand_and_on_spot() -> None:
    plan = llm_ocr.launch("aws-batch", "s3://scans/2024", output="s3://ocr/2024", num_shards=2, job_queue="llm-ocr-gpu",
                          job_role=ROLE, region="eu-west-1", image=IMAGE, instance_type="g6.xlarge", pages=1000,
                          dry_run=True, offline=True).plan
    # The note names the built-in prices, their source and date, and that they are not this region's.
    (note,) = [n for n in plan.notes if n.startswith("g6.xlarge: $0.8048/h on-demand")]
    assert "$0.3879/h on Spot" in note and "read 2026-11-26" in note and "NOT eu-west-1" in note
    assert plan.estimate is not None
    rows = {row.hardware: row for row in plan.estimate.rows}
    assert plan.estimate.rows[0].hardware == "g6.xlarge" and plan.estimate.rows[0].chosen
    assert rows["g6.xlarge"].price_per_hour == 0.8048 and rows["g6.xlarge Spot"].price_per_hour == 0.3879
    assert {"g6e.xlarge", "g5.2xlarge", "p4d.24xlarge", "p5.48xlarge Spot"} <= set(rows)
    # Your own price replaces the built-in one, and says so.
    mine = llm_ocr.launch("aws-batch", "s3://scans/2024", output="s3://ocr/2024", num_shards=2, job_queue="q",
                          job_role=ROLE, region="us-east-1", image=IMAGE, instance_type="g6.xlarge", pages=1000,
                          price_per_hour=0.5, dry_run=True, offline=True).plan
    assert mine.estimate is not None and mine.estimate.rows[0].price_per_hour == 0.5
    assert "--price-per-hour" in mine.estimate.rows[0].price_note
