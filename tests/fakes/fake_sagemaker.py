"""A local SageMaker Processing that really runs the jobs it is given, in front of moto.

boto3 reaches it through ``AWS_ENDPOINT_URL_SAGEMAKER`` (and ``AWS_ENDPOINT_URL_SERVICE_QUOTAS``);
every other service (S3, CloudWatch Logs, Secrets Manager, IAM, STS) is moto itself. moto accepts
``CreateProcessingJob`` but reports ``Completed`` at once and drops ``Environment`` and
``ProcessingResources`` from describe (docs/facts.md#local-stand-ins), so this server:

- checks every ``CreateProcessingJob`` body against SageMaker's documented limits (written out
  here from the API reference, independently of the launcher's own check), answering a
  ``ValidationException`` as SageMaker would, then forwards it to moto (which keeps the job and
  gives its ARN) and records the exact body in :attr:`FakeSageMaker.requests`;
- runs the job: for each of ``InstanceCount`` hosts ``algo-1``...``algo-N``, a folder standing for
  the host's ``/opt/ml`` with ``config/resourceconfig.json`` naming that host (found through
  ``LLM_OCR_SAGEMAKER_RESOURCE_CONFIG``) and the ``ProcessingInputs`` delivered from moto's S3
  under ``processing/`` as SageMaker delivers them (``FullyReplicated``: every object to every
  host; ``ShardedByS3Key``: about 1/N of the objects to each host, so one object reaches one host;
  ``S3InputMode: Pipe`` or ``AppManaged: true``: no files), then the request's exact ``ContainerEntrypoint + ContainerArguments`` as
  a local subprocess with the request's ``Environment`` (values under ``/opt/ml/`` pointed at the
  host's folder, as the container's mount would), the "execution role's" credentials and moto as
  every AWS endpoint; the command's words under ``/opt/ml/`` point at the host's folder too
  (:mod:`tests.fakes.container`: the job's bootstrap installs the wheel from there into a venv of
  its own; ``tests/fakes/vllm`` stands for the image's vLLM, the simulated DeepSeek-OCR server);
- sends each host's output to moto's CloudWatch Logs, group ``/aws/sagemaker/ProcessingJobs``,
  stream ``JOB/algo-K-EPOCH``, as SageMaker does;
- answers ``DescribeProcessingJob`` with moto's answer and the real state: ``InProgress`` while
  a host runs, then ``Completed`` (every host exited 0), ``Failed`` (with ``FailureReason``) or
  ``Stopped`` (``StopProcessingJob``: SIGTERM to every host, SIGKILL after ``grace_s``; or
  ``MaxRuntimeInSeconds`` reached); ``ProcessingStartTime``/``ProcessingEndTime`` as SageMaker
  gives them;
- answers ``ListServiceQuotas`` for ``sagemaker`` from :attr:`FakeSageMaker.quotas`.

:meth:`FakeSageMaker.kill_host` kills one host the way a lost instance dies. When a host fails
the others run on (``stop_others_on_failure=True`` stops them, the stricter reading of
SageMaker); the job is ``Failed`` once every host has ended.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import subprocess
import tempfile
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

from tests.fakes.container import container_env, map_words, with_image
from tests.fakes.fake_jobs import _signal_tree
from tests.fakes.http_server import FakeHTTPServer

LOG_GROUP = "/aws/sagemaker/ProcessingJobs"
#: The credentials of the jobs' "execution role" (distinct from the launcher's).
ROLE_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "role-key-id", "AWS_SECRET_ACCESS_KEY": "role-secret-key"}
TERMINAL = ("Completed", "Failed", "Stopped")


@dataclass
class Host:
    """One instance of a job."""

    name: str
    folder: Path
    process: subprocess.Popen[bytes] | None = None
    lines: list[str] = field(default_factory=list)
    exit_code: int | None = None


@dataclass
class FakeProcessingJob:
    """A submitted job and its hosts."""

    name: str
    body: dict[str, Any]
    folder: Path
    status: str = "InProgress"
    failure: str | None = None
    exit_message: str | None = None
    created: float = field(default_factory=time.time)
    started: float | None = None
    ended: float | None = None
    hosts: list[Host] = field(default_factory=list)
    stop_reason: str | None = None
    changed: threading.Condition = field(default_factory=threading.Condition)


class FakeSageMaker(FakeHTTPServer):
    """See the module docstring. ``job_env``: variables every host's "container" has (e.g.
    ``FAKE_VLLM_SIM_ARGS``); ``host_env``: host name (``algo-K``) -> variables of that host only
    (e.g. a slower GPU); ``images``: image URI -> extra variables when a job runs it."""

    def __init__(
        self,
        moto_url: str,
        *,
        workdir: Path | None = None,
        region: str = "us-east-1",
        job_env: dict[str, str] | None = None,
        host_env: dict[str, dict[str, str]] | None = None,
        images: dict[str, dict[str, str]] | None = None,
        quotas: dict[str, int] | None = None,
        stop_others_on_failure: bool = False,
        grace_s: float = 10.0,
    ) -> None:
        self.moto_url = moto_url
        self.region = region
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="fake-sagemaker-"))
        self.job_env = dict(job_env or {})
        self.host_env = dict(host_env or {})
        self.images = dict(images or {})
        self.quotas = dict(quotas or {})
        self.stop_others_on_failure = stop_others_on_failure
        self.grace_s = grace_s
        self.jobs: dict[str, FakeProcessingJob] = {}
        self.requests: list[dict[str, Any]] = []
        self.calls: list[str] = []
        self.lock = threading.Lock()
        super().__init__()

    # -- lifecycle (tests/fakes/http_server.py) -------------------------------------------------

    def handler_class(self) -> type[BaseHTTPRequestHandler]:
        return _handler(self)

    def stop_work(self) -> None:
        """Kill every host still running (before the fake stops answering)."""
        for job in list(self.jobs.values()):
            for host in job.hosts:
                if host.process is not None and host.process.poll() is None:
                    _signal_tree(host.process.pid, signal.SIGKILL)

    # -- test helpers ---------------------------------------------------------------------------

    def kill_host(self, job_name: str, host: int) -> None:
        """SIGKILL host ``algo-{host}`` of a job and everything it started (a lost instance)."""
        process = self.jobs[job_name].hosts[host - 1].process
        assert process is not None, "the host has not started"
        _signal_tree(process.pid, signal.SIGKILL)

    def wait_all(self, timeout: float = 120) -> None:
        """Wait until every job has ended."""
        deadline = time.monotonic() + timeout
        for job in list(self.jobs.values()):
            with job.changed:
                while job.status not in TERMINAL:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise TimeoutError(f"job {job.name} still {job.status}")
                    job.changed.wait(left)

    def log_text(self) -> str:
        """Every line every host printed."""
        return "\n".join(line for job in self.jobs.values() for host in job.hosts for line in host.lines)

    # -- the API --------------------------------------------------------------------------------

    def handle(self, target: str, body: bytes) -> tuple[int, dict[str, Any]] | None:
        """Answer ``target`` here, or None to forward the request to moto as it is."""
        with self.lock:
            self.calls.append(target)
        action = target.rpartition(".")[2]
        if target.startswith("ServiceQuotas") and action == "ListServiceQuotas":
            return 200, self._quotas(json.loads(body or b"{}"))
        if not target.startswith("SageMaker."):
            return None
        params = json.loads(body or b"{}")
        if action == "CreateProcessingJob":
            problems = check_create_request(params)
            if problems:
                return 400, {"__type": "ValidationException", "message": "; ".join(problems)}
            return None  # moto stores it; the response hook starts it
        if action == "StopProcessingJob" and params.get("ProcessingJobName") in self.jobs:
            self._stop(self.jobs[params["ProcessingJobName"]], "Stopped by the user", signal.SIGTERM)
        return None

    def after_moto(self, target: str, body: bytes, status: int, answer: bytes) -> bytes:
        """Moto's answer to a forwarded call, with the real state where moto invents one."""
        action = target.rpartition(".")[2]
        if not target.startswith("SageMaker.") or status != 200:
            return answer
        params = json.loads(body or b"{}")
        if action == "CreateProcessingJob":
            self._submit(params)
        elif action == "DescribeProcessingJob" and params.get("ProcessingJobName") in self.jobs:
            data = json.loads(answer)
            data.update(self._describe(self.jobs[params["ProcessingJobName"]]))
            return json.dumps(data).encode()
        return answer

    def _describe(self, job: FakeProcessingJob) -> dict[str, Any]:
        with job.changed:
            found: dict[str, Any] = {"ProcessingJobStatus": job.status, "CreationTime": job.created}
            if job.started is not None:
                found["ProcessingStartTime"] = job.started
            if job.ended is not None:
                found["ProcessingEndTime"] = job.ended
            if job.failure:
                found["FailureReason"] = job.failure
            if job.exit_message:
                found["ExitMessage"] = job.exit_message
        return found

    def _quotas(self, params: dict[str, Any]) -> dict[str, Any]:
        if params.get("ServiceCode") != "sagemaker":
            return {"Quotas": []}
        quotas = [
            {"ServiceCode": "sagemaker", "QuotaName": f"{name} for processing job usage", "QuotaCode": f"L-{i:08X}",
             "Value": float(value), "Unit": "None", "Adjustable": True}
            for i, (name, value) in enumerate(sorted(self.quotas.items()))
        ]
        return {"Quotas": quotas}

    # -- running jobs ---------------------------------------------------------------------------

    def _submit(self, body: dict[str, Any]) -> None:
        name = body["ProcessingJobName"]
        job = FakeProcessingJob(name, body, self.workdir / name)
        with self.lock:
            self.requests.append(json.loads(json.dumps(body)))
            self.jobs[name] = job
        threading.Thread(target=self._run, args=(job,), name=f"fake-sm-{name}", daemon=True).start()

    def _set(self, job: FakeProcessingJob, status: str, failure: str | None = None) -> None:
        with job.changed:
            job.status = status
            job.failure = failure or job.failure
            if status in TERMINAL:
                job.ended = time.time()
            job.changed.notify_all()

    def _run(self, job: FakeProcessingJob) -> None:
        cluster = job.body["ProcessingResources"]["ClusterConfig"]
        names = [f"algo-{k}" for k in range(1, int(cluster["InstanceCount"]) + 1)]
        try:
            for name in names:
                host = Host(name, job.folder / name)
                self._prepare(job, host, names, cluster["InstanceType"])
                job.hosts.append(host)
        except Exception as exc:  # noqa: BLE001 - e.g. an input that does not exist
            self._set(job, "Failed", f"ClientError: {exc}")
            return
        logs = _client("logs", self.moto_url, self.region)
        try:
            logs.create_log_group(logGroupName=LOG_GROUP)
        except logs.exceptions.ResourceAlreadyExistsException:
            pass
        app = job.body["AppSpecification"]
        command = [*app.get("ContainerEntrypoint", []), *app.get("ContainerArguments", [])]
        with job.changed:
            job.started = time.time()
            job.changed.notify_all()
        pumps = []
        for host in job.hosts:
            try:
                words = map_words(command, {"/opt/ml": str(host.folder / "opt/ml")})
                host.process = subprocess.Popen(words, env=self.marked(self._environment(job, host)), cwd=host.folder,
                                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
            except OSError as exc:
                host.lines.append(f"cannot start the container command: {exc}")
                host.exit_code = 127
                continue
            pump = threading.Thread(target=self._pump, args=(job, host, logs), daemon=True)
            pump.start()
            pumps.append(pump)
        limit = job.body.get("StoppingCondition", {}).get("MaxRuntimeInSeconds")
        timer = threading.Timer(float(limit), self._stop, args=(job, "MaxRuntimeExceeded", signal.SIGTERM)) if limit else None
        if timer:
            timer.start()
        for pump in pumps:
            pump.join()
        if timer:
            timer.cancel()
        failed = [h for h in job.hosts if h.exit_code != 0]
        if job.stop_reason:
            job.exit_message = job.stop_reason
            self._set(job, "Stopped")
        elif failed:
            self._set(job, "Failed", f"AlgorithmError: host {failed[0].name} exited with code {failed[0].exit_code}; "
                                     "see the job's logs")
        else:
            self._set(job, "Completed")

    def _prepare(self, job: FakeProcessingJob, host: Host, names: list[str], instance_type: str) -> None:
        config = host.folder / "opt/ml/config/resourceconfig.json"
        config.parent.mkdir(parents=True, exist_ok=True)
        config.write_text(json.dumps({"current_host": host.name, "hosts": names, "current_instance_type": instance_type,
                                      "current_group_name": "homogeneousCluster"}))
        s3 = _client("s3", self.moto_url, self.region)
        index = names.index(host.name)
        for item in job.body.get("ProcessingInputs", []):
            source = item["S3Input"]
            local = self._local(host, source["LocalPath"])
            local.mkdir(parents=True, exist_ok=True)
            parsed = urllib.parse.urlparse(source["S3Uri"])
            prefix = parsed.path.lstrip("/")
            keys = sorted(entry["Key"] for page in s3.get_paginator("list_objects_v2").paginate(Bucket=parsed.netloc, Prefix=prefix)
                          for entry in page.get("Contents", []))
            if not keys:
                raise RuntimeError(f"no object under {source['S3Uri']} (ProcessingInput {item['InputName']})")
            if item.get("AppManaged"):
                continue  # the container fetches it itself: SageMaker downloads nothing
            if source.get("S3InputMode", "File") == "Pipe":
                continue  # streamed through a FIFO named after the input: no files at LocalPath
            if source.get("S3DataDistributionType", "FullyReplicated") == "ShardedByS3Key":
                # Each host gets about 1/N of the objects (the API reference); one object goes to one host.
                keys = keys[index :: len(names)]
            for key in keys:
                target = local / (key[len(prefix):].lstrip("/") or key.rsplit("/", 1)[-1])
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(s3.get_object(Bucket=parsed.netloc, Key=key)["Body"].read())

    def _local(self, host: Host, container_path: str) -> Path:
        """The host's folder standing for a container path under ``/opt/ml``."""
        return host.folder / container_path.lstrip("/")

    def _environment(self, job: FakeProcessingJob, host: Host) -> dict[str, str]:
        root = str(host.folder / "opt/ml")
        env = {
            **container_env(host.folder),
            "LLM_OCR_SAGEMAKER_RESOURCE_CONFIG": f"{root}/config/resourceconfig.json",
            "AWS_ENDPOINT_URL": self.moto_url,
            "AWS_REGION": self.region,
            "AWS_DEFAULT_REGION": self.region,
            "AWS_EC2_METADATA_DISABLED": "true",
            "AWS_CONFIG_FILE": os.devnull,
            "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
            **ROLE_CREDENTIALS,
            **self.job_env,
            **self.host_env.get(host.name, {}),
        }
        with_image(env, self.images.get(job.body["AppSpecification"]["ImageUri"], {}))
        for key, value in (job.body.get("Environment") or {}).items():
            env[key] = root + value[len("/opt/ml"):] if value.startswith("/opt/ml/") else value
        return env

    def _pump(self, job: FakeProcessingJob, host: Host, logs: Any) -> None:
        """Copy a host's output to its CloudWatch stream (batched), then record its exit code."""
        assert host.process is not None and host.process.stdout is not None
        stream = f"{job.name}/{host.name}-{int(time.time())}"
        logs.create_log_stream(logGroupName=LOG_GROUP, logStreamName=stream)
        pending: list[dict[str, Any]] = []
        last = time.monotonic()

        def flush() -> None:
            if pending:
                logs.put_log_events(logGroupName=LOG_GROUP, logStreamName=stream, logEvents=list(pending))
                pending.clear()

        for raw in host.process.stdout:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            host.lines.append(line)
            pending.append({"timestamp": int(time.time() * 1000), "message": line})
            if len(pending) >= 50 or time.monotonic() - last > 0.3:
                flush()
                last = time.monotonic()
        flush()
        host.exit_code = host.process.wait()
        if host.exit_code != 0 and self.stop_others_on_failure and not job.stop_reason:
            for other in job.hosts:
                if other is not host and other.process is not None and other.process.poll() is None:
                    _signal_tree(other.process.pid, signal.SIGTERM)

    def _stop(self, job: FakeProcessingJob, reason: str, sig: int) -> None:
        with job.changed:
            if job.status in TERMINAL:
                return
            job.stop_reason = job.stop_reason or reason
        self._set(job, "Stopping")
        for host in job.hosts:
            if host.process is not None and host.process.poll() is None:
                _signal_tree(host.process.pid, sig)
                threading.Timer(self.grace_s, _signal_tree, args=(host.process.pid, signal.SIGKILL)).start()


# --------------------------------------------------------------------------------------------
# SageMaker's limits on CreateProcessingJob, from the API reference (not from llm-ocr's code)

_JOB_NAME = re.compile(r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$")
_ENV_KEY = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
_TAG_TEXT = re.compile(r"^[\w\s.:/=+\-@]*$")
_ROLE = re.compile(r"^arn:aws[a-z\-]*:iam::\d{12}:role/?[a-zA-Z_0-9+=,.@\-_/]+$")


def check_create_request(body: dict[str, Any]) -> list[str]:
    """What SageMaker would refuse in a ``CreateProcessingJob`` body."""
    import botocore.session

    problems = []
    name = body.get("ProcessingJobName", "")
    if not _JOB_NAME.match(name):
        problems.append(f"ProcessingJobName {name!r} must be 1-63 letters, digits and single hyphens")
    if not _ROLE.match(body.get("RoleArn", "")):
        problems.append("RoleArn is not a role ARN")
    app = body.get("AppSpecification") or {}
    if not app.get("ImageUri") or len(app["ImageUri"]) > 255:
        problems.append("AppSpecification.ImageUri is missing or over 255 characters")
    for key in ("ContainerEntrypoint", "ContainerArguments"):
        items = app.get(key, [])
        if len(items) > 100 or any(len(item) > 256 for item in items):
            problems.append(f"AppSpecification.{key}: at most 100 items of at most 256 characters")
    cluster = (body.get("ProcessingResources") or {}).get("ClusterConfig") or {}
    enum = botocore.session.get_session().get_service_model("sagemaker").shape_for("ProcessingInstanceType").enum
    if cluster.get("InstanceType") not in enum:
        problems.append(f"InstanceType {cluster.get('InstanceType')!r} is not a Processing instance type")
    if not 1 <= int(cluster.get("InstanceCount", 0)) <= 100:
        problems.append("InstanceCount must be 1-100")
    if not 1 <= int(cluster.get("VolumeSizeInGB", 0)) <= 16384:
        problems.append("VolumeSizeInGB must be 1-16384")
    runtime = (body.get("StoppingCondition") or {}).get("MaxRuntimeInSeconds", 1)
    if not 1 <= int(runtime) <= 777600:
        problems.append("MaxRuntimeInSeconds must be 1-777600")
    env = body.get("Environment") or {}
    if len(env) > 100:
        problems.append(f"Environment has {len(env)} entries (at most 100)")
    for key, value in env.items():
        if not _ENV_KEY.match(key) or len(key) > 256 or len(value) > 256:
            problems.append(f"Environment {key!r}: keys are variable names, values at most 256 characters")
    for item in body.get("ProcessingInputs", []):
        source, name = item.get("S3Input", {}), item.get("InputName")
        if not source.get("LocalPath", "").startswith("/opt/ml/processing/"):
            problems.append(f"ProcessingInput {name}: LocalPath must be under /opt/ml/processing/")
        for key, allowed in (("S3DataType", ("S3Prefix", "ManifestFile")), ("S3InputMode", ("File", "Pipe")),
                             ("S3DataDistributionType", ("FullyReplicated", "ShardedByS3Key"))):
            if key in source and source[key] not in allowed:
                problems.append(f"ProcessingInput {name}: S3Input.{key} {source[key]!r} is not one of {', '.join(allowed)}")
        if not isinstance(item.get("AppManaged", False), bool):
            problems.append(f"ProcessingInput {name}: AppManaged must be a boolean")
        if not str(source.get("S3Uri", "")).startswith("s3://"):
            problems.append(f"ProcessingInput {name}: S3Uri must be an s3:// URI")
    tags = body.get("Tags", [])
    if len(tags) > 50 or any(not _TAG_TEXT.match(t["Key"] + t["Value"]) or len(t["Value"]) > 256 for t in tags):
        problems.append("Tags: at most 50, keys and values of letters, digits, spaces and _.:/=+-@")
    return problems


def _client(service: str, endpoint: str, region: str) -> Any:
    import boto3

    return boto3.client(service, endpoint_url=endpoint, region_name=region, aws_access_key_id="fake-sagemaker",
                        aws_secret_access_key="fake-sagemaker")


def _handler(fake: FakeSageMaker) -> type[BaseHTTPRequestHandler]:
    moto = urllib.parse.urlparse(fake.moto_url)

    class Handler(BaseHTTPRequestHandler):  # POST only: the AWS JSON protocol
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            target = self.headers.get("X-Amz-Target", "")
            answered = fake.handle(target, body)
            if answered is not None:
                status, data = answered
                self._send(status, json.dumps(data).encode(), "application/x-amz-json-1.1")
                return
            connection = http.client.HTTPConnection(moto.hostname, moto.port, timeout=60)
            headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length")}
            connection.request("POST", self.path, body=body, headers=headers)
            response = connection.getresponse()
            answer = fake.after_moto(target, body, response.status, response.read())
            self._send(response.status, answer, response.getheader("Content-Type") or "application/x-amz-json-1.1")
            connection.close()

        def _send(self, status: int, data: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return Handler
