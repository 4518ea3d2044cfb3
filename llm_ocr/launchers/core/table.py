"""The status table of a launch: one row per shard, and totals with GPU-hours and cost.

A row combines three sources, most trusted first: the shard's completion markers (written last
by the run, with its stats), the progress file the running shard rewrites (pages done so far),
and what the platform says about the job (pending, running, failed, billed seconds). Those facts
are read by :func:`llm_ocr.launchers.core.follow.read_launch` (:class:`LaunchFacts`); everything
here is pure: :func:`status_table` makes the table of them, :func:`shard_status` each row, and the
table renders as text (CLI), a ``rich`` table (live view on a terminal) or HTML (notebooks).

Cost = the job's running time x the hardware's hourly price (the whole machine is billed);
GPU-hours = running time x GPUs. The running time is the platform's billed seconds when it says,
else the markers' wall time, else the progress file's elapsed time.
"""

from __future__ import annotations

import html
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from llm_ocr.launchers.core.adapter import JobState
from llm_ocr.stage_table import STAGE_FOLDERS, STAGES

#: Row states (besides "done...") that will not change without a new launch.
FINAL_STATES = frozenset({"failed", "cancelled", "not launched", "no marker"})
PAGE_STATUSES = ("ok", "truncated", "error")
DOCUMENT_STATUSES = ("ok", "partial", "error")
FIELDS_STATUSES = ("ok", "invalid", "error")


def statuses_of(stage: str) -> tuple[str, ...]:
    """The statuses a launched stage's table counts."""
    return {"assemble": DOCUMENT_STATUSES, "fields": FIELDS_STATUSES}.get(stage, PAGE_STATUSES)


@dataclass
class ShardStatus:
    """One shard's row."""

    shard: int
    state: str
    job_id: str | None = None
    job_state: str = ""
    #: The job's (task's) phase in platform-neutral terms, "" when no job is known.
    job_phase: str = ""
    message: str | None = None
    #: Stages with a completion marker.
    stages_done: list[str] = field(default_factory=list)
    #: Pages (documents for an Assemble launch) by status, this shard's runs so far.
    counts: dict[str, int] = field(default_factory=dict)
    #: Pages (documents) done by an earlier run of the shard and skipped by the last one.
    earlier: int = 0
    #: Fields' documents by status, for a ``run`` launched with a schema (None: no Fields in
    #: this launch; empty: its marker is not there yet).
    fields: dict[str, int] | None = None
    elapsed_s: float | None = None
    gpu_hours: float | None = None
    cost_usd: float | None = None
    #: Pages by the route of the reading kept, and per model its pages and busy seconds (docs/routes.md).
    routes: dict[str, int] = field(default_factory=dict)
    models: dict[str, dict[str, float]] = field(default_factory=dict)

    @property
    def final(self) -> bool:
        """True when the row will not change without a new launch: a shard with its markers
        whose job still runs (it may yet exit non-zero and be retried) is not final yet."""
        return (self.state.startswith("done") and self.job_phase not in ("pending",
                                                                         "running")) or self.state in FINAL_STATES

    @property
    def kind(self) -> str:
        """The state without its counts: ``done``, ``done, job failed``, ``running``..."""
        if self.state.startswith("done") and self.job_phase in ("failed", "cancelled"):
            return f"done, job {self.job_phase}"
        return self.state.split(" (")[0]

    @property
    def succeeded(self) -> bool:
        """Every completion marker, and a job (if known) that did not fail."""
        return self.state.startswith("done") and self.job_phase not in ("pending", "running", "failed", "cancelled")

    @property
    def done_count(self) -> int:
        """Pages (documents) with a row from this shard's runs."""
        return sum(self.counts.values())


def shard_status(
    shard: int,
    stage: str,
    markers: dict[str, dict[str, Any]],
    progress: dict[str, Any] | None,
    job: JobState | None,
    *,
    gpus: int,
    price_per_hour: float | None,
    needed: Sequence[str] | None = None,
) -> ShardStatus:
    """The row of ``shard`` of a ``stage`` launch from its markers (by stage), its progress file
    and its job's state (None: no job known). ``needed``: the markers that make the shard done
    (default the stage's; a ``run`` with a schema needs Fields' too, and its row shows them)."""
    needed = tuple(needed or STAGES[stage].markers)
    done = all(name in markers for name in needed)
    counts, earlier = _counts(stage, markers, progress)
    phase = _phase(job, done)
    elapsed = _elapsed(stage, markers, progress, job, needed)
    row = ShardStatus(
        shard=shard,
        state=_state(job, phase, done, counts),
        job_id=job.job_id if job else None,
        job_state=job.raw if job else "",
        job_phase=phase,
        message=_message(job, phase, done),
        stages_done=[name for name in STAGE_FOLDERS if name in markers],
        counts=counts,
        earlier=earlier,
        elapsed_s=elapsed,
        fields=_fields(markers, needed),
    )
    row.routes, row.models = _routes(markers)
    if elapsed is not None:
        row.gpu_hours = round(elapsed * gpus / 3600, 4)
        row.cost_usd = round(elapsed / 3600 * price_per_hour, 4) if price_per_hour is not None else None
    return row


