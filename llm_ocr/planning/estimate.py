"""A run estimated before it starts: for each platform and machine, GPU-hours, wall time, cost.

For ``P`` pages on ``N`` shards, each on a machine of ``g`` GPUs that each read ``r`` pages/s
(:func:`llm_ocr.planning.rates.rate_for`; one vLLM server per GPU):

- a shard reads ``P / N`` pages in ``P / N / (r * g)`` seconds, after :data:`STARTUP_S` of
  start-up (image pull, model download and load: an assumption, not a measurement);
- its wall time is the two together, the launch's wall time that of a shard (they run at once);
- the GPU-hours are what is billed: ``N * g * wall``, start-up included;
- the cost is ``N * wall`` hours of the machine's price per hour (costs.py's tables).

Every figure is an estimate and the plan labels where its rate comes from; a machine whose GPU
has no figure gets none (no rate is invented), and one without a known price gets no cost.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llm_ocr.costs import (
    AWS_BATCH_HARDWARE,
    AWS_BATCH_SPOT_HARDWARE,
    HF_JOBS_HARDWARE,
    SAGEMAKER_HARDWARE,
    Hardware,
    cloud_run_hardware,
)
from llm_ocr.options import DatasetOptions
from llm_ocr.planning.rates import GPU_NAMES, Rate, no_figure, rate_for, read_measurements
from llm_ocr.sources import InputPlan
from llm_ocr.sources.counting import DEFAULT_SAMPLE, PageCount, count_input_pages, count_plan
from llm_ocr.vlm.families import family_for

#: Start-up of a shard's job before its first page: image pull, wheel install, model download and
#: load (the launchers size timeouts with the same assumption).
STARTUP_S = 20 * 60

#: Platforms on your own cluster: its GPUs, at the price you give (``gpu_price_per_hour``).
CLUSTER_PLATFORMS = ("slurm", "k8s", "ray")

#: The platforms a plan can cover, in the order it lists them.
PLATFORMS = ("hf-jobs", "sagemaker", "cloud-run", "aws-batch", *CLUSTER_PLATFORMS)

#: The platforms ``llm-ocr plan`` covers unless asked: the clusters' rows are alike (one GPU of
#: each preset at your price), so Slurm's stand for Kubernetes' and Ray's.
DEFAULT_PLATFORMS = ("hf-jobs", "sagemaker", "cloud-run", "aws-batch", "slurm")


def platform_hardware(platform: str, gpu_price_per_hour: float | None = None) -> list[Hardware]:
    """The GPU machines a user could pick on ``platform``: Hugging Face Jobs' flavors, SageMaker's
    instance types, Cloud Run's L4 task (8 vCPU, 32 GiB: the launcher's default with a GPU), AWS
    Batch's GPU instance types on-demand and on Spot ("g6e.xlarge Spot"), and on a cluster (Slurm,
    Kubernetes, Ray) one GPU of each preset (priced only with ``gpu_price_per_hour``: your
    cluster's)."""
    if platform == "hf-jobs":
        return [h for h in HF_JOBS_HARDWARE.values() if h.gpus > 0]
    if platform == "sagemaker":
        return [h for h in SAGEMAKER_HARDWARE.values() if h.gpus > 0]
    if platform == "cloud-run":
        return [cloud_run_hardware(1, 8, 32)]
    if platform == "aws-batch":
        gpu_types = [name for name, h in AWS_BATCH_HARDWARE.items() if h.gpus > 0]
        return [h for name in gpu_types for h in (AWS_BATCH_HARDWARE[name], AWS_BATCH_SPOT_HARDWARE[name])]
    if platform in CLUSTER_PLATFORMS:
        return [Hardware(GPU_NAMES[gpu], 1, gpu, gpu_price_per_hour, gpu_price_per_hour is not None, GPU_NAMES[gpu])
                for gpu in GPU_NAMES]
    raise ValueError(f"unknown platform {platform!r}: one of {', '.join(PLATFORMS)}")


@dataclass
class PlanRow:
    """One machine of one platform, and what the run would take on it."""

    platform: str
    hardware: str
    accelerator: str
    gpus: int
    #: The rate of one of its GPUs (None: no figure for its GPU).
    rate: Rate | None
    #: Why there is no figure, when there is none.
    note: str = ""
    price_per_hour: float | None = None
    #: False when the price is estimated (a multi-GPU flavor priced as its GPUs' list price).
    price_listed: bool = True
    wall_s: float | None = None
    gpu_hours: float | None = None
    cost_usd: float | None = None
    #: The machine the launch picked (``llm-ocr launch --dry-run``).
    chosen: bool = False
    #: Where the price comes from and when it was found ("" when the table does not say).
    price_note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "platform": self.platform, "hardware": self.hardware, "accelerator": self.accelerator, "gpus": self.gpus,
            "rate": self.rate.to_dict() if self.rate else None, "note": self.note,
            "price_per_hour": self.price_per_hour, "price_listed": self.price_listed, "wall_s": _round(self.wall_s),
            "gpu_hours": _round(self.gpu_hours),
            "cost_usd": _round(self.cost_usd), "chosen": self.chosen, "price_note": self.price_note,
        }  # fmt: skip


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def estimate_row(row: PlanRow, pages: int, num_shards: int, startup_s: float = STARTUP_S) -> PlanRow:
    """Fill ``row``'s wall time, GPU-hours and cost for ``pages`` on ``num_shards`` of its machine
    (the module docstring's arithmetic); nothing without a rate."""
    if row.rate is None or row.rate.pages_per_s <= 0:
        return row
    per_shard = pages / max(num_shards, 1)
    row.wall_s = startup_s + per_shard / (row.rate.pages_per_s * max(row.gpus, 1))
    row.gpu_hours = num_shards * max(row.gpus, 1) * row.wall_s / 3600
    if row.price_per_hour is not None:
        row.cost_usd = num_shards * row.wall_s / 3600 * row.price_per_hour
    return row


