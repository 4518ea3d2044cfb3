"""A local AWS Batch that really runs the array jobs it is given, beside moto.

boto3 reaches it through ``AWS_ENDPOINT_URL_BATCH`` (the REST-JSON protocol: ``POST /v1/submitjob``
...); every other service (S3, CloudWatch Logs, Secrets Manager, SSM, STS) is moto itself. moto has a
Batch backend, but it runs jobs with Docker (absent here) and its "simple" mode only pretends, so
this server:

- checks every request against botocore's service model for ``batch`` (required and unknown
  members, types, enums: :func:`model_problems`, written here apart from llm-ocr's own check) and
  against the values Batch's API reference states (:func:`batch_problems`: array size 2..10,000,
  names, retry attempts 1..10 and at most 5 ``evaluateOnExit`` globs, timeout >= 60 s, resource
  requirements as whole numbers, a GPU only with EC2), and refuses what Batch refuses with a
  ``ClientException``: an unknown or disabled job queue, an unknown job definition;
- keeps job definitions as Batch does (revisions, ``ACTIVE``, the defaults Batch adds);
- runs an array job's children at once, each the definition's exact ``command`` as a local
  subprocess (:mod:`tests.fakes.container`) with its ``environment`` and the submission's overrides,
  the ``secrets`` resolved from moto by their ``valueFrom`` ARN (as the ECS agent does, with the
  execution role: none, no start), ``AWS_BATCH_JOB_ARRAY_INDEX``/``_SIZE``/``AWS_BATCH_JOB_ATTEMPT``,
  and the job role's credentials only from a container credentials endpoint this server answers
  (``AWS_CONTAINER_CREDENTIALS_FULL_URI``), with moto as every AWS endpoint;
- sends each attempt's output to moto's CloudWatch Logs, group ``/aws/batch/job``, a stream per
  attempt (``DEFINITION/default/ID``), named in ``container.logStreamName``;
- applies the ``retryStrategy`` as the user guide says: the first ``evaluateOnExit`` entry whose
  conditions all match (globs with an optional final ``*``) decides, none matching retries, a
  timeout or a termination is never retried; the parent is ``SUCCEEDED`` when every child is,
  ``FAILED`` once every child has ended and one failed;
- :meth:`FakeBatch.reclaim` kills a running child the way a Spot reclamation does: the attempt ends
  with status reason ``Host EC2 (instance i-...) terminated.`` and no exit code.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import signal
import subprocess
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.fakes.container import container_env, with_image
from tests.fakes.fake_jobs import _signal_tree
from tests.fakes.http_server import FakeHTTPServer

LOG_GROUP = "/aws/batch/job"
ACCOUNT = "123456789012"
#: The credentials of the jobs' "job role" (distinct from the launcher's), served by the
#: container credentials endpoint.
ROLE_CREDENTIALS = {"AccessKeyId": "batch-role-key-id", "SecretAccessKey": "batch-role-secret-key", "Token": "batch-tok"}
TERMINAL = ("SUCCEEDED", "FAILED")
SPOT_REASON = "Host EC2 (instance i-0fakespot0000001) terminated."
TIMEOUT_REASON = "Job attempt duration exceeded timeout"


@dataclass
class Child:
    """One child of an array job (or the job itself when it is not an array)."""

    job_id: str
    index: int | None
    status: str = "RUNNABLE"
    status_reason: str | None = None
    attempts: list[dict[str, Any]] = field(default_factory=list)
    process: subprocess.Popen[bytes] | None = None
    lines: list[str] = field(default_factory=list)
    started: int | None = None
    stopped: int | None = None
    stream: str | None = None
    #: Why the running attempt was ended from outside (a reclaim, a timeout, a termination).
    ended_by: str | None = None
    terminated: bool = False


@dataclass
class FakeJob:
    """A submitted job and its children."""

    job_id: str
    body: dict[str, Any]
    definition: dict[str, Any]
    queue: str
    created: int
    children: list[Child] = field(default_factory=list)
    changed: threading.Condition = field(default_factory=threading.Condition)


class FakeBatch(FakeHTTPServer):
    """See the module docstring. ``queues``: job queue name -> state (``ENABLED``/``DISABLED``);
    ``job_env``: variables of every child's "container"; ``child_env``: array index -> variables of
    that child only (e.g. a slower GPU); ``images``: image -> extra variables; ``grace_s``: SIGTERM
    to SIGKILL on a timeout or a termination (30 s: "Job timeouts" in the user guide)."""

    def __init__(self, moto_url: str, *, workdir: Path | None = None, region: str = "us-east-1",
                 queues: dict[str, str] | None = None, job_env: dict[str, str] | None = None,
                 images: dict[str, dict[str, str]] | None = None, child_env: dict[int, dict[str, str]] | None = None,
                 grace_s: float = 30.0) -> None:
        self.moto_url = moto_url
        self.region = region
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="fake-batch-"))
        self.queues = dict(queues or {"llm-ocr-gpu": "ENABLED"})
        self.job_env = dict(job_env or {})
        self.images = dict(images or {})
        self.child_env = dict(child_env or {})
        self.grace_s = grace_s
        self.definitions: dict[str, list[dict[str, Any]]] = {}
        self.jobs: dict[str, FakeJob] = {}
        #: (operation, body) of every accepted request, in order.
        self.requests: list[tuple[str, dict[str, Any]]] = []
        self.lock = threading.Lock()
        super().__init__()

    # -- lifecycle ------------------------------------------------------------------------------

    def stop_work(self) -> None:
        """Kill every child still running; none is retried after (terminated, as by the user):
        a retried attempt would start after the fake has stopped and outlive it."""
        for job in list(self.jobs.values()):
            with job.changed:
                for child in job.children:
                    child.terminated = True
            for child in job.children:
                if child.process is not None and child.process.poll() is None:
                    _signal_tree(child.process.pid, signal.SIGKILL)

    # -- test helpers ---------------------------------------------------------------------------

    def sent(self, operation: str) -> list[dict[str, Any]]:
        """The accepted bodies of ``operation``."""
        return [body for name, body in self.requests if name == operation]

    def reclaim(self, job_id: str, index: int) -> None:
        """End child ``index``'s running attempt as a Spot reclamation does (its host is gone)."""
        child = self.jobs[job_id].children[index]
        assert child.process is not None and child.process.poll() is None, "the child is not running"
        child.ended_by = SPOT_REASON
        _signal_tree(child.process.pid, signal.SIGKILL)

    def wait_all(self, timeout: float = 300) -> None:
        """Wait until every job has ended."""
        deadline = time.monotonic() + timeout
        for job in list(self.jobs.values()):
            with job.changed:
                while not all(c.status in TERMINAL for c in job.children):
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise TimeoutError(f"job {job.job_id} still running")
                    job.changed.wait(left)

    def log_text(self) -> str:
        """Every line every child printed."""
        return "\n".join(line for job in self.jobs.values() for c in job.children for line in c.lines)

    # -- the API --------------------------------------------------------------------------------

    def handle(self, handler: Any) -> None:
        """One request: the REST-JSON API, or the container credentials endpoint."""
        if handler.command == "GET" and handler.path.startswith("/v2/credentials/"):
            self._send(handler, 200, {**ROLE_CREDENTIALS, "Expiration": "2099-01-01T00:00:00Z",
                                      "RoleArn": f"arn:aws:iam::{ACCOUNT}:role/llm-ocr-batch-job"})
            return
        body = json.loads(handler.rfile.read(int(handler.headers.get("Content-Length") or 0)) or b"{}")
        operation = {op.http["requestUri"]: name for name in _model().operation_names
                     if (op := _model().operation_model(name))}.get(handler.path.split("?")[0])
        if handler.command != "POST" or operation is None:
            self._send(handler, 404, {"message": f"no route {handler.command} {handler.path}"}, "ClientException")
            return
        problems = model_problems(body, operation) + batch_problems(body, operation)
        if problems:
            self._send(handler, 400, {"message": "; ".join(problems)}, "ClientException")
            return
        try:
            answer = getattr(self, f"_{operation}")(body)
        except _Refused as exc:
            self._send(handler, 400, {"message": str(exc)}, "ClientException")
            return
        with self.lock:
            self.requests.append((operation, json.loads(json.dumps(body))))
        self._send(handler, 200, answer)

    @staticmethod
    def _send(handler: Any, status: int, data: dict[str, Any], error: str | None = None) -> None:
        raw = json.dumps(data).encode()
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        if error:
            handler.send_header("x-amzn-ErrorType", error)
        handler.send_header("Content-Length", str(len(raw)))
        handler.end_headers()
        handler.wfile.write(raw)

    def _DescribeJobQueues(self, body: dict[str, Any]) -> dict[str, Any]:
        found = []
        for name, state in self.queues.items():
            arn = f"arn:aws:batch:{self.region}:{ACCOUNT}:job-queue/{name}"
            if not body.get("jobQueues") or name in body["jobQueues"] or arn in body["jobQueues"]:
                found.append({"jobQueueName": name, "jobQueueArn": arn, "state": state, "status": "VALID",
                              "priority": 1, "computeEnvironmentOrder": []})
        return {"jobQueues": found}

    def _RegisterJobDefinition(self, body: dict[str, Any]) -> dict[str, Any]:
        name = body["jobDefinitionName"]
        with self.lock:
            revisions = self.definitions.setdefault(name, [])
            revision = len(revisions) + 1
            stored = json.loads(json.dumps(body))
            container = stored.get("containerProperties", {})
            for key in ("volumes", "mountPoints", "ulimits", "secrets"):  # Batch's own defaults
                container.setdefault(key, [])
            # Batch gives the environment back in an order of its own.
            container["environment"] = list(reversed(container.get("environment", [])))
            stored.update(revision=revision, status="ACTIVE", containerOrchestrationType="ECS",
                          jobDefinitionArn=f"arn:aws:batch:{self.region}:{ACCOUNT}:job-definition/{name}:{revision}")
            revisions.append(stored)
        return {"jobDefinitionName": name, "jobDefinitionArn": stored["jobDefinitionArn"], "revision": revision}

    def _DescribeJobDefinitions(self, body: dict[str, Any]) -> dict[str, Any]:
        found = [d for name, revisions in self.definitions.items() for d in revisions
                 if body.get("jobDefinitionName") in (None, name) and body.get("status") in (None, d["status"])]
        return {"jobDefinitions": found}

    def _SubmitJob(self, body: dict[str, Any]) -> dict[str, Any]:
        queue = body["jobQueue"].rpartition("/")[2]
        if self.queues.get(queue) != "ENABLED":
            raise _Refused(f"Job Queue {body['jobQueue']} does not exist or is not enabled")
        definition = self._definition(body["jobDefinition"])
        container = definition.get("containerProperties", {})
        if any(r["type"] == "GPU" for r in container.get("resourceRequirements", [])) \
                and "FARGATE" in definition.get("platformCapabilities", []):
            raise _Refused("GPU resources are not supported on Fargate")
        job_id = str(uuid.uuid4())
        size = body.get("arrayProperties", {}).get("size")
        job = FakeJob(job_id, body, definition, queue, _now())
        job.children = [Child(f"{job_id}:{i}", i) for i in range(size)] if size else [Child(job_id, None)]
        with self.lock:
            self.jobs[job_id] = job
        for child in job.children:
            threading.Thread(target=self._run, args=(job, child), name=f"fake-batch-{child.job_id}", daemon=True).start()
        arn = f"arn:aws:batch:{self.region}:{ACCOUNT}:job/{job_id}"
        return {"jobArn": arn, "jobName": body["jobName"], "jobId": job_id}

    def _definition(self, reference: str) -> dict[str, Any]:
        name, _, revision = reference.rpartition("/")[2].partition(":")
        revisions = [d for d in self.definitions.get(name, []) if d["status"] == "ACTIVE"]
        chosen = [d for d in revisions if str(d["revision"]) == revision] if revision else revisions[-1:]
        if not chosen:
            raise _Refused(f"Job definition {reference} does not exist")
        return chosen[0]

    def _DescribeJobs(self, body: dict[str, Any]) -> dict[str, Any]:
        if len(body["jobs"]) > 100:
            raise _Refused("at most 100 jobs per DescribeJobs")
        found = []
        for job_id in body["jobs"]:
            parent, _, index = job_id.partition(":")
            job = self.jobs.get(parent)
            if job is None:
                continue
            with job.changed:
                if index:
                    if int(index) < len(job.children) and job.children[0].index is not None:
                        found.append(self._detail(job, job.children[int(index)]))
                else:
                    found.append(self._parent_detail(job))
        return {"jobs": found}

    def _detail(self, job: FakeJob, child: Child) -> dict[str, Any]:
        detail: dict[str, Any] = {
            "jobArn": f"arn:aws:batch:{self.region}:{ACCOUNT}:job/{child.job_id}", "jobName": job.body["jobName"],
            "jobId": child.job_id, "jobQueue": job.queue, "status": child.status, "createdAt": job.created,
            "jobDefinition": job.definition["jobDefinitionArn"], "attempts": list(child.attempts),
            "container": {"image": job.definition["containerProperties"]["image"]},
            "isTerminated": child.terminated, "tags": job.body.get("tags", {}),
        }
        if child.status_reason:
            detail["statusReason"] = child.status_reason
        if child.started:
            detail["startedAt"] = child.started
        if child.stopped:
            detail["stoppedAt"] = child.stopped
        if child.stream:
            detail["container"]["logStreamName"] = child.stream
        if child.attempts and "exitCode" in child.attempts[-1]["container"]:
            detail["container"]["exitCode"] = child.attempts[-1]["container"]["exitCode"]
        if child.index is not None:
            detail["arrayProperties"] = {"index": child.index}
        return detail

    def _parent_detail(self, job: FakeJob) -> dict[str, Any]:
        if job.children[0].index is None:
            return self._detail(job, job.children[0])
        counts = {s: sum(c.status == s for c in job.children)
                  for s in ("SUBMITTED", "PENDING", "RUNNABLE", "STARTING", "RUNNING", "SUCCEEDED", "FAILED")}
        if all(c.status in TERMINAL for c in job.children):
            status = "FAILED" if counts["FAILED"] else "SUCCEEDED"
        else:
            status = "RUNNING" if counts["RUNNING"] else "PENDING"
        detail = {"jobArn": f"arn:aws:batch:{self.region}:{ACCOUNT}:job/{job.job_id}", "jobName": job.body["jobName"],
                  "jobId": job.job_id, "jobQueue": job.queue, "status": status, "createdAt": job.created,
                  "jobDefinition": job.definition["jobDefinitionArn"],
                  "arrayProperties": {"size": len(job.children), "statusSummary": counts},
                  "isTerminated": any(c.terminated for c in job.children), "tags": job.body.get("tags", {})}
        if status == "FAILED":
            detail["statusReason"] = "Array Child Job failed"
        return detail

    def _TerminateJob(self, body: dict[str, Any]) -> dict[str, Any]:
        parent, _, index = body["jobId"].partition(":")
        job = self.jobs.get(parent)
        if job is None:
            raise _Refused(f"Job {body['jobId']} does not exist")
        for child in job.children if not index else [job.children[int(index)]]:
            with job.changed:
                child.terminated = True
                if child.status in TERMINAL:
                    continue
                if child.process is None:
                    self._end(job, child, "FAILED", body["reason"])
                    continue
                child.ended_by = body["reason"]
            _signal_tree(child.process.pid, signal.SIGTERM)
            threading.Timer(self.grace_s, _signal_tree, args=(child.process.pid, signal.SIGKILL)).start()
        return {}

    _CancelJob = _TerminateJob

    # -- running children -----------------------------------------------------------------------

    def _end(self, job: FakeJob, child: Child, status: str, reason: str | None) -> None:
        with job.changed:
            child.status = status
            child.status_reason = reason
            child.stopped = _now()
            job.changed.notify_all()

    def _run(self, job: FakeJob, child: Child) -> None:
        container = job.definition["containerProperties"]
        retry = job.definition.get("retryStrategy") or {}
        retry = {**retry, **(job.body.get("retryStrategy") or {})}
        attempts = int(retry.get("attempts", 1))
        logs = _client("logs", self.moto_url, self.region)
        try:
            logs.create_log_group(logGroupName=LOG_GROUP)
        except logs.exceptions.ResourceAlreadyExistsException:
            pass
        for attempt in range(1, attempts + 1):
            with job.changed:
                if child.terminated:
                    return
            try:
                env = self._environment(job, child, attempt)
            except Exception as exc:  # noqa: BLE001 - a secret the agent cannot read: the task never starts
                self._end(job, child, "FAILED", f"ResourceInitializationError: unable to pull secrets: {exc}")
                return
            folder = self.workdir / child.job_id.replace(":", "-") / f"attempt-{attempt}"
            env.update(container_env(folder))
            with_image(env, self.images.get(container["image"], {}))
            stream = f"{job.definition['jobDefinitionName']}/default/{uuid.uuid4().hex}"
            logs.create_log_stream(logGroupName=LOG_GROUP, logStreamName=stream)
            command = (job.body.get("containerOverrides") or {}).get("command") or container["command"]
            with job.changed:
                if child.terminated:  # terminated (or the fake stopped) while the attempt was prepared
                    return
                child.status, child.stream, child.ended_by = "RUNNING", stream, None
                child.started = child.started or _now()
                child.process = subprocess.Popen(command, env=self.marked(env), cwd=folder, stdout=subprocess.PIPE,
                                                 stderr=subprocess.STDOUT, start_new_session=True)
                job.changed.notify_all()
            limit = (job.body.get("timeout") or job.definition.get("timeout") or {}).get("attemptDurationSeconds")
            timer = threading.Timer(float(limit), self._timeout, args=(job, child)) if limit else None
            if timer:
                timer.start()
            started = _now()
            code = self._pump(child, logs, stream)
            if timer:
                timer.cancel()
            reason = child.ended_by
            record: dict[str, Any] = {"container": {"logStreamName": stream}, "startedAt": started,
                                      "stoppedAt": _now(), "statusReason": reason or "Essential container in task exited"}
            if reason != SPOT_REASON:  # a lost host reports no exit code
                record["container"]["exitCode"] = code
            with job.changed:
                child.attempts.append(record)
            if code == 0 and reason is None:
                self._end(job, child, "SUCCEEDED", "Essential container in task exited")
                return
            again = reason not in (TIMEOUT_REASON,) and not child.terminated and attempt < attempts \
                and _decide(retry.get("evaluateOnExit") or [], record) == "RETRY"
            if not again:
                self._end(job, child, "FAILED", record["statusReason"])
                return
            with job.changed:
                child.status = "RUNNABLE"
                job.changed.notify_all()

    def _timeout(self, job: FakeJob, child: Child) -> None:
        with job.changed:
            child.ended_by = TIMEOUT_REASON
        if child.process is not None:
            _signal_tree(child.process.pid, signal.SIGTERM)
            threading.Timer(self.grace_s, _signal_tree, args=(child.process.pid, signal.SIGKILL)).start()

    def _environment(self, job: FakeJob, child: Child, attempt: int) -> dict[str, str]:
        container = job.definition["containerProperties"]
        env = {item["name"]: item["value"] for item in container.get("environment", [])}
        env.update({item["name"]: item["value"] for item in (job.body.get("containerOverrides") or {}).get("environment", [])})
        if container.get("secrets"):
            if not container.get("executionRoleArn"):
                raise RuntimeError("the job definition has secrets but no executionRoleArn")
            env.update({item["name"]: self._secret(item["valueFrom"]) for item in container["secrets"]})
        env.update(self.job_env)
        env.update(self.child_env.get(child.index if child.index is not None else -1, {}))
        env.update({
            "AWS_BATCH_JOB_ID": child.job_id, "AWS_BATCH_JOB_ATTEMPT": str(attempt), "AWS_BATCH_JQ_NAME": job.queue,
            "AWS_BATCH_CE_NAME": "llm-ocr-fake-ce", "AWS_REGION": self.region, "AWS_ENDPOINT_URL": self.moto_url,
            "AWS_EC2_METADATA_DISABLED": "true", "AWS_CONFIG_FILE": os.devnull, "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
        })
        if container.get("jobRoleArn"):
            env["AWS_CONTAINER_CREDENTIALS_FULL_URI"] = f"{self.url}/v2/credentials/{child.job_id}"
        if child.index is not None:
            env.update(AWS_BATCH_JOB_ARRAY_INDEX=str(child.index), AWS_BATCH_JOB_ARRAY_SIZE=str(len(job.children)))
        return env

    def _secret(self, arn: str) -> str:
        service = arn.split(":")[2]
        if service == "secretsmanager":
            return str(_client("secretsmanager", self.moto_url, self.region).get_secret_value(SecretId=arn)["SecretString"])
        name = arn.split(":parameter", 1)[1]
        return str(_client("ssm", self.moto_url, self.region).get_parameter(Name=name, WithDecryption=True)["Parameter"]["Value"])

    def _pump(self, child: Child, logs: Any, stream: str) -> int:
        """Copy an attempt's output to its CloudWatch stream, a batch at least every 0.3 s (a line
        then silence still arrives, as the awslogs driver sends it); its exit code."""
        assert child.process is not None and child.process.stdout is not None
        pending: list[dict[str, Any]] = []
        lock = threading.Lock()
        done = threading.Event()

        def flush() -> None:
            with lock:
                batch = pending[:]
                pending.clear()
                if batch:  # under the lock: batches arrive in order
                    logs.put_log_events(logGroupName=LOG_GROUP, logStreamName=stream, logEvents=batch)

        def flusher() -> None:
            while not done.wait(0.3):
                flush()

        thread = threading.Thread(target=flusher, daemon=True)
        thread.start()
        for raw in child.process.stdout:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            child.lines.append(line)
            with lock:
                pending.append({"timestamp": _now(), "message": line})
        done.set()
        thread.join()
        flush()
        return child.process.wait()


