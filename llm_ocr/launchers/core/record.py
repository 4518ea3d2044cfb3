"""The launch record: which jobs run which shards, kept beside the output.

``OUT/_state/launches/{launch_id}.json`` holds the platform, the jobs (id, shards, name, URL),
the latest job of every shard (a relaunch carries over the jobs of shards it did not relaunch),
the hardware and its price, and what the platform adapter needs to follow the jobs (namespace,
region...). So ``llm-ocr jobs status OUT`` works from any machine that can read OUT, without
listing the platform's jobs by name (racy).

A copy of the output's URL is also kept locally by launch id
(``$XDG_CACHE_HOME/llm-ocr/launches/ID.json``), so ``llm-ocr jobs status LAUNCH_ID`` finds the
output on the machine that launched. No secret is ever written to either.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from llm_ocr.stage_table import STAGES
from llm_ocr.storage import Storage
from llm_ocr.storage.state import STATE_DIR

LAUNCHES_DIR = "launches"
_ID_RE = re.compile(r"^\d{8}-\d{6}-[0-9a-f]{4}$")


def new_launch_id() -> str:
    """A launch id that sorts by time: ``20250611-142233-9f3c`` (UTC)."""
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + secrets.token_hex(2)


def looks_like_launch_id(text: str) -> bool:
    """Whether ``text`` has the shape of a launch id (rather than an output URL)."""
    return bool(_ID_RE.match(text))


@dataclass
class LaunchRecord:
    """One launch, as saved in ``OUT/_state/launches/``."""

    launch_id: str
    platform: str
    output: str
    stage: str
    num_shards: int
    hardware: str
    gpus: int
    price_per_hour: float | None
    image: str
    created_at: float = field(default_factory=time.time)
    #: Submitted jobs: {"job_id", "shards", "name", "url", "launch_id"}.
    jobs: list[dict[str, Any]] = field(default_factory=list)
    #: shard index (as a string: JSON keys) -> job id of the latest job running it.
    shards: dict[str, str] = field(default_factory=dict)
    #: The adapter's facts to follow the jobs (LaunchPlan.target.info).
    info: dict[str, Any] = field(default_factory=dict)
    #: Why shards were not launched ("done", "running job ID").
    skipped: dict[str, str] = field(default_factory=dict)
    #: The completion markers a shard needs (``run`` with a schema: Fields' too); empty in
    #: records written before it was kept: the stage's own.
    markers: list[str] = field(default_factory=list)

    def needed_markers(self) -> tuple[str, ...]:
        """The completion markers a shard of this launch must have to count as done."""
        return tuple(self.markers) or STAGES[self.stage].markers

    def job(self, job_id: str) -> dict[str, Any] | None:
        """The record entry of ``job_id``."""
        return next((j for j in self.jobs if j["job_id"] == job_id), None)

    def job_of_shard(self, shard: int) -> dict[str, Any] | None:
        """The latest job running ``shard``, if any."""
        job_id = self.shards.get(str(shard))
        return self.job(job_id) if job_id else None

    def current_jobs(self) -> list[dict[str, Any]]:
        """The latest job of each shard (each job once)."""
        ids = dict.fromkeys(self.shards.values())
        return [job for job_id in ids if (job := self.job(job_id)) is not None]

    def add(self, job: dict[str, Any]) -> None:
        """Record a submitted job as the latest for its shards."""
        self.jobs.append(job)
        for shard in job["shards"]:
            self.shards[str(shard)] = job["job_id"]

    def carry_over(self, previous: LaunchRecord, shards: set[int]) -> None:
        """Keep ``previous``'s jobs of ``shards`` (not relaunched) so the table shows every shard."""
        for shard in sorted(shards):
            job = previous.job_of_shard(shard)
            if job is None:
                continue
            if self.job(job["job_id"]) is None:
                self.jobs.append(job)
            self.shards[str(shard)] = job["job_id"]

    def to_json(self) -> dict[str, Any]:
        """The record as saved."""
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LaunchRecord:
        """A record read back (unknown keys from newer versions are ignored)."""
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        return cls(**known)


def record_path(out: Storage, launch_id: str) -> str:
    """Where a launch record lives."""
    return out.path(STATE_DIR, LAUNCHES_DIR, f"{launch_id}.json")


def save_record(out: Storage, record: LaunchRecord) -> None:
    """Write the record beside the output, made visible now (on the Hub: committed), and note
    its output locally by launch id."""
    out.write_atomic(record_path(out, record.launch_id),
                     json.dumps(record.to_json(), indent=2, sort_keys=True).encode())
    out.flush()
    try:
        path = _local_index() / f"{record.launch_id}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"output": record.output, "platform": record.platform}))
    except OSError:
        pass  # a convenience: `jobs status OUT` works without it


def load_record(out: Storage, launch_id: str | None = None) -> LaunchRecord | None:
    """Launch ``launch_id``'s record, or the latest one when None; None when there is none."""
    if launch_id is None:
        paths = out.glob(STATE_DIR, LAUNCHES_DIR, "*.json")
        if not paths:
            return None
        path = max(paths, key=lambda p: p.rsplit("/", 1)[-1])  # ids sort by time
    else:
        path = record_path(out, launch_id)
        if not out.exists(path):
            return None
    return LaunchRecord.from_json(json.loads(out.read_bytes(path)))


def output_of_launch(launch_id: str) -> str | None:
    """The output URL a launch id was launched to from this machine, if noted here."""
    path = _local_index() / f"{launch_id}.json"
    try:
        return str(json.loads(path.read_text())["output"])
    except (OSError, ValueError, KeyError):
        return None


def _local_index() -> Path:
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "llm-ocr" / LAUNCHES_DIR
