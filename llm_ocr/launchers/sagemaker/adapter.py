"""SageMaker Processing: one ``CreateProcessingJob`` with ``InstanceCount = N`` for N shards.

Plain boto3 (the ``sagemaker`` SDK stays out: docs/facts.md#aws-sagemaker-processing). Calls: ``sts.
get_caller_identity`` (the credentials work), ``iam.get_role`` (the execution role exists, when
the caller may look), ``service-quotas.list_service_quotas`` (the account's "ml.X for processing
job usage" quota, when readable), ``secretsmanager.describe_secret`` (the named secrets exist; no
value is ever read here), ``sagemaker.create_processing_job`` / ``describe_processing_job`` /
``stop_processing_job``, and CloudWatch Logs ``describe_log_streams`` / ``get_log_events`` on
``/aws/sagemaker/ProcessingJobs`` (one stream per host, ``JOB/algo-K-EPOCH``).

Each host finds its shard in ``/opt/ml/config/resourceconfig.json`` (``algo-K``) and the job's
``LLM_OCR_TASK_SHARDS`` map (:mod:`llm_ocr.container.shard_index`): a launch of more than 100 shards is
several jobs, and a relaunch runs only the unfinished shards, so host K is not always shard K-1.
The output goes straight to its URL through llm-ocr's storage, not through ``ProcessingOutputs``,
so a relaunch sees (and skips) the parts written before. Credentials come from the job's
execution role; a secret the role cannot stand in for (``HF_TOKEN`` for an ``hf://`` output)
is fetched by name from Secrets Manager at start (``--aws-secret NAME=SECRET_ID``,
:mod:`llm_ocr.container.aws_secrets`), never put in ``Environment``.

Code delivery without building an image: the stock AWS vLLM Deep Learning Container, and the
llm-ocr wheel uploaded once per content digest to S3 (``OUT/_state/code/`` for an ``s3://``
output, else ``--code-uri``) and given to every host as a ``ProcessingInput``, installed by the
entrypoint before it execs ``llm-ocr`` (:mod:`llm_ocr.launchers.core.command`). Or ``--image URI``
from ``sagemaker/Dockerfile``. SageMaker Processing has no job retries: a failed or stopped
shard is run again by relaunching, and resumes from its parts.
"""

from __future__ import annotations

import dataclasses
import re
import time
from collections.abc import Iterator, Sequence
from datetime import datetime, timezone
from typing import Any, ClassVar

from fsspec.core import split_protocol
from pydantic import BaseModel, Field

from llm_ocr.costs import SAGEMAKER_HARDWARE, Hardware, sagemaker_price_note
from llm_ocr.launchers.core.adapter import JobState, Phase, PlatformOptions, Submission
from llm_ocr.launchers.core.aws import own_credentials
from llm_ocr.launchers.core.command import extras_for, install_then_run, with_extras
from llm_ocr.launchers.core.images import image_note, launch_image
from llm_ocr.launchers.core.spec import (
    LAUNCH_LABEL,
    LaunchError,
    LaunchRequest,
    PlannedJob,
    ShardSpec,
    Target,
    assert_no_secret,
    brief_error,
)
from llm_ocr.launchers.core.wheel import Wheel, upload_wheel, wheel_to_ship
from llm_ocr.launchers.sagemaker import request as req