@dataclass
class Plan:
    """Pages of the inputs, the model's family, and a :class:`PlanRow` per platform machine."""

    pages: PageCount
    model: str
    family: str
    num_shards: int
    rows: list[PlanRow] = field(default_factory=list)
    startup_s: float = STARTUP_S

    def to_dict(self) -> dict[str, Any]:
        """The ``--json`` form."""
        return {
            "pages": self.pages.pages, "documents": self.pages.documents, "pages_by_kind": self.pages.by_kind,
            "pages_estimated": self.pages.estimated, "not_counted": self.pages.uncounted, "model": self.model,
            "duplicate_documents": self.pages.duplicate_documents, "duplicate_pages": self.pages.duplicate_pages,
            "family": self.family, "num_shards": self.num_shards, "startup_s": self.startup_s,
            "rows": [r.to_dict() for r in self.rows],
        }  # fmt: skip

    def lines(self) -> list[str]:
        """The plan as text: the count, then a table, then where each rate ([1]) and each
        labelled price ([a]) comes from."""
        startup = f"~{self.startup_s / 60:.0f} min of start-up (an assumption)"
        about = (f"model {self.model} (family {self.family}), {self.num_shards} shard(s); all figures are estimates, "
                 f"each shard's wall time includes {startup}")
        head = [self.pages.describe(), about]
        table = [("", "platform", "machine", "GPUs", "$/h", "pages/s", "wall", "GPU-hours", "cost")]
        sources: dict[str, int] = {}
        prices: dict[str, str] = {}
        for row in self.rows:
            ref = ""
            if row.rate is not None:
                ref = f"[{sources.setdefault(row.rate.label, len(sources) + 1)}]"
            price = _price(row)
            if row.price_note:
                price += f" [{prices.setdefault(row.price_note, chr(ord('a') + len(prices)))}]"
            table.append((
                "*" if row.chosen else "", row.platform, row.hardware, str(row.gpus), price,
                f"{row.rate.pages_per_s * max(row.gpus, 1):.2f} {ref}" if row.rate else "-",
                _duration(row.wall_s), f"{row.gpu_hours:,.1f}" if row.gpu_hours is not None else "-",
                _cost(row),
            ))  # fmt: skip
        widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
        body = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in table]
        notes = [f"[{n}] {label}" for label, n in sources.items()]
        notes += [f"[{ref}] price: {label}" for label, ref in prices.items()]
        if any(not row.price_listed and row.cost_usd is not None for row in self.rows):
            notes.append("~ the machine's price is estimated (its GPUs' list price times their number)")
        missing = sorted({row.note for row in self.rows if row.rate is None and row.note})
        return head + body + notes + missing

    def __str__(self) -> str:
        return "\n".join(self.lines())


