"""Hugging Face Jobs: one job per shard through ``huggingface_hub``'s Jobs API (2.4).

Calls (``HfApi``, checked in huggingface_hub 2.4's ``hf_api.py`` and ``_jobs_api.py``):
``whoami`` (the namespace), ``list_jobs_hardware`` (``GET /api/jobs/hardware``: the flavors and
their prices), ``run_job`` (``POST /api/jobs/{namespace}``), ``list_jobs(labels=)`` and
``inspect_job`` (``GET /api/jobs/{namespace}[/{id}]``), ``fetch_job_logs``
(``GET .../{id}/logs``, server-sent events) and ``cancel_job`` (``POST .../{id}/cancel``).

docs/facts.md#hugging-face-jobs: no job arrays, so each shard is its own job told
``LLM_OCR_NUM_SHARDS`` / ``LLM_OCR_SHARD_INDEX`` in ``env``; ``HF_TOKEN`` only ever in ``secrets``;
``attempts`` counts tries including the first (a preempted or crashed job is retried and resumes
from its parts).

Code delivery without building an image: the llm-ocr wheel is uploaded once per content digest
to a private model repo (``NAMESPACE/llm-ocr-jobs-code`` unless ``--code-repo``), mounted
read-only in every job with ``run_job(volumes=[Volume(type="model", ...)])``, and installed by
the job's command before it execs ``llm-ocr`` (:mod:`llm_ocr.launchers.core.command`). The job's
``command`` replaces the image's ENTRYPOINT: HF's own ``hf jobs uv run --image
vllm/vllm-openai`` recipes rely on that (their command is ``uv run ...``, which would otherwise
be handed to ``vllm serve``); the prebuilt image of ``hf-jobs/Dockerfile`` resets the
ENTRYPOINT anyway.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, Field

from llm_ocr.costs import HF_JOBS_HARDWARE, Hardware
from llm_ocr.launchers.core.adapter import JobState, Phase, PlatformOptions, Submission
from llm_ocr.launchers.core.command import CPU_IMAGE, extras_for, install_then_run, with_extras
from llm_ocr.launchers.core.images import image_note, launch_image
from llm_ocr.launchers.core.spec import (
    LAUNCH_LABEL,
    REDACTED,
    LaunchError,
    LaunchRequest,
    PlannedJob,
    ShardSpec,
    Target,
)
from llm_ocr.launchers.core.wheel import Wheel, wheel_to_ship
from llm_ocr.storage.stores import scrub

log = logging.getLogger("llm_ocr")

#: Where the code repo is mounted in the container.
CODE_MOUNT = "/llm-ocr-code"
DEFAULT_GPU_FLAVOR = "a100-large"
DEFAULT_CPU_FLAVOR = "cpu-basic"

_PHASES: dict[str, Phase] = {
    "SCHEDULING": "pending",
    "RUNNING": "running",
    "COMPLETED": "succeeded",
    "ERROR": "failed",
    "CANCELED": "cancelled",
    "DELETED": "cancelled",
}
_PER_HOUR = {"second": 3600.0, "minute": 60.0, "hour": 1.0}


class HfJobsOptions(PlatformOptions):
    """Hugging Face Jobs: ``llm-ocr launch hf-jobs`` options (``llm_ocr.launch`` keywords)."""

    flavor: str | None = Field(
        None, description=f"Hardware flavor (default: {DEFAULT_GPU_FLAVOR}, or {DEFAULT_CPU_FLAVOR} for assemble and "
        "--endpoint runs); e.g. l4x1, l40sx1, a100-large, h200.", json_schema_extra={"metavar": "FLAVOR"},
    )
    namespace: str | None = Field(None, description="User or organisation to run the jobs under (default: the token's "
                                                    "user).")
    code_repo: str | None = Field(
        None, description="Private model repo the llm-ocr wheel is uploaded to (default: NAMESPACE/llm-ocr-jobs-code).",
        json_schema_extra={"metavar": "OWNER/NAME"},
    )


class HfJobs:
    """The Hugging Face Jobs adapter (see the module docstring)."""

    name: ClassVar[str] = "hf-jobs"
    shard_env: ClassVar[bool] = True
    hardware_option: ClassVar[str] = "flavor"
    options: ClassVar[type[BaseModel]] = HfJobsOptions

    def __init__(self, *, token: str | None = None, endpoint: str | None = None, **options: Any) -> None:
        """``options``: :class:`HfJobsOptions` fields; ``token`` and ``endpoint`` (the Hub's) for tests
        and for following a launch."""
        given = HfJobsOptions.model_validate(options)
        self.namespace = given.namespace
        self.code_repo = given.code_repo
        self.wheel_path = Path(given.wheel) if given.wheel else None
        self._token = token
        # huggingface_hub reads HF_ENDPOINT at import time; read it now so that a variable set
        # later (a notebook cell, a test) is honoured too.
        self.endpoint = os.environ.get("HF_ENDPOINT") or endpoint or None
        self._api: Any = None

    # -- options --------------------------------------------------------------------------------

    @classmethod
    def from_record(cls, info: dict[str, Any]) -> HfJobs:
        """An adapter following the jobs of a launch record."""
        return cls(namespace=info.get("namespace"), endpoint=info.get("endpoint"))

    # -- the client -----------------------------------------------------------------------------

    def _token_or_fail(self) -> str:
        from huggingface_hub import get_token

        token = self._token or get_token()
        if not token:
            raise LaunchError(
                "no Hugging Face token: run `hf auth login` or export HF_TOKEN (a token with write access: "
                "the jobs get it as their HF_TOKEN secret to read inputs and write hf:// outputs)"
            )
        return token

    @property
    def api(self) -> Any:
        if self._api is None:
            from huggingface_hub import HfApi

            self._api = HfApi(endpoint=self.endpoint, token=self._token_or_fail())
        return self._api

    def _namespace(self) -> str:
        if self.namespace is None:
            try:
                self.namespace = str(self.api.whoami()["name"])
            except LaunchError:
                raise
            except Exception as exc:
                if is_network_error(exc):
                    raise LaunchError(
                        f"could not reach the Hugging Face Hub at {self.endpoint or 'https://huggingface.co'} (a "
                        f"network failure, not the token: {_brief(exc)}); check the connection, or review the plan "
                        "with --dry-run --offline"
                    ) from exc
                raise LaunchError(
                    f"the Hugging Face token was refused ({_brief(exc)}): run `hf auth login` or export a valid "
                    "HF_TOKEN"
                ) from exc
        return self.namespace

    # -- planning -------------------------------------------------------------------------------

    def hardware_table(self) -> tuple[dict[str, Hardware], str]:
        """The flavors with GPUs and prices: the live list when reachable, else the built-in one."""
        try:
            live = self.api.list_jobs_hardware()
        except LaunchError:
            raise
        except Exception as exc:  # noqa: BLE001 - the built-in table is a fine fallback
            log.warning("could not list Hugging Face Jobs hardware (%s); using the built-in flavor table", _brief(exc))
            return dict(HF_JOBS_HARDWARE), "built-in table"
        table = {}
        for hw in live:
            known = HF_JOBS_HARDWARE.get(hw.name)
            gpus = int(hw.accelerator.quantity) if hw.accelerator else 0
            per_hour = _PER_HOUR.get(str(hw.unit_label).lower())
            price = round(hw.unit_cost_usd * per_hour, 4) if per_hour and hw.unit_cost_usd is not None else None
            accelerator = f"{gpus}x {hw.accelerator.model} {hw.accelerator.vram}" if hw.accelerator else hw.cpu
            table[hw.name] = Hardware(hw.name, gpus, known.gpu_preset if known else None, price, True, accelerator)
        return table, "live list"

    def resolve(self, request: LaunchRequest) -> Target:
        """Token, namespace, flavor, image and the wheel to ship (built, not uploaded). Offline:
        no call to the Hub (the token is not checked, the namespace is ``--namespace`` or a
        placeholder, the flavors are the built-in table)."""
        check_jobs_api()
        chosen = launch_image(request, self.name)
        notes: list[str] = []
        if request.offline:
            from huggingface_hub import get_token

            token = self._token or get_token() or ""
            namespace = self.namespace or "NAMESPACE"
            table, source = dict(HF_JOBS_HARDWARE), "built-in table"
            notes.append("offline: not checked: the Hugging Face token and its namespace"
                         + ("" if self.namespace else " (NAMESPACE stands for it: pass --namespace)")
                         + ", the live flavor list and its prices (the built-in table is used)")
        else:
            token = self._token_or_fail()
            namespace = self._namespace()
            table, source = self.hardware_table()
        flavor = request.hardware or (DEFAULT_GPU_FLAVOR if request.needs_model else DEFAULT_CPU_FLAVOR)
        hardware = table.get(flavor)
        if hardware is None:
            raise LaunchError(f"unknown --flavor {flavor!r}; Hugging Face Jobs flavors ({source}): "
                              f"{_flavor_list(table)}")
        if request.needs_model and hardware.gpus == 0:
            raise LaunchError(
                f"--flavor {flavor} has no GPU, but llm-ocr {request.stage} serves a model in the job: choose a GPU "
                f"flavor ({_flavor_list({k: v for k, v in table.items() if v.gpus})}) or pass --endpoint URL"
            )
        info: dict[str, Any] = {"namespace": namespace, "endpoint": self.endpoint}
        private: dict[str, Any] = {}
        if request.image:
            return Target(hardware, request.image, [], {"HF_TOKEN": token}, info, private, notes)
        image = CPU_IMAGE
        if chosen is not None:
            image = chosen.image.ref
            notes.append(image_note(request, chosen))

        wheel = wheel_to_ship(self.wheel_path)
        code_repo = self.code_repo or f"{namespace}/llm-ocr-jobs-code"
        path_in_repo = f"wheels/{wheel.digest[:16]}/{wheel.filename}"
        extras = extras_for([request.output, *request.inputs])
        from huggingface_hub import Volume

        private.update(wheel=wheel, volumes=[Volume(type="model", source=code_repo, mount_path=CODE_MOUNT)])
        info.update(code_repo=code_repo, wheel=path_in_repo)
        prefix = install_then_run(with_extras(f"{CODE_MOUNT}/{path_in_repo}", extras))
        return Target(hardware, image, prefix, {"HF_TOKEN": token}, info, private, notes)

    def plan_jobs(self, specs: Sequence[ShardSpec], target: Target) -> list[PlannedJob]:
        """One job per shard, each with the exact body ``run_job`` sends (secrets redacted)."""
        volumes = target.private.get("volumes") or []
        return [PlannedJob([spec.shard_index], job_body(spec, volumes, redact=True), [spec]) for spec in specs]

    # -- side effects ---------------------------------------------------------------------------

    def deliver(self, target: Target) -> None:
        """Upload the wheel to the code repo unless a wheel with the same digest is there."""
        wheel: Wheel | None = target.private.get("wheel")
        if wheel is None:
            return
        repo, path = target.info["code_repo"], target.info["wheel"]
        try:
            self.api.create_repo(repo, repo_type="model", private=True, exist_ok=True)
            if self.api.file_exists(repo, path, repo_type="model"):
                log.info("llm-ocr wheel %s already in %s: not uploaded again", wheel.digest[:16], repo)
                return
            self.api.upload_file(
                path_or_fileobj=wheel.data, path_in_repo=path, repo_id=repo, repo_type="model",
                commit_message=f"llm-ocr wheel {wheel.filename} ({wheel.digest[:16]})",
            )
            log.info("uploaded the llm-ocr wheel to %s/%s", repo, path)
        except Exception as exc:
            raise LaunchError(f"could not upload the llm-ocr wheel to {repo} ({_brief(exc)}); pass --code-repo "
                              "OWNER/NAME of a repo the token can write, or --image with a prebuilt image") from exc

    def submit(self, jobs: Sequence[PlannedJob], target: Target) -> Iterator[Submission]:
        """``run_job`` per shard."""
        namespace = self._namespace()
        volumes = target.private.get("volumes") or None
        for job in jobs:
            (spec,) = job.specs
            try:
                info = self.api.run_job(
                    image=spec.image, command=spec.command, env=spec.env, secrets=spec.secrets, flavor=spec.hardware,
                    timeout=spec.timeout_s, attempts=spec.attempts, name=spec.name, labels=spec.labels,
                    volumes=volumes, namespace=namespace,
                )
            except Exception as exc:
                raise LaunchError(_brief(exc)) from exc
            yield Submission(info.id, [spec.shard_index], spec.name, info.url, f"hf jobs logs -f {namespace}/{info.id}")

    # -- following ------------------------------------------------------------------------------

    def states(self, jobs: Sequence[dict[str, Any]]) -> dict[str, JobState]:
        """One ``list_jobs`` per launch (by its label), ``inspect_job`` for any job it missed."""
        namespace = self._namespace()
        wanted = {j["job_id"] for j in jobs}
        found: dict[str, Any] = {}
        for launch_id in sorted({str(j.get("launch_id")) for j in jobs if j.get("launch_id")}):
            for info in self.api.list_jobs(labels={LAUNCH_LABEL: launch_id}, namespace=namespace):
                if info.id in wanted:
                    found[info.id] = info
        for job_id in sorted(wanted - set(found)):
            found[job_id] = self.api.inspect_job(job_id=job_id, namespace=namespace)
        return {job_id: _state(info) for job_id, info in found.items()}

    def shard_phase(self, state: JobState, shard: int) -> JobState:
        """One job runs one shard: its state is the shard's."""
        return state

    def logs(self, job: dict[str, Any], shard: int, *, follow: bool = False, tail: int | None = None) -> Iterator[str]:
        """The job's log lines (``fetch_job_logs``)."""
        return iter(self.api.fetch_job_logs(job_id=job["job_id"], namespace=self._namespace(), follow=follow,
                                            tail=tail))

    def cancel(self, jobs: Sequence[dict[str, Any]]) -> list[str]:
        """``cancel_job`` each."""
        namespace = self._namespace()
        for job in jobs:
            self.api.cancel_job(job_id=job["job_id"], namespace=namespace)
        return [job["job_id"] for job in jobs]


def job_body(spec: ShardSpec, volumes: Sequence[Any], *, redact: bool) -> dict[str, Any]:
    """The JSON body ``HfApi.run_job`` posts for ``spec`` (huggingface_hub 2.4 ``_create_job_spec``:
    ``name`` goes into the labels; a ``hf.co/spaces/`` image is a ``spaceId``)."""
    body: dict[str, Any] = {
        "command": list(spec.command),
        "arguments": [],
        "environment": dict(spec.env),
        "flavor": spec.hardware,
    }
    if spec.secrets:
        body["secrets"] = {k: (REDACTED if redact else v) for k, v in spec.secrets.items()}
    body["timeoutSeconds"] = int(spec.timeout_s)
    body["attempts"] = spec.attempts
    body["labels"] = {**spec.labels, "name": spec.name}
    if volumes:
        body["volumes"] = [v.to_dict() for v in volumes]
    for prefix in ("https://huggingface.co/spaces/", "https://hf.co/spaces/", "huggingface.co/spaces/",
                   "hf.co/spaces/"):
        if spec.image.startswith(prefix):
            body["spaceId"] = spec.image[len(prefix):]
            break
    else:
        body["dockerImage"] = spec.image
    return body


#: The ``run_job`` keywords the launcher passes (``attempts`` first appears in huggingface_hub 2.1).
RUN_JOB_KEYWORDS = ("attempts", "name", "labels", "volumes")


def check_jobs_api() -> None:
    """:class:`LaunchError` when the installed huggingface_hub's ``run_job`` lacks a keyword the
    launcher passes: found now, not as a TypeError after the wheel upload."""
    import inspect

    import huggingface_hub
    from huggingface_hub import HfApi

    accepted = inspect.signature(HfApi.run_job).parameters
    missing = [k for k in RUN_JOB_KEYWORDS if k not in accepted]
    if missing:
        raise LaunchError(
            f"huggingface_hub {huggingface_hub.__version__} is too old for llm-ocr's Jobs launcher (its run_job has no "
            f"{', '.join(missing)}): pip install -U 'llm-ocr[hub]' (huggingface_hub>=2.1)"
        )


def is_network_error(exc: BaseException) -> bool:
    """Whether ``exc`` (or what caused it) is a failure to reach the server: a name that does not
    resolve, a refused or timed-out connection; not an answer such as 401."""
    import socket

    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        name = type(current).__name__
        if isinstance(current, (socket.gaierror, ConnectionError, TimeoutError)) or any(
            word in name for word in ("ConnectError", "ConnectionError", "ConnectTimeout", "NameResolution", "Timeout")
        ):
            return True
        if any(text in str(current) for text in ("Name or service not known", "Temporary failure in name resolution",
                                                 "nodename nor servname", "Connection refused",
                                                 "Network is unreachable")):
            return True
        current = current.__cause__ or current.__context__
    return False


def _state(info: Any) -> JobState:
    stage = str(getattr(info.status.stage, "value", info.status.stage))
    running = None
    if info.durations is not None and info.durations.running_secs is not None:
        running = float(info.durations.running_secs)
    elif info.started_at is not None:
        end = info.finished_at or datetime.now(timezone.utc)
        running = max(0.0, (end - info.started_at).total_seconds())
    return JobState(info.id, _PHASES.get(stage, "unknown"), stage, info.status.message, running)


def _flavor_list(table: dict[str, Hardware]) -> str:
    def describe(h: Hardware) -> str:
        price = f", ${h.price_per_hour:.2f}/h" if h.price_per_hour is not None else ""
        return f"{h.name} ({h.accelerator}{price})" if h.accelerator else h.name

    ordered = sorted(table.values(), key=lambda h: (h.gpus == 0, h.name))
    return ", ".join(describe(h) for h in ordered)


def _brief(exc: BaseException) -> str:
    """An exception's first line, without tokens."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return scrub(text)