#: AWS's vLLM Deep Learning Container for SageMaker (aws/deep-learning-containers release notes:
#: vLLM 0.14.0, PyTorch 2.9.1, CUDA 12.9; DeepSeek-OCR needs vLLM >= 0.12). Its own entrypoint
#: starts vLLM's server: the job's ContainerEntrypoint replaces it.
DLC_VLLM_TAG = "vllm:0.14.0-gpu-py312-cu129-ubuntu22.04-sagemaker"
#: The DLC registry account per region (aws/deep-learning-containers available_images.md);
#: every other region uses 763104351884.
DLC_ACCOUNTS = {
    "af-south-1": "626614931356",
    "ap-east-1": "871362719292",
    "ap-northeast-3": "364406365360",
    "ap-southeast-3": "907027046896",
    "eu-south-1": "692866216735",
    "me-south-1": "217643126080",
    "me-central-1": "914824155844",
    "cn-north-1": "727897471807",
    "cn-northwest-1": "727897471807",
}
DEFAULT_DLC_ACCOUNT = "763104351884"
DEFAULT_GPU_INSTANCE = "ml.g6e.xlarge"
DEFAULT_CPU_INSTANCE = "ml.m5.xlarge"
DEFAULT_VOLUME_GB = 50
LOG_GROUP = "/aws/sagemaker/ProcessingJobs"
#: Instance families llm-ocr serves DeepSeek-OCR on (L40S, L4, A10G, H100): other accelerators
#: in Processing's list (T4, V100, K80, Inferentia, Trainium) are refused for stages with a model.
MODEL_FAMILIES = ("ml.g6e.", "ml.g6.", "ml.g5.", "ml.p5.")
_ACCELERATED = re.compile(r"^ml\.(g\d|p\d|inf\d|trn\d)")
_ROLE_ARN = re.compile(r"^arn:aws[a-z\-]*:iam::\d{12}:role/?[a-zA-Z_0-9+=,.@\-_/]+$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

_PHASES: dict[str, Phase] = {
    "InProgress": "running",
    "Stopping": "running",
    "Completed": "succeeded",
    "Failed": "failed",
    "Stopped": "cancelled",
}


class SageMakerOptions(PlatformOptions):
    """SageMaker Processing: ``llm-ocr launch sagemaker`` options (``llm_ocr.launch`` keywords)."""

    instance_type: str | None = Field(
        None, description=f"Instance type (default: {DEFAULT_GPU_INSTANCE}, 1x L40S; {DEFAULT_CPU_INSTANCE} for "
        "assemble and --endpoint runs); e.g. ml.g6.xlarge (L4), ml.g5.xlarge (A10G), ml.g6e.12xlarge (4x L40S), "
        "ml.p5.4xlarge (H100).", json_schema_extra={"metavar": "TYPE"},
    )
    role: str | None = Field(None, description="The jobs' execution role (required; see sagemaker/README.md).",
                             json_schema_extra={"metavar": "ARN"})
    region: str | None = Field(None, description="AWS region (default: AWS_REGION / AWS_DEFAULT_REGION / your AWS "
                                                 "config).")
    aws_secret: list[str] | dict[str, str] = Field(
        default_factory=list, description="The job sets NAME from this AWS Secrets Manager secret at start (e.g. "
        "HF_TOKEN=llm-ocr/hf-token for an hf:// output).",
        json_schema_extra={"metavar": "NAME=SECRET_ID", "repeat": True},
    )
    code_uri: str | None = Field(None, description="Where the llm-ocr wheel is uploaded (default: OUT/_state/code for "
                                                   "an "
                                 "s3:// output).", json_schema_extra={"metavar": "S3_URL"})
    volume_size: int = Field(DEFAULT_VOLUME_GB, description="ML storage volume per instance, in GB (model weights and "
                             "scratch).", json_schema_extra={"metavar": "GB"})
    price_per_hour: float | None = Field(None, description="Your price of one instance-hour, for the cost table "
                                         "(default: the built-in estimate).", json_schema_extra={"metavar": "USD"})


class SageMaker:
    """The SageMaker Processing adapter (see the module docstring)."""

    name: ClassVar[str] = "sagemaker"
    shard_env: ClassVar[bool] = False
    hardware_option: ClassVar[str] = "instance_type"
    options: ClassVar[type[BaseModel]] = SageMakerOptions

    def __init__(self, **options: Any) -> None:
        """``options``: :class:`SageMakerOptions` fields."""
        given = SageMakerOptions.model_validate(options)
        self.role = given.role
        self.region = given.region
        self.code_uri = given.code_uri.rstrip("/") if given.code_uri else None
        self.wheel_path = given.wheel
        self.aws_secrets = _secret_map(given.aws_secret)
        self.volume_size_gb = given.volume_size
        self.price_per_hour = given.price_per_hour
        self._session: Any = None
        self._clients: dict[str, Any] = {}

    # -- options --------------------------------------------------------------------------------

    @classmethod
    def from_record(cls, info: dict[str, Any]) -> SageMaker:
        """An adapter following the jobs of a launch record (its region)."""
        return cls(region=info.get("region"))

    # -- clients --------------------------------------------------------------------------------

    def _client(self, service: str) -> Any:
        if service not in self._clients:
            if self._session is None:
                import boto3

                self._session = boto3.session.Session(region_name=self._region())
            from botocore.config import Config

            # Fail fast on an unreachable or refusing service: the launch reports it and goes on.
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
        """Region, role, instance type, credentials, quota, secrets, image and the wheel to ship."""
        chosen = launch_image(request, self.name)
        region = self._region()
        role = self._role()
        if request.secret_names:
            names = ", ".join(request.secret_names)
            raise LaunchError(
                f"--secret {names}: SageMaker jobs have no secrets channel (their Environment is readable by anyone "
                f"who can describe them); store the value in AWS Secrets Manager and pass --aws-secret NAME=SECRET_ID, "
                "which the job fetches by name at start with its role"
            )
        hardware = self._hardware(request)
        notes = [("SageMaker Processing has no job retries (--attempts is not used): relaunch the same command to "
                  "rerun failed shards; they resume from their parts")]
        if hardware.price_per_hour is not None and self.price_per_hour is None:
            notes.append(f"{sagemaker_price_note(hardware.name, region)}; pass --price-per-hour for your own")
        if request.offline:
            account, quota = "ACCOUNT", None
            self._check_secrets(request, notes, offline=True)
            notes.append("offline: not checked: the AWS credentials and account, that the role exists, the account's "
                         "instance quota, that the --aws-secret secrets exist")
        else:
            account = self._account()
            self._check_role(role, notes)
            quota = self._quota(hardware.name, notes)
            self._check_secrets(request, notes)
        info: dict[str, Any] = {"region": region, "account": account, "role": role}
        private: dict[str, Any] = {"quota": quota, "role": role, "secret_ids": dict(self.aws_secrets),
                                   "stage": request.stage}
        # The jobs get the secrets' values only in their own process (fetched by name at start):
        # the specs list the names, with no value to leak.
        secret_names = dict.fromkeys(self.aws_secrets, "")
        if request.image:
            return Target(hardware, request.image, [], secret_names, info, private, notes)
        dlc = DLC_VLLM_TAG
        if chosen is not None:
            dlc = chosen.image.ref
            notes.append(image_note(request, chosen))

        wheel = wheel_to_ship(self.wheel_path)
        code_prefix = self._code_prefix(request)
        code_uri = f"{code_prefix}/wheels/{wheel.digest[:16]}/"
        extras = extras_for([request.output, *request.inputs])
        if self.aws_secrets:
            extras = sorted({*extras, "sagemaker"})  # boto3, to fetch the secrets
        private.update(wheel=wheel, code_uri=code_uri)
        info.update(code_uri=code_uri)
        image = f"{DLC_ACCOUNTS.get(region, DEFAULT_DLC_ACCOUNT)}.dkr.ecr.{region}.amazonaws.com{_cn(region)}/{dlc}"
        if region not in DLC_ACCOUNTS and not re.match(r"^(us|eu|ap|ca|sa)-", region):
            notes.append(f"the vLLM DLC registry for {region} is assumed to be {DEFAULT_DLC_ACCOUNT}: pass --image if "
                         "it is not")
        prefix = install_then_run(with_extras(f"{req.CODE_LOCAL_PATH}/{wheel.filename}", extras))
        return Target(hardware, image, prefix, secret_names, info, private, notes)

    def _role(self) -> str:
        if not self.role:
            raise LaunchError(
                "no execution role: pass --role arn:aws:iam::ACCOUNT:role/NAME, a role SageMaker can assume that may "
                "read the inputs, write the output and write logs (sagemaker/README.md lists the permissions)"
            )
        if not _ROLE_ARN.match(self.role):
            raise LaunchError(f"--role {self.role!r} is not an IAM role ARN (arn:aws:iam::123456789012:role/NAME)")
        return self.role

    def _hardware(self, request: LaunchRequest) -> Hardware:
        name = request.hardware or (DEFAULT_GPU_INSTANCE if request.needs_model else DEFAULT_CPU_INSTANCE)
        allowed = req.processing_instance_types()
        gpu_types = sorted(t for t in allowed if t.startswith(MODEL_FAMILIES) and t in SAGEMAKER_HARDWARE)
        if name not in allowed:
            if name in req.training_instance_types():
                raise LaunchError(
                    f"--instance-type {name} is for SageMaker Training only: Processing jobs cannot use it. "
                    f"GPU types Processing offers: {_type_list(gpu_types)}"
                )
            raise LaunchError(f"unknown --instance-type {name!r} for SageMaker Processing; GPU types: "
                              f"{_type_list(gpu_types)}")
        hardware = SAGEMAKER_HARDWARE.get(name) or Hardware(name, 0, None, None, True, "")
        if request.needs_model:
            if not name.startswith(MODEL_FAMILIES) or name not in SAGEMAKER_HARDWARE or hardware.gpus == 0:
                what = "has no GPU" if not _ACCELERATED.match(name) else "is not a GPU llm-ocr serves DeepSeek-OCR on"
                raise LaunchError(
                    f"--instance-type {name} {what}, but llm-ocr {request.stage} serves a model in the job: choose "
                    f"{_type_list(gpu_types)}, or pass --endpoint URL"
                )
        if self.price_per_hour is not None:
            hardware = dataclasses.replace(hardware, price_per_hour=self.price_per_hour, listed=True)
        return hardware

    def _account(self) -> str:
        try:
            return str(self._client("sts").get_caller_identity()["Account"])
        except Exception as exc:
            raise LaunchError(
                f"AWS credentials missing or refused ({brief_error(exc)}): configure them (aws configure, aws sso "
                "login, or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY) for the account the jobs run in"
            ) from exc

    def _check_role(self, role: str, notes: list[str]) -> None:
        try:
            self._client("iam").get_role(RoleName=role.rsplit("/", 1)[-1])
        except Exception as exc:
            if _code(exc) == "NoSuchEntity":
                raise LaunchError(f"--role {role}: no such role in this account; create it "
                                  "(sagemaker/README.md)") from exc
            notes.append(f"could not check that role {role} exists ({brief_error(exc)})")

    def _quota(self, instance_type: str, notes: list[str]) -> int | None:
        """The account's "TYPE for processing job usage" quota, None when it cannot be read."""
        wanted = f"{instance_type} for processing job usage"
        try:
            pages = self._client("service-quotas").get_paginator("list_service_quotas").paginate(ServiceCode="sagemaker")  # noqa: E501 - not wrapped yet
            for page in pages:
                for quota in page.get("Quotas", []):
                    if quota.get("QuotaName") == wanted:
                        return int(quota["Value"])
        except Exception as exc:  # noqa: BLE001 - not readable: SageMaker will say at submit time
            notes.append(f"could not read the account's service quotas ({brief_error(exc)}); SageMaker refuses a job "
                         f"beyond the '{wanted}' quota at submit time")
            return None
        notes.append(f"no '{wanted}' quota listed for this account; SageMaker checks it at submit time")
        return None

    def _check_secrets(self, request: LaunchRequest, notes: list[str], *, offline: bool = False) -> None:
        protocols = {split_protocol(url)[0] for url in [request.output, *request.inputs]}
        if split_protocol(request.output)[0] == "hf" and "HF_TOKEN" not in self.aws_secrets:
            raise LaunchError(
                f"--output {request.output} is on the Hugging Face Hub: the jobs need a write token. Store it in AWS "
                "Secrets Manager (aws secretsmanager create-secret --name llm-ocr/hf-token --secret-string hf_...) and "
                "pass --aws-secret HF_TOKEN=llm-ocr/hf-token; the job fetches it by name with its role"
            )
        if "hf" in protocols and "HF_TOKEN" not in self.aws_secrets:
            notes.append("hf:// inputs are read without a token: pass --aws-secret HF_TOKEN=SECRET_ID for private ones")
        for name, reference in ({} if offline else self.aws_secrets).items():
            secret_id = reference.partition("#")[0]
            try:
                self._client("secretsmanager").describe_secret(SecretId=secret_id)  # metadata only, never the value
            except Exception as exc:
                if _code(exc) == "ResourceNotFoundException":
                    raise LaunchError(
                        f"--aws-secret {name}={reference}: no secret {secret_id!r} in AWS Secrets Manager in "
                        f"{self._region()}; create it there (aws secretsmanager create-secret --name {secret_id} ...)"
                    ) from exc
                notes.append(f"could not check secret {secret_id!r} ({brief_error(exc)}); the job's role must read it")

    def _code_prefix(self, request: LaunchRequest) -> str:
        if self.code_uri:
            if split_protocol(self.code_uri)[0] != "s3":
                raise LaunchError(f"--code-uri {self.code_uri!r} must be an s3:// URL: SageMaker copies it into the "
                                  "job")
            return self.code_uri
        if split_protocol(request.output)[0] == "s3":
            return f"{request.output.rstrip('/')}/_state/code"
        raise LaunchError(
            f"--output {request.output} is not on S3, so the llm-ocr wheel needs another home: pass --code-uri "
            "s3://BUCKET/PREFIX (the role must read it), or --image with llm-ocr installed (sagemaker/Dockerfile)"
        )

    def plan_jobs(self, specs: Sequence[ShardSpec], target: Target) -> list[PlannedJob]:
        """Shards in runs of at most 100 hosts (one job each), each job's exact request body.

        Every spec's ``env`` becomes its job's ``Environment``, so the dry run shows what each
        host gets. Nothing here is secret: secrets are fetched by name in the job.
        """
        quota = target.private.get("quota")
        if quota is not None and len(specs) > quota:
            raise LaunchError(
                f"{len(specs)} shard(s) need {len(specs)} {specs[0].hardware} instances at once, but this account's "
                f"'{specs[0].hardware} for processing job usage' quota in {target.info['region']} is {quota}: request "
                f"more (Service Quotas console, or aws service-quotas request-service-quota-increase --service-code "
                f"sagemaker ...) or launch with --num-shards {max(quota, 1)}"
            )
        by_shard = {spec.shard_index: spec for spec in specs}
        groups = req.group_shards(list(by_shard), specs[0].num_shards, req.max_instances_per_job())
        role, secret_ids, stage = target.private["role"], target.private["secret_ids"], target.private["stage"]
        code_uri = target.private.get("code_uri")
        jobs = []
        for part, shards in enumerate(groups):
            group = [by_shard[s] for s in shards]
            first = group[0]
            env = req.job_environment(first, shards, target.info["region"], secret_ids)
            for spec in group:
                spec.env = dict(env)
                spec.attempts = 1  # Processing jobs are not retried: a relaunch is the retry
            name = req.job_name(stage, first.labels[LAUNCH_LABEL], part, len(groups))
            body = req.processing_job_body(name, group, target, env, stage=stage, role=role,
                                           volume_gb=self.volume_size_gb, code_uri=code_uri)
            problems = req.request_problems(body)
            if problems:
                raise LaunchError(
                    "the Processing job would break SageMaker's limits, so nothing was submitted: "
                    + "; ".join(problems)
                    + " (Environment holds the --env variables and llm-ocr's own; ContainerArguments the INPUTs and "
                    "stage options: shorten them, or put long option values in a file the job can read)"
                )
            jobs.append(PlannedJob(shards, body, group))
        # The job reads AWS as its role: the launcher's own keys must never ride along.
        try:
            assert_no_secret(own_credentials(self._session), "a Processing job request", [job.body for job in jobs])
        except LaunchError:
            raise LaunchError(
                "your AWS secret key or session token would appear in the Processing job request (in --env or a stage "
                "option): remove it; the jobs reach AWS as their execution role, and other secrets go by name "
                "(--aws-secret NAME=SECRET_ID)"
            ) from None
        return jobs

    # -- side effects ---------------------------------------------------------------------------

    def deliver(self, target: Target) -> None:
        """Upload the wheel to S3 unless a wheel with the same digest is there."""
        wheel: Wheel | None = target.private.get("wheel")
        if wheel is not None:
            upload_wheel(wheel, target.private["code_uri"], hint="pass --code-uri s3://BUCKET/PREFIX you can write, "
                         "or --image with llm-ocr installed")

    def submit(self, jobs: Sequence[PlannedJob], target: Target) -> Iterator[Submission]:
        """``create_processing_job`` per job (one per run of up to 100 shards)."""
        region = self._region()
        client = self._client("sagemaker")
        for job in jobs:
            name = job.body["ProcessingJobName"]
            try:
                client.create_processing_job(**job.body)
            except Exception as exc:
                hint = (" (the account's instance quota: see Service Quotas)" if _code(exc) == "ResourceLimitExceeded"
                        else "")
                raise LaunchError(f"{brief_error(exc)}{hint}") from exc
            url = f"https://{region}.console.aws.amazon.com/sagemaker/home?region={region}#/processing-jobs/{name}"
            follow = f"aws logs tail {LOG_GROUP} --log-stream-name-prefix {name}/ --follow --region {region}"
            yield Submission(name, list(job.shards), name, url, follow)

    # -- following ------------------------------------------------------------------------------

    def states(self, jobs: Sequence[dict[str, Any]]) -> dict[str, JobState]:
        """``describe_processing_job`` of each job."""
        client = self._client("sagemaker")
        return {job["job_id"]: _state(client.describe_processing_job(ProcessingJobName=job["job_id"])) for job in jobs}

    def shard_phase(self, state: JobState, shard: int) -> JobState:
        """SageMaker reports the job, not its hosts: every shard shares its job's state, marked
        ``shared`` so that a host that wrote all its markers is not blamed for another's failure."""
        return dataclasses.replace(state, shared=True)

    def logs(self, job: dict[str, Any], shard: int, *, follow: bool = False, tail: int | None = None) -> Iterator[str]:
        """The CloudWatch stream of the host running ``shard`` (``JOB/algo-K-...``)."""
        host = job["shards"].index(shard) + 1
        return self._stream_lines(job["job_id"], f"{job['job_id']}/algo-{host}-", follow=follow, tail=tail)

    def _stream_lines(self, name: str, prefix: str, *, follow: bool, tail: int | None) -> Iterator[str]:
        logs = self._client("logs")
        tokens: dict[str, str | None] = {}
        ended = False
        while True:
            try:
                streams = logs.describe_log_streams(logGroupName=LOG_GROUP, logStreamNamePrefix=prefix)["logStreams"]
            except Exception as exc:
                if _code(exc) != "ResourceNotFoundException":
                    raise LaunchError(f"cannot read the logs of {name} ({brief_error(exc)})") from exc
                streams = []
            if not streams and not follow:
                raise LaunchError(f"no log stream {LOG_GROUP}/{prefix}* yet: the host has not started (llm-ocr jobs "
                                  "status)")
            for stream in sorted(streams, key=lambda s: s["logStreamName"]):
                yield from self._events(logs, stream["logStreamName"], tokens, tail)
            if not follow or ended:
                return
            # One more pass after the job ends, for the lines written just before.
            state = _state(self._client("sagemaker").describe_processing_job(ProcessingJobName=name))
            ended = state.phase in ("succeeded", "failed", "cancelled")
            if not ended:
                time.sleep(2.0)

    @staticmethod
    def _events(logs: Any, stream: str, tokens: dict[str, str | None], tail: int | None) -> Iterator[str]:
        """New events of one stream since the last call (``tokens`` keeps the place)."""
        while True:
            args: dict[str, Any] = {"logGroupName": LOG_GROUP, "logStreamName": stream}
            if stream in tokens:
                args.update(nextToken=tokens[stream], startFromHead=True)
            elif tail is not None:
                args.update(startFromHead=False, limit=tail)
            else:
                args.update(startFromHead=True)
            page = logs.get_log_events(**args)
            for event in page.get("events", []):
                yield str(event.get("message", "")).rstrip("\n")
            token = page.get("nextForwardToken")
            done = token == tokens.get(stream) or not page.get("events")
            tokens[stream] = token
            if done:
                return

    def cancel(self, jobs: Sequence[dict[str, Any]]) -> list[str]:
        """``stop_processing_job`` each (a job's hosts stop together: every shard it runs)."""
        client = self._client("sagemaker")
        for job in jobs:
            client.stop_processing_job(ProcessingJobName=job["job_id"])
        return [job["job_id"] for job in jobs]


def _state(info: dict[str, Any]) -> JobState:
    status = str(info.get("ProcessingJobStatus", ""))
    phase: Phase = _PHASES.get(status, "unknown")
    started, ended = info.get("ProcessingStartTime"), info.get("ProcessingEndTime")
    if phase == "running" and started is None:
        phase = "pending"  # instances still being provisioned
    running = None
    if started is not None:
        end = ended if ended is not None and phase != "running" else datetime.now(timezone.utc)
        running = max(0.0, (_utc(end) - _utc(started)).total_seconds())
    message = info.get("FailureReason") or info.get("ExitMessage")
    return JobState(str(info["ProcessingJobName"]), phase, status, message, running)


def _utc(moment: datetime) -> datetime:
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


def _secret_map(given: dict[str, str] | Sequence[str] | None) -> dict[str, str]:
    if not given:
        return {}
    pairs = given.items() if isinstance(given, dict) else (item.partition("=")[::2] for item in given)
    found = {}
    for name, secret_id in pairs:
        if not _ENV_NAME.match(name or "") or not secret_id:
            raise LaunchError(f"--aws-secret {name}={secret_id}: write NAME=SECRET_ID (NAME a variable name, SECRET_ID "
                              "a Secrets Manager name or ARN, optionally #KEY of a JSON secret)")
        found[name] = secret_id
    return found


def _type_list(types: Sequence[str]) -> str:
    def describe(name: str) -> str:
        h = SAGEMAKER_HARDWARE[name]
        return f"{name} ({h.accelerator}" + (f", ~${h.price_per_hour:g}/h)" if h.price_per_hour is not None else ")")

    return ", ".join(describe(t) for t in types)


def _cn(region: str) -> str:
    return ".cn" if region.startswith("cn-") else ""


def _code(exc: BaseException) -> str:
    return str(getattr(exc, "response", {}).get("Error", {}).get("Code", ""))