def _phase(job: JobState | None, done: bool) -> str:
    """The job's phase as the row shows it ("" when no job is known)."""
    if job is None:
        return ""
    if done and job.shared and job.phase in ("failed", "cancelled"):
        return "succeeded"  # another host of the job failed it; this one finished its shard
    return job.phase


def _state(job: JobState | None, phase: str, done: bool, counts: dict[str, int]) -> str:
    """The row's state: ``done (N failed)`` (and how its job ended, if badly), else the job's."""
    if done:
        failed = counts.get("error", 0) + counts.get("partial", 0)
        state = f"done ({failed} failed)" if failed else "done"
        if phase in ("failed", "cancelled"):
            state += f", job {phase}"  # the markers are there, but the job did not end well
        return state
    if job is None:
        return "not launched"
    if job.phase == "succeeded":
        return "no marker"  # exited 0 without one: should not happen; `llm-ocr status OUT` tells more
    return job.phase


def _message(job: JobState | None, phase: str, done: bool) -> str | None:
    """The job's message where it explains the row: a job that failed or was cancelled, and a
    pending one's reason to wait (a pod that will never start, a retry coming)."""
    if job is None or not (phase in ("failed", "cancelled") or (phase == "pending" and not done)):
        return None
    return job.message


def _elapsed(stage: str, markers: dict[str, dict[str, Any]], progress: dict[str, Any] | None, job: JobState | None,
             needed: Sequence[str]) -> float | None:
    """The shard's running time: the platform's billed seconds, else the markers' wall time, else
    the progress file's."""
    if job is not None and job.running_s is not None:
        return job.running_s
    seconds = _marker_seconds(stage, markers, needed)
    if seconds is None and progress is not None:
        return float(progress.get("wall_time_s") or 0.0)
    return seconds


def _fields(markers: dict[str, dict[str, Any]], needed: Sequence[str]) -> dict[str, int] | None:
    """Fields' documents by status (empty before its marker), or None when the launch has no Fields."""
    if "fields" in markers:
        return _counts("fields", markers, None)[0]
    return {} if "fields" in needed else None


def _routes(markers: dict[str, dict[str, Any]]) -> tuple[dict[str, int], dict[str, dict[str, float]]]:
    """A shard's pages by route (Escalate's marker's when it has one: its rows are the final
    readings) and, per model, its pages read and busy seconds over Extract and Escalate."""
    routes: dict[str, int] = {}
    models: dict[str, dict[str, float]] = {}
    for name in ("extract", "escalate"):
        marker = markers.get(name) or {}
        routes = dict(marker.get("routes") or {}) or routes
        for model, counts in (marker.get("models") or {}).items():
            into = models.setdefault(model, {"pages": 0, "busy_s": 0.0})
            into["pages"] += counts.get("pages", 0)
            into["busy_s"] += counts.get("busy_s", 0.0)
    return routes, models


def _counts(stage: str, markers: dict[str, dict[str, Any]], progress: dict[str, Any] | None) -> tuple[dict[str, int],
                                                                                                      int]:
    if stage in ("assemble", "fields"):
        docs = (markers.get(stage) or {}).get("documents") or {}
        return {k: int(docs.get(k, 0)) for k in statuses_of(stage)}, int(docs.get("skipped", 0))
    source = markers.get(STAGES[stage].primary) or progress or {}
    pages = source.get("pages") or {}
    return {k: int(pages.get(k, 0)) for k in PAGE_STATUSES}, int(pages.get("skipped", 0))


def _marker_seconds(stage: str, markers: dict[str, dict[str, Any]], needed: Sequence[str]) -> float | None:
    # In `run`, Describe works inside Extract's page flow: its wall time overlaps Extract's.
    names = [name for name in needed if not (stage == "run" and name == "describe")]
    seconds = [float(markers[n]["wall_time_s"]) for n in names if n in markers and "wall_time_s" in markers[n]]
    return sum(seconds) if seconds else None


