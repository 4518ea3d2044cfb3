"""``llm-ocr compare``: the same documents read by two or more runs, side by side, on one HTML page.

For each run: its model, its olmOCR-bench scores (``OUT/quality/bench.json``, when
``bench-quality --bench`` was run on it), its no-ground-truth signals (``OUT/quality/checks.json``,
else computed here without writing), tokens per page, pages/s and GPU time and cost per
1,000 pages from its completion markers. Then the pages the runs disagree on most (or all
pages, up to ``max_pages``): the page image, re-rendered from its source, and each run's
Markdown with the words that differ highlighted: in the first run, the words some other run
lacks; in every other run, the words the first lacks. Like the report, the page is one
self-contained file with no script and a Content-Security-Policy that forbids any.
"""

from __future__ import annotations

import itertools
import logging
import os
import posixpath
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rapidfuzz import fuzz

from llm_ocr.options import RenderOptions
from llm_ocr.quality import results as saved
from llm_ocr.quality.diff import diff_columns
from llm_ocr.quality.findings import CSS as QUALITY_CSS
from llm_ocr.quality.findings import pct, score_text
from llm_ocr.quality.pages import RunStats, iter_pages, run_stats
from llm_ocr.quality.text import normalize_text
from llm_ocr.report import CSS as REPORT_CSS
from llm_ocr.report import SourcePages
from llm_ocr.report.safe_html import anchor, data_uri, esc, markdown_to_html
from llm_ocr.report.writer import CSP
from llm_ocr.storage import Storage

log = logging.getLogger("llm_ocr.quality")

CSS = """
.llmocr .llmocr-grid{display:grid;gap:.8em;align-items:start}
.llmocr .llmocr-grid>div{min-width:0}
.llmocr .llmocr-grid img{display:block;width:100%;height:auto;border:1px solid #bbb}
.llmocr .llmocr-text{white-space:pre-wrap;word-break:break-word;font-family:ui-monospace,Menlo,monospace;font-size:.78em;
 border:1px solid #e3e3e3;background:#fcfcfc;padding:.5em;max-height:60em;overflow:auto}
.llmocr mark.llmocr-ins{background:#c8f0c8;color:inherit}
.llmocr mark.llmocr-del{background:#f8cccc;color:inherit}
.llmocr .llmocr-runhead{font-weight:600;margin:.2em 0}
""".strip()  # noqa: E501 - CSS rules, one a line


class CompareError(Exception):
    """The runs cannot be compared (the message says why)."""


