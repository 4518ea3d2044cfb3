"""A local stand-in for the Cloud Run Admin API v2 (and Cloud Logging's ``entries:list``) that
really runs the job executions it is given.

The real clients talk to it: ``google.cloud.run_v2`` with ``transport="rest"``,
``client_options={"api_endpoint": URL}`` and anonymous credentials, and ``google.cloud.logging``
over HTTP. Routes, from google-cloud-run 0.16's ``services/*/transports/rest_base.py``:

- ``POST   /v2/projects/P/locations/L/jobs?jobId=J`` (create_job), ``GET``/``PATCH``/``DELETE
  .../jobs/J`` (get_job, update_job, delete_job), ``GET .../jobs`` (list_jobs);
- ``POST   .../jobs/J:run`` (run_job: ``RunJobRequest.Overrides``);
- ``GET    .../jobs/J/executions[/E]`` (list_executions, get_execution), ``POST .../executions/E:cancel``;
- ``GET    .../executions/E/tasks`` (list_tasks);
- ``GET    .../locations/L/operations/O`` (the long-running operations' polling);
- ``POST   /v2/entries:list`` (Cloud Logging; a filter of ``key="value"`` / ``timestamp>"T"`` terms).

Create, update, run and cancel answer long-running operations; run's carries the execution in its
metadata at once and is done when the execution ends.

An execution runs each task's container as a local subprocess (its own session), at most
``parallelism`` at a time, with the template's env merged with the overrides' (by name), secret
references resolved from the fake Secret Manager (:attr:`FakeCloudRun.secrets`), the Cloud
Storage volumes materialised from the GCS emulator into the task's folder, and what the
container would have: ``CLOUD_RUN_TASK_INDEX``, ``CLOUD_RUN_TASK_COUNT``,
``CLOUD_RUN_TASK_ATTEMPT``, ``CLOUD_RUN_EXECUTION``, ``CLOUD_RUN_JOB``, plus ``job_env`` (the GCS
emulator's address stands in for the service account), and :mod:`tests.fakes.container`'s
``python3``, ``uv`` and fake ``vllm``; the command's words under a volume's mount path point at
the task's copy of it, and ``llm-ocr`` exists only in the venv the task's bootstrap installs the
shipped wheel into. A failed attempt is retried up
to ``maxRetries`` times with the next ``CLOUD_RUN_TASK_ATTEMPT``; an attempt past ``timeout`` is
stopped as Cloud Run stops one: SIGTERM to the container's main process, SIGKILL to everything
``grace_s`` seconds later (:meth:`FakeCloudRun.stop_attempt` does the same on demand).
"""

from __future__ import annotations

import json
import re
import secrets as random
import signal
import subprocess
import tempfile
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import psutil

from tests.fakes.container import Descendants, container_env, kill_tree, map_words, process_tree, with_image
from tests.fakes.http_server import FakeHTTPServer
from tests.storage_servers import GcsEmulator

_TYPE = "type.googleapis.com/google.cloud.run.v2."
_JOB_ID = re.compile(r"^[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?$")
_FILTER_TERM = re.compile(r'([\w.]+(?:\."[^"]+")?)\s*(=|>)\s*"([^"]*)"')


class ApiError(Exception):
    """An error answer: HTTP status, gRPC status name, message."""

    def __init__(self, code: int, status: str, message: str) -> None:
        super().__init__(message)
        self.code, self.status, self.message = code, status, message


#: A service account's email (Cloud Run's ``serviceAccount``): NAME@PROJECT.iam.gserviceaccount.com,
#: or a Google-managed one (PROJECT_NUMBER-compute@developer.gserviceaccount.com).
_SERVICE_ACCOUNT = re.compile(r"^[a-z][a-z0-9-]{4,61}[a-z0-9]@[a-z0-9-]+(\.iam)?\.gserviceaccount\.com$|^\d+-compute@developer\.gserviceaccount\.com$")
#: Google Cloud labels: keys 1-63 of lowercase letters, digits, _ and -, starting with a letter;
#: values 0-63 of the same; at most 64; Cloud Run's own prefixes are reserved.
_LABEL_KEY = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")
_LABEL_VALUE = re.compile(r"^[a-z0-9_-]{0,63}$")
_RESERVED_PREFIXES = ("run.googleapis.com", "cloud.googleapis.com", "serving.knative.dev", "autoscaling.knative.dev")
_ANNOTATION_KEY = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")


