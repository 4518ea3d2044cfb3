"""The contract between the launcher core and a platform adapter.

An adapter is a class with the attributes and methods of :class:`Platform`. The core calls, in
order: :meth:`Platform.resolve` (credentials, hardware, image, how the code gets into the
container: no side effects, so ``--dry-run`` calls it too), :meth:`Platform.plan_jobs` (the
shard specs grouped into the platform's jobs, with the exact request bodies),
:meth:`Platform.deliver` (upload the code, once, idempotently) and :meth:`Platform.submit`.
Later, from the launch record alone (maybe on another machine): :meth:`Platform.states`,
:meth:`Platform.logs` and :meth:`Platform.cancel`.

How shards map to jobs is the adapter's business: Hugging Face Jobs has no job arrays, so one
job per shard, each told its index in ``LLM_OCR_SHARD_INDEX`` (``shard_env = True``);
SageMaker Processing (``InstanceCount = N``) and Cloud Run (``task_count = N``) run one job for
all shards and the container finds its index from the platform (``shard_env = False``).

An adapter whose jobs see the launching machine's file system (a Slurm cluster's shared one) sets
``shared_filesystem = True``: the core then accepts local paths as INPUT and OUT.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from llm_ocr.launchers.core.spec import LaunchRequest, PlannedJob, ShardSpec, Target


class PlatformOptions(BaseModel):
    """What every platform's options have; each adapter's model adds its own."""

    model_config = ConfigDict(extra="forbid")

    wheel: str | None = Field(None, description="Ship this llm-ocr wheel instead of building one.",
                              json_schema_extra={"metavar": "PATH"})


#: A job's state in platform-neutral terms.
Phase = Literal["pending", "running", "succeeded", "failed", "cancelled", "unknown"]
TERMINAL_PHASES: frozenset[str] = frozenset({"succeeded", "failed", "cancelled"})


@dataclass
class Submission:
    """A submitted job: its id and the shards it runs."""

    job_id: str
    shards: list[int]
    name: str = ""
    url: str = ""
    #: How to follow it with the platform's own tools (e.g. ``hf jobs logs -f ID``).
    follow_hint: str = ""


@dataclass
class JobState:
    """What the platform says about the job running one shard."""

    job_id: str
    phase: Phase
    #: The platform's own word for it (``RUNNING``, ``InProgress``...).
    raw: str = ""
    message: str | None = None
    #: Seconds the job has run (billed time), when the platform says.
    running_s: float | None = None
    #: The state is the whole job's, the same for every shard it runs (SageMaker reports jobs, not
    #: hosts): a failure in it cannot be pinned on a shard that wrote all its completion markers.
    shared: bool = False


class Platform(Protocol):
    """A platform adapter (see the module docstring for the call order)."""

    #: As typed after ``llm-ocr launch``.
    name: ClassVar[str]
    #: True when each shard is its own job and gets ``LLM_OCR_SHARD_INDEX`` in its env.
    shard_env: ClassVar[bool]
    #: The option that names the hardware (``flavor``, ``instance_type``, ``gpu``).
    hardware_option: ClassVar[str]

    #: The platform's own options (``llm-ocr launch PLATFORM --help``, ``llm_ocr.launch`` keywords),
    #: declared once: the hardware is the field named :attr:`hardware_option`.
    options: ClassVar[type[BaseModel]]

    def __init__(self, **options: Any) -> None:
        """Built from the fields of :attr:`options` (and, for following jobs, what the record says)."""

    @classmethod
    def from_record(cls, info: dict[str, Any]) -> Platform:
        """An adapter able to follow jobs from a launch record's ``info`` (credentials from the
        environment as usual)."""

    def resolve(self, request: LaunchRequest) -> Target:
        """Check credentials and hardware, choose the image and the code delivery; raise
        :class:`~llm_ocr.launchers.core.spec.LaunchError` naming what to change. No side effects."""

    def plan_jobs(self, specs: Sequence[ShardSpec], target: Target) -> list[PlannedJob]:
        """Group ``specs`` into jobs and build each job's exact request body (secrets redacted)."""

    def deliver(self, target: Target) -> None:
        """Make the code the jobs install available (upload it unless already there)."""

    def submit(self, jobs: Sequence[PlannedJob], target: Target) -> Iterator[Submission]:
        """Submit ``jobs``, yielding each submission as soon as it is accepted (so that a failure
        half-way still leaves the earlier ones on record)."""

    def states(self, jobs: Sequence[dict[str, Any]]) -> dict[str, JobState]:
        """The current state of each job in ``jobs`` (launch-record entries: ``job_id``,
        ``shards``, ``launch_id``), by job id."""

    def shard_phase(self, state: JobState, shard: int) -> JobState:
        """The state of ``shard`` within its job (the job's own state when one job is one shard)."""

    def logs(self, job: dict[str, Any], shard: int, *, follow: bool = False, tail: int | None = None) -> Iterator[str]:
        """Log lines of ``shard``, which runs in ``job`` (a launch-record entry)."""

    def cancel(self, jobs: Sequence[dict[str, Any]]) -> list[str]:
        """Cancel ``jobs``; the ids of those a cancel was sent to."""