class _Refused(Exception):
    """What Batch answers with a ``ClientException``."""


def _decide(entries: list[dict[str, str]], attempt: dict[str, Any]) -> str:
    """The action of the first entry whose given conditions all match (none: ``RETRY``)."""
    values = {"onStatusReason": attempt.get("statusReason") or "", "onReason": attempt["container"].get("reason") or "",
              "onExitCode": str(attempt["container"].get("exitCode", ""))}
    for entry in entries:
        if all(_glob(entry[key], values[key]) for key in values if key in entry):
            return entry["action"].upper()
    return "RETRY"


def _glob(pattern: str, value: str) -> bool:
    """Batch's globs: exact, or a prefix when ending in ``*`` (``EvaluateOnExit`` in the API reference)."""
    return value.startswith(pattern[:-1]) if pattern.endswith("*") else fnmatch.fnmatchcase(value, pattern)


def _now() -> int:
    return int(time.time() * 1000)


def _client(service: str, endpoint: str, region: str) -> Any:
    import boto3

    return boto3.client(service, endpoint_url=endpoint, region_name=region, aws_access_key_id="fake-batch",
                        aws_secret_access_key="fake-batch")


def _model() -> Any:
    import botocore.session

    global _MODEL
    if _MODEL is None:
        _MODEL = botocore.session.get_session().get_service_model("batch")
    return _MODEL


