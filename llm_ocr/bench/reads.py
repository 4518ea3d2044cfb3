"""``llm-ocr bench-reads``: what one shard of a dataset INPUT reads, against its share.

For each shard asked for, the inputs are planned afresh (every footer read, as a shard job
does), then the shard's documents are listed to the end, as Extract would list them. Reported:
bytes read (footers and row groups apart) and requests, from the reader's own count and, when
the dataset is served here, from the server's; the shard's share (the dataset's bytes / N); the
time to the first page ready to send (plan + first row + rendering its first page: what comes
before the first request to the model) and to the last document.

:func:`plan_report` gives every shard's share of an N-shard plan from the footers alone: how
balanced the plan is, even with more shards than files.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from llm_ocr.options import DatasetOptions, RenderOptions
from llm_ocr.sources import InputError, InputPlan, plan_inputs
from llm_ocr.sources.dataset_inputs import ParquetPlan
from llm_ocr.sources.render import render_pages

MB = 1e6


@dataclass
class ShardReads:
    """One shard's reads and timings."""

    num_shards: int
    shard: int
    documents: int
    pages: int
    dataset_bytes: int  # the Parquet files of the dataset inputs, whole
    share_bytes: float  # dataset_bytes / num_shards
    footer_bytes: int
    data_bytes: int
    requests: int
    served_bytes: int | None  # what the counting server sent, when the dataset is served here
    plan_s: float
    first_page_s: float | None  # plan + first document + its first page rendered
    all_s: float

    @property
    def read_bytes(self) -> int:
        """Footers and row groups."""
        return self.footer_bytes + self.data_bytes

    @property
    def read_over_share(self) -> float:
        """Bytes read over the shard's share (the issue's bar: 1.5 plus the footers)."""
        return self.read_bytes / self.share_bytes if self.share_bytes else 0.0

    @property
    def data_over_share(self) -> float:
        """Row-group bytes read over the share: the footers left out."""
        return self.data_bytes / self.share_bytes if self.share_bytes else 0.0


@dataclass
class PlanReport:
    """How an N-shard plan splits the dataset inputs, from the footers."""

    num_shards: int
    files: int
    rows: int
    row_groups: int
    dataset_bytes: int
    shard_bytes: list[int]
    shard_rows: list[int]

    @property
    def share(self) -> float:
        """The dataset's bytes / N."""
        return self.dataset_bytes / self.num_shards

    def summary(self) -> dict[str, Any]:
        """Max, median and min shard bytes over the share, and shards with nothing."""
        ratios = [b / self.share for b in self.shard_bytes]
        return {
            "max_over_share": round(max(ratios), 3),
            "median_over_share": round(statistics.median(ratios), 3),
            "min_over_share": round(min(ratios), 3),
            "empty_shards": sum(1 for r in self.shard_rows if r == 0),
        }


def _parquet_plans(plan: InputPlan) -> list[ParquetPlan]:
    plans = [p for p in plan.plans if isinstance(p, ParquetPlan)]
    if not plans:
        raise InputError("bench-reads measures Parquet dataset inputs (a folder or file of .parquet, or a Hub dataset)")
    return plans


def dataset_bytes(plan: InputPlan) -> int:
    """Bytes of the Parquet files of the dataset inputs."""
    return sum(f.size for p in _parquet_plans(plan) for f in p.files.files)