@dataclass
class LaunchStatus:
    """Every shard of a launch, with totals."""

    output: str
    stage: str
    num_shards: int
    shards: list[ShardStatus]
    launch_id: str | None = None
    platform: str | None = None
    hardware: str | None = None
    gpus: int = 1
    price_per_hour: float | None = None
    checked_at: float = field(default_factory=time.time)
    #: Set by :meth:`count_rows`: the counts come from the Parquet parts (every run of every
    #: shard), with this many duplicate rows found; None: from markers and progress files.
    duplicates: int | None = None
    #: The launch's ``run`` also extracts fields (``--schema``/``--classes``): a column and a
    #: totals line count its documents.
    fields: bool = False

    def count_rows(self, counts: dict[int, dict[str, int]], duplicates: int,
                   fields: dict[int, dict[str, int]] | None = None) -> None:
        """Replace each shard's counts by the rows its parts hold, by status (exact, all runs);
        ``fields``: the same for Fields' rows of a ``run`` with a schema.

        Markers and progress files only count a shard's last run; a shard resumed after a kill
        or a retry did part of its pages in an earlier one.
        """
        for row in self.shards:
            row.counts = dict(counts.get(row.shard, {}))
            row.earlier = 0
            if fields is not None and row.fields is not None and (row.fields or row.shard in fields):
                row.fields = {k: int(fields.get(row.shard, {}).get(k, 0)) for k in FIELDS_STATUSES}
        self.duplicates = duplicates

    @property
    def finished(self) -> bool:
        """True when no shard will change without a new launch."""
        return all(row.final for row in self.shards)

    @property
    def succeeded(self) -> bool:
        """True when every shard has its completion markers and no shard's job failed."""
        return all(row.succeeded for row in self.shards)

    def totals(self) -> dict[str, Any]:
        """Shards by state, pages by status, GPU-hours, cost and pages/s per GPU."""
        states = Counter(row.kind for row in self.shards)
        counts: Counter[str] = Counter()
        fields: Counter[str] = Counter()
        for row in self.shards:
            counts.update(row.counts)
            fields.update(row.fields or {})
        seconds = sum(row.elapsed_s or 0.0 for row in self.shards)
        gpu_seconds = seconds * self.gpus
        done = sum(counts.values())
        costs = [row.cost_usd for row in self.shards if row.cost_usd is not None]
        return {
            "shards": dict(states),
            "counts": dict(counts),
            "done": done,
            "done_earlier": sum(row.earlier for row in self.shards),
            "gpu_hours": round(gpu_seconds / 3600, 4),
            "cost_usd": round(sum(costs), 4) if costs and self.price_per_hour is not None else None,
            "pages_per_s_per_gpu": round(done / gpu_seconds,
                                         3) if gpu_seconds > 0 and self.stage != "assemble" else None,
            **({"fields": {k: fields.get(k, 0) for k in FIELDS_STATUSES}} if self.fields else {}),
        }

    def to_dict(self) -> dict[str, Any]:
        """The table as JSON (``llm-ocr jobs status --json``)."""
        data = asdict(self)
        data["totals"] = self.totals()
        data["finished"], data["succeeded"] = self.finished, self.succeeded
        return data

    # -- rendering ------------------------------------------------------------------------------

    @property
    def unit(self) -> str:
        return "documents" if self.stage in ("assemble", "fields") else "pages"

    def title(self) -> str:
        parts = [f"{self.platform or 'launch'} {self.launch_id or ''}".strip(), f"{self.stage} -> {self.output}",
                 f"{self.num_shards} shard(s)"]
        if self.hardware:
            price = f", ${self.price_per_hour:.2f}/h" if self.price_per_hour is not None else ""
            parts.append(f"{self.hardware}{price}")
        return " | ".join(parts)

    def header(self) -> list[str]:
        statuses = statuses_of(self.stage)
        fields = ["fields"] if self.fields else []
        return ["shard", "job", "state", "stages done", self.unit, *statuses, *fields, "elapsed", "cost $"]

    def cells(self, row: ShardStatus) -> list[str]:
        statuses = statuses_of(self.stage)
        done = str(row.done_count) + (f" (+{row.earlier} earlier)" if row.earlier else "")
        state = row.state + (f": {row.message}" if row.message else "")
        return [
            str(row.shard),
            row.job_id or "-",
            state,
            ",".join(row.stages_done) or "-",
            done,
            *(str(row.counts.get(s, 0)) for s in statuses),
            *([_fields_cell(row.fields)] if self.fields else []),
            _duration(row.elapsed_s),
            f"{row.cost_usd:.2f}" if row.cost_usd is not None else "-",
        ]

    def totals_lines(self) -> list[str]:
        t = self.totals()
        shards = ", ".join(f"{k} {v}" for k, v in sorted(t["shards"].items()))
        order = statuses_of(self.stage)
        counts = ", ".join(f"{k} {t['counts'].get(k, 0)}" for k in order)
        source = (f" (counted in the Parquet parts; duplicates: {self.duplicates})" if self.duplicates is not None
                  else f" (+{t['done_earlier']} done by earlier runs)" if t["done_earlier"] else "")
        lines = [
            f"shards: {shards}",
            f"{self.unit}: {t['done']} = {counts}{source}",
            f"GPU-hours: {t['gpu_hours']:.3f} ({self.gpus} GPU(s) per job)"
            + (f" | cost: ${t['cost_usd']:.2f}" if t["cost_usd"] is not None else " | cost: unknown price")
            + (f" | {t['pages_per_s_per_gpu']:.2f} pages/s per GPU" if t["pages_per_s_per_gpu"] is not None else ""),
        ]
        if self.fields:
            fields = t["fields"]
            counted = ", ".join(f"{k} {fields[k]}" for k in FIELDS_STATUSES)
            lines.insert(2, f"fields: {sum(fields.values())} documents = {counted}")
        routes: Counter[str] = Counter()
        models: dict[str, Counter[str]] = {}
        for row in self.shards:
            routes.update(row.routes)
            for model, read in row.models.items():
                models.setdefault(model, Counter()).update(read)
        if routes and set(routes) != {"model"}:
            lines.append("routes: " + ", ".join(f"{k} {v}" for k, v in sorted(routes.items()))
                         + " | " + "; ".join(f"{m}: {int(c['pages'])} pages read, {c['busy_s'] / 3600:.3f} GPU-h busy"
                                              for m, c in sorted(models.items())))
        return lines

    def __str__(self) -> str:
        rows = [self.header(), *(self.cells(r) for r in self.shards)]
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        text = [self.title()]
        text += ["  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in rows]
        return "\n".join(text + self.totals_lines())

    def rich(self) -> Any:
        """A ``rich`` renderable of the table (live view)."""
        from rich.table import Table

        table = Table(title=self.title(), caption="\n".join(self.totals_lines()), caption_justify="left")
        for name in self.header():
            table.add_column(name, justify="right" if name not in ("job", "state", "stages done") else "left")
        for row in self.shards:
            table.add_row(*self.cells(row))
        return table

    def _repr_html_(self) -> str:
        head = "".join(f"<th>{html.escape(h)}</th>" for h in self.header())
        body = "".join(
            "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in self.cells(r)) + "</tr>" for r in self.shards
        )
        totals = "<br>".join(html.escape(line) for line in self.totals_lines())
        return (f"<div><b>{html.escape(self.title())}</b><table><thead><tr>{head}</tr></thead>"
                f"<tbody>{body}</tbody></table><p>{totals}</p></div>")


@dataclass
class LaunchFacts:
    """What a launch's table is made of, as read from its record, OUT and the platform."""

    output: str
    stage: str
    num_shards: int
    #: The completion markers that make a shard done.
    needed: tuple[str, ...]
    #: stage -> shard -> its completion marker (those read: the needed ones, and Escalate's for a run).
    markers: dict[str, dict[int, dict[str, Any]]]
    #: shard -> the progress file of its last run of the stage.
    progress: dict[int, dict[str, Any]]
    #: shard -> what the platform says about its job (launched shards only).
    jobs: dict[int, JobState]
    launch_id: str | None = None
    platform: str | None = None
    hardware: str | None = None
    gpus: int = 1
    price_per_hour: float | None = None


def status_table(facts: LaunchFacts) -> LaunchStatus:
    """The table of a launch's ``facts``: a row per shard, and what the totals need."""
    rows = [
        shard_status(
            shard, facts.stage, {s: m[shard] for s, m in facts.markers.items() if shard in m},
            facts.progress.get(shard), facts.jobs.get(shard), gpus=facts.gpus, price_per_hour=facts.price_per_hour,
            needed=facts.needed,
        )
        for shard in range(facts.num_shards)
    ]
    return LaunchStatus(
        output=facts.output,
        stage=facts.stage,
        num_shards=facts.num_shards,
        shards=rows,
        launch_id=facts.launch_id,
        platform=facts.platform,
        hardware=facts.hardware,
        gpus=facts.gpus,
        price_per_hour=facts.price_per_hour,
        fields="fields" in facts.needed and facts.stage != "fields",
    )


def _fields_cell(counts: dict[str, int] | None) -> str:
    """A ``run`` shard's Fields documents: ``ok 7, invalid 1`` (statuses with none left out);
    ``-`` before its marker."""
    if not counts:
        return "-"
    return ", ".join(f"{k} {counts[k]}" for k in FIELDS_STATUSES if counts.get(k)) or "0"


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    whole = round(seconds)
    return f"{whole // 3600}:{whole % 3600 // 60:02d}:{whole % 60:02d}"


@dataclass
class CostTable:
    """GPU-hours and cost per finished shard, from its completion markers' wall times."""

    hardware: str
    gpus: int
    price_per_hour: float | None
    rows: list[dict[str, Any]]

    def totals(self) -> dict[str, Any]:
        """Sums over the shards, and pages/s per GPU overall."""
        hours = sum(r["wall_hours"] for r in self.rows)
        gpu_hours = sum(r["gpu_hours"] for r in self.rows)
        pages = sum(r["pages"] for r in self.rows)
        return {
            "shards": len(self.rows),
            "wall_hours": round(hours, 4),
            "gpu_hours": round(gpu_hours, 4),
            "cost_usd": round(hours * self.price_per_hour, 4) if self.price_per_hour is not None else None,
            "pages": pages,
            "pages_per_s_per_gpu": round(pages / (gpu_hours * 3600), 3) if gpu_hours > 0 else None,
        }

    def __str__(self) -> str:
        price = f"${self.price_per_hour:.2f}/h" if self.price_per_hour is not None else "unknown price"
        lines = [f"{self.hardware} ({self.gpus} GPU(s), {price}); from the completion markers"]
        lines.append(f"{'shard':>5} {'wall h':>8} {'GPU-h':>8} {'cost $':>8} {'pages':>7} {'pages/s/GPU':>11}")
        for r in self.rows:
            lines.append(f"{r['shard']:>5} {r['wall_hours']:>8.4f} {r['gpu_hours']:>8.4f} {_money(r['cost_usd']):>8} "
                         f"{r['pages']:>7} {_rate(r['pages_per_s_per_gpu']):>11}")
        t = self.totals()
        lines.append(f"{'total':>5} {t['wall_hours']:>8.4f} {t['gpu_hours']:>8.4f} {_money(t['cost_usd']):>8} "
                     f"{t['pages']:>7} {_rate(t['pages_per_s_per_gpu']):>11}")
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        text = str(self).splitlines()
        return f"<div><b>{html.escape(text[0])}</b><pre>{html.escape(chr(10).join(text[1:]))}</pre></div>"


def marker_costs(
    stage: str, markers: dict[str, dict[int, dict[str, Any]]], *, hardware: str, gpus: int,
    price_per_hour: float | None,
    needed: Sequence[str] | None = None,
) -> CostTable:
    """The cost of every shard of a ``stage`` launch that has its ``needed`` markers (by stage,
    by shard; default the stage's own)."""
    needed = tuple(needed or STAGES[stage].markers)
    shards = sorted(set.intersection(*(set(markers.get(s, {})) for s in needed))) if needed else []
    rows = []
    for shard in shards:
        own = {s: markers[s][shard] for s in needed}
        seconds = _marker_seconds(stage, own, needed) or 0.0
        counts, _ = _counts(stage, own, None)
        pages = sum(counts.values()) if stage != "assemble" else int(own["assemble"].get("pages", 0))
        rows.append({
            "shard": shard,
            "wall_hours": round(seconds / 3600, 4),
            "gpu_hours": round(seconds * gpus / 3600, 4),
            "cost_usd": round(seconds / 3600 * price_per_hour, 4) if price_per_hour is not None else None,
            "pages": pages,
            "pages_per_s_per_gpu": round(pages / (seconds * gpus), 3) if seconds > 0 and gpus else None,
        })
    return CostTable(hardware, gpus, price_per_hour, rows)


def _money(value: float | None) -> str:
    return f"{value:.4f}" if value is not None else "-"


def _rate(value: float | None) -> str:
    return f"{value:.3f}" if value is not None else "-"
