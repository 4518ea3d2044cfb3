"""What a launch asks for and the job specs it becomes: the platform-neutral data of a launch.

A :class:`LaunchRequest` is what the user typed (inputs, output, shards, stage and its options,
hardware, image...). Planning turns it into one :class:`ShardSpec` per shard to launch: the
container image, the command (the plain ``llm-ocr`` invocation, possibly behind a code-install
step), the plain environment, the secrets (kept apart: their values never leave this object
except towards the platform's secrets channel), hardware, timeout, attempts and labels.
:class:`LaunchPlan` gathers the specs and the exact API request bodies; its :meth:`LaunchPlan.
to_json` is the ``--dry-run`` contract (docs/platforms-hf-jobs.md#the-dry-run-contract).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, Field, field_validator

from llm_ocr.costs import Hardware
from llm_ocr.launchers.core.files import ShippedFile
from llm_ocr.options import DatasetOptions
from llm_ocr.stage_table import STAGES
from llm_ocr.storage.stores import scrub

if TYPE_CHECKING:
    StageName = str
else:
    #: ``--stage``: a stage of the stage table (pydantic checks it, naming them).
    StageName = Literal[tuple(STAGES)]

#: Flags of ``llm-ocr run`` that make it run Fields after Assemble (``--schema`` is given as
#: ``--fields-schema`` by the launcher).
FIELDS_FLAGS = frozenset({"--fields-schema", "--schema", "--classes"})


#: The flag of ``llm-ocr run`` that makes it escalate pages between Extract and Describe.
ESCALATE_FLAG = "--escalate-to"


def launch_markers(stage: str, stage_args: list[str]) -> tuple[str, ...]:
    """The completion markers a shard of a launch must have to count as done: the stage's
    (:attr:`Stage.markers <llm_ocr.stage_table.Stage.markers>`), Escalate's too for a ``run``
    given ``--escalate-to``, and Fields' for a ``run`` given a schema or a classes file."""
    markers = STAGES[stage].markers
    if stage == "run" and any(a == ESCALATE_FLAG or a.startswith(f"{ESCALATE_FLAG}=") for a in stage_args):
        markers = (markers[0], "escalate", *markers[1:])
    if stage == "run" and FIELDS_FLAGS & set(stage_args):
        return (*markers, "fields")
    return markers


#: The label keys every job carries (values: the launch id, and "00003-of-00016").
LAUNCH_LABEL = "llm-ocr-launch"
SHARD_LABEL = "llm-ocr-shard"

#: What a secret's value is replaced by wherever a request body is shown.
REDACTED = "<secret>"


class LaunchError(Exception):
    """The launch cannot go ahead; the message says what to change. Nothing was submitted."""