def measure_shard(
    inputs: Sequence[str],
    num_shards: int,
    shard: int,
    *,
    dataset: DatasetOptions | None = None,
    storage_options: dict | None = None,
    served: Callable[[], int] | None = None,
) -> ShardReads:
    """Plan ``inputs`` and list shard ``shard`` of ``num_shards`` to the end, counting.

    ``served`` returns the bytes a counting server has sent so far (it is read before and after).
    """
    before = served() if served else 0
    start = time.perf_counter()
    plan = plan_inputs(inputs, dataset=dataset, storage_options=storage_options)
    total = dataset_bytes(plan)
    planned = time.perf_counter()
    first_page: float | None = None
    documents = pages = 0
    for ref in plan.documents(num_shards, shard):
        if first_page is None and ref.images:
            render_pages(ref, RenderOptions(), 1, 1)
            first_page = time.perf_counter() - start
        documents += 1
        pages += len(ref.images)
    end = time.perf_counter()
    return ShardReads(
        num_shards=num_shards,
        shard=shard,
        documents=documents,
        pages=pages,
        dataset_bytes=total,
        share_bytes=total / num_shards,
        footer_bytes=plan.stats.footer_bytes,
        data_bytes=plan.stats.data_bytes,
        requests=plan.stats.requests,
        served_bytes=(served() - before) if served else None,
        plan_s=planned - start,
        first_page_s=first_page,
        all_s=end - start,
    )


def plan_report(
    inputs: Sequence[str], num_shards: int, *, dataset: DatasetOptions | None = None,
    storage_options: dict | None = None
) -> PlanReport:
    """Every shard's share of an ``num_shards`` plan, reading the footers only."""
    plan = plan_inputs(inputs, dataset=dataset, storage_options=storage_options)
    parquet = _parquet_plans(plan)
    shares = plan.dataset_shares(num_shards)
    return PlanReport(
        num_shards=num_shards,
        files=sum(len(p.files.files) for p in parquet),
        rows=sum(p.num_rows for p in parquet),
        row_groups=sum(len(p.groups) for p in parquet),
        dataset_bytes=dataset_bytes(plan),
        shard_bytes=[s.bytes for s in shares],
        shard_rows=[s.rows for s in shares],
    )


def format_reads(results: list[ShardReads]) -> str:
    """A table of shard measurements, in MB and seconds."""
    header = (
        f"{'shards':>6} {'shard':>5} {'docs':>6} {'pages':>6} {'share MB':>9} {'read MB':>8} {'footers MB':>10} "
        f"{'data MB':>8} {'read/share':>10} {'data/share':>10} {'requests':>8} {'served MB':>9} "
        f"{'plan s':>7} {'1st page s':>10} {'all s':>7}"
    )
    lines = [header]
    for r in results:
        served = f"{r.served_bytes / MB:9.2f}" if r.served_bytes is not None else f"{'-':>9}"
        first = f"{r.first_page_s:10.2f}" if r.first_page_s is not None else f"{'-':>10}"
        lines.append(
            f"{r.num_shards:>6} {r.shard:>5} {r.documents:>6} {r.pages:>6} {r.share_bytes / MB:9.2f} "
            f"{r.read_bytes / MB:8.2f} {r.footer_bytes / MB:10.2f} {r.data_bytes / MB:8.2f} {r.read_over_share:10.2f} "
            f"{r.data_over_share:10.2f} {r.requests:>8} {served} {r.plan_s:7.2f} {first} {r.all_s:7.2f}"
        )
    return "\n".join(lines)


def format_plan(report: PlanReport) -> str:
    """One paragraph on an N-shard plan."""
    s = report.summary()
    return (
        f"plan of {report.num_shards} shards over {report.files} files, {report.row_groups} row groups, "
        f"{report.rows} rows, {report.dataset_bytes / MB:.2f} MB (share {report.share / MB:.3f} MB): "
        f"shard bytes / share max {s['max_over_share']}, median {s['median_over_share']}, "
        f"min {s['min_over_share']}; {s['empty_shards']} shard(s) with no rows"
    )


def dump_json(results: list[ShardReads], plans: list[PlanReport]) -> str:
    """The measurements as one JSON object."""
    shards = [
        {**asdict(r), "read_bytes": r.read_bytes, "read_over_share": round(r.read_over_share, 4),
         "data_over_share": round(r.data_over_share, 4)}
        for r in results
    ]  # fmt: skip
    return json.dumps({"shards": shards, "plans": [{**asdict(p), **p.summary()} for p in plans]}, indent=2)
