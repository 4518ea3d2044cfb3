"""The quality results as HTML: a section for the report's top, marks on the flagged documents,
notes on the pages that failed, and which documents and pages the report shows first
(:class:`~llm_ocr.report.ReportAnnotations`)."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import MISSING, fields
from typing import Any

from llm_ocr.quality.checks import TEST_CLASSES
from llm_ocr.report import ReportAnnotations
from llm_ocr.report.safe_html import anchor, esc

CSS = """
.llmocr .llmocr-quality{border:1px solid #ccc;padding:.3em .9em;margin:1em 0;background:#fafafa}
.llmocr .llmocr-quality h2{font-size:1.2em;margin:.3em 0}
.llmocr .llmocr-fail{background:#fff0f0;border-left:4px solid #c62828;padding:.3em .6em;margin:.3em 0;font-size:.9em}
.llmocr .llmocr-fail code{white-space:pre-wrap;word-break:break-word}
.llmocr .llmocr-flag{display:inline-block;background:#fdf0c8;color:#6b5000;border-radius:.6em;padding:0 .5em;
 margin-right:.3em;font-size:.8em;font-weight:600}
""".strip()


def pct(value: float | None) -> str:
    """A share as a percentage with one decimal ("–" when unknown)."""
    return "&ndash;" if value is None else f"{value * 100:.1f}%"


def score_text(overall: Mapping[str, Any]) -> str:
    """``81.2% ± 3.1`` from a bench result's ``overall`` (the half-width of the 95% interval)."""
    score, ci = overall.get("score"), overall.get("ci")
    if score is None:
        return "&ndash;"
    half = f" &plusmn; {(ci[1] - ci[0]) / 2 * 100:.1f}" if ci else ""
    return f"{score * 100:.1f}%{half}"


def _table(rows: Sequence[tuple[str, ...]], head: tuple[str, ...]) -> str:
    cells = "".join(f"<th>{h}</th>" for h in head)
    body = "".join("<tr>" + "".join(f'<td class="n">{c}</td>' if i else f"<th>{c}</th>" for i,
                                    c in enumerate(r)) + "</tr>" for r in rows)
    return f'<table class="llmocr-summary"><tr>{cells}</tr>{body}</table>'


def bench_section(result: Mapping[str, Any]) -> str:
    """Scores per category and test type, and what was not scored."""
    overall = result["overall"]
    parts = [
        "<h2>olmOCR-bench tests</h2>",
        (
            f"<p>Overall <strong>{score_text(overall)}</strong> (mean of the categories' pass rates, 95% bootstrap "
            f"interval), {overall['passed']} of {overall['tests']} tests passed. Bench: "
            f"{esc(result.get('bench', ''))}</p>"
        ),
    ]
    head = ("", "pass rate", "passed", "tests")
    for title, key in (("category", "by_category"), ("test type", "by_type")):
        rows = [(esc(k), pct(v["score"]), str(v["passed"]), str(v["tests"])) for k, v in result[key].items()]
        parts.append(_table(rows, (f"by {title}", *head[1:])))
    not_scored = result.get("not_scored") or {}
    if not_scored.get("tests"):
        reasons = "; ".join(f"{esc(k)} ({n})" for k, n in not_scored["reasons"].items())
        parts.append(f'<div class="llmocr-note">{not_scored["tests"]} test(s) not scored: {reasons}</div>')
    missing = result.get("not_in_run") or {}
    if missing.get("tests"):
        parts.append(
            f'<div class="llmocr-note">{missing["tests"]} test(s) on {missing["pdfs"]} of {missing["of_pdfs"]} PDFs '
            "are not in this run and were left out.</div>"
        )
    invalid = result.get("invalid_tests") or []
    if invalid:
        shown = "".join(f"<li>{esc(line)}</li>" for line in invalid[:20])
        parts.append(f'<div class="llmocr-error">{len(invalid)} test line(s) refused:<ul>{shown}</ul></div>')
    return "".join(parts)


def checks_section(result: Mapping[str, Any]) -> str:
    """The no-ground-truth signals: flags counted, text-layer recall, the worst pages."""
    layer = result.get("text_layer") or {}
    flags = ", ".join(f"{esc(k)} {n}" for k, n in (result.get("flags") or {}).items()) or "none"
    parts = [
        "<h2>Checks without ground truth</h2>",
        (
            f"<p>{result['flagged_pages']} of {result['pages']} pages flagged ({flags}). "
            f"Text-layer lines found: {pct(layer.get('recall'))} of {layer.get('snippets', 0)} sampled.</p>"
        ),
    ]
    worst = result.get("worst_pages") or []
    if worst:
        items = "".join(
            f'<li><a href="#{anchor("", p["doc_id"], p["page"])}">{esc(p["doc_id"])} page {p["page"]}</a>: '
            + "; ".join(f"{esc(k)} ({esc(v)})" for k, v in p["flags"].items())
            + "</li>"
            for p in worst
        )
        parts.append(f"<p>Worst pages:</p><ol>{items}</ol>")
    return "".join(parts)


def failed_test_html(record: Mapping[str, Any]) -> str:
    """One failed test: its type and id, why it failed, and what it asked for."""
    test = dict(record.get("test") or {})
    cls = TEST_CLASSES.get(str(record.get("type")))
    defaults = {f.name: f.default for f in fields(cls) if f.default is not MISSING} if cls else {}
    asked = {
        k: v for k, v in test.items()
        if k not in ("pdf", "page", "id", "type", "checked", "url") and v not in (None, "") and defaults.get(k,
            MISSING) != v
    }  # fmt: skip
    return (
        f'<div class="llmocr-fail"><strong>{esc(record["type"])}</strong> <span '
        f'class="llmocr-meta">{esc(record["id"])}</span>: '
        f"{esc(record.get('explanation') or '')}<br><code>{esc(json.dumps(asked, ensure_ascii=False))}</code></div>"
    )


def _mark(failed_tests: int, flags: Mapping[str, int]) -> str:
    """The mark of a flagged document in the report: what was found, counted."""
    found = [f"{failed_tests} failed test{'s' if failed_tests != 1 else ''}"] if failed_tests else []
    found += [f"{esc(flag)} &times;{n}" if n > 1 else esc(flag) for flag, n in sorted(flags.items())]
    return f'<span class="llmocr-flag">flagged</span> <span class="llmocr-meta">{", ".join(found)}</span>'


def report_annotations(bench: Mapping[str, Any] | None, checks: Mapping[str, Any] | None) -> ReportAnnotations:
    """What the report shows of the quality results: every document, the flagged ones first
    (worst first) and marked, their failing pages always among those shown."""
    sections: list[str] = []
    notes: dict[tuple[str, int], list[str]] = defaultdict(list)
    weight: dict[str, float] = defaultdict(float)
    pages: dict[str, set[int]] = defaultdict(set)
    failed_tests: dict[str, int] = defaultdict(int)
    flags: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    if bench is not None:
        sections.append(bench_section(bench))
        for record in bench.get("results", []):
            if record.get("passed") is False and record.get("doc_id"):
                key = (record["doc_id"], int(record["page"]))
                notes[key].append(failed_test_html(record))
                weight[record["doc_id"]] += 1
                failed_tests[record["doc_id"]] += 1
                pages[record["doc_id"]].add(int(record["page"]))
    if checks is not None:
        sections.append(checks_section(checks))
        for page in checks.get("flagged", []):
            key = (page["doc_id"], int(page["page"]))
            found = "".join(f'<span class="llmocr-flag">{esc(k)}</span>{esc(v)} ' for k, v in page["flags"].items())
            notes[key].insert(0, f'<div class="llmocr-note">{found}</div>')
            weight[page["doc_id"]] += page["badness"] / 100
            for flag in page["flags"]:
                flags[page["doc_id"]][flag] += 1
            pages[page["doc_id"]].add(int(page["page"]))
    documents = sorted(weight, key=lambda d: (-weight[d], d))
    html = f'<style>{CSS}</style><section class="llmocr-quality">{"".join(sections)}</section>' if sections else ""
    return ReportAnnotations(
        summary_html=html,
        page_html={key: "".join(items) for key, items in notes.items()},
        document_html={d: _mark(failed_tests.get(d, 0), flags.get(d, {})) for d in documents},
        documents=documents,
        pages=dict(pages),
    )
