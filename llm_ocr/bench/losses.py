"""``llm-ocr bench --losses``: where GPU time went before issue 19 and where it goes now, side by side.

Four workloads, each run twice on the same corpus and simulated server, once the way the client
behaved before (``today``) and once as it does now (``new``):

- **loops**: 10% of pages loop on a table row longer than vLLM's 90-token n-gram window, half
  of them again when retried hotter; ``max_tokens`` is 7,168 (an 8,192 context). Today answers
  are read whole, so a loop runs to ``max_tokens``; now they stream and a loop is cut.
- **256 slots** and **64 slots, long tail**: ``--endpoint`` without ``--max-in-flight``. Today
  that kept 64 requests in flight; now the limit is sized from the server's ``/metrics``.
- **GPUs**: the same work on one simulated GPU, then on four (four servers behind the client's
  dispatcher, as llm-ocr runs vLLM on a 4-GPU machine).
- These three render pages small (36 DPI, so 494 x 640 px): on a shared 2-core machine a
  client rendering full pages cannot feed 256 slots or four GPUs, and the comparison would
  measure rendering (the instant benchmark's job) instead of the in-flight policy.
- **long page**: the 234 x 14,295 pt strip of docs/facts.md#real-pdfs (443 x 27,049 px at 144 DPI):
  read whole today, in segments now. The simulator does not read text, so what is compared is how
  large the text is where the model reads it (the scale of its 640-pixel crops), and that the page
  still gets one row.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from llm_ocr.bench.corpus import make_corpus, strip_pdf
from llm_ocr.bench.run import BenchConfig, RunResult, run_once
from llm_ocr.servers.frame.protocol import text_scale
from llm_ocr.sources.segments import plan_segments

#: (workload, today's config changes, new config changes) on top of the workload's base.
Variant = tuple[str, dict[str, Any], dict[str, Any]]


@dataclass
class Comparison:
    """One workload's two runs and the numbers that compare them."""

    name: str
    today: RunResult
    new: RunResult
    lines: list[tuple[str, str, str]] = field(default_factory=list)


def workloads(base: BenchConfig) -> list[tuple[str, BenchConfig, dict[str, Any], dict[str, Any]]]:
    """The workloads: name, base config, today's changes, the new changes."""
    quiet = replace(base, loop_rate=0.0)
    # Pages rendered small (Letter at 36 DPI becomes 494 x 640 px, min_page_side): the client
    # then feeds any server on a loaded 2-core machine, so what is measured is the in-flight
    # policy and the dispatcher, not the client's rendering (the instant bench measures that).
    light = replace(quiet, dpi=36.0)
    return [
        ("loops", replace(base, loop_rate=0.10, loop_repeat_rate=0.5, max_tokens=7168, decode_ms_per_token=1.0),
         {"cut_loops": False}, {"cut_loops": True}),
        # 12 ms a token (36 ms with all 256 slots busy): ~6 pages/s at full use, which the
        # client can feed while sharing the machine; the default 3 ms would need 23 pages/s.
        ("256 slots", replace(light, slots=256, decode_ms_per_token=12.0), {"max_in_flight": 64}, {"adaptive": True}),
        ("64 slots, long tail", replace(light, output_tokens_sigma=1.0), {"max_in_flight": 64}, {"adaptive": True}),
        ("GPUs", light, {"servers": 1}, {"servers": 4}),
        ("long page", replace(quiet, instant=True), {"max_page_aspect": 0.0}, {"max_page_aspect": 3.0}),
    ]  # fmt: skip