_MODEL: Any = None


# --------------------------------------------------------------------------------------------
# What Batch refuses


def model_problems(body: dict[str, Any], operation: str) -> list[str]:
    """Where ``body`` does not fit ``operation``'s input shape in botocore's model."""
    problems: list[str] = []

    def walk(shape: Any, value: Any, where: str) -> None:
        kind = shape.type_name
        types = {"structure": dict, "map": dict, "list": list, "string": str, "integer": int, "long": int,
                 "boolean": bool}
        if kind in types and (not isinstance(value, types[kind]) or (kind in ("integer", "long") and isinstance(value, bool))):
            problems.append(f"{where}: expected {kind}")
            return
        if kind == "structure":
            problems.extend(f"{where}: missing {m}" for m in shape.required_members if m not in value)
            problems.extend(f"{where}: unknown field {m}" for m in value if m not in shape.members)
            for name, item in value.items():
                if name in shape.members:
                    walk(shape.members[name], item, f"{where}.{name}")
        elif kind == "list":
            for i, item in enumerate(value):
                walk(shape.member, item, f"{where}[{i}]")
        elif kind == "map":
            for key, item in value.items():
                walk(shape.value, item, f"{where}[{key}]")
        elif kind == "string" and shape.enum and value not in shape.enum:
            problems.append(f"{where}: {value!r} not in {shape.enum}")

    walk(_model().operation_model(operation).input_shape, body, operation)
    return problems


