"""Google Cloud Run Jobs: every shard a task of one job execution (google-cloud-run 0.16).

Calls (``google.cloud.run_v2``, REST transport; routes read in its ``transports/rest_base.py``):
``JobsClient.get_job`` (``GET /v2/projects/P/locations/L/jobs/J``), ``create_job``
(``POST .../jobs?jobId=J``) or ``update_job`` (``PATCH .../jobs/J``), then ``run_job``
(``POST .../jobs/J:run`` with ``RunJobRequest.Overrides``); later ``ExecutionsClient.
get_execution`` and ``TasksClient.list_tasks`` for the states, ``ExecutionsClient.
cancel_execution`` to cancel, and Cloud Logging's ``entries:list`` (``google.cloud.logging``,
HTTP) with ``resource.type="cloud_run_job"`` for the logs. Create, update, run and cancel are
long-running operations; ``run_job``'s carries the new execution in its metadata at once.

The job is created when absent, updated when its template changed (the request bodies are in
:mod:`llm_ocr.launchers.cloud_run.job`), and never deleted, so its execution history stays. One
launch is one execution: its ``task_count`` is the number of shards launched, and each task
finds its shard from ``CLOUD_RUN_TASK_INDEX`` through :data:`llm_ocr.container.shard_index.TASK_SHARDS_ENV`
(a relaunch runs only the unfinished shards, whose indices are not 0..k-1).

A GPU task is stopped after at most 1 hour (docs/facts.md#google-cloud-run-jobs), so a task's
attempts are the unit of resume: ``max_retries`` is 3 by default (``--attempts 4``), Cloud Run sends
SIGTERM at the limit (then SIGKILL ~10 s later, as for services: the container contract; not
verified for job tasks), llm-ocr stops intake, saves its parts within ``LLM_OCR_GRACE_PERIOD`` (set
to 5 s here) and exits 3, and the retry resumes from the parts. Shards are sized to fit one attempt
(:func:`llm_ocr.launchers.core.sizing.fit_timeout`).

Secrets are Secret Manager references only (``--secret-ref NAME=SECRET[:VERSION]`` ->
``EnvVar.value_source.secret_key_ref``): no value is read or sent by the launcher. Cloud Storage
access in the tasks is the job's service account's.

Code delivery without building an image: the llm-ocr wheel is uploaded once per content digest
to ``--code-location`` (default ``gs://OUTPUT_BUCKET/llm-ocr-code``), that folder is mounted
read-only in every task as a Cloud Storage volume, and the task's command installs the wheel
before it execs ``llm-ocr`` in the stock pinned vLLM image from Docker Hub
(:mod:`llm_ocr.launchers.core.command`); ``--image`` takes a prebuilt image
(``google-cloud-run/Dockerfile``) instead.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Iterator, Sequence
from datetime import datetime, timezone
from typing import Any, ClassVar, Literal

from fsspec.core import split_protocol
from pydantic import BaseModel, Field

from llm_ocr.costs import CLOUD_RUN_PRICES, cloud_run_hardware
from llm_ocr.launchers.cloud_run.job import (
    MAX_RETRIES,
    MAX_TASKS,
    CodeVolume,
    check_job_id,
    check_service_account,
    job_body,
    parse_secret_refs,
    run_body,
    task_resources,
    template_changed,
)
from llm_ocr.launchers.core.adapter import JobState, Phase, PlatformOptions, Submission
from llm_ocr.launchers.core.command import CPU_IMAGE, VLLM_IMAGE, extras_for, install_then_run, with_extras
from llm_ocr.launchers.core.images import image_note, launch_image
from llm_ocr.launchers.core.spec import LaunchError, LaunchRequest, PlannedJob, ShardSpec, Target
from llm_ocr.launchers.core.wheel import Wheel, wheel_to_ship
from llm_ocr.storage import Storage
from llm_ocr.storage.stores import scrub

log = logging.getLogger("llm_ocr")

#: Docker Hub images run on Cloud Run as they are; the registry is spelt out.
GPU_IMAGE = f"docker.io/{VLLM_IMAGE}"
CPU_ONLY_IMAGE = f"docker.io/library/{CPU_IMAGE}"
CODE_MOUNT = "/llm-ocr-code"
#: Per-attempt limits: 1 hour with a GPU, 168 hours without (Cloud Run docs, "Set task timeout
#: for jobs"; docs/facts.md#google-cloud-run-jobs).
GPU_TASK_LIMIT_S = 3600
CPU_TASK_LIMIT_S = 168 * 3600
#: Seconds llm-ocr lets pages in flight finish after SIGTERM: inside Cloud Run's ~10 s before
#: SIGKILL, leaving time to write the last part.
GRACE_PERIOD_S = 5
#: Test and emulator hooks: where the Cloud Run and Cloud Logging APIs are (anonymous credentials).
ENDPOINT_ENV = "LLM_OCR_CLOUD_RUN_ENDPOINT"
LOGGING_ENDPOINT_ENV = "LLM_OCR_CLOUD_LOGGING_ENDPOINT"
_PROJECT_ENVS = ("GOOGLE_CLOUD_PROJECT", "CLOUDSDK_CORE_PROJECT")
_REGION_ENVS = ("CLOUDSDK_RUN_REGION",)
_OPERATION_TIMEOUT_S = 300
_LOG_POLL_S = 5.0
# google.cloud.run_v2.Condition.State / ExecutionReason names (types/condition.py).
_SUCCEEDED, _FAILED = "CONDITION_SUCCEEDED", "CONDITION_FAILED"


class CloudRunOptions(PlatformOptions):
    """Cloud Run Jobs: ``llm-ocr launch cloud-run`` options (``llm_ocr.launch`` keywords)."""

    project: str | None = Field(None, description="Google Cloud project (default: $GOOGLE_CLOUD_PROJECT).")
    region: str | None = Field(None, description="Cloud Run region with L4 GPUs, e.g. us-central1 (default: "
                               "$CLOUDSDK_RUN_REGION).")
    gpu: str | None = Field(None, description="GPU type per task: nvidia-l4 (default), or none for a CPU task (default "
                            "for assemble and --endpoint runs).", json_schema_extra={"metavar": "TYPE"})
    cpu: int | None = Field(None, description="vCPUs per task: 1, 2, 4, 6 or 8 (default 8 with a GPU, else 2).")
    memory: str | None = Field(None, description="Memory per task, e.g. 32Gi (default 32Gi with a GPU, else 8Gi).")
    job_name: str | None = Field(None, description="The Cloud Run job to create or update (default llm-ocr-STAGE).")
    parallelism: int | None = Field(None, description="Tasks running at once (default: all; set it to your GPU quota).")
    service_account: str | None = Field(None, description="The tasks' identity (default: the project's compute "
                                        "service account).")
    secret_ref: list[str] = Field(
        default_factory=list, description="Env var NAME in the tasks from Secret Manager secret SECRET (version latest "
        "unless given).", json_schema_extra={"metavar": "NAME=SECRET[:VERSION]", "repeat": True},
    )
    code_location: str | None = Field(None, description="Where the llm-ocr wheel is uploaded and mounted from (default "
                                      "gs://OUTPUT_BUCKET/llm-ocr-code).",
                                      json_schema_extra={"metavar": "gs://BUCKET/FOLDER"})


class CloudRun:
    """The Cloud Run Jobs adapter (see the module docstring)."""

    name: ClassVar[str] = "cloud-run"
    shard_env: ClassVar[bool] = False
    hardware_option: ClassVar[str] = "gpu"
    options: ClassVar[type[BaseModel]] = CloudRunOptions
    #: max_retries 3: a task stopped at the 1 h limit or preempted resumes on its retries.
    default_attempts: ClassVar[int] = 4

    def __init__(self, *, endpoint: str | None = None, logging_endpoint: str | None = None, **options: Any) -> None:
        """``options``: :class:`CloudRunOptions` fields; ``endpoint`` and ``logging_endpoint`` (the APIs')
        for tests and for following a launch."""
        given = CloudRunOptions.model_validate(options)
        self.project = given.project or next((os.environ[k] for k in _PROJECT_ENVS if os.environ.get(k)), None)
        self.region = given.region or next((os.environ[k] for k in _REGION_ENVS if os.environ.get(k)), None)
        self.cpu = given.cpu
        self.memory = given.memory
        self.job_name = given.job_name
        self.parallelism = given.parallelism
        self.service_account = given.service_account
        self.secret_refs = list(given.secret_ref)
        self.code_location = given.code_location
        self.wheel_path = given.wheel
        self.endpoint = os.environ.get(ENDPOINT_ENV) or endpoint or None
        self.logging_endpoint = os.environ.get(LOGGING_ENDPOINT_ENV) or logging_endpoint or self.endpoint
        self._clients: dict[str, Any] = {}
        #: execution name -> shard -> the state of the task running it (filled by states()).
        self._tasks: dict[str, dict[int, JobState]] = {}

    # -- options --------------------------------------------------------------------------------

    @classmethod
    def from_record(cls, info: dict[str, Any]) -> CloudRun:
        """An adapter following the executions of a launch record."""
        return cls(project=info.get("project"), region=info.get("region"), job_name=info.get("job"),
                   endpoint=info.get("endpoint"), logging_endpoint=info.get("logging_endpoint"))

    # -- clients --------------------------------------------------------------------------------

    def _client(self, kind: str) -> Any:
        if kind not in self._clients:
            from google.cloud import run_v2

            cls = {"jobs": run_v2.JobsClient, "executions": run_v2.ExecutionsClient, "tasks": run_v2.TasksClient}[kind]
            self._clients[kind] = cls(transport="rest", **self._connection(self.endpoint))
        return self._clients[kind]

    def _connection(self, endpoint: str | None) -> dict[str, Any]:
        if not endpoint:
            return {}
        from google.api_core.client_options import ClientOptions
        from google.auth.credentials import AnonymousCredentials

        return {"client_options": ClientOptions(api_endpoint=endpoint), "credentials": AnonymousCredentials()}

    def _check_credentials(self) -> None:
        if self.endpoint:
            return
        import google.auth
        from google.auth.exceptions import DefaultCredentialsError

        try:
            google.auth.default(scopes=["https://www.googleapis.com/auth/cloud-platform"])
        except DefaultCredentialsError as exc:
            raise LaunchError(
                f"no Google Cloud credentials ({_brief(exc)}): run `gcloud auth application-default login`, "
                "or set GOOGLE_APPLICATION_CREDENTIALS"
            ) from exc

    @property
    def _location(self) -> str:
        return f"projects/{self.project}/locations/{self.region}"

    # -- planning -------------------------------------------------------------------------------

    def resolve(self, request: LaunchRequest) -> Target:
        """Project, region, task resources, secrets, image and the wheel to ship (built, not
        uploaded). Nothing is sent anywhere."""
        chosen = launch_image(request, self.name)
        missing = [flag for flag, value in (("--project", self.project), ("--region", self.region)) if not value]
        if missing:
            raise LaunchError(
                f"Cloud Run needs {' and '.join(missing)}: pass them, or set GOOGLE_CLOUD_PROJECT / "
                "CLOUDSDK_RUN_REGION (a region with Cloud Run L4 GPUs, e.g. us-central1, europe-west1, europe-west4, "
                "asia-southeast1)"
            )
        if request.num_shards > MAX_TASKS:
            raise LaunchError(f"--num-shards {request.num_shards}: a Cloud Run execution runs at most {MAX_TASKS} "
                              "tasks")
        if self.parallelism is not None and self.parallelism < 1:
            raise LaunchError(f"--parallelism must be at least 1 (got {self.parallelism})")
        if request.attempts is not None and request.attempts > MAX_RETRIES + 1:
            raise LaunchError(
                f"--attempts {request.attempts}: Cloud Run retries a task at most {MAX_RETRIES} times (maxRetries "
                f"0..{MAX_RETRIES}), so a task has at most {MAX_RETRIES + 1} attempts"
            )
        if request.secret_names:
            raise LaunchError(
                f"--secret {request.secret_names[0]}: Cloud Run tasks read secrets from Secret Manager, never from "
                f"this machine: store it (printf %s \"${request.secret_names[0]}\" | gcloud secrets create NAME "
                f"--data-file=-) and pass --secret-ref {request.secret_names[0]}=NAME"
            )
        resources = task_resources(request.hardware, self.cpu, self.memory, needs_model=request.needs_model,
                                   stage=request.stage)
        refs = parse_secret_refs(self.secret_refs)
        for name in refs:
            if name in request.env:
                raise LaunchError(f"{name} is given both as --env and --secret-ref; keep it a secret only")
        if split_protocol(request.output)[0] == "hf" and "HF_TOKEN" not in refs:
            raise LaunchError(
                f"the tasks need HF_TOKEN to write {request.output}: store a write token in Secret Manager "
                "(printf %s \"$HF_TOKEN\" | gcloud secrets create hf-token --data-file=-) and pass --secret-ref "
                "HF_TOKEN=hf-token"
            )
        job_id = check_job_id(self.job_name or f"llm-ocr-{request.stage}")
        if self.service_account:
            check_service_account(self.service_account)
        notes = []
        if request.offline:
            notes.append("offline: not checked: the Google Cloud credentials")
        else:
            self._check_credentials()
        hardware = cloud_run_hardware(1 if resources.gpu else 0, resources.cpu, resources.memory_gib)
        if self.region != CLOUD_RUN_PRICES.region:
            notes.append(f"the Cloud Run prices are {CLOUD_RUN_PRICES.region}'s list prices "
                         f"({CLOUD_RUN_PRICES.source}, {CLOUD_RUN_PRICES.recorded}); {self.region} may differ, so the "
                         "costs shown are estimates")
        info: dict[str, Any] = {
            "project": self.project, "region": self.region, "job": job_id, "gpu": resources.gpu, "cpu": resources.cpu,
            "memory_gib": resources.memory_gib, "endpoint": self.endpoint, "logging_endpoint": self.logging_endpoint,
        }
        private: dict[str, Any] = {"resources": resources, "code": None, "command_words": 1}
        def target(image: str, prefix: list[str]) -> Target:
            return Target(hardware, image, prefix, {}, info, private, notes=notes, secret_refs=refs,
                          max_timeout_s=GPU_TASK_LIMIT_S if resources.gpu else CPU_TASK_LIMIT_S,
                          env={"LLM_OCR_GRACE_PERIOD": str(GRACE_PERIOD_S)})

        if request.image:
            return target(request.image, [])
        image = CPU_ONLY_IMAGE
        if chosen is not None:
            image = f"docker.io/{chosen.image.ref}"  # Docker Hub images run on Cloud Run as they are
            notes.append(image_note(request, chosen, image))

        wheel = wheel_to_ship(self.wheel_path)
        code_url = self.code_location or _default_code_location(request.output)
        protocol, path = split_protocol(code_url)
        bucket, _, folder = path.strip("/").partition("/")
        if protocol not in ("gs", "gcs") or not bucket:
            raise LaunchError(f"--code-location {code_url!r}: give a gs://BUCKET/FOLDER the tasks' service account can "
                              "read")
        in_folder = f"wheels/{wheel.digest[:16]}/{wheel.filename}"
        prefix = install_then_run(with_extras(f"{CODE_MOUNT}/{in_folder}",
                                              extras_for([request.output, *request.inputs])))
        private.update(wheel=wheel, code_url=f"gs://{bucket}/{folder}".rstrip("/"), wheel_path=in_folder,
                       code=CodeVolume(bucket, folder, CODE_MOUNT), command_words=len(prefix))
        info["code"] = f"{private['code_url']}/{in_folder}"
        return target(image, prefix)

    def plan_jobs(self, specs: Sequence[ShardSpec], target: Target) -> list[PlannedJob]:
        """One job execution for every shard to launch: the ``Job`` to create or update, and the
        ``:run`` body, as the REST transport sends them."""
        first = specs[0]
        shards = [spec.shard_index for spec in specs]
        words = target.private["command_words"]
        job = job_body(first, command_words=words, resources=target.private["resources"], task_count=len(shards),
                       parallelism=self.parallelism, service_account=self.service_account, code=target.private["code"])
        body = {
            "name": f"{self._location}/jobs/{target.info['job']}",
            "job": _as_sent("Job", job),
            "run": _as_sent("RunJobRequest", run_body(first, command_words=words, shards=shards)),
        }
        return [PlannedJob(shards, body, list(specs))]

    # -- side effects ---------------------------------------------------------------------------

    def deliver(self, target: Target) -> None:
        """Upload the wheel to the code location unless a wheel with the same digest is there."""
        wheel: Wheel | None = target.private.get("wheel")
        if wheel is None:
            return
        code = Storage(target.private["code_url"])
        path = code.path(*target.private["wheel_path"].split("/"))
        try:
            if code.exists(path):
                log.info("llm-ocr wheel %s already in %s: not uploaded again", wheel.digest[:16],
                         target.private["code_url"])
                return
            code.write_atomic(path, wheel.data)
            code.flush()
        except Exception as exc:
            raise LaunchError(f"could not upload the llm-ocr wheel to {target.info['code']} ({_brief(exc)}); pass "
                              "--code-location gs://BUCKET/FOLDER you can write, or --image with a prebuilt "
                              "image") from exc
        log.info("uploaded the llm-ocr wheel to %s", target.info["code"])

    def submit(self, jobs: Sequence[PlannedJob], target: Target) -> Iterator[Submission]:
        """Create or update the job (never delete it), then run one execution with the overrides."""
        from google.api_core import exceptions
        from google.cloud import run_v2

        client = self._client("jobs")
        for planned in jobs:
            name = planned.body["name"]
            desired = planned.body["job"]
            try:
                current = client.get_job(name=name)
            except exceptions.NotFound:
                current = None
            try:
                if current is None:
                    job = run_v2.Job.from_json(_json(desired))
                    client.create_job(parent=self._location, job=job,
                                      job_id=name.rsplit("/", 1)[-1]).result(_OPERATION_TIMEOUT_S)
                    log.info("created Cloud Run job %s", name)
                elif template_changed(desired, _to_dict(run_v2.Job, current)):
                    job = run_v2.Job.from_json(_json({**desired, "name": name}))
                    client.update_job(job=job).result(_OPERATION_TIMEOUT_S)
                    log.info("updated Cloud Run job %s (its template changed; its executions are kept)", name)
                else:
                    log.info("Cloud Run job %s is up to date", name)
                request = run_v2.RunJobRequest.from_json(_json({**planned.body["run"], "name": name}))
                operation = client.run_job(request=request)
            except exceptions.GoogleAPICallError as exc:
                raise LaunchError(_brief(exc)) from exc
            execution = operation.metadata
            if execution is None or not execution.name:
                raise LaunchError(f"Cloud Run accepted the run of {name} but named no execution; see `gcloud run jobs "
                                  "executions list`")
            short = execution.name.rsplit("/", 1)[-1]
            url = (f"https://console.cloud.google.com/run/jobs/executions/details/{self.region}/{short}/tasks"
                   f"?project={self.project}")
            follow = f"gcloud run jobs executions describe {short} --region {self.region} --project {self.project}"
            yield Submission(execution.name, list(planned.shards), short, url, follow)

    # -- following ------------------------------------------------------------------------------

    def states(self, jobs: Sequence[dict[str, Any]]) -> dict[str, JobState]:
        """Each execution (``get_execution``) and its tasks (``list_tasks``), by execution name."""
        found = {}
        for job in jobs:
            name = job["job_id"]
            execution = self._client("executions").get_execution(name=name)
            tasks = list(self._client("tasks").list_tasks(parent=name))
            found[name] = _execution_state(execution)
            shards = job["shards"]
            self._tasks[name] = {shards[task.index]: _task_state(task) for task in tasks if 0 <= task.index < len(shards)}  # noqa: E501 - not wrapped yet
        return found

    def shard_phase(self, state: JobState, shard: int) -> JobState:
        """The state of the task running ``shard`` (before its task exists: the execution's)."""
        tasks = next((t for name, t in self._tasks.items() if name.rsplit("/", 1)[-1] == state.job_id), {})
        if shard in tasks:
            return tasks[shard]
        phase: Phase = "pending" if state.phase in ("pending", "running") else state.phase
        return JobState(state.job_id, phase, state.raw, state.message)

    def logs(self, job: dict[str, Any], shard: int, *, follow: bool = False, tail: int | None = None) -> Iterator[str]:
        """The task's log lines from Cloud Logging (``follow``: until the task ends)."""
        execution = job["job_id"]
        index = job["shards"].index(shard)
        job_id = execution.split("/jobs/")[1].split("/")[0]
        query = (f'resource.type="cloud_run_job" AND resource.labels.job_name="{job_id}" '
                 f'AND labels."run.googleapis.com/execution_name"="{execution.rsplit("/", 1)[-1]}" '
                 f'AND labels."run.googleapis.com/task_index"="{index}"')
        return self._log_lines(query, job, shard, follow=follow, tail=tail)

    def _log_lines(self, query: str, job: dict[str, Any], shard: int, *, follow: bool,
                   tail: int | None) -> Iterator[str]:
        from google.cloud import logging as cloud_logging

        client = cloud_logging.Client(project=self.project, _use_grpc=False, **self._connection(self.logging_endpoint))
        resource = [f"projects/{self.project}"]
        if tail is not None:
            entries = list(client.list_entries(resource_names=resource, filter_=query,
                                               order_by=cloud_logging.DESCENDING,
                                               max_results=tail))
            entries.reverse()
        else:
            entries = list(client.list_entries(resource_names=resource, filter_=query,
                                               order_by=cloud_logging.ASCENDING))
        last = None
        for entry in entries:
            last = entry.timestamp
            yield _payload(entry)
        while follow:
            ended = self.shard_phase(self.states([job])[job["job_id"]], shard).phase in ("succeeded", "failed",
                                                                                         "cancelled")
            since = f' AND timestamp>"{last.isoformat()}"' if last else ""
            for entry in client.list_entries(resource_names=resource, filter_=query + since,
                                             order_by=cloud_logging.ASCENDING):
                last = entry.timestamp
                yield _payload(entry)
            if ended:
                return
            time.sleep(_LOG_POLL_S)

    def cancel(self, jobs: Sequence[dict[str, Any]]) -> list[str]:
        """``cancel_execution`` each (its running tasks are stopped; the execution is kept)."""
        client = self._client("executions")
        for job in jobs:
            client.cancel_execution(name=job["job_id"])
        return [job["job_id"] for job in jobs]


# ------------------------------------------------------------------------------------------------


def _default_code_location(output: str) -> str:
    protocol, path = split_protocol(output)
    if protocol not in ("gs", "gcs"):
        raise LaunchError(
            f"the llm-ocr wheel goes to Cloud Storage, mounted in the tasks: pass --code-location gs://BUCKET/FOLDER "
            f"(the output {output} is not on gs://), or --image with a prebuilt image"
        )
    return f"gs://{path.strip('/').split('/')[0]}/llm-ocr-code"


def _json(value: dict[str, Any]) -> str:
    return json.dumps(value)


def _to_dict(message_cls: Any, message: Any) -> dict[str, Any]:
    """A proto-plus message as the camelCase JSON the REST API exchanges (defaults left out)."""
    from google.protobuf import json_format

    return dict(json_format.MessageToDict(message_cls.pb(message)))


def _as_sent(kind: Literal["Job", "RunJobRequest"], body: dict[str, Any]) -> dict[str, Any]:
    """``body`` after a round trip through the proto message, as the REST transport serialises
    it (default values dropped, canonical field forms): what the dry run shows is what is sent."""
    from google.cloud import run_v2

    cls = run_v2.Job if kind == "Job" else run_v2.RunJobRequest
    return _to_dict(cls, cls.from_json(_json(body)))


def _conditions(message: Any) -> dict[str, Any]:
    return {c.type_: c for c in message.conditions}


def _seconds(start: Any, end: Any) -> float | None:
    """Seconds from ``start`` to ``end`` (now if unset), None without a start (proto timestamps
    arrive as datetimes; an unset one is falsy)."""
    if not start:
        return None
    finish = end if end else datetime.now(timezone.utc)
    return max(0.0, (finish - start).total_seconds())


def _execution_state(execution: Any) -> JobState:
    """The execution's phase from its counts: succeeded only when every task succeeded."""
    completed = _conditions(execution).get("Completed")
    finished = bool(execution.completion_time) or (completed is not None and completed.state.name in (_SUCCEEDED,
                                                                                                      _FAILED))
    counts = (f"{execution.succeeded_count}/{execution.task_count} succeeded, {execution.failed_count} failed, "
              f"{execution.running_count} running, {execution.retried_count} retried, {execution.cancelled_count} "
              "cancelled")
    phase: Phase
    if finished:
        if execution.succeeded_count == execution.task_count and not execution.failed_count:
            phase = "succeeded"
        elif execution.cancelled_count and not execution.failed_count:
            phase = "cancelled"
        else:
            phase = "failed"
    elif execution.running_count or execution.start_time:
        phase = "running"
    else:
        phase = "pending"
    message = completed.message if completed is not None and completed.message else None
    return JobState(execution.name.rsplit("/", 1)[-1], phase, counts,
                    message or (counts if phase in ("failed", "cancelled") else None),
                    _seconds(execution.start_time, execution.completion_time))


def _task_state(task: Any) -> JobState:
    """A task's phase from its ``Completed`` condition, else its times and last attempt's result."""
    completed = _conditions(task).get("Completed")
    state = completed.state.name if completed is not None else ""
    result = task.last_attempt_result
    exit_code = result.exit_code if result else 0
    clean_exit = not exit_code and not (result and result.status.code)
    phase: Phase
    if state == _SUCCEEDED or (state != _FAILED and task.completion_time and clean_exit):
        phase = "succeeded"
    elif state == _FAILED or task.completion_time:
        phase = "cancelled" if completed is not None and completed.execution_reason.name == "CANCELLED" else "failed"
    else:
        phase = "running" if task.start_time else "pending"
    attempt = f"attempt {task.retried + 1}"
    message = None
    if phase in ("failed", "cancelled"):
        why = (result.status.message if result else "") or (completed.message if completed is not None else "")
        message = f"{attempt} exited {exit_code}" + (f": {why}" if why else "")
    name = f"{task.execution.rsplit('/', 1)[-1] or task.name.rsplit('/', 1)[-1]} task {task.index}"
    return JobState(name, phase, f"{phase.upper()} ({attempt})", message,
                    _seconds(task.start_time, task.completion_time))


def _payload(entry: Any) -> str:
    payload = entry.payload
    if isinstance(payload, dict):
        return str(payload.get("message", payload))
    return str(payload)


def _brief(exc: BaseException) -> str:
    """An exception's first line, without credentials."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return scrub(text)
