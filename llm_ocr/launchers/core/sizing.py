"""How long a shard's job may run: its page count over a planning rate, plus start-up, with margin.

A job's timeout should be long enough that a healthy shard finishes, and short enough that a
wedged one does not bill for days. The shard's page count comes from ``--pages`` (the whole
input's; shards are balanced by document, so each gets about 1/N), or from the listing when every
document is an image (one page each). PDFs' page counts are unknown without downloading them and
dataset rows without streaming them: then :data:`DEFAULT_TIMEOUT_S` applies, and the launch says
so. Attempts resume from the parts already written, so a timeout costs the unfinished remainder
only.

The planning rates below are assumptions, not measurements: the one published anchor is
DeepSeek-OCR's ~200k pages/day (~2.3 pages/s) on one A100-40G; the other GPUs are scaled from it
by rough relative throughput. ``--pages-per-s`` replaces them with your own figure.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

from fsspec.core import split_protocol

from llm_ocr.options import DatasetOptions
from llm_ocr.sources import InputPlan, plan_inputs

#: Timeout when the page count is unknown (HF Jobs' own default is 30 minutes: too short to even
#: pull a vLLM image and load a model on some days).
DEFAULT_TIMEOUT_S = 6 * 3600
#: Image pull, wheel install, model download and load, before the first page.
STARTUP_S = 20 * 60
#: Planned work is multiplied by this: slow pages, retries, a busy storage backend.
MARGIN = 2.0
MIN_TIMEOUT_S = 3600
ROUND_TO_S = 15 * 60

#: Pages per second per GPU preset (see the module docstring: assumptions).
PLANNING_PAGES_PER_S: dict[str, float] = {
    "a100-40gb": 2.3,
    "a100-80gb": 2.5,
    "h100-80gb": 4.5,
    "h200-141gb": 5.0,
    "l40s-48gb": 1.5,
    "l4-24gb": 0.7,
}
#: For GPUs without a preset (A10G, T4: sized at run time).
DEFAULT_PAGES_PER_S = 0.7
#: Assemble runs on CPUs and reads rows, no model: much faster per page.
ASSEMBLE_PAGES_PER_S = 50.0
#: Listing more documents than this just to count pages is not worth it at launch.
MAX_COUNTED_DOCUMENTS = 200_000


def input_pages(inputs: list[str], dataset: DatasetOptions, storage_options: dict[str, Any]) -> tuple[int | None, str]:
    """``(pages, how)`` of the inputs, ``pages`` None when unknown without reading the documents.

    Listing also checks every input (existence, read access): an unusable one raises
    :class:`llm_ocr.sources.InputError` here, before anything is submitted.
    """
    return plan_pages(plan_inputs(inputs, dataset=dataset, storage_options=storage_options), inputs, dataset)


def plan_pages(plan: InputPlan, inputs: list[str], dataset: DatasetOptions) -> tuple[int | None, str]:
    """``(pages, how)`` of inputs listed already (``plan``), as :func:`input_pages` counts them."""
    documents = plan.documents()
    if any(_is_dataset(url, dataset) for url in inputs):
        # Counting would stream the rows (and their images) just to learn their number.
        return None, "dataset rows are not counted at launch"
    if plan.has_datasets:
        return None, "dataset and manifest rows are not counted at launch"
    images = 0
    for ref in itertools.islice(documents, MAX_COUNTED_DOCUMENTS + 1):
        if ref.kind != "image":
            return None, f"{ref.kind.replace('_', ' ')} page counts are unknown before the run"
        images += 1
    if images > MAX_COUNTED_DOCUMENTS:
        return None, f"more than {MAX_COUNTED_DOCUMENTS} documents"
    return images, f"{images} image(s), one page each"


def _is_dataset(url: str, dataset: DatasetOptions) -> bool:
    """An INPUT that names a dataset (Hub or Parquet) rather than document files."""
    protocol, path = split_protocol(url)
    parts = path.strip("/").split("/")
    hub_dataset = protocol == "hf" and len(parts) == 3 and parts[0] == "datasets"
    return hub_dataset or dataset.config is not None or url.lower().endswith(".parquet")


def shard_timeout(pages: int | None, num_shards: int, pages_per_s: float) -> int:
    """Seconds a shard of ``pages / num_shards`` pages may run (:data:`DEFAULT_TIMEOUT_S` if unknown)."""
    if pages is None:
        return DEFAULT_TIMEOUT_S
    per_shard = math.ceil(pages / max(num_shards, 1))
    seconds = STARTUP_S + per_shard / pages_per_s * MARGIN
    return max(MIN_TIMEOUT_S, math.ceil(seconds / ROUND_TO_S) * ROUND_TO_S)


def planning_rate(preset: str | None, stage: str) -> float:
    """The planning pages/s for a GPU preset and stage."""
    if stage == "assemble":
        return ASSEMBLE_PAGES_PER_S
    return PLANNING_PAGES_PER_S.get(preset or "", DEFAULT_PAGES_PER_S)


def fit_timeout(
    pages: int | None,
    num_shards: int,
    pages_per_s: float,
    *,
    limit_s: int | None,
    attempts: int,
    requested_s: int | None = None,
) -> tuple[int, list[str]]:
    """``(timeout, warnings)`` of one attempt of a shard's job under a platform limit ``limit_s``
    on one attempt (None: no limit, and this is :func:`shard_timeout` or ``requested_s``).

    A shard too long for one attempt still finishes when the attempt stopped at the limit
    flushes its parts and a retry resumes from them, each retry paying the start-up again: that
    gets a warning with the numbers and the ``--num-shards`` that avoids it. A shard that cannot
    finish even in every attempt of ``attempts`` (without any margin) raises ``ValueError``.
    """
    if requested_s is not None and limit_s is not None and requested_s > limit_s:
        raise ValueError(f"--timeout {requested_s}s is more than the platform's limit of {limit_s}s ({limit_s / 60:g} "
                         "min) per attempt")
    timeout = requested_s if requested_s is not None else shard_timeout(pages, num_shards, pages_per_s)
    if limit_s is None:
        return timeout, []
    if pages is None:
        return min(timeout, limit_s), []  # a longer shard is stopped at the limit and resumes on retry
    timeout = min(timeout, limit_s)
    per_shard = math.ceil(pages / max(num_shards, 1))
    work_s = per_shard / pages_per_s
    useful_s = timeout - STARTUP_S
    one_attempt = max(1,
        math.ceil(pages / ((limit_s - STARTUP_S) / MARGIN * pages_per_s))) if limit_s > STARTUP_S else None
    advice = (f"--num-shards {one_attempt} or more keeps each shard within one attempt with margin" if one_attempt
              else f"the limit is shorter than the {STARTUP_S // 60} min planned start-up")
    needed = math.ceil(work_s / useful_s) if useful_s > 0 else None
    if needed is None or needed > attempts:
        raise ValueError(
            f"a shard of {per_shard} pages needs ~{work_s / 60:.0f} min at {pages_per_s:g} pages/s, more than "
            f"{attempts} attempt(s) of {timeout // 60} min (minus ~{STARTUP_S // 60} min start-up each) can give: "
            f"{advice} (or set --pages-per-s if your rate is known to be higher)"
        )
    planned = STARTUP_S + work_s * MARGIN
    if planned <= timeout:
        return timeout, []
    with_margin = math.ceil(work_s * MARGIN / useful_s)
    note = (
        f"shards too long for the {timeout // 60} min task limit: a shard of {per_shard} pages needs "
        f"~{planned / 60:.0f} min at {pages_per_s:g} pages/s ({STARTUP_S // 60} min start-up + x{MARGIN:g} "
        f"margin); tasks will be stopped at the limit and resume on retry (~{min(with_margin, attempts)} of "
        f"{attempts} attempts, each paying the start-up again): {advice}"
    )
    return timeout, [note]