def _label_problems(labels: dict[str, Any]) -> list[str]:
    problems = [f"{len(labels)} labels (at most 64)"] if len(labels) > 64 else []
    for key, value in labels.items():
        if key.startswith(_RESERVED_PREFIXES) or not _LABEL_KEY.match(key):
            problems.append(f"key {key!r}: lowercase letters, digits, _ and -, starting with a letter, at most 63")
        elif not isinstance(value, str) or not _LABEL_VALUE.match(value):
            problems.append(f"value {value!r} of {key!r}: lowercase letters, digits, _ and -, at most 63")
    return problems


def _iso(t: float | None) -> str | None:
    if t is None:
        return None
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _seconds(duration: str) -> float:
    return float(duration.rstrip("s"))


@dataclass
class Attempt:
    """One run of a task's container."""

    number: int
    started: float
    ended: float | None = None
    exit_code: int | None = None
    term_signal: int | None = None
    stop_reason: str | None = None  # "timeout" | "stopped" | "cancelled"
    #: The container's environment (secrets resolved), for the tests to check what arrived.
    env: dict[str, str] = field(default_factory=dict, repr=False)


@dataclass
class FakeTask:
    """One task of an execution."""

    index: int
    state: str = "PENDING"  # RUNNING, SUCCEEDED, FAILED, CANCELLED
    attempts: list[Attempt] = field(default_factory=list)
    process: subprocess.Popen[bytes] | None = None
    started: float | None = None
    completed: float | None = None
    message: str = ""

    @property
    def retried(self) -> int:
        return max(0, len(self.attempts) - 1)


@dataclass
class FakeExecution:
    """One execution: the job's template as the overrides changed it, and its tasks."""

    name: str
    job: str
    template: dict[str, Any]
    task_count: int
    parallelism: int
    created: float = field(default_factory=time.time)
    started: float | None = None
    completed: float | None = None
    cancelled: bool = False
    tasks: list[FakeTask] = field(default_factory=list)
    operation: str = ""

    @property
    def short(self) -> str:
        return self.name.rsplit("/", 1)[-1]