def brief_error(exc: BaseException) -> str:
    """An exception's first line (its type when it has no message), credentials scrubbed: what a
    :class:`LaunchError` quotes of a platform's or a store's refusal."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return scrub(text)


class LaunchOptions(BaseModel):
    """The options of ``llm-ocr launch`` itself (also ``llm_ocr.launch`` keywords).

    The launched stage's own options go to the jobs' command line; the platform's to its adapter.
    """

    output: str = Field(..., description="Output URL the jobs can write (hf://, s3://, gs://).")
    num_shards: int = Field(..., description="Number of shards (jobs on hf-jobs, tasks on cloud-run).")
    stage: StageName = Field("run", description="Stage each job runs (run: all three).")
    image: str | None = Field(None, description="Prebuilt image with llm-ocr (default: a stock pinned image + the "
                                                "llm-ocr wheel).")
    timeout: int | None = Field(
        None, description="Per job, seconds or 90m/6h (default: sized from --pages, else 6h).",
        json_schema_extra={"metavar": "DURATION"},
    )
    attempts: int | None = Field(
        None, description="Tries per job (a task on cloud-run) including the first (default 3; 4 on cloud-run); "
                          "retries resume."
    )
    env: dict[str, str] = Field(
        default_factory=dict, description="Plain environment variable for the jobs.",
        json_schema_extra={"metavar": "NAME=VALUE", "repeat": True},
    )
    secret: list[str] = Field(
        default_factory=list, description="Pass local environment variable NAME to the jobs as a secret.",
        json_schema_extra={"metavar": "NAME", "repeat": True},
    )
    pages: int | None = Field(None, description="Pages in the whole input, to size the timeout.")
    pages_per_s: float | None = Field(None, description="Pages/s one job does, to size the timeout.")
    retry_errors: bool = Field(False, description="Also relaunch finished shards that have failed pages.")
    wait: bool = Field(False, description="Then show a live table until every shard ends.")
    interval: float = Field(15.0, gt=0, description="Seconds between polls while waiting.")
    dry_run: bool = Field(False, description="Print the job specs and API requests as JSON; submit nothing.")
    #: ``--dry-run --offline``: plan without any network call; every check skipped is named in
    #: the plan's notes.
    offline: bool = Field(
        False, description="With --dry-run: check nothing over the network (credentials, the platform's lists, "
        "inputs, output); the notes name every check skipped.",
    )

    @field_validator("timeout", mode="before")
    @classmethod
    def _seconds(cls, value: Any) -> Any:
        """``3600``, ``"90m"``, ``"2h"`` -> seconds (Hugging Face Jobs' own notation)."""
        if value is None or isinstance(value, int):
            return value
        units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
        text = str(value).strip()
        try:
            return int(float(text[:-1]) * units[text[-1]]) if text[-1:] in units else int(float(text))
        except ValueError:
            raise ValueError(f"{value!r}: give seconds or a duration like 90m or 6h") from None

    @field_validator("env", mode="before")
    @classmethod
    def _pairs(cls, value: Any) -> Any:
        """``["NAME=VALUE", ...]`` (as the flag is repeated) -> ``{"NAME": "VALUE"}``."""
        if not isinstance(value, (list, tuple)):
            return value
        pairs = {}
        for item in value:
            name, sep, text = str(item).partition("=")
            if not sep or not name:
                raise ValueError(f"{item!r}: write NAME=VALUE")
            pairs[name] = text
        return pairs


class LaunchRequest(LaunchOptions):
    """One launch as asked: its :class:`LaunchOptions`, and what the launch derived from the stage's
    options (checked before planning; no check against the platform yet)."""

    platform: str
    #: The stage's served model and recipe (its ``--model``, ``--recipe``): what a plan estimates.
    model: str | None = None
    recipe: str | None = None
    #: The stage's ``--gpu-preset``, if given: the GPUs a machine without a named preset has.
    gpu_preset: str | None = None
    inputs: list[str] = Field(default_factory=list)
    #: The stage's own options and the INPUTs: passed to the container unchanged
    #: (``llm-ocr STAGE <stage_args> --output OUT``).
    stage_args: list[str] = Field(default_factory=list)
    #: Whether the stage needs a model server in the job (no ``--endpoint`` among the options).
    needs_model: bool = True
    #: The model family the jobs serve (``--model``/``--recipe``): it names the stock image.
    family: str = "deepseek-ocr"
    #: The platform's machine type (``--flavor`` on hf-jobs, ``--instance-type`` on sagemaker...).
    hardware: str | None = None
    dataset: DatasetOptions = Field(default_factory=DatasetOptions)
    storage_options: dict[str, Any] = Field(default_factory=dict)
    #: Local files the stage's options named, copied beside the output on submit
    #: (:mod:`llm_ocr.launchers.core.files`); the stage arguments name the copies.
    shipped: list[ShippedFile] = Field(default_factory=list)

    @property
    def markers(self) -> tuple[str, ...]:
        """The completion markers each shard must have (:func:`launch_markers`)."""
        return launch_markers(self.stage, self.stage_args)

    @property
    def timeout_s(self) -> int | None:
        """The per-job timeout in seconds, if given."""
        return self.timeout

    @property
    def secret_names(self) -> list[str]:
        """Names of local environment variables to pass as secrets (their values are read locally)."""
        return self.secret


@dataclass
class ShardSpec:
    """One shard's job as the container sees it."""

    shard_index: int
    num_shards: int
    name: str
    image: str
    command: list[str]
    env: dict[str, str]
    #: name -> value; the values go only to the platform's secrets channel.
    secrets: dict[str, str] = field(repr=False)
    hardware: str
    timeout_s: int
    attempts: int
    labels: dict[str, str]
    #: name -> a reference the platform resolves in the job (a Secret Manager version...): no
    #: value, nothing read on this machine; listed with the secrets by name.
    secret_refs: dict[str, str] = field(default_factory=dict)

    def public(self) -> dict[str, Any]:
        """The spec as the dry-run contract shows it: secrets by name only."""
        return {
            "shard_index": self.shard_index,
            "num_shards": self.num_shards,
            "name": self.name,
            "image": self.image,
            "command": list(self.command),
            "env": dict(self.env),
            "secrets": sorted({*self.secrets, *self.secret_refs}),
            "hardware": self.hardware,
            "timeout_s": self.timeout_s,
            "attempts": self.attempts,
        }


@dataclass
class PlannedJob:
    """One platform job to submit: the shards it runs and its exact request body.

    ``body`` has every secret value replaced by :data:`REDACTED`; the adapter puts the real
    values back from the specs when it submits.
    """

    shards: list[int]
    body: dict[str, Any]
    specs: list[ShardSpec]


@dataclass
class Target:
    """What a platform resolved for a launch: hardware, image, how the code gets in, secrets."""

    hardware: Hardware
    image: str
    #: Command words placed before ``llm-ocr ...``: they install the shipped code, then exec the
    #: rest (:func:`llm_ocr.launchers.core.command.install_then_run`). Empty when the image has it.
    run_prefix: list[str]
    #: Secrets every job of this platform gets (e.g. ``HF_TOKEN``), name -> value.
    secrets: dict[str, str] = field(repr=False)
    #: Facts needed later to follow the jobs (namespace, code location...): saved in the record.
    info: dict[str, Any] = field(default_factory=dict)
    #: Adapter-private state (built wheel, API client...); never serialised.
    private: dict[str, Any] = field(default_factory=dict, repr=False)
    #: What the user should know about this platform's choices (shown with the plan).
    notes: list[str] = field(default_factory=list)
    #: The platform's limit on one attempt of a job, in seconds (Cloud Run: 1 h with a GPU);
    #: the timeout is sized under it, and a shard too long for every attempt is refused.
    max_timeout_s: int | None = None
    #: Plain environment every job of this platform gets (before the user's ``--env``).
    env: dict[str, str] = field(default_factory=dict)
    #: Secrets by reference (name -> the platform's reference, no value): see ShardSpec.
    secret_refs: dict[str, str] = field(default_factory=dict)


@dataclass
class LaunchPlan:
    """Everything a launch would submit, and why the other shards are left alone."""

    platform: str
    launch_id: str
    request: LaunchRequest
    target: Target
    specs: list[ShardSpec]
    jobs: list[PlannedJob]
    #: shard -> why it is not launched ("done", "running job ID").
    skipped: dict[int, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    #: The output's latest launch record before this one (a LaunchRecord), if any.
    previous: Any = None
    #: What the launch would take on each machine of the platform (a llm_ocr.planning.Plan, made
    #: on a dry run; None otherwise): printed beside the specs, not part of the dry-run JSON.
    estimate: Any = None
    #: The platform's own form of the dry run, printed instead of :meth:`to_json` when set
    #: (Kubernetes' ``--yaml``: the objects for ``kubectl apply -f -``).
    text: str | None = None
    #: Written by :func:`~llm_ocr.launchers.core.submit.submit_plan` before any job: the folder
    #: INPUTs' listing (a :class:`llm_ocr.sources.InputPlan`) and the manifest URL the jobs read.
    manifest: tuple[Any, str] | None = None

    def to_json(self) -> dict[str, Any]:
        """The ``--dry-run`` object (docs/platforms-hf-jobs.md#the-dry-run-contract): jobs by shard,
        and the exact request bodies."""
        return {
            "platform": self.platform,
            "launch_id": self.launch_id,
            "jobs": [spec.public() for spec in self.specs],
            "requests": [job.body for job in self.jobs],
        }


def secret_values(specs: list[ShardSpec], extra: dict[str, str] | None = None) -> dict[str, str]:
    """Every secret value of ``specs`` (and ``extra``), by name."""
    found = dict(extra or {})
    for spec in specs:
        found.update(spec.secrets)
    return found


def assert_no_secret(secrets: dict[str, str], where: str, value: Any) -> None:
    """Raise :class:`LaunchError` if any secret value appears in ``value`` (serialised).

    Short values are skipped: a 3-character "secret" would match by accident.
    """
    text = json.dumps(value, default=str)
    for name, secret in secrets.items():
        if secret and len(secret) >= 8 and secret in text:
            raise LaunchError(
                f"the value of secret {name} would appear in {where}; pass it only as a secret "
                f"(--secret {name}), never in --env, a stage option or a label"
            )
