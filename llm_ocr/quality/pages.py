"""A run's page rows and its completion markers, as the quality checks read them."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from llm_ocr.storage import Storage, retry_io
from llm_ocr.storage.parts import list_parts
from llm_ocr.storage.state import list_markers

#: Stages whose rows are one page each, in the order they are checked: Escalate's hold the readings
#: used (where a run escalated), Extract's the model's own output.
PAGE_STAGES = ("escalate", "extract", "describe")
#: The columns the checks read (never ``raw``, ``figures`` or ``blocks``: images and bulk).
COLUMNS = (
    "doc_id", "doc_index", "page", "source", "num_pages", "markdown", "status", "error", "finish_reason",
    "cut_reason", "cut_tokens", "prompt_tokens", "completion_tokens", "latency_s", "attempts", "model", "width",
    "height", "quarantined", "route", "escalated_from", "escalation_reason", "text_estimate",
)  # fmt: skip


#: How a stage's part files are named (:func:`llm_ocr.storage.parts.part_name`).
PART_PATTERN = "part-NNNNN-of-NNNNN-NNNNNN.parquet (shard, shard count, sequence)"


class NoPagesError(Exception):
    """The folder holds no page rows to check."""


def has_pages(out: Storage) -> bool:
    """Whether ``out`` holds a run's page rows (Extract's or Describe's parts)."""
    return any(list_parts(out.child(name)) for name in PAGE_STAGES)


def page_stage(out: Storage) -> tuple[str, Storage]:
    """The stage folder whose rows are checked: Extract's, else Describe's."""
    for name in PAGE_STAGES:
        stage = out.child(name)
        if list_parts(stage):
            return name, stage
    others = [p for name in PAGE_STAGES for p in out.child(name).glob("*.parquet")]
    found = f"; found {out.display(others[0])}, but a run's parts are named {PART_PATTERN}" if others else ""
    raise NoPagesError(
        f"no page rows under {out.display(out.root)}: expected Parquet parts in extract/ or describe/{found}. "
        "To score Markdown files another tool wrote, use --bench DIR --markdown MD (docs/quality.md)"
    )


def iter_pages(out: Storage, columns: tuple[str, ...] = COLUMNS) -> Iterator[dict[str, Any]]:
    """Every page row of a run (one part in memory at a time), with the ``columns`` it has.

    A page written twice (a store without atomic writes, an interrupted rewrite) is given once,
    the first finished row kept over an error row, so each page counts once.
    """
    import pyarrow.parquet as pq

    _, stage = page_stage(out)
    seen: dict[tuple[str, int], str] = {}
    held: dict[tuple[str, int], dict[str, Any]] = {}
    for path in list_parts(stage):

        def read(path: str = path) -> Any:
            with stage.fs.open(path, "rb") as handle:
                parquet = pq.ParquetFile(handle, pre_buffer=False)  # this thread only: parts.parquet_file says why
                wanted = [c for c in columns if c in parquet.schema_arrow.names]
                return parquet.read(columns=wanted, use_threads=False)

        table = retry_io(read, what=f"reading {stage.display(path)}")
        for row in table.to_pylist():
            key = (str(row.get("doc_id")), int(row.get("page") or 0))
            status = row.get("status") or "unknown"
            if key in seen:
                if seen[key] == "error" and status != "error":
                    held[key] = row
                    seen[key] = status
                continue
            seen[key] = status
            if status == "error":
                held[key] = row  # a later finished row for the same page wins
            else:
                yield row
    yield from held.values()


