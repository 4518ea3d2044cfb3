"""``llm-ocr bench --losses``: where GPU time goes without the client's loss-cutting mechanisms and with
them, side by side.

Four workloads, each run twice on the same corpus and simulated server, once with those mechanisms
off (``today``: answers read whole, a fixed in-flight limit, one server, long pages read whole) and
once as the client runs now (``new``):

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
- **long page** and **long page, olmOCR-2**: the 234 x 14,295 pt strip of
  docs/facts.md#real-pdfs (443 x 27,049 px at 144 DPI), read by DeepSeek-OCR and by olmOCR-2:
  whole today, in segments now (each rendered from the source at the family's resolution). The
  simulator knows the strip (its text layer) and serves it as a GPU would (1 ms a token): word
  recall, tokens generated against the text's own, wall time against the bound, and for
  DeepSeek-OCR how large the text is where the model reads it (the scale of its 640-pixel
  crops). The simulator answers a piece from its geometry, whatever its scale: the recall says
  that every piece was found and joined, not that a model could read it (the scale line and
  the simulator's refusal of under-size pieces say that).

Two more compare dense pages read whole, cut at ``max_tokens`` and retried (``today``;
``--pieces off`` in the dense recall workloads, every page read whole) with dense pages read in
tiles (``new``, ``--pieces auto``); the simulator knows the dense pages (their text layer; a tile
gets the text of its region):

- **dense pages, 256 slots**: the 256-slot workload (``--endpoint``, in flight sized from
  ``/metrics``) with 4 broadsheet pages of 25,000 characters (about 9,000 tokens each, against
  ``max_tokens`` 7,168) spread through the documents, the last one near the end;
- **dense recall**: 24 pages of the corpus (``--pages``, if fewer) and 2 dense pages, all known to an instant simulator,
  so that each row's text can be compared with its page's text layer: word recall of normal and
  dense pages, and the tokens each dense page cost;
- **dense recall, ...** (:data:`DENSE_RECALL`): whether tiling holds up when the context is
  short or the answers are denser than planned. The same pages against a served GPU (1 ms a
  token), DeepSeek-OCR at 4,096 and 8,192 tokens of context, olmOCR-2 (bands) at 8,192, and
  DeepSeek-OCR answering 2 tokens a character (the adaptive split): word recall, status,
  tokens generated against the text's own (its text layer at the server's tokens a character),
  wall time against the bound, and the normal pages' requests and tokens.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from llm_ocr.bench.corpus import make_corpus, strip_pdf, with_dense_pages
from llm_ocr.bench.long_tail import make_long_tail_corpus
from llm_ocr.bench.run import BenchConfig, RunResult, run_once
from llm_ocr.engines.frame.protocol import text_scale
from llm_ocr.sources.segments import plan_segments

#: The served model of the long-tail workloads.
OLMOCR = "allenai/olmOCR-2-7B-1025-FP8"

#: The dense recall workloads, each a context size or answer density that tiles must fit, and what
#: each changes on the served GPU's base.
DENSE_RECALL: dict[str, dict[str, Any]] = {
    "dense recall, DeepSeek-OCR 4096": {"max_model_len": 4096, "max_tokens": None},
    "dense recall, DeepSeek-OCR 8192": {"max_model_len": 8192, "max_tokens": None},
    "dense recall, olmOCR-2 8192": {"model": OLMOCR, "max_model_len": 8192, "max_tokens": None, "long_side": None},
    # 2 tokens a character: pieces planned from the first guess (0.35 a character of text, 20%
    # of max_tokens each) run out and are cut again. The dense pages alone: at that density the
    # normal pages would run out too, and be taken for loops (their estimate says they are short).
    "dense recall, denser answers": {"max_model_len": 8192, "max_tokens": None, "tokens_per_char": 2.0},
}

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
    before_tiles = {"tile_dense_pages": False}  # "today" reads dense pages whole
    # olmOCR-2 with its recipe's budget (max_tokens 8,000 in a 16,384 context): a long tail of
    # long answers, which the longest-first order (look_ahead) is for. Its pages are scaled to
    # 640 px on the longer side so that the client feeds the server on a loaded 2-core machine
    # (its own 1,288 px PNGs cost the client ~4 times more).
    strip_gpu = replace(quiet, slots=64, prefill_ms=20.0, decode_ms_per_token=1.0, load_slowdown=1.0)
    long_tail = replace(quiet, model=OLMOCR, long_side=640, max_tokens=None, max_model_len=16384, adaptive=True)
    return [
        ("loops", replace(base, loop_rate=0.10, loop_repeat_rate=0.5, max_tokens=7168, decode_ms_per_token=1.0),
         {"cut_loops": False, **before_tiles}, {"cut_loops": True}),
        # 12 ms a token (36 ms with all 256 slots busy): ~6 pages/s at full use, which the
        # client can feed while sharing the machine; the default 3 ms would need 23 pages/s.
        ("256 slots", replace(light, slots=256, decode_ms_per_token=12.0), {"max_in_flight": 64, **before_tiles},
         {"adaptive": True}),
        ("64 slots, long tail", replace(light, output_tokens_sigma=1.0), {"max_in_flight": 64, **before_tiles},
         {"adaptive": True}),
        ("GPUs", light, {"servers": 1, **before_tiles}, {"servers": 4}),
        # Read whole, the strip's text (35,000 characters) would now be tiled: before, it was not.
        # Known to the simulator (run_losses), on a served GPU (1 ms a token): recall, tokens
        # against the text's own and wall time against the bound.
        ("long page", replace(strip_gpu, max_tokens=7168), {"max_page_aspect": 0.0, **before_tiles},
         {"max_page_aspect": 3.0}),
        # The same strip read by olmOCR-2 (its pages 1,288 px on the longer side): read whole it
        # is a 22 x 1,288 px image; in segments, each rendered from the source as a page of its own.
        ("long page, olmOCR-2", replace(strip_gpu, model=OLMOCR, long_side=None, max_tokens=None),
         {"max_page_aspect": 0.0, **before_tiles}, {"max_page_aspect": 3.0}),
        # The 256-slot workload, with dense pages (their corpus is filled in by run_losses).
        ("dense pages, 256 slots", replace(light, slots=256, decode_ms_per_token=12.0, adaptive=True, max_tokens=7168),
         {"tile_dense_pages": False}, {"tile_dense_pages": True}),
        ("dense recall", replace(quiet, instant=True, dpi=72.0, max_tokens=7168),
         {"pieces": "off"}, {"pieces": "auto"}),
        # The same pages where tiles are tight: DeepSeek-OCR at 4,096 and 8,192 tokens of
        # context (answers of 3,072 and 7,168), olmOCR-2 (bands, no boxes) at 8,192 (answers of
        # 4,096), and DeepSeek-OCR answering twice as many tokens a character as the planner's
        # first guess (the adaptive split at work). A served GPU (1 ms a token): wall time
        # against the bound.
        *((name, replace(quiet, slots=64, prefill_ms=20.0, decode_ms_per_token=1.0, load_slowdown=1.0, dpi=72.0,
                         **changes), {"pieces": "off"}, {"pieces": "auto"})
          for name, changes in DENSE_RECALL.items()),
        # Pages whose text has a long tail, known to the simulator (each answered from its own
        # text), served as olmOCR-2 behind --endpoint: sent in input order, then longest first.
        ("long tail, 64 slots", replace(long_tail, slots=64, decode_ms_per_token=3.0), {"look_ahead": 0}, {}),
        ("long tail, 256 slots", replace(long_tail, slots=256, decode_ms_per_token=6.0), {"look_ahead": 0}, {}),
    ]  # fmt: skip


def _ratio(result: RunResult) -> str:
    if not result.lower_bound_s or not result.wall_s:
        return "-"
    return f"{result.lower_bound_s / result.wall_s:.3f}"


def _longest_first(result: RunResult) -> str:
    if not result.longest_first_s or not result.wall_s:
        return "-"
    return f"{result.longest_first_s / result.wall_s:.3f}"


def _peak(result: RunResult) -> str:
    look_ahead = result.client.get("look_ahead") or {}
    if not look_ahead:
        return "off"
    return f"{look_ahead.get('peak_pages', 0)} pages, {look_ahead.get('peak_mb', 0)} MiB"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _row(label: str, cells: Iterable[str]) -> tuple[str, str, str]:
    """A table line: the label, then today's and the new run's cell."""
    today, new = cells
    return label, today, new


def describe(name: str, today: RunResult, new: RunResult) -> list[tuple[str, str, str]]:
    """The lines of the side-by-side table for one workload."""
    both = (today, new)
    if name == "loops":
        return [
            _row("loops: tokens per loop event", (f"{r.loops['tokens_per_event'] or '-'}" for r in both)),
            _row("loops: share of tokens on loops", (_pct(r.loops["share_of_tokens"]) for r in both)),
            _row("loops: loop events / looping pages truncated", (
                f"{r.loops['events']} / {r.pages_by_status.get('truncated', 0)}" for r in both)),
            _row("loops: finished pages cut short", (str(r.loops["finished_pages_cut"]) for r in both)),
            _row("loops: pages/s", (f"{r.pages_per_s:.2f}" for r in both)),
        ]  # fmt: skip
    if name in ("256 slots", "64 slots, long tail"):
        return [
            (f"{name}: bound / wall (1 = perfect client)", _ratio(today), _ratio(new)),
            (f"{name}: longest-first bound / wall", _longest_first(today), _longest_first(new)),
            _row(f"{name}: in flight / mean running", (
                f"{r.client['max_in_flight']} / {r.server['mean_running']}" for r in both)),
        ]  # fmt: skip
    if name.startswith("long tail"):
        return [
            (f"{name}: longest-first bound / wall", _longest_first(today), _longest_first(new)),
            _row("  wall s (longest-first bound s)", (f"{r.wall_s:.1f} ({r.longest_first_s or 0:.1f})" for r in both)),
            _row("  bound in the order sent / wall", (_ratio(r) for r in both)),
            _row("  last answer at s / requests", (f"{r.breakdown['last_answer_s']:.1f} / {r.requests}" for r in both)),
            _row("  look-ahead peak", (_peak(r) for r in both)),
        ]  # fmt: skip
    if name == "dense pages, 256 slots":
        return [
            (f"{name}: bound / wall (1 = perfect client)", _ratio(today), _ratio(new)),
            _row("  wall s (bound s)", (f"{r.wall_s:.1f} ({r.lower_bound_s or 0:.1f})" for r in both)),
            _row("  dense pages: status", (", ".join(d["status"] for d in r.dense["pages"]) for r in both)),
            _row("  dense pages: tokens each (requests)", (
                ", ".join(f"{d['tokens']} ({d['requests']})" for d in r.dense["pages"]) for r in both)),
            _row("  client CPU ms/page", (f"{r.client['cpu_ms_per_page']}" for r in both)),
        ]  # fmt: skip
    if name in DENSE_RECALL:
        return [
            _row(f"{name}: word recall, dense pages (min)", (_recall(r, "dense") for r in both)),
            _row("  dense pages: status", (", ".join(d["status"] for d in r.dense["pages"]) for r in both)),
            _row("  tokens generated / the text's own tokens (target <= 1.3x)", (
                ", ".join(f"{d['tokens'] / d['text_tokens']:.2f}x" if d.get("text_tokens") else "-"
                          for d in r.dense["pages"]) for r in both)),
            _row("  requests per dense page", (", ".join(str(d["requests"]) for d in r.dense["pages"]) for r in both)),
            _row("  wall s (bound s)", (f"{r.wall_s:.1f} ({r.lower_bound_s or 0:.1f})" for r in both)),
            _row("  normal pages: requests / tokens / min recall", (
                f"{r.dense['normal']['requests']} / {r.dense['normal']['tokens']:,} / {_recall(r, 'normal')}"
                for r in both)),
        ]  # fmt: skip
    if name == "dense recall":
        return [
            _row("dense recall: word recall, normal pages (min)", (_recall(r, "normal") for r in both)),
            _row("  word recall, dense pages (min)", (_recall(r, "dense") for r in both)),
            _row("  tokens per dense page, mean",
                 (f"{_mean(d['tokens'] for d in r.dense['pages']):,.0f}" for r in both)),
            _row("  of which whole-page answers / tiles", (
                f"{_mean(d['whole_tokens'] for d in r.dense['pages']):,.0f} / "
                f"{_mean(d['tile_tokens'] for d in r.dense['pages']):,.0f}"
                for r in both)),
            _row("  dense pages: status", (", ".join(d["status"] for d in r.dense["pages"]) for r in both)),
        ]  # fmt: skip
    if name == "GPUs":
        return [
            ("pages/s, 1 vs 4 simulated GPUs", f"{today.pages_per_s:.2f}", f"{new.pages_per_s:.2f}"),
            ("  bound / wall (slowest GPU)", _ratio(today), _ratio(new)),
        ]
    strip = [
        _row("  word recall", (_recall(r, "strip") for r in both)),
        _row("  tokens generated / the text's own tokens", (
            ", ".join(f"{d['tokens'] / d['text_tokens']:.2f}x" if d.get("text_tokens") else "-"
                      for d in r.dense.get("pages", [])) or "-" for r in both)),
        _row("  wall s (bound s)", (f"{r.wall_s:.1f} ({r.lower_bound_s or 0:.1f})" for r in both)),
    ]
    if name == "long page, olmOCR-2":
        return [
            _row("long page (olmOCR-2): requests / rows", (f"{r.requests} / {r.pages}" for r in both)),
            _row("  status", (",".join(k for k, v in r.pages_by_status.items() if v) for r in both)),
            *strip,
        ]
    # The long page: one row either way; the text scale where the model reads it.
    width, height = 443, 27049
    segments = plan_segments(width, height)
    whole = text_scale(width, height)
    parts = min(text_scale(s.width, s.height) for s in segments) if segments else whole
    return [
        _row("long page 443x27049: requests / rows", (f"{r.requests} / {r.pages}" for r in both)),
        ("  text scale in the model's crops", f"{whole:.2f}x", f"{parts:.2f}x"),
        _row("  status", (",".join(k for k, v in r.pages_by_status.items() if v) for r in both)),
        *strip,
    ]


def _mean(values: Any) -> float:
    values = list(values)
    return sum(values) / len(values) if values else 0.0


def _recall(result: RunResult, kind: str) -> str:
    recalls = result.dense.get(f"recall_{kind}") or []
    return f"{min(recalls):.4f} (mean {_mean(recalls):.4f})" if recalls else "-"


def dense_accounting(logs: list[Path], rows: list[dict[str, Any]], mark: str = "dense") -> list[dict[str, Any]]:
    """For each dense page (a PDF named ``*dense*``, or ``*MARK*``): its row's status, and the
    completion tokens and requests the simulator's logs show for it, whole-page answers and
    tiles apart."""
    import json

    pages: dict[str, dict[str, Any]] = {}
    for row in rows:
        if mark in row["doc_id"]:
            pages[row["doc_id"]] = {"doc": row["doc_id"], "status": row["status"], "tokens": 0, "requests": 0,
                                    "whole_tokens": 0, "tile_tokens": 0}  # fmt: skip
    for log in logs:
        for line in log.read_text().splitlines() if log.exists() else []:
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            known = record.get("known_page") or {}
            page = pages.get(Path(known.get("source", "")).name)
            if page is None or record.get("completion_tokens") is None:
                continue
            tokens = int(record["completion_tokens"])
            page["tokens"] += tokens
            page["requests"] += 1
            page["tile_tokens" if "region" in known else "whole_tokens"] += tokens
    return [pages[k] for k in sorted(pages)]


def normal_accounting(logs: list[Path]) -> dict[str, int]:
    """Requests and completion tokens of the known pages that are not dense (their cost)."""
    import json

    out = {"requests": 0, "tokens": 0}
    for log in logs:
        for line in log.read_text().splitlines() if log.exists() else []:
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            source = Path((record.get("known_page") or {}).get("source", "")).name
            if source and "dense" not in source and record.get("completion_tokens") is not None:
                out["requests"] += 1
                out["tokens"] += int(record["completion_tokens"])
    return out


def text_tokens(corpus: Path, doc: str, tokens_per_char: float) -> int:
    """The tokens of a page's own text (its text layer, at the simulator's tokens a character)."""
    from llm_ocr.bench.accuracy import text_layer

    return round(len(text_layer(str(corpus / doc), 1)) * tokens_per_char)


def recall_by_kind(rows: list[dict[str, Any]], corpus: Path) -> dict[str, list[float]]:
    """Word recall of each row's Markdown against its page's text layer, normal and dense pages
    apart (pages without a text layer, the scans, are left out)."""
    from llm_ocr.bench.accuracy import text_layer, word_recall

    out: dict[str, list[float]] = {"recall_normal": [], "recall_dense": [], "recall_strip": []}
    for row in rows:
        truth = text_layer(str(corpus / row["doc_id"]), row["page"])
        if len(truth.split()) < 10:
            continue
        kind = next((f"recall_{k}" for k in ("dense", "strip") if k in row["doc_id"]), "recall_normal")
        out[kind].append(round(word_recall(truth, row["markdown"] or ""), 4))
    return out


def _read_rows(output: Path) -> list[dict[str, Any]]:
    import pyarrow.parquet as pq

    rows: list[dict[str, Any]] = []
    for path in sorted((output / "extract").glob("*.parquet")):
        rows.extend(pq.read_table(path, columns=["doc_id", "page", "status", "markdown"]).to_pylist())
    return rows


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
        made: dict[str, Path] = {}

        def page_corpus() -> Path:
            # Made once, and only if a workload reads it (``only`` may pick none that does).
            if "pages" not in made:
                made["pages"] = make_corpus(corpus_root / f"pages-{base.pages}-seed-{base.seed}", base.pages,
                                            base.seed)[0].parent  # fmt: skip
            return made["pages"]

        def strip_corpus() -> Path:
            if "strip" not in made:
                made["strip"] = corpus_root / "strip"
                made["strip"].mkdir(parents=True, exist_ok=True)
                strip_pdf(made["strip"] / "strip-234x14295pt.pdf", base.seed)
            return made["strip"]

        comparisons = []
        for name, config, today_changes, new_changes in workloads(base):
            if only and name not in only:
                continue
            if name.startswith("long page"):
                corpus = strip = strip_corpus()
                config = replace(config, sim_corpus=str(strip))  # the strip known: answered from its text
            elif name.startswith("long tail"):
                corpus = corpus_root / f"long-tail-{base.pages}-seed-{base.seed}"
                make_long_tail_corpus(corpus, base.pages, base.seed)
                config = replace(config, sim_corpus=str(corpus))  # every page known: answered from its text
            elif name == "dense pages, 256 slots":
                corpus = corpus_root / f"pages-{base.pages}-seed-{base.seed}-with-dense"
                config = replace(config, sim_corpus=str(with_dense_pages(corpus, page_corpus(), 4, base.seed)))
            elif name == "dense recall" or name in DENSE_RECALL:
                # 24 normal pages beside the dense ones, fewer when the run asks for fewer (a test).
                normal = min(base.pages, 24)
                few = make_corpus(corpus_root / f"pages-{normal}-seed-{base.seed}", normal, base.seed)[0].parent
                corpus = corpus_root / f"pages-{normal}-seed-{base.seed}-with-dense"
                dense_only = with_dense_pages(corpus, few, 2, base.seed)
                config = replace(config, sim_corpus=str(corpus))  # every page known: each has a truth
                if name == "dense recall, denser answers":
                    corpus = dense_only
            else:
                corpus = page_corpus()
            results = []
            for label, changes in (("today", today_changes), ("new", new_changes)):
                work = work_root / f"{name.replace(' ', '-').replace(',', '')}-{label}"
                dense = name.startswith("dense")
                result = asyncio.run(run_once(replace(config, **changes), corpus, work,
                                              keep=dense or name.startswith("long page")))
                if name.startswith("long page") and result.output:
                    rows = _read_rows(Path(result.output))
                    result.dense = {"pages": dense_accounting(sorted(work.glob("requests-*.jsonl")), rows, "strip"),
                                    **recall_by_kind(rows, corpus)}
                    for page in result.dense["pages"]:
                        page["text_tokens"] = text_tokens(corpus, page["doc"], config.tokens_per_char)
                    shutil.rmtree(result.output, ignore_errors=True)
                if dense and result.output:
                    rows = _read_rows(Path(result.output))
                    result.dense = {"pages": dense_accounting(sorted(work.glob("requests-*.jsonl")), rows)}
                    if name == "dense recall" or name in DENSE_RECALL:
                        result.dense.update(recall_by_kind(rows, corpus))
                    if name in DENSE_RECALL:
                        result.dense["normal"] = normal_accounting(sorted(work.glob("requests-*.jsonl")))
                        for page in result.dense["pages"]:
                            page["text_tokens"] = text_tokens(corpus, page["doc"], config.tokens_per_char)
                    shutil.rmtree(result.output, ignore_errors=True)
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