@dataclass
class Run:
    """One run to compare: where it is, what to call it, its pages and quality results."""

    out: str
    label: str
    rows: dict[tuple[str, int], dict[str, Any]]
    stats: RunStats
    bench: dict[str, Any] | None
    checks: dict[str, Any] | None
    models: list[str] = field(default_factory=list)
    #: Failed bench tests and no-truth flags by page (filled by :func:`load_run`).
    failed: dict[tuple[str, int], list[dict[str, Any]]] = field(default_factory=dict)
    flags: dict[tuple[str, int], dict[str, str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for record in (self.bench or {}).get("results", []):
            if record.get("passed") is False and record.get("doc_id"):
                self.failed.setdefault((record["doc_id"], int(record["page"])), []).append(record)
        self.flags = {(p["doc_id"], int(p["page"])): p["flags"] for p in (self.checks or {}).get("flagged", [])}


@dataclass
class CompareResult:
    """Where the comparison went and what it holds."""

    path: str
    runs: list[dict[str, Any]]
    pages_compared: int
    pages_shown: int


def load_run(out: str, storage_options: Mapping[str, Any] | None = None, label: str | None = None) -> Run:
    """Read a run for comparison (its no-truth checks are computed, not saved, if it has none saved)."""
    from llm_ocr.quality.score import check_output

    storage = Storage(out, dict(storage_options or {}))
    rows = {(str(r["doc_id"]), int(r.get("page") or 0)): r for r in iter_pages(storage)}
    checks = saved.load(storage, saved.CHECKS) or check_output(out, storage_options=storage_options, write=False)
    models = sorted({str(r["model"]) for r in rows.values() if r.get("model")})
    name = label or (", ".join(models) if models else posixpath.basename(out.rstrip("/")) or out)
    return Run(out, name, rows, run_stats(storage), saved.load(storage, saved.BENCH), checks, models)


def disagreement(texts: Sequence[str]) -> float:
    """1 minus the lowest similarity (rapidfuzz ``ratio`` of the normalised texts) of any two."""
    normal = [normalize_text(t) for t in texts]
    if len(normal) < 2:
        return 0.0
    return 1.0 - min(fuzz.ratio(a, b) / 100.0 for a, b in itertools.combinations(normal, 2))


def _money(value: float | None, digits: int = 2) -> str:
    return "&ndash;" if value is None else f"${value:,.{digits}f}"


def _number(value: float | None, digits: int = 2) -> str:
    return "&ndash;" if value is None else f"{value:,.{digits}f}"


def _routes(routes: Mapping[str, int]) -> str:
    """``12 / 30 / 5``: pages by route (all the model's for a run before routes)."""
    if not routes:
        return "&ndash;"
    return " / ".join(str(routes.get(k, 0)) for k in ("text-layer", "model", "escalated"))


def runs_table(runs: Sequence[Run]) -> str:
    """One column per run: scores, signals, tokens, speed and cost."""
    lines: list[tuple[str, list[str]]] = [
        ("Output", [esc(r.out) for r in runs]),
        ("Model", [esc(", ".join(r.models) or "?") for r in runs]),
        ("Pages in the output", [str(len(r.rows)) for r in runs]),
    ]
    if any(r.bench for r in runs):
        lines.append(("olmOCR-bench score", [score_text(r.bench["overall"]) if r.bench else "not run" for r in runs]))
        types = sorted({t for r in runs if r.bench for t in r.bench["by_type"]})
        for t in types:
            lines.append((f"&nbsp;&nbsp;{esc(t)} tests",
                          [pct(r.bench["by_type"].get(t, {}).get("score")) if r.bench else "" for r in runs]))
    lines.append(("Pages flagged (no ground truth)", [
        f"{r.checks['flagged_pages']} of {r.checks['pages']}" if r.checks else "&ndash;" for r in runs]))  # fmt: skip
    lines.append(("Text-layer lines found", [pct((r.checks or {}).get("text_layer", {}).get("recall")) for r in runs]))
    stats = [r.stats.to_json() for r in runs]
    lines += [
        ("Completion tokens per page", [_number(s["completion_tokens_per_page"], 0) for s in stats]),
        ("Prompt tokens per page",
         [_number(s["prompt_tokens"] / s["pages"] if s["pages"] else None, 0) for s in stats]),
        ("Pages/s (per shard)", [_number(s["pages_per_s"]) for s in stats]),
        ("Pages per route (text layer / model / escalated)", [_routes(s["routes"]) for s in stats]),
        ("GPU-seconds per 1,000 pages", [_number(s["gpu_seconds_per_1000_pages"], 0) for s in stats]),
        ("&nbsp;&nbsp;of them busy (a request in flight)",
         [_number(s["busy_seconds_per_1000_pages"], 0) for s in stats]),
        ("Cost per 1,000 pages", [_money(s["cost_per_1000_pages_usd"]) for s in stats]),
    ]
    head = "<tr><th></th>" + "".join(f"<th>{esc(r.label)}</th>" for r in runs) + "</tr>"
    body = "".join(f"<tr><th>{name}</th>" + "".join(f'<td class="n">{v}</td>' for v in values) + "</tr>" for name,
                   values in lines)
    note = (
        '<p class="llmocr-meta">Speed and cost come from the runs\' completion markers (the last run of each shard); '
        "cost is known when the GPU's price is (a GPU preset or --gpu-price-per-hour).</p>"
    )
    return f'<table class="llmocr-summary">{head}{body}</table>{note}'


def _page_section(key: tuple[str, int], runs: Sequence[Run], score: float, pages: SourcePages | None) -> str:
    doc_id, page = key
    rows = [r.rows.get(key) for r in runs]
    texts = [str((row or {}).get("markdown") or "") for row in rows]
    columns = diff_columns(texts)
    view = pages.page(page) if pages is not None and page > 0 else None
    uri = data_uri(view.data, view.mime) if view is not None and view.data else None
    picture = (f'<img src="{uri}" alt="page image">' if uri
               else f'<p class="llmocr-missing">{esc((view.note if view else None) or "no page image")}</p>')
    cells = [f"<div>{picture}</div>"]
    for run, row, column, text in zip(runs, rows, columns, texts, strict=True):
        status = (row or {}).get("status") or "missing"
        head = f'<div class="llmocr-runhead">{esc(run.label)} <span class="llmocr-status llmocr-status-{esc(status if status in ("ok", "truncated") else "error")}">{esc(status)}</span></div>'  # noqa: E501 - not wrapped yet
        notes = [f'<span class="llmocr-flag">{esc(flag)}</span>' for flag in run.flags.get(key, {})]
        failed = run.failed.get(key, [])
        if failed:
            notes.append(f'<span class="llmocr-meta">{len(failed)} bench test(s) failed: '
                         + esc("; ".join(f"{f['type']}: {f['explanation'][:80]}" for f in failed[:3])) + "</span>")  # fmt: skip  # noqa: E501 - not wrapped yet
        body = (f'<div class="llmocr-text">{column}</div>' if row is not None
                else '<p class="llmocr-missing">not in this run</p>')
        rendered = markdown_to_html(text) if text else ""
        details = f'<details><summary>Rendered Markdown</summary><div class="llmocr-md">{rendered}</div></details>' if rendered else ""  # noqa: E501 - not wrapped yet
        cells.append(f"<div>{head}{''.join(notes)}{body}{details}</div>")
    grid = f'style="grid-template-columns:repeat({len(cells)},minmax(0,1fr))"'
    return (
        f'<section class="llmocr-page" id="{anchor("", doc_id, page)}"><h3>{esc(doc_id)} &middot; page {page} '
        f'<span class="llmocr-meta">(disagreement {score * 100:.0f}%)</span></h3>'
        f'<div class="llmocr-grid" {grid}>{"".join(cells)}</div></section>'
    )


def compare_runs(
    outs: Sequence[str],
    html_path: str | None = None,
    *,
    labels: Sequence[str] | None = None,
    max_pages: int = 30,
    render: RenderOptions | None = None,
    storage_options: Mapping[str, Any] | None = None,
) -> CompareResult:
    """Write the side-by-side page of runs ``outs`` (default path: ``compare.html`` in the
    first run's folder); the pages where the runs disagree most come first."""
    if len(outs) < 2:
        raise CompareError("give at least two output folders to compare")
    so = dict(storage_options or {})
    runs = [load_run(out, so, labels[i] if labels and i < len(labels) else None) for i, out in enumerate(outs)]
    seen: dict[str, int] = {}
    for run in runs:  # two runs of one model need telling apart
        seen[run.label] = seen.get(run.label, 0) + 1
    for run in runs:
        if seen[run.label] > 1:
            run.label = f"{run.label} ({run.out})"
    keys = sorted({k for r in runs for k in r.rows if sum(k in o.rows for o in runs) >= 2})
    if not keys:
        raise CompareError("the runs have no page in common (compare runs over the same inputs)")
    scored = [(disagreement([str(r.rows.get(k, {}).get("markdown") or "") for r in runs]), k) for k in keys]
    scored.sort(key=lambda item: (-item[0], item[1]))
    shown = scored[:max_pages]
    sources = {k: next((r.rows[k].get("source") for r in runs if k in r.rows), None) for _, k in shown}
    parts = [
        (
            "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f'<meta http-equiv="Content-Security-Policy" content="{CSP}"><meta name="referrer" content="no-referrer">'
            "<title>llm-ocr "
            f"compare</title><style>body{{margin:1.2em;background:#fff}}\n{REPORT_CSS}\n{QUALITY_CSS}\n{CSS}"
            '</style></head><body><div class="llmocr"><h1>llm-ocr compare</h1>'
        ),
        runs_table(runs),
        (
            f"<p>{len(keys)} pages are in at least two runs; the {len(shown)} where they disagree most are shown, "
            "most different first. Highlighted: in the first run, words some other run lacks; in the others, words the "
            "first lacks.</p>"
        ),
    ]
    by_document: dict[str, list[tuple[float, tuple[str, int]]]] = {}
    for item in shown:
        by_document.setdefault(item[1][0], []).append(item)
    rendered: dict[tuple[str, int], str] = {}
    for doc_id, items in by_document.items():  # one renderer per document, pages in any order
        with SourcePages(doc_id, sources[items[0][1]], render, so) as pages:
            for score, key in items:
                rendered[key] = _page_section(key, runs, score, pages)
    parts += [rendered[k] for _, k in shown]
    parts.append("</div></body></html>\n")
    target = html_path or posixpath.join(runs[0].out.rstrip("/"), "compare.html")
    path = _write(target, "".join(parts), so)
    return CompareResult(path, [{"out": r.out, "label": r.label, **r.stats.to_json()} for r in runs], len(keys),
                         len(shown))


def _write(target: str, text: str, storage_options: Mapping[str, Any]) -> str:
    store = Storage(posixpath.dirname(target) or ".", dict(storage_options))
    path = store.path(posixpath.basename(target))
    if store.is_local:
        os.makedirs(store.root, exist_ok=True)
        handle, tmp = tempfile.mkstemp(prefix=".compare-", suffix=".html.tmp", dir=store.root)
        with os.fdopen(handle, "w", encoding="utf-8") as f:
            f.write(text)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    else:
        store.write_atomic(path, text.encode("utf-8"))
        store.flush()
    return store.display(path)