_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$")
_GLOB = re.compile(r"^[A-Za-z0-9.:\s]*\*?$")


def batch_problems(body: dict[str, Any], operation: str) -> list[str]:
    """The values Batch's API reference says it refuses (see the module docstring)."""
    problems = []
    for key in ("jobName", "jobDefinitionName"):
        if key in body and not _NAME.match(body[key]):
            problems.append(f"{key} {body[key]!r}: up to 128 letters, numbers, hyphens and underscores")
    size = (body.get("arrayProperties") or {}).get("size")
    if size is not None and not 2 <= size <= 10_000:
        problems.append(f"arrayProperties.size {size}: an array job has 2 to 10000 children")
    retry = body.get("retryStrategy") or {}
    if "attempts" in retry and not 1 <= retry["attempts"] <= 10:
        problems.append("retryStrategy.attempts: 1 to 10")
    entries = retry.get("evaluateOnExit") or []
    if entries and "attempts" not in retry:
        problems.append("retryStrategy.evaluateOnExit needs attempts")
    if len(entries) > 5:
        problems.append("retryStrategy.evaluateOnExit: at most 5 entries")
    for entry in entries:
        for key in ("onStatusReason", "onReason"):
            if key in entry and (len(entry[key]) > 512 or not _GLOB.match(entry[key])):
                problems.append(f"evaluateOnExit.{key} {entry[key]!r} is not a valid pattern")
        if "onExitCode" in entry and not re.match(r"^[0-9]*\*?$", entry["onExitCode"]):
            problems.append(f"evaluateOnExit.onExitCode {entry['onExitCode']!r}: digits and an optional final *")
        if entry.get("action", "").upper() not in ("RETRY", "EXIT"):
            problems.append("evaluateOnExit.action: RETRY or EXIT")
    timeout = (body.get("timeout") or {}).get("attemptDurationSeconds")
    if timeout is not None and timeout < 60:
        problems.append("timeout.attemptDurationSeconds: at least 60")
    container = body.get("containerProperties") or {}
    if operation == "RegisterJobDefinition" and body.get("type") == "container" and not container:
        problems.append("a container job definition needs containerProperties")
    for item in container.get("resourceRequirements", []):
        if not re.match(r"^[1-9][0-9]*$", item.get("value", "")):
            problems.append(f"resourceRequirements {item.get('type')}: a whole number, got {item.get('value')!r}")
    if "GPU" in {r.get("type") for r in container.get("resourceRequirements", [])} \
            and "FARGATE" in body.get("platformCapabilities", []):
        problems.append("GPU resources are not supported on Fargate")
    for item in container.get("environment", []):
        if str(item.get("name", "")).startswith("AWS_BATCH"):
            problems.append(f"environment {item['name']}: names starting with AWS_BATCH are reserved")
    for item in container.get("secrets", []):
        if not re.match(r"^arn:aws[a-z-]*:(secretsmanager|ssm):", item.get("valueFrom", "")) \
                and not re.match(r"^[A-Za-z0-9_./-]+$", item.get("valueFrom", "")):
            problems.append(f"secrets {item.get('name')}: valueFrom must be a Secrets Manager or SSM ARN or name")
    return problems