def _ratio(result: RunResult) -> str:
    if not result.lower_bound_s or not result.wall_s:
        return "-"
    return f"{result.lower_bound_s / result.wall_s:.3f}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def describe(name: str, today: RunResult, new: RunResult) -> list[tuple[str, str, str]]:
    """The lines of the side-by-side table for one workload."""
    both = (today, new)
    if name == "loops":
        return [
            ("loops: tokens per loop event", *(f"{r.loops['tokens_per_event'] or '-'}" for r in both)),
            ("loops: share of tokens on loops", *(_pct(r.loops["share_of_tokens"]) for r in both)),
            ("loops: loop events / looping pages truncated", *(
                f"{r.loops['events']} / {r.pages_by_status.get('truncated', 0)}" for r in both)),
            ("loops: finished pages cut short", *(str(r.loops["finished_pages_cut"]) for r in both)),
            ("loops: pages/s", *(f"{r.pages_per_s:.2f}" for r in both)),
        ]  # fmt: skip
    if name in ("256 slots", "64 slots, long tail"):
        return [
            (f"{name}: bound / wall (1 = perfect client)", _ratio(today), _ratio(new)),
            (f"{name}: in flight / mean running", *(
                f"{r.client['max_in_flight']} / {r.server['mean_running']}" for r in both)),
        ]  # fmt: skip
    if name == "GPUs":
        return [
            ("pages/s, 1 vs 4 simulated GPUs", f"{today.pages_per_s:.2f}", f"{new.pages_per_s:.2f}"),
            ("  bound / wall (slowest GPU)", _ratio(today), _ratio(new)),
        ]
    # The long page: one row either way; the text scale where the model reads it.
    width, height = 443, 27049
    segments = plan_segments(width, height)
    whole = text_scale(width, height)
    parts = min(text_scale(s.width, s.height) for s in segments) if segments else whole
    return [
        ("long page 443x27049: requests / rows", *(f"{r.requests} / {r.pages}" for r in both)),
        ("  text scale in the model's crops", f"{whole:.2f}x", f"{parts:.2f}x"),
        ("  status", *(",".join(k for k, v in r.pages_by_status.items() if v) for r in both)),
    ]


def run_losses(
    base: BenchConfig,
    *,
    corpus_dir: str | Path | None = None,
    work_dir: str | Path | None = None,
    only: list[str] | None = None,
    on_result: Callable[[str, str, RunResult], None] | None = None,
) -> list[Comparison]:
    """Run every workload today's way and the new way; returns the comparisons."""
    with tempfile.TemporaryDirectory(prefix="llm-ocr-losses-") as tmp:
        corpus_root = Path(corpus_dir) if corpus_dir else Path(tmp) / "corpus"
        work_root = Path(work_dir) if work_dir else Path(tmp) / "work"
        pages = make_corpus(corpus_root / f"pages-{base.pages}-seed-{base.seed}", base.pages, base.seed)[0].parent
        strip = corpus_root / "strip"
        strip.mkdir(parents=True, exist_ok=True)
        strip_pdf(strip / "strip-234x14295pt.pdf", base.seed)
        comparisons = []
        for name, config, today_changes, new_changes in workloads(base):
            if only and name not in only:
                continue
            corpus = strip if name == "long page" else pages
            results = []
            for label, changes in (("today", today_changes), ("new", new_changes)):
                work = work_root / f"{name.replace(' ', '-').replace(',', '')}-{label}"
                result = asyncio.run(run_once(replace(config, **changes), corpus, work))
                if on_result is not None:
                    on_result(name, label, result)
                results.append(result)
            comparisons.append(Comparison(name, results[0], results[1], describe(name, *results)))
    return comparisons


def format_losses(comparisons: list[Comparison]) -> str:
    """The side-by-side table."""
    rows = [("", "today", "new")] + [line for c in comparisons for line in c.lines]
    loads = [f"{r.machine['loadavg_before'][0]:.1f}" for c in comparisons for r in (c.today, c.new)]
    rows.append(("load average at each run's start", ", ".join(loads[0::2]), ", ".join(loads[1::2])))
    width = [max(len(r[i]) for r in rows) for i in range(3)]
    out = [f"{a:<{width[0]}}  {b:>{width[1]}}  {c:>{width[2]}}" for a, b, c in rows]
    out.append(f"({os.cpu_count()} cores; every number is one run: repeat and compare before trusting a difference)")
    return "\n".join(out)