@dataclass
class RunStats:
    """What a run's completion markers say: pages, tokens, time and GPU cost, summed over shards."""

    shards: int = 0
    pages: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    wall_time_s: float = 0.0
    gpu_seconds: float | None = 0.0
    cost_usd: float | None = 0.0
    presets: tuple[str, ...] = ()
    #: Pages by the route of the reading kept (Escalate's markers' when it ran, else Extract's).
    routes: dict[str, int] = field(default_factory=dict)
    #: Seconds each model's server had a request of the run in flight (``busy_s``), over Extract and Escalate.
    busy_s: dict[str, float] = field(default_factory=dict)

    @property
    def busy_seconds(self) -> float | None:
        """The models' busy seconds summed (None: no marker says, runs before routes)."""
        return sum(self.busy_s.values()) if self.busy_s else None

    @property
    def pages_per_s(self) -> float | None:
        """Pages per second per shard (each shard holds its own server)."""
        return self.pages / self.wall_time_s if self.wall_time_s > 0 else None

    def per_thousand_pages(self, value: float | None) -> float | None:
        """``value`` (a total over the run) per 1,000 pages."""
        return value / self.pages * 1000 if value is not None and self.pages else None

    def to_json(self) -> dict[str, Any]:
        """A JSON object of the stats and the rates derived from them."""
        return {
            "shards": self.shards, "pages": self.pages, "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens, "wall_time_s": round(self.wall_time_s, 3),
            "pages_per_s": self.pages_per_s, "gpu_seconds": self.gpu_seconds, "cost_usd": self.cost_usd,
            "gpu_seconds_per_1000_pages": self.per_thousand_pages(self.gpu_seconds),
            "cost_per_1000_pages_usd": self.per_thousand_pages(self.cost_usd),
            "completion_tokens_per_page": self.completion_tokens / self.pages if self.pages else None,
            "presets": list(self.presets), "routes": dict(self.routes), "busy_s": dict(self.busy_s),
            "busy_seconds_per_1000_pages": self.per_thousand_pages(self.busy_seconds),
        }  # fmt: skip


def run_stats(out: Storage, stage: str = "extract") -> RunStats:
    """The sum of a stage's completion markers (their ``gpu`` cost: None when any is unknown),
    plus, for Extract, the Escalate stage's (its model's GPU time and tokens) when it ran."""
    stats = RunStats()
    presets: set[str] = set()
    stages = (stage, "escalate") if stage == "extract" else (stage,)
    routes: dict[str, dict[str, int]] = {}
    for name in stages:
        for marker in list_markers(out, name):
            pages: Mapping[str, Any] = marker.get("pages") or {}
            tokens: Mapping[str, Any] = marker.get("tokens") or {}
            if name == stage:  # Escalate reads the same pages again: they are counted once
                stats.shards += 1
                stats.pages += int(pages.get("total") or 0)
            stats.prompt_tokens += int(tokens.get("prompt") or 0)
            stats.completion_tokens += int(tokens.get("completion") or 0)
            stats.wall_time_s += float(marker.get("wall_time_s") or 0.0)
            gpu: Mapping[str, Any] = marker.get("gpu") or {}
            if gpu.get("preset"):
                presets.add(str(gpu["preset"]))
            seconds, cost = gpu.get("gpu_seconds"), gpu.get("estimated_cost_usd")
            unknown = seconds is None or stats.gpu_seconds is None
            stats.gpu_seconds = None if unknown else (stats.gpu_seconds or 0.0) + float(seconds or 0.0)
            stats.cost_usd = None if cost is None or stats.cost_usd is None else stats.cost_usd + float(cost)
            for route, count in (marker.get("routes") or {}).items():
                routes.setdefault(name, {})
                routes[name][route] = routes[name].get(route, 0) + int(count)
            for model, counts in (marker.get("models") or {}).items():
                stats.busy_s[model] = stats.busy_s.get(model, 0.0) + float(counts.get("busy_s") or 0.0)
    # Escalate's rows hold the readings kept: its routes, where it ran.
    stats.routes = routes.get("escalate") or routes.get(stage) or {}
    if not stats.shards:
        stats.gpu_seconds = stats.cost_usd = None
    stats.presets = tuple(sorted(presets))
    return stats