def _price(row: PlanRow) -> str:
    if row.price_per_hour is None:
        return "-"
    return f"{'' if row.price_listed else '~'}${row.price_per_hour:g}"


def _cost(row: PlanRow) -> str:
    if row.cost_usd is None:
        return "price unknown" if row.rate else "-"
    return f"{'' if row.price_listed else '~'}${row.cost_usd:,.2f}"


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    hours = seconds / 3600
    return f"{hours:,.1f} h" if hours >= 1 else f"{math.ceil(seconds / 60)} min"


def plan_rows(
    family: str,
    pages: int,
    num_shards: int,
    *,
    platforms: Sequence[str] = DEFAULT_PLATFORMS,
    pages_per_s: float | None = None,
    gpu_price_per_hour: float | None = None,
    rates_file: Path | None = None,
    chosen: tuple[str, Hardware] | None = None,
) -> list[PlanRow]:
    """A :class:`PlanRow` for every machine of ``platforms`` (and the ``chosen`` one, first,
    marked), estimated for ``pages`` on ``num_shards`` (``pages_per_s``: your own rate per GPU,
    for every machine)."""
    measured = read_measurements(rates_file)
    choices = [(p, h) for p in platforms for h in platform_hardware(p, gpu_price_per_hour)]
    if chosen is not None:
        choices = [chosen, *[(p, h) for p, h in choices if (p, h.name) != (chosen[0], chosen[1].name)]]
    rows = []
    for platform, hardware in choices:
        gpu = hardware.gpu_preset
        if pages_per_s is not None:
            rate: Rate | None = Rate(pages_per_s, "given", f"{pages_per_s:g} pages/s per GPU, given with --pages-per-s")
        else:
            rate = rate_for(family, gpu, measured)
        gpu_name = (hardware.accelerator or hardware.name).split("x ", 1)[-1]  # "4x A10G 24GB": the GPU
        note = "" if rate else (no_figure(family) if gpu in GPU_NAMES else
                                f"no figure for the {gpu_name} (no preset, no memory bandwidth on file): measure one "
                                "with bench-accuracy --gpu, or pass --pages-per-s")
        row = PlanRow(platform, hardware.name, hardware.accelerator, hardware.gpus, rate, note,
                      hardware.price_per_hour, hardware.listed,
                      chosen=chosen is not None and (platform, hardware) == chosen, price_note=hardware.price_note)
        rows.append(estimate_row(row, pages, num_shards))
    return rows


def plan(
    inputs: Sequence[str] | str,
    *,
    model: str,
    recipe: str | None = None,
    num_shards: int = 1,
    platforms: Sequence[str] = DEFAULT_PLATFORMS,
    pages: int | None = None,
    pages_per_s: float | None = None,
    gpu_price_per_hour: float | None = None,
    dataset: DatasetOptions | None = None,
    storage_options: dict[str, Any] | None = None,
    sample: int = DEFAULT_SAMPLE,
    rates_file: Path | None = None,
    input_plan: InputPlan | None = None,
) -> Plan:
    """Count the pages of ``inputs`` (their listing, PDFs' page trees, Parquet footers: nothing
    rendered) and estimate a run of ``model`` on ``num_shards`` for every machine of
    ``platforms`` (``pages``: skip the count and take this many; ``input_plan``: the inputs
    listed already, not listed again)."""
    if num_shards < 1:
        raise ValueError(f"num_shards must be at least 1 (got {num_shards})")
    family = family_for(model, recipe).name
    if pages is not None:
        count = PageCount(pages=pages, given=True)
    elif input_plan is not None:
        count = count_plan(input_plan, sample=sample)
    else:
        listed = [inputs] if isinstance(inputs, str) else [str(i) for i in inputs]
        count = count_input_pages(listed, dataset=dataset, storage_options=storage_options, sample=sample)
    rows = plan_rows(family, count.pages, num_shards, platforms=platforms, pages_per_s=pages_per_s,
                     gpu_price_per_hour=gpu_price_per_hour, rates_file=rates_file)
    return Plan(count, model, family, num_shards, rows)