class FakeCloudRun(FakeHTTPServer):
    """The fake API server (see the module docstring).

    Args:
        gcs: the GCS emulator Cloud Storage volumes are read from.
        secrets: Secret Manager: ``"NAME"`` (latest) or ``"NAME:VERSION"`` -> value.
        job_env: variables every task's container has.
        task_env: task index -> extra variables for that task only (e.g. a broken GPU).
        images: image -> variables its container adds (a prebuilt image "contains" llm-ocr).
        grace_s: seconds between SIGTERM and SIGKILL when an attempt is stopped.
    """

    def __init__(
        self,
        gcs: GcsEmulator,
        *,
        secrets: dict[str, str] | None = None,
        job_env: dict[str, str] | None = None,
        task_env: dict[int, dict[str, str]] | None = None,
        images: dict[str, dict[str, str]] | None = None,
        grace_s: float = 10.0,
        workdir: Path | None = None,
    ) -> None:
        self.gcs = gcs
        self.secrets = dict(secrets or {})
        self.job_env = dict(job_env or {})
        self.task_env = dict(task_env or {})
        self.images = dict(images or {})
        self.grace_s = grace_s
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="fake-cloud-run-"))
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)
        self.jobs: dict[str, dict[str, Any]] = {}
        #: job name -> every version of it the API stored (create, then each update).
        self.job_versions: dict[str, list[dict[str, Any]]] = {}
        self.deleted: list[str] = []
        self.executions: dict[str, FakeExecution] = {}
        self.operations: dict[str, Any] = {}
        #: Every request: {"method", "path", "body"} (body parsed from JSON).
        self.requests: list[dict[str, Any]] = []
        #: Log entries: (time, job id, execution id, task index, attempt, line).
        self.log_entries: list[tuple[float, str, str, int, int, str]] = []
        super().__init__()

    # -- lifecycle (tests/fakes/http_server.py) -------------------------------------------------

    def stop_work(self) -> None:
        """Kill every task still running (before the fake stops answering)."""
        for execution in list(self.executions.values()):
            execution.cancelled = True
            for task in execution.tasks:
                if task.process is not None and task.process.poll() is None:
                    kill_tree(task.process.pid, signal.SIGKILL)

    # -- test helpers ---------------------------------------------------------------------------

    def calls(self, method: str, suffix: str = "") -> list[dict[str, Any]]:
        """Requests with this method whose path ends with ``suffix``."""
        with self.lock:
            return [r for r in self.requests if r["method"] == method and r["path"].endswith(suffix)]

    def stop_attempt(self, execution: str, index: int, reason: str = "stopped") -> None:
        """Stop the running attempt of a task as Cloud Run stops one at its time limit: SIGTERM
        to the container's main process, SIGKILL to all of it after ``grace_s``. The attempt
        counts as failed (and is retried if retries are left)."""
        task = self.executions[execution].tasks[index]
        self._stop(task, reason)

    def wait_all(self, timeout: float = 180) -> None:
        """Wait until every execution has ended."""
        deadline = time.monotonic() + timeout
        with self.changed:
            while any(e.completed is None for e in self.executions.values()):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError("executions still running")
                self.changed.wait(left)

    def log_text(self) -> str:
        """Every log line of every task."""
        with self.lock:
            return "\n".join(entry[-1] for entry in self.log_entries)

    # -- HTTP -----------------------------------------------------------------------------------

    def handle(self, handler: BaseHTTPRequestHandler) -> None:
        parsed = urllib.parse.urlsplit(handler.path)
        length = int(handler.headers.get("Content-Length") or 0)
        raw = handler.rfile.read(length) if length else b""
        body = json.loads(raw) if raw else None
        with self.lock:
            self.requests.append({"method": handler.command, "path": parsed.path, "body": body})
        try:
            status, answer = 200, self._route(handler.command, parsed.path, urllib.parse.parse_qs(parsed.query), body or {})
        except ApiError as exc:
            status, answer = exc.code, {"error": {"code": exc.code, "message": exc.message, "status": exc.status}}
        data = json.dumps(answer).encode()
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)

    def _route(self, method: str, path: str, query: dict[str, list[str]], body: dict[str, Any]) -> Any:
        if path == "/v2/entries:list" and method == "POST":
            return self._list_entries(body)
        match = re.match(r"^/v2/(projects/[^/]+/locations/[^/]+)(/.*)$", path)
        if not match:
            raise ApiError(404, "NOT_FOUND", f"no route {method} {path}")
        location, rest = match.groups()
        if rest.startswith("/operations/") and method == "GET":
            return self._operation(location + rest)
        if rest == "/jobs" and method == "POST":
            return self._create_job(location, query.get("jobId", [""])[0], body)
        if rest == "/jobs" and method == "GET":
            return {"jobs": [j for n, j in self.jobs.items() if n.startswith(location + "/")]}
        parts = re.match(r"^/jobs/([^/:]+)(:run)?(?:/executions(?:/([^/:]+)(:cancel|/tasks)?)?)?$", rest)
        if not parts:
            raise ApiError(404, "NOT_FOUND", f"no route {method} {path}")
        job_id, run, execution_id, tail = parts.groups()
        job_name = f"{location}/jobs/{job_id}"
        if run and method == "POST":
            return self._run(job_name, body)
        if "/executions" not in rest:
            if method == "GET":
                return self._job(job_name)
            if method == "PATCH":
                return self._update_job(job_name, body)
            if method == "DELETE":
                with self.lock:
                    self.deleted.append(job_name)
                    self.jobs.pop(job_name, None)
                return self._done_operation(location, "Job", {"name": job_name})
        if execution_id is None and method == "GET":
            with self.lock:
                return {"executions": [self._execution_json(e) for e in self.executions.values() if e.job == job_name]}
        execution = self.executions.get(f"{job_name}/executions/{execution_id}")
        if execution is None:
            raise ApiError(404, "NOT_FOUND", f"Execution {execution_id} not found")
        if tail is None and method == "GET":
            return self._execution_json(execution)
        if tail == "/tasks" and method == "GET":
            return {"tasks": [self._task_json(execution, t) for t in execution.tasks]}
        if tail == ":cancel" and method == "POST":
            self._cancel(execution)
            return self._done_operation(location, "Execution", self._execution_json(execution))
        raise ApiError(404, "NOT_FOUND", f"no route {method} {path}")

    # -- jobs -----------------------------------------------------------------------------------

    def _job(self, name: str) -> dict[str, Any]:
        with self.lock:
            job = self.jobs.get(name)
        if job is None:
            raise ApiError(404, "NOT_FOUND", f"Resource '{name.rsplit('/', 1)[-1]}' of kind 'JOB' in region "
                                             f"'{name.split('/')[3]}' in project '{name.split('/')[1]}' does not exist.")
        return job

    def _create_job(self, location: str, job_id: str, body: dict[str, Any]) -> dict[str, Any]:
        if not _JOB_ID.match(job_id):
            raise ApiError(400, "INVALID_ARGUMENT", f"invalid job id {job_id!r}")
        name = f"{location}/jobs/{job_id}"
        with self.lock:
            if name in self.jobs:
                raise ApiError(409, "ALREADY_EXISTS", f"Resource '{job_id}' already exists.")
            self._validate(body)
            job = self._stored(name, body, generation=1, created=time.time())
            self.jobs[name] = job
            self.job_versions[name] = [json.loads(json.dumps(job))]
        return self._done_operation(location, "Job", job)

    def _update_job(self, name: str, body: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            current = self._job(name)
            self._validate(body)
            job = self._stored(name, body, generation=int(current["generation"]) + 1, created=current["_created"])
            job["executionCount"] = current.get("executionCount", 0)
            self.jobs[name] = job
            self.job_versions[name].append(json.loads(json.dumps(job)))
        return self._done_operation(name.split("/jobs/")[0], "Job", job)

    def _stored(self, name: str, body: dict[str, Any], *, generation: int, created: float) -> dict[str, Any]:
        job = json.loads(json.dumps(body))
        job.update(name=name, generation=str(generation), createTime=_iso(created), updateTime=_iso(time.time()),
                   launchStage="GA", _created=created)
        # What the server fills in by itself: the fields a client never sent.
        job["template"]["template"].setdefault("executionEnvironment", "EXECUTION_ENVIRONMENT_GEN2")
        return job

    @staticmethod
    def _validate(body: dict[str, Any]) -> None:
        """The API's own rules the launcher must meet (docs/facts.md#google-cloud-run-jobs)."""
        template = body.get("template") or {}
        task = template.get("template") or {}
        containers = task.get("containers") or []
        if len(containers) != 1 or not containers[0].get("image"):
            raise ApiError(400, "INVALID_ARGUMENT", "a job needs exactly one container with an image")
        if int(template.get("taskCount", 1)) > 10_000:
            raise ApiError(400, "INVALID_ARGUMENT", "taskCount must be at most 10000")
        limits = (containers[0].get("resources") or {}).get("limits") or {}
        cpu, memory = float(limits.get("cpu", "1")), limits.get("memory", "512Mi")
        memory_gib = float(memory[:-2]) / (1024 if memory.endswith("Mi") else 1)
        if cpu > 8 or memory_gib > 32:
            raise ApiError(400, "INVALID_ARGUMENT", "at most 8 CPU and 32Gi of memory")
        if "nvidia.com/gpu" in limits:
            if (task.get("nodeSelector") or {}).get("accelerator") != "nvidia-l4":
                raise ApiError(400, "INVALID_ARGUMENT", "a GPU needs nodeSelector.accelerator nvidia-l4")
            if cpu < 4 or memory_gib < 16:
                raise ApiError(400, "INVALID_ARGUMENT", "an L4 needs at least 4 CPU and 16Gi")
            if _seconds(task.get("timeout", "600s")) > 3600:
                raise ApiError(400, "INVALID_ARGUMENT", "a GPU task times out after at most 1 hour")
            # Jobs' GPUs run without zonal redundancy (Cloud Run docs, "Configure GPUs for jobs").
            if task.get("gpuZonalRedundancyDisabled") is not True:
                raise ApiError(400, "INVALID_ARGUMENT", "a job's GPU needs gpuZonalRedundancyDisabled: true")
        if "gpuZonalRedundancyDisabled" in task and not isinstance(task["gpuZonalRedundancyDisabled"], bool):
            raise ApiError(400, "INVALID_ARGUMENT", "gpuZonalRedundancyDisabled must be a boolean")
        retries = task.get("maxRetries", 3)
        if not isinstance(retries, int) or not 0 <= retries <= 10:
            raise ApiError(400, "INVALID_ARGUMENT", f"maxRetries must be between 0 and 10 (got {retries!r})")
        account = task.get("serviceAccount")
        if account is not None and not _SERVICE_ACCOUNT.match(str(account)):
            raise ApiError(400, "INVALID_ARGUMENT", f"serviceAccount {account!r} is not a service account email")
        for where, labels in (("job", body.get("labels")), ("template", template.get("labels"))):
            for problem in _label_problems(labels or {}):
                raise ApiError(400, "INVALID_ARGUMENT", f"{where} labels: {problem}")
        for key in (body.get("annotations") or {}):
            if key.split("/")[0].endswith(_RESERVED_PREFIXES) or not _ANNOTATION_KEY.match(key):
                raise ApiError(400, "INVALID_ARGUMENT", f"annotation key {key!r} is not allowed")

    # -- operations -----------------------------------------------------------------------------

    def _done_operation(self, location: str, kind: str, resource: dict[str, Any]) -> dict[str, Any]:
        public = {k: v for k, v in resource.items() if not k.startswith("_")}
        return {"name": f"{location}/operations/{random.token_hex(8)}", "done": True,
                "metadata": {"@type": _TYPE + kind, **public}, "response": {"@type": _TYPE + kind, **public}}

    def _operation(self, name: str) -> dict[str, Any]:
        with self.lock:
            execution = self.operations.get(name)
        if execution is None:
            raise ApiError(404, "NOT_FOUND", f"operation {name} not found")
        return self._run_operation(execution)

    def _run_operation(self, execution: FakeExecution) -> dict[str, Any]:
        data = {"@type": _TYPE + "Execution", **self._execution_json(execution)}
        answer = {"name": execution.operation, "metadata": data, "done": execution.completed is not None}
        if execution.completed is not None:
            answer["response"] = data
        return answer

    # -- executions -----------------------------------------------------------------------------

    def _run(self, job_name: str, body: dict[str, Any]) -> dict[str, Any]:
        job = self._job(job_name)
        overrides = body.get("overrides") or {}
        template = json.loads(json.dumps(job["template"]["template"]))
        container = template["containers"][0]
        for override in overrides.get("containerOverrides") or []:
            if override.get("name") not in ("", None, container.get("name")):
                raise ApiError(400, "INVALID_ARGUMENT", f"no container named {override.get('name')}")
            if override.get("args") or override.get("clearArgs"):
                container["args"] = list(override.get("args") or [])
            env = {e["name"]: e for e in container.get("env") or []}
            env.update({e["name"]: e for e in override.get("env") or []})
            container["env"] = list(env.values())
        if "timeout" in overrides:
            template["timeout"] = overrides["timeout"]
        task_count = int(overrides.get("taskCount") or job["template"].get("taskCount") or 1)
        if task_count > 10_000:
            raise ApiError(400, "INVALID_ARGUMENT", "taskCount must be at most 10000")
        parallelism = int(job["template"].get("parallelism") or task_count)
        job_id = job_name.rsplit("/", 1)[-1]
        name = f"{job_name}/executions/{job_id}-{random.token_hex(3)[:5]}"
        execution = FakeExecution(name, job_name, template, task_count, min(parallelism, task_count),
                                  tasks=[FakeTask(i) for i in range(task_count)])
        execution.operation = f"{job_name.split('/jobs/')[0]}/operations/{random.token_hex(8)}"
        with self.lock:
            job["executionCount"] = job.get("executionCount", 0) + 1
            job["latestCreatedExecution"] = {"name": name, "createTime": _iso(execution.created)}
            self.executions[name] = execution
            self.operations[execution.operation] = execution
        threading.Thread(target=self._run_execution, args=(execution,), daemon=True, name=f"fake-run-{execution.short}").start()
        return self._run_operation(execution)

    def _run_execution(self, execution: FakeExecution) -> None:
        execution.started = time.time()
        slots = threading.Semaphore(execution.parallelism)
        threads = [threading.Thread(target=self._run_task, args=(execution, task, slots), daemon=True) for task in execution.tasks]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        with self.changed:
            execution.completed = time.time()
            self.changed.notify_all()

    def _run_task(self, execution: FakeExecution, task: FakeTask, slots: threading.Semaphore) -> None:
        with slots:
            retries = int(execution.template.get("maxRetries", 0))
            timeout = _seconds(execution.template.get("timeout", "600s"))
            for number in range(retries + 1):
                if execution.cancelled:
                    self._finish(task, "CANCELLED", "the execution was cancelled")
                    return
                attempt = Attempt(number, time.time())
                try:
                    env = attempt.env = self._environment(execution, task, number)
                except ApiError as exc:
                    attempt.ended, attempt.exit_code = time.time(), 1
                    task.attempts.append(attempt)
                    self._finish(task, "FAILED", exc.message)
                    return
                self._attempt(execution, task, attempt, env, timeout)
                if attempt.exit_code == 0:
                    self._finish(task, "SUCCEEDED", "")
                    return
                if execution.cancelled:
                    self._finish(task, "CANCELLED", "the execution was cancelled")
                    return
            code = f"exit code {attempt.exit_code}" if attempt.exit_code is not None else f"signal {attempt.term_signal}"
            self._finish(task, "FAILED", f"Task {task.index} failed with {code} after {retries} retries")

    def _attempt(self, execution: FakeExecution, task: FakeTask, attempt: Attempt, env: dict[str, str], timeout: float) -> None:
        container = execution.template["containers"][0]
        folder = self.workdir / execution.short / f"task{task.index}-attempt{attempt.number}"
        (folder / "work").mkdir(parents=True, exist_ok=True)
        with self.changed:
            task.attempts.append(attempt)
            task.state = "RUNNING"
            task.started = task.started or attempt.started
            self.changed.notify_all()
        try:
            words = map_words([*container.get("command", []), *container.get("args", [])], self._mount(execution, container, folder))
        except ApiError as exc:
            attempt.ended, attempt.exit_code = time.time(), 1
            self._log(execution, task, attempt, f"cannot mount the task's volumes: {exc.message}")
            return
        seen = Descendants()
        try:
            process = subprocess.Popen(words, env=seen.marked(self.marked(env)), cwd=folder / "work",
                                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
        except OSError as exc:
            attempt.ended, attempt.exit_code = time.time(), 127
            self._log(execution, task, attempt, f"cannot start the container command: {exc}")
            return
        task.process = process
        timer = threading.Timer(timeout, self._stop, args=(task, "timeout"))
        timer.daemon = True
        timer.start()
        assert process.stdout is not None
        for raw in process.stdout:
            self._log(execution, task, attempt, raw.decode("utf-8", "replace").rstrip("\n"))
        code = process.wait()
        timer.cancel()
        seen.kill()  # the container ends with its main process: nothing it started outlives it
        attempt.ended = time.time()
        if code >= 0:
            attempt.exit_code = code
        else:
            attempt.term_signal = -code
        self._log(execution, task, attempt, f"Container called exit({code}).")

    def _stop(self, task: FakeTask, reason: str) -> None:
        process = task.process
        if process is None or process.poll() is not None:
            return
        if task.attempts:
            task.attempts[-1].stop_reason = task.attempts[-1].stop_reason or reason
        tree = process_tree(process.pid)
        try:
            process.send_signal(signal.SIGTERM)  # the container's main process only, as Docker/Cloud Run do
        except ProcessLookupError:
            return

        def kill_all() -> None:
            for proc in tree + process_tree(process.pid):
                try:
                    proc.send_signal(signal.SIGKILL)
                except psutil.NoSuchProcess:
                    pass

        timer = threading.Timer(self.grace_s, kill_all)
        timer.daemon = True
        timer.start()

    def _cancel(self, execution: FakeExecution) -> None:
        execution.cancelled = True
        for task in execution.tasks:
            if task.state == "RUNNING":
                self._stop(task, "cancelled")

    def _finish(self, task: FakeTask, state: str, message: str) -> None:
        with self.changed:
            task.state, task.message, task.completed = state, message, time.time()
            self.changed.notify_all()

    def _environment(self, execution: FakeExecution, task: FakeTask, attempt: int) -> dict[str, str]:
        container = execution.template["containers"][0]
        folder = self.workdir / execution.short / f"task{task.index}-attempt{attempt}"
        env = {
            **container_env(folder),
            "HF_HOME": str(folder / "hf-home"),
            **self.job_env,
        }
        with_image(env, self.images.get(container["image"], {}))
        for item in container.get("env") or []:
            if "value" in item:
                env[item["name"]] = item["value"]
            elif "valueSource" in item:
                ref = item["valueSource"]["secretKeyRef"]
                value = self.secrets.get(f"{ref['secret']}:{ref.get('version', 'latest')}")
                if value is None and ref.get("version", "latest") == "latest":
                    value = self.secrets.get(ref["secret"])
                if value is None:
                    raise ApiError(400, "FAILED_PRECONDITION", f"secret {ref['secret']} version {ref.get('version')} not found")
                env[item["name"]] = value
            else:
                env[item["name"]] = ""
        env.update(self.task_env.get(task.index, {}))
        env.update({
            "CLOUD_RUN_TASK_INDEX": str(task.index),
            "CLOUD_RUN_TASK_COUNT": str(execution.task_count),
            "CLOUD_RUN_TASK_ATTEMPT": str(attempt),
            "CLOUD_RUN_EXECUTION": execution.short,
            "CLOUD_RUN_JOB": execution.job.rsplit("/", 1)[-1],
        })
        return env

    def _mount(self, execution: FakeExecution, container: dict[str, Any], folder: Path) -> dict[str, str]:
        """Materialise the Cloud Storage volumes in the task's folder: mount path -> local path."""
        volumes = {v["name"]: v for v in execution.template.get("volumes") or []}
        mounts = {}
        for mount in container.get("volumeMounts") or []:
            volume = volumes.get(mount["name"])
            if volume is None or "gcs" not in volume:
                raise ApiError(400, "INVALID_ARGUMENT", f"volume {mount['name']} is not a Cloud Storage volume")
            gcs = volume["gcs"]
            only = next((o.split("=", 1)[1] for o in gcs.get("mountOptions") or [] if o.startswith("only-dir=")), "")
            prefix = only.strip("/") + "/" if only else ""
            local = folder / "mounts" / mount["name"]
            for name in self.gcs.list(gcs["bucket"], prefix):
                target = local / name[len(prefix):]
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(self.gcs.read(gcs["bucket"], name))
            mounts[mount["mountPath"]] = str(local)
        return mounts

    # -- JSON views -----------------------------------------------------------------------------

    def _execution_json(self, execution: FakeExecution) -> dict[str, Any]:
        with self.lock:
            tasks = list(execution.tasks)
            states = [t.state for t in tasks]
            done = execution.completed is not None
            counts = {s: states.count(s) for s in ("RUNNING", "SUCCEEDED", "FAILED", "CANCELLED")}
            if not done:
                condition = {"type": "Completed", "state": "CONDITION_PENDING"}
            elif counts["SUCCEEDED"] == execution.task_count:
                condition = {"type": "Completed", "state": "CONDITION_SUCCEEDED", "message": "Execution completed successfully."}
            elif execution.cancelled:
                condition = {"type": "Completed", "state": "CONDITION_FAILED", "executionReason": "CANCELLED",
                             "message": "The execution was cancelled."}
            else:
                condition = {"type": "Completed", "state": "CONDITION_FAILED", "executionReason": "NON_ZERO_EXIT_CODE",
                             "message": f"Task {next(t.index for t in tasks if t.state == 'FAILED')} failed."}
            return {
                "name": execution.name,
                "job": execution.job.rsplit("/", 1)[-1],
                "createTime": _iso(execution.created),
                "startTime": _iso(execution.started),
                "completionTime": _iso(execution.completed),
                "taskCount": execution.task_count,
                "parallelism": execution.parallelism,
                "runningCount": counts["RUNNING"],
                "succeededCount": counts["SUCCEEDED"],
                "failedCount": counts["FAILED"],
                "cancelledCount": counts["CANCELLED"],
                "retriedCount": sum(1 for t in tasks if t.retried),
                "conditions": [condition],
                "logUri": f"https://console.cloud.google.com/logs/viewer?execution={execution.short}",
                "template": execution.template,
            }

    def _task_json(self, execution: FakeExecution, task: FakeTask) -> dict[str, Any]:
        with self.lock:
            data: dict[str, Any] = {
                "name": f"{execution.name}/tasks/{execution.short}-task{task.index}",
                "job": execution.job.rsplit("/", 1)[-1],
                "execution": execution.short,
                "index": task.index,
                "retried": task.retried,
                "startTime": _iso(task.started),
                "completionTime": _iso(task.completed),
            }
            if task.state in ("SUCCEEDED", "FAILED", "CANCELLED"):
                state = "CONDITION_SUCCEEDED" if task.state == "SUCCEEDED" else "CONDITION_FAILED"
                condition = {"type": "Completed", "state": state, "message": task.message}
                if task.state != "SUCCEEDED":
                    condition["executionReason"] = "CANCELLED" if task.state == "CANCELLED" else "NON_ZERO_EXIT_CODE"
                data["conditions"] = [condition]
            else:
                data["conditions"] = [{"type": "Completed", "state": "CONDITION_PENDING"}]
            last = next((a for a in reversed(task.attempts) if a.ended is not None), None)
            if last is not None:
                result: dict[str, Any] = {"status": {"code": 0 if last.exit_code == 0 else 2,
                                                     "message": "" if last.exit_code == 0 else task.message}}
                if last.exit_code is not None:
                    result["exitCode"] = last.exit_code
                else:
                    result["termSignal"] = last.term_signal
                data["lastAttemptResult"] = result
            return {k: v for k, v in data.items() if v is not None}

    # -- logs -----------------------------------------------------------------------------------

    def _log(self, execution: FakeExecution, task: FakeTask, attempt: Attempt, line: str) -> None:
        with self.lock:
            self.log_entries.append((time.time(), execution.job.rsplit("/", 1)[-1], execution.short, task.index, attempt.number, line))

    def _list_entries(self, body: dict[str, Any]) -> dict[str, Any]:
        terms = _FILTER_TERM.findall(body.get("filter") or "")
        with self.lock:
            entries = list(self.log_entries)
        project = (body.get("resourceNames") or ["projects/unknown"])[0].split("/")[1]
        rows = [self._entry_json(project, number, *entry) for number, entry in enumerate(entries)]
        rows = [row for row in rows if all(_matches(row, key, op, value) for key, op, value in terms)]
        rows.sort(key=lambda r: (r["timestamp"], r["insertId"]), reverse=(body.get("orderBy") or "").endswith("desc"))
        start = int(body.get("pageToken") or 0)
        size = int(body.get("pageSize") or 1000)
        page = rows[start:start + size]
        answer: dict[str, Any] = {"entries": page}
        if start + size < len(rows):
            answer["nextPageToken"] = str(start + size)
        return answer

    @staticmethod
    def _entry_json(project: str, number: int, at: float, job: str, execution: str, index: int, attempt: int,
                    line: str) -> dict[str, Any]:
        return {
            "logName": f"projects/{project}/logs/run.googleapis.com%2Fstdout",
            "resource": {"type": "cloud_run_job", "labels": {"job_name": job, "project_id": project}},
            "labels": {"run.googleapis.com/execution_name": execution, "run.googleapis.com/task_index": str(index),
                       "run.googleapis.com/task_attempt": str(attempt)},
            "textPayload": line,
            "timestamp": _iso(at),
            "insertId": f"{number:012d}",  # in the order written, for entries of the same microsecond
        }


def _matches(row: dict[str, Any], key: str, op: str, value: str) -> bool:
    if key == "timestamp":
        stamp = datetime.fromisoformat(row["timestamp"].replace("Z", "+00:00"))
        wanted = datetime.fromisoformat(value.replace("Z", "+00:00"))
        return stamp > wanted if op == ">" else stamp == wanted
    label = re.match(r'^labels\."([^"]+)"$', key)
    if label:
        actual = row["labels"].get(label.group(1))
    elif key == "resource.type":
        actual = row["resource"]["type"]
    elif key.startswith("resource.labels."):
        actual = row["resource"]["labels"].get(key.split(".", 2)[2])
    else:
        return False
    return actual == value
