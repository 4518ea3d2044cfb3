"""AWS Batch: one array job of N children for N shards, on a job queue the user set up.

Plain boto3. Calls: ``sts.get_caller_identity`` (the credentials work), ``batch.describe_job_queues``
(the queue exists and takes jobs), ``batch.describe_job_definitions`` (an identical active revision
is reused) and ``register_job_definition`` otherwise, ``submit_job``; later ``describe_jobs`` (the
parent, and its children as ``JOBID:INDEX``, 100 per call), ``terminate_job`` (on the parent: Batch
ends every child), and CloudWatch Logs ``get_log_events`` on ``/aws/batch/job`` (the default group of
the ``awslogs`` driver; the stream is the child attempt's ``container.logStreamName``).

The requests and Batch's limits on them are :mod:`llm_ocr.launchers.aws_batch.request`. Child i of
the array reads ``AWS_BATCH_JOB_ARRAY_INDEX`` and runs the i-th shard of ``LLM_OCR_TASK_SHARDS``
(:mod:`llm_ocr.container.shard_index`), so a relaunch submits only the shards without a completion
marker, as a smaller array (a plain job for one shard: Batch has no array of one). A child whose
EC2 host is lost (a Spot reclamation) is retried by Batch and resumes from its parts; a shard's own
error is not retried (the job definition's ``retryStrategy``).

Code delivery without building an image: the stock vLLM image from Docker Hub, and the llm-ocr
wheel uploaded once per content digest to ``OUT/_state/code/`` (``--code-uri`` for an output not
on S3); the child's command fetches it with the job role's credentials and bootstraps from it
(:mod:`llm_ocr.container.s3_fetch`), then ``exec`` s ``llm-ocr``. Or ``--image URI`` (an image in
ECR with llm-ocr installed: ``aws-batch/README.md``).

Secrets never travel as values: ``--aws-secret NAME=ARN`` (a Secrets Manager secret or an SSM
parameter) becomes ``secrets[].valueFrom`` in the job definition, resolved by the ECS agent with
the ``--execution-role``. S3 access in the children is the ``--job-role``'s.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterator, Sequence
from datetime import datetime, timezone
from typing import Any, ClassVar

from fsspec.core import split_protocol
from pydantic import BaseModel, Field

from llm_ocr.container import s3_fetch
from llm_ocr.costs import aws_batch_price_note
from llm_ocr.launchers.aws_batch import request as req
from llm_ocr.launchers.core.adapter import JobState, Phase, PlatformOptions, Submission
from llm_ocr.launchers.core.aws import own_credentials
from llm_ocr.launchers.core.command import CPU_IMAGE, extras_for, with_extras
from llm_ocr.launchers.core.images import image_note, launch_image
from llm_ocr.launchers.core.spec import (
    LaunchError,
    LaunchRequest,
    PlannedJob,
    ShardSpec,
    Target,
    assert_no_secret,
    brief_error,
)
from llm_ocr.launchers.core.wheel import Wheel, upload_wheel, wheel_to_ship

log = logging.getLogger("llm_ocr")

LOG_GROUP = "/aws/batch/job"
_ROLE_ARN = re.compile(r"^arn:aws[a-z\-]*:iam::\d{12}:role/?[a-zA-Z_0-9+=,.@\-_/]+$")
#: ``valueFrom``: a Secrets Manager secret's ARN (optionally ``:json-key:version-stage:version-id``)
#: or an SSM parameter's ARN ("Specifying sensitive data" in the AWS Batch user guide).
_SECRET_ARN = re.compile(r"^arn:aws[a-z\-]*:(secretsmanager|ssm):[a-z0-9-]+:\d{12}:(secret:|parameter/)\S+$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_PHASES: dict[str, Phase] = {
    "SUBMITTED": "pending", "PENDING": "pending", "RUNNABLE": "pending", "STARTING": "pending",
    "RUNNING": "running", "SUCCEEDED": "succeeded", "FAILED": "failed",
}
_LOG_POLL_S = 2.0
#: Batch stops a container with SIGTERM, then SIGKILL 30 s later (on a timeout: "Job timeouts" in the
#: user guide; a termination goes through the same ECS stop): llm-ocr's own grace (30 s by default)
#: ends well inside that, so the in-flight pages' part is written before the kill.
GRACE_PERIOD_S = 15


class AwsBatchOptions(PlatformOptions):
    """AWS Batch: ``llm-ocr launch aws-batch`` options (``llm_ocr.launch`` keywords)."""

    job_queue: str | None = Field(None, description="The job queue (name or ARN) the array job goes to (required; "
                                  "aws-batch/template.yaml makes one).", json_schema_extra={"metavar": "QUEUE"})
    instance_type: str | None = Field(
        None, description=f"The instance each shard fills: its GPUs, vCPUs and memory become the job's resource "
        f"requirements (default {req.DEFAULT_GPU_INSTANCE}, 1x L40S; {req.DEFAULT_CPU_INSTANCE} for assemble and "
        f"--endpoint runs); one of {', '.join(req.HARDWARE)}. The compute environment must offer it.",
        json_schema_extra={"metavar": "TYPE"},
    )
    job_role: str | None = Field(None, description="IAM role the children act as (S3 reads and writes; required for "
                                 "the stock image, which fetches the llm-ocr wheel with it).",
                                 json_schema_extra={"metavar": "ARN"})
    execution_role: str | None = Field(None, description="IAM role the ECS agent resolves --aws-secret with "
                                       "(required with --aws-secret).", json_schema_extra={"metavar": "ARN"})
    region: str | None = Field(None, description="AWS region (default: AWS_REGION / AWS_DEFAULT_REGION / your AWS "
                                                 "config).")
    aws_secret: list[str] | dict[str, str] = Field(
        default_factory=list, description="The children get NAME from this Secrets Manager secret or SSM parameter "
        "ARN, by reference (e.g. HF_TOKEN=arn:aws:secretsmanager:...:secret:llm-ocr/hf-token-AbCdEf).",
        json_schema_extra={"metavar": "NAME=ARN", "repeat": True},
    )
    code_uri: str | None = Field(None, description="Where the llm-ocr wheel is uploaded (default: OUT/_state/code for "
                                 "an s3:// output).", json_schema_extra={"metavar": "S3_URL"})
    price_per_hour: float | None = Field(None, ge=0, description="Your price of one instance-hour (on-demand or "
                                         "Spot), for the cost table (default: the built-in on-demand price, "
                                         "us-east-1).",
                                         json_schema_extra={"metavar": "USD"})


class AwsBatch:
    """The AWS Batch adapter (see the module docstring)."""

    name: ClassVar[str] = "aws-batch"
    shard_env: ClassVar[bool] = False
    hardware_option: ClassVar[str] = "instance_type"
    options: ClassVar[type[BaseModel]] = AwsBatchOptions

    def __init__(self, **options: Any) -> None:
        """``options``: :class:`AwsBatchOptions` fields."""
        self.given = AwsBatchOptions.model_validate(options)
        self.region = self.given.region
        self.secret_refs = _secret_refs(self.given.aws_secret)
        self._session: Any = None
        self._clients: dict[str, Any] = {}
        #: parent job id -> shard -> the state of the child running it (filled by states()).
        self._children: dict[str, dict[int, JobState]] = {}

    @classmethod
    def from_record(cls, info: dict[str, Any]) -> AwsBatch:
        """An adapter following the jobs of a launch record (its region)."""
        return cls(region=info.get("region"))

    # -- clients --------------------------------------------------------------------------------

    def _client(self, service: str) -> Any:
        if service not in self._clients:
            if self._session is None:
                import boto3

                self._session = boto3.session.Session(region_name=self._region())
            from botocore.config import Config

            config = Config(retries={"max_attempts": 3, "mode": "standard"}, connect_timeout=10, read_timeout=60)
            self._clients[service] = self._session.client(service, config=config)
        return self._clients[service]

    def _region(self) -> str:
        if self.region is None:
            import boto3

            self.region = boto3.session.Session().region_name
        if not self.region:
            raise LaunchError("no AWS region: pass --region REGION, or set AWS_REGION (or a region in ~/.aws/config)")
        return self.region

    # -- planning -------------------------------------------------------------------------------

    def resolve(self, request: LaunchRequest) -> Target:
        """Region, queue, roles, instance, secrets, image and the wheel to ship; the queue and the
        credentials are checked unless offline."""
        chosen = launch_image(request, self.name)
        region = self._region()
        queue = self.given.job_queue
        if not queue:
            raise LaunchError("no job queue: pass --job-queue QUEUE (aws-batch/template.yaml makes one over a GPU "
                              "compute environment)")
        if request.secret_names:
            raise LaunchError(
                f"--secret {', '.join(request.secret_names)}: a value would sit in the job definition; store it in "
                "AWS Secrets Manager or SSM Parameter Store and pass --aws-secret NAME=ARN (resolved by the ECS agent "
                "with --execution-role)"
            )
        for flag, role in (("--job-role", self.given.job_role), ("--execution-role", self.given.execution_role)):
            if role and not _ROLE_ARN.match(role):
                raise LaunchError(f"{flag} {role!r} is not an IAM role ARN (arn:aws:iam::123456789012:role/NAME)")
        if self.secret_refs and not self.given.execution_role:
            raise LaunchError("--aws-secret needs --execution-role ARN: the ECS agent reads the secrets with it "
                              "(secretsmanager:GetSecretValue / ssm:GetParameters on those ARNs)")
        if split_protocol(request.output)[0] == "hf" and "HF_TOKEN" not in self.secret_refs:
            raise LaunchError(f"--output {request.output} is on the Hugging Face Hub: pass --aws-secret "
                              "HF_TOKEN=ARN of a secret holding a write token")
        instance = self._instance(request)
        price = self.given.price_per_hour
        notes = [("a child whose EC2 host is lost (Spot reclamation) is retried by Batch and resumes from its parts; "
                  "a shard's own error is not retried: relaunch the same command to rerun it")]
        if price is None:
            notes.append(f"{aws_batch_price_note(instance.name, region)}; pass --price-per-hour for your own (a Spot "
                         "compute environment's, or your region's)")
        if request.offline:
            account = "ACCOUNT"
            notes.append("offline: not checked: the AWS credentials and account, that the job queue exists and is "
                         "enabled, which job definition revision is reused")
        else:
            account = self._account()
            self._check_queue(queue)
        info: dict[str, Any] = {"region": region, "account": account, "job_queue": queue}
        private: dict[str, Any] = {"instance": instance, "stage": request.stage, "queue": queue,
                                   "offline": request.offline}
        secret_names = dict.fromkeys(self.secret_refs, "")
        hardware = instance.hardware(price)
        env = {"AWS_DEFAULT_REGION": region, "LLM_OCR_GRACE_PERIOD": str(GRACE_PERIOD_S)}
        if request.image:
            return Target(hardware, request.image, [], secret_names, info, private, notes, env=env)
        if not self.given.job_role:
            raise LaunchError("the stock image fetches the llm-ocr wheel from S3 as the job's role: pass --job-role "
                              "ARN (a role ECS tasks can assume that may read and write the S3 URLs; "
                              "aws-batch/template.yaml makes one), or --image with llm-ocr installed")
        image = f"docker.io/library/{CPU_IMAGE}"
        if chosen is not None:
            image = f"docker.io/{chosen.image.ref}"  # ECS pulls Docker Hub images as they are
            notes.append(image_note(request, chosen, image))
        wheel = wheel_to_ship(self.given.wheel)
        code_uri = f"{self._code_prefix(request)}/wheels/{wheel.digest[:16]}/"
        extras = sorted({*extras_for([request.output, *request.inputs]), "s3"})
        private.update(wheel=wheel, code_uri=code_uri)
        info.update(code_uri=code_uri)
        prefix = ["python3", "-c", s3_fetch.program(), with_extras(f"{code_uri}{wheel.filename}", extras)]
        return Target(hardware, image, prefix, secret_names, info, private, notes, env=env)

    def _instance(self, request: LaunchRequest) -> req.Instance:
        name = request.hardware or (req.DEFAULT_GPU_INSTANCE if request.needs_model else req.DEFAULT_CPU_INSTANCE)
        gpu_types = [n for n, i in req.HARDWARE.items() if i.gpus]
        if name not in req.HARDWARE:
            raise LaunchError(f"unknown --instance-type {name!r} for AWS Batch; llm-ocr sizes jobs for "
                              f"{', '.join(req.HARDWARE)}")
        instance = req.HARDWARE[name]
        if request.needs_model and not instance.gpus:
            raise LaunchError(f"--instance-type {name} has no GPU, but llm-ocr {request.stage} serves a model in the "
                              f"job: choose one of {', '.join(gpu_types)}, or pass --endpoint URL")
        return instance

    def _account(self) -> str:
        try:
            return str(self._client("sts").get_caller_identity()["Account"])
        except Exception as exc:
            raise LaunchError(f"AWS credentials missing or refused ({brief_error(exc)}): configure them (aws "
                              "configure, aws sso login, or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY)") from exc

    def _check_queue(self, queue: str) -> None:
        try:
            found = self._client("batch").describe_job_queues(jobQueues=[queue])["jobQueues"]
        except Exception as exc:
            raise LaunchError(f"cannot look up job queue {queue!r} ({brief_error(exc)})") from exc
        if not found:
            raise LaunchError(f"--job-queue {queue}: no such job queue in {self._region()} (aws batch "
                              "describe-job-queues lists them; aws-batch/template.yaml makes one)")
        state, status = found[0].get("state"), found[0].get("status")
        if state != "ENABLED" or status not in ("VALID", "UPDATING", "CREATING"):
            raise LaunchError(f"--job-queue {queue} is {state}/{status}: it takes no jobs")

    def _code_prefix(self, request: LaunchRequest) -> str:
        given = self.given.code_uri
        if given:
            if split_protocol(given)[0] != "s3":
                raise LaunchError(f"--code-uri {given!r} must be an s3:// URL: the children fetch the wheel from S3")
            return given.rstrip("/")
        if split_protocol(request.output)[0] == "s3":
            return f"{request.output.rstrip('/')}/_state/code"
        raise LaunchError(f"--output {request.output} is not on S3, so the llm-ocr wheel needs another home: pass "
                          "--code-uri s3://BUCKET/PREFIX (the job role must read it), or --image with llm-ocr "
                          "installed")

    def plan_jobs(self, specs: Sequence[ShardSpec], target: Target) -> list[PlannedJob]:
        """One array job of every shard (a plain job for one), with its job definition."""
        if len(specs) > req.MAX_ARRAY:
            raise LaunchError(f"{len(specs)} shards: an AWS Batch array job has at most {req.MAX_ARRAY} children; "
                              f"launch with --num-shards {req.MAX_ARRAY} or fewer")
        first = specs[0]
        shards = [spec.shard_index for spec in specs]
        stage, instance = target.private["stage"], target.private["instance"]
        definition = req.definition_body(first, instance, stage=stage, job_role=self.given.job_role,
                                         execution_role=self.given.execution_role, secret_refs=self.secret_refs,
                                         region=target.info["region"])
        submission = req.submit_body(first, shards, stage=stage, job_queue=target.private["queue"])
        problems = [*req.request_problems(definition, "RegisterJobDefinition"),
                    *req.request_problems(submission, "SubmitJob")]
        if problems:
            raise LaunchError("the job would break AWS Batch's limits, so nothing was submitted: "
                              + "; ".join(problems))
        try:
            assert_no_secret(own_credentials(self._session), "an AWS Batch request", [definition, submission])
        except LaunchError:
            raise LaunchError("your AWS secret key or session token would appear in the AWS Batch requests (in --env "
                              "or a stage option): remove it; the children reach AWS as --job-role") from None
        for spec in specs:  # what each child gets, for the dry run's per-shard view
            spec.env = {**spec.env, **{e["name"]: e["value"] for e in submission["containerOverrides"]["environment"]}}
        return [PlannedJob(shards, {"registerJobDefinition": definition, "submitJob": submission}, list(specs))]

    # -- side effects ---------------------------------------------------------------------------

    def deliver(self, target: Target) -> None:
        """Upload the wheel to S3 unless a wheel with the same digest is there."""
        wheel: Wheel | None = target.private.get("wheel")
        if wheel is not None:
            upload_wheel(wheel, target.private["code_uri"], hint="pass --code-uri s3://BUCKET/PREFIX you can write, "
                         "or --image with llm-ocr installed")

    def submit(self, jobs: Sequence[PlannedJob], target: Target) -> Iterator[Submission]:
        """Register the job definition unless an identical revision is active, then ``submit_job``."""
        region = self._region()
        client = self._client("batch")
        for job in jobs:
            try:
                revision = self._definition(client, job.body["registerJobDefinition"])
                answer = client.submit_job(**{**job.body["submitJob"], "jobDefinition": revision})
            except Exception as exc:
                raise LaunchError(brief_error(exc)) from exc
            job_id = str(answer["jobId"])
            url = f"https://{region}.console.aws.amazon.com/batch/home?region={region}#jobs/detail/{job_id}"
            follow = f"aws batch describe-jobs --jobs {job_id} --region {region}"
            yield Submission(job_id, list(job.shards), str(answer.get("jobName", "")), url, follow)

    def _definition(self, client: Any, wanted: dict[str, Any]) -> str:
        """``name:revision`` of an active revision identical to ``wanted``, registered if there is none."""
        name = wanted["jobDefinitionName"]
        pages = client.get_paginator("describe_job_definitions").paginate(jobDefinitionName=name, status="ACTIVE")
        for page in pages:
            for found in page.get("jobDefinitions", []):
                if req.same_definition(wanted, found):
                    log.info("job definition %s:%s is the same: reused", name, found["revision"])
                    return f"{name}:{found['revision']}"
        answer = client.register_job_definition(**wanted)
        log.info("registered job definition %s:%s", name, answer["revision"])
        return f"{name}:{answer['revision']}"

    # -- following ------------------------------------------------------------------------------

    def states(self, jobs: Sequence[dict[str, Any]]) -> dict[str, JobState]:
        """``describe_jobs`` of each parent and of its children (``ID:INDEX``)."""
        client = self._client("batch")
        found: dict[str, JobState] = {}
        for job in jobs:
            job_id, shards = job["job_id"], job["shards"]
            (parent,) = client.describe_jobs(jobs=[job_id])["jobs"] or [{"jobId": job_id, "status": "UNKNOWN"}]
            found[job_id] = _state(parent)
            if len(shards) == 1:
                self._children[job_id] = {shards[0]: found[job_id]}
                continue
            children: dict[int, JobState] = {}
            ids = [f"{job_id}:{i}" for i in range(len(shards))]
            for start in range(0, len(ids), 100):  # DescribeJobs takes at most 100 ids
                for child in client.describe_jobs(jobs=ids[start:start + 100])["jobs"]:
                    index = int(child.get("arrayProperties", {}).get("index", child["jobId"].rpartition(":")[2]))
                    children[shards[index]] = _state(child)
            self._children[job_id] = children
        return found

    def shard_phase(self, state: JobState, shard: int) -> JobState:
        """The state of the array child running ``shard`` (the job's own when it has none yet)."""
        return self._children.get(state.job_id, {}).get(shard, state)

    def logs(self, job: dict[str, Any], shard: int, *, follow: bool = False, tail: int | None = None) -> Iterator[str]:
        """The CloudWatch stream of the child running ``shard`` (its latest attempt's)."""
        shards = job["shards"]
        job_id = job["job_id"] if len(shards) == 1 else f"{job['job_id']}:{shards.index(shard)}"
        batch, logs = self._client("batch"), self._client("logs")
        token: str | None = None
        stream = None
        while True:
            (detail,) = batch.describe_jobs(jobs=[job_id])["jobs"] or [{}]
            latest = detail.get("container", {}).get("logStreamName")
            if latest and latest != stream:  # a retry writes to a stream of its own
                stream, token = latest, None
            ended = _state(detail).phase in ("succeeded", "failed", "cancelled") if detail else True
            if stream is None and not follow:
                raise LaunchError(f"no log stream for {job_id} yet: the child has not started (llm-ocr jobs status)")
            if stream is not None:
                while True:
                    args: dict[str, Any] = {"logGroupName": LOG_GROUP, "logStreamName": stream, "startFromHead": True}
                    if token:
                        args["nextToken"] = token
                    elif tail is not None:
                        args.update(startFromHead=False, limit=tail)
                    page = logs.get_log_events(**args)
                    for event in page.get("events", []):
                        yield str(event.get("message", "")).rstrip("\n")
                    done = page.get("nextForwardToken") == token or not page.get("events")
                    token = page.get("nextForwardToken")
                    if done:
                        break
            if not follow or ended:
                return
            time.sleep(_LOG_POLL_S)

    def cancel(self, jobs: Sequence[dict[str, Any]]) -> list[str]:
        """``terminate_job`` each parent (Batch ends its children: running ones are stopped)."""
        client = self._client("batch")
        for job in jobs:
            client.terminate_job(jobId=job["job_id"], reason="cancelled with llm-ocr jobs cancel")
        return [job["job_id"] for job in jobs]


def _state(detail: dict[str, Any]) -> JobState:
    status = str(detail.get("status", ""))
    phase: Phase = _PHASES.get(status, "unknown")
    if phase == "failed" and (detail.get("isCancelled") or detail.get("isTerminated")):
        phase = "cancelled"
    started, stopped = detail.get("startedAt"), detail.get("stoppedAt")
    running = None
    if started:
        end = stopped if stopped and phase != "running" else datetime.now(timezone.utc).timestamp() * 1000
        running = max(0.0, (end - started) / 1000)
    message = detail.get("statusReason")
    reason = detail.get("container", {}).get("reason")
    if reason and reason not in (message or ""):
        message = f"{message}: {reason}" if message else reason
    return JobState(str(detail.get("jobId", "")), phase, status, message, running)


def _secret_refs(given: dict[str, str] | Sequence[str] | None) -> dict[str, str]:
    if not given:
        return {}
    pairs = given.items() if isinstance(given, dict) else (item.partition("=")[::2] for item in given)
    found = {}
    for name, arn in pairs:
        if not _ENV_NAME.match(name or "") or not _SECRET_ARN.match(arn or ""):
            raise LaunchError(f"--aws-secret {name}={arn}: write NAME=ARN, ARN a Secrets Manager secret's "
                              "(arn:aws:secretsmanager:REGION:ACCOUNT:secret:NAME-SUFFIX) or an SSM parameter's "
                              "(arn:aws:ssm:REGION:ACCOUNT:parameter/NAME)")
        found[name] = arn
    return found
