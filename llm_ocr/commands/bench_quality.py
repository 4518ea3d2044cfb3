"""``llm-ocr bench-quality``: how good a run's output is, with olmOCR-bench's tests or without
ground truth; with ``--models``, the same sample read by several models, then compared."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from llm_ocr.config import ENV_PREFIX, OptionError

log = logging.getLogger(__name__)


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``bench-quality`` sub-command."""
    parser = sub.add_parser(
        "bench-quality",
        help="score a run's output: olmOCR-bench's tests (--bench), or checks that need no ground truth",
        description=(
            "With --bench DIR: score OUT's Extract output against the tests of a bench in olmOCR-bench's format "
            "(DIR/*.jsonl and DIR/pdfs/; run `llm-ocr run DIR/pdfs --output OUT` first) and print the scores per "
            "category, per test type and overall with a bootstrap 95% interval. Without: check every page of OUT "
            "for empty output, repetition loops, stray characters, truncation and, where the PDF's text layer is "
            "usable, lines of that layer missing from the Markdown; print a table per document and the worst pages. "
            "Results go to OUT/quality/*.json and the failing cases into OUT/report.html. With --models A,B and "
            "--endpoint: read the sample (the bench's PDFs, or --inputs) with each model into OUT/runs/MODEL, "
            "score each run and write OUT/compare.html."
        ),
        epilog="exit status: 0 scored; 1 scored below --fail-under; 2 could not run. See docs/quality.md.",
    )
    parser.add_argument("output", nargs="?", metavar="OUT", help="the output folder or URL of a run [env "
                                                                 f"{ENV_PREFIX}OUTPUT]")
    parser.add_argument("--bench", metavar="DIR", help="a bench in olmOCR-bench's layout (JSONL test files beside "
                                                       "pdfs/)")
    parser.add_argument("--markdown", metavar="MD",
                        help="with --bench: score the Markdown files in MD (another tool's: olmOCR's "
                        "{pdf}_pg{N}_repeat{M}.md, {pdf}_pg{N}.md per page or {pdf}.md per document, named by the "
                        "PDF's path under pdfs/) instead of OUT's rows; OUT receives the results only")
    parser.add_argument("--download", action="store_true",
                        help="fetch allenai/olmOCR-bench from the Hugging Face Hub into --bench DIR first (about 360 "
                             "MB)")
    parser.add_argument("--katex", metavar="DIR", help="folder with katex.min.js and katex.min.css (default: found, "
                                                       "see docs)")
    parser.add_argument("--no-text-layer", action="store_true", help="without --bench: do not read PDF text layers")
    parser.add_argument("--samples", type=int, default=8, metavar="N", help="text-layer lines looked for per page "
                                                                            "(default %(default)s)")
    parser.add_argument("--worst", type=int, default=10, metavar="N", help="worst pages listed (default %(default)s)")
    parser.add_argument("--fail-under", type=float, default=None, metavar="SCORE",
                        help="exit 1 when the bench score (0-100) is below SCORE, or without --bench when more than "
                        "SCORE%% of the pages are flagged")
    parser.add_argument("--no-report", action="store_true", help="do not (re)write OUT/report.html with the failing "
                                                                 "cases")
    parser.add_argument("--json", action="store_true", help="print the summary as one JSON object instead of tables")
    parser.add_argument("--storage-options", default=None, metavar="JSON",
                        help="fsspec storage options for OUT and the sources, a JSON object")
    chain = parser.add_argument_group("several models (--models)")
    chain.add_argument("--models", metavar="A,B,...", help="read the same sample with each of these served models and "
                                                           "compare")
    chain.add_argument("--endpoint", metavar="URL[,URL...]",
                       help="OpenAI-compatible base URLs; each model is read on those that serve it (GET /v1/models)")
    chain.add_argument("--inputs", nargs="+", metavar="INPUT", help="without --bench: the documents to read")
    chain.add_argument("--sample", type=int, default=None, metavar="N", help="with --bench: read only N of its PDFs "
                                                                             "(spread over its categories)")
    chain.add_argument("--extract-args", default="", metavar="ARGS",
                       help="extra options for each `llm-ocr extract`, one string (e.g. '--max-in-flight 64')")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Handle ``llm-ocr bench-quality``."""
    out = args.output or os.environ.get(ENV_PREFIX + "OUTPUT")
    if not out:
        raise OptionError("give OUT, the output folder of a run (or set LLM_OCR_OUTPUT)")
    if args.samples < 1 or args.worst < 0:
        raise OptionError("--samples must be at least 1 and --worst at least 0")
    try:
        args.storage_options = json.loads(args.storage_options) if args.storage_options else {}
    except ValueError as exc:
        raise OptionError(f"--storage-options is not a JSON object: {exc}") from exc
    if args.download:
        if not args.bench:
            raise OptionError("--download needs --bench DIR: where to put olmOCR-bench")
        from llm_ocr.quality.download import DownloadError, download_bench

        try:
            args.bench = str(download_bench(args.bench))
        except DownloadError as exc:
            log.error("%s", exc)
            return 2
        log.info("olmOCR-bench is in %s", args.bench)
    if args.markdown and not args.bench:
        raise OptionError("--markdown needs --bench DIR: the tests its files are scored against")
    if args.markdown and args.models:
        raise OptionError("--markdown scores files already written; --models reads a sample with each model: give one")
    if args.models:
        return _several_models(args, out)
    return _one_run(args, out)


def _one_run(args: argparse.Namespace, out: str) -> int:
    from llm_ocr.quality import check_output, score_output
    from llm_ocr.quality.bench import BenchError
    from llm_ocr.quality.pages import NoPagesError

    try:
        if args.bench:
            result = score_output(out, args.bench, katex=args.katex, storage_options=args.storage_options,
                                  markdown=args.markdown)  # fmt: skip
        else:
            result = check_output(out, text_layer=not args.no_text_layer, samples=args.samples, worst=args.worst,
                                  storage_options=args.storage_options)  # fmt: skip
    except (BenchError, NoPagesError) as exc:
        log.error("%s", exc)
        return 2
    _print(args, result)
    if args.markdown:
        log.info("no report: the readings are Markdown files, not a run's rows; every verdict is in %s",
                 result.get("saved_to"))  # fmt: skip
    elif not args.no_report:
        _report(out, result if args.bench else None, None if args.bench else result, args.storage_options)
    return _verdict(args, result)


def _verdict(args: argparse.Namespace, result: Mapping[str, Any]) -> int:
    if args.fail_under is None:
        return 0
    if "overall" in result:
        score = result["overall"]["score"]
        return 1 if score is None or score * 100 < args.fail_under else 0
    flagged = result["flagged_pages"] / result["pages"] * 100 if result["pages"] else 0.0
    return 1 if flagged > args.fail_under else 0


def _report(
    out: str, bench: Mapping[str, Any] | None, checks: Mapping[str, Any] | None, storage_options: Mapping[str, Any]
) -> None:
    """Rewrite OUT/report.html with the quality results (both kinds, when both were saved)."""
    from llm_ocr.quality import results
    from llm_ocr.quality.findings import report_annotations
    from llm_ocr.report import ReportError, write_report
    from llm_ocr.storage import Storage

    storage = Storage(out, dict(storage_options))
    bench = bench or results.load(storage, results.BENCH)
    checks = checks or results.load(storage, results.CHECKS)
    try:
        report = write_report(out, annotations=report_annotations(bench, checks), storage_options=storage_options)
    except ReportError as exc:
        log.warning("no report: %s", exc)
        return
    log.info("report, with the quality results: %s", report.path)


# ============================================================================================
# Printing


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.1f}%"


def _print(args: argparse.Namespace, result: Mapping[str, Any]) -> None:
    if args.json:
        summary = {k: v for k, v in result.items() if k not in ("results", "flagged")}
        print(json.dumps(summary, default=str))
        return
    if "overall" in result:
        print(bench_table(result))
    else:
        print(checks_table(result))


def bench_table(result: Mapping[str, Any]) -> str:
    """The bench scores as text: overall, per category, per test type, and what was left out."""
    overall = result["overall"]
    lines = []
    if overall["score"] is None:
        lines.append("olmOCR-bench: no test could be scored")
    else:
        low, high = overall["ci"]
        lines.append(
            f"olmOCR-bench score {overall['score'] * 100:.1f}% (95% interval {low * 100:.1f}-{high * 100:.1f}%), "
            f"{overall['passed']} of {overall['tests']} tests passed"
        )
    for title, key in (("category", "by_category"), ("test type", "by_type")):
        lines.append(f"  {title:<22} {'pass rate':>9} {'passed':>7} {'tests':>6}")
        for name, row in result[key].items():
            lines.append(f"  {name[:22]:<22} {_pct(row['score']):>9} {row['passed']:>7} {row['tests']:>6}")
    if any("readings" in r for r in result.get("results", [])):
        lines.append("  (pages read several times: a test passes on more than half of its readings; a test type's")
        lines.append("  pass rate is the mean share of readings passed, as olmOCR's scorer reports it)")
    if result["not_scored"]["tests"]:
        for reason, n in result["not_scored"]["reasons"].items():
            lines.append(f"  not scored: {n} test(s): {reason}")
    missing = result["not_in_run"]
    if missing["tests"]:
        lines.append(f"  not in the run: {missing['tests']} test(s) on {missing['pdfs']} of {missing['of_pdfs']} PDFs "
                     "(left out)")
    for line in result["invalid_tests"][:10]:
        lines.append(f"  refused: {line}")
    raised = result.get("raised") or []
    if raised:
        lines.append(f"  {len(raised)} reading(s) made a test raise, counted as failed; "
                     "olmOCR's scorer fails the whole run there:")  # fmt: skip
        lines += [f"    {line[:200]}" for line in raised[:10]]
    if result.get("markdown"):
        lines.append(f"  read: {result['markdown_files']} Markdown file(s) in {result['markdown']}")
    unmatched = result.get("unmatched_files") or []
    if unmatched:
        lines.append(f"  not scored: {len(unmatched)} file(s) that name no page of the bench:")
        lines += [f"    {line}" for line in unmatched[:10]]
        lines.append(f"    expected, {result['expected_names']}")
    if result.get("saved_to"):
        lines.append(f"  verdicts: {result['saved_to']}")
    return "\n".join(lines)


def checks_table(result: Mapping[str, Any], max_rows: int = 50) -> str:
    """The no-ground-truth checks as text: one line per document, then the worst pages."""
    head = f"{'document':<34} {'pages':>5} {'ok':>4} {'trunc':>5} {'error':>5} {'empty':>5} {'loop':>4} {'stray':>5} {'layer':>6}  worst"  # noqa: E501 - not wrapped yet
    lines = [head, "-" * len(head)]
    documents = sorted(result["documents"], key=lambda d: d["doc_id"])
    for doc in documents[:max_rows]:
        status, flags = doc["status"], doc["flags"]
        worst = f"p{doc['worst_page']}" if doc["worst_page"] is not None else "-"
        doc_id = doc["doc_id"] if len(doc["doc_id"]) <= 34 else "..." + doc["doc_id"][-31:]
        lines.append(
            f"{doc_id:<34} {doc['pages']:>5} {status.get('ok', 0):>4} {status.get('truncated', 0):>5} "
            f"{status.get('error', 0):>5} {flags.get('empty', 0):>5} {flags.get('repetition', 0):>4} "
            f"{flags.get('stray', 0):>5} {_pct(doc['recall']):>6}  {worst}"
        )
    if len(documents) > max_rows:
        lines.append(f"... and {len(documents) - max_rows} more documents (all in the JSON)")
    layer = result["text_layer"]
    lines.append(
        f"{result['pages']} pages, {result['flagged_pages']} flagged"
        + (f" ({', '.join(f'{k} {n}' for k, n in result['flags'].items())})" if result["flags"] else "")
        + f"; text-layer lines found: {_pct(layer['recall'])} of {layer['snippets']} sampled"
    )
    if result["worst_pages"]:
        lines.append("worst pages:")
        for page in result["worst_pages"]:
            why = "; ".join(f"{k}: {v}" for k, v in page["flags"].items())
            lines.append(f"  {page['doc_id']} p{page['page']}  {why[:160]}")
    if result.get("saved_to"):
        lines.append(f"signals of every page: {result['saved_to']}")
    return "\n".join(lines)


# ============================================================================================
# Several models


def _slug(model: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "--", model).strip("-") or "model"


def _served(urls: list[str]) -> dict[str, list[str]]:
    """Model name -> the URLs (of ``urls``) that serve it."""
    from llm_ocr.options import ClientOptions
    from llm_ocr.vlm.client import EndpointDown, VlmClient

    async def ask(url: str) -> list[str]:
        client = VlmClient(url, "", api_key=os.environ.get(ENV_PREFIX + "API_KEY"), options=ClientOptions())
        try:
            return await client.served_models()
        except EndpointDown as exc:
            log.warning("%s", exc)
            return []
        finally:
            await client.close()

    async def ask_all() -> list[list[str]]:
        return await asyncio.gather(*(ask(u) for u in urls))

    served: dict[str, list[str]] = {}
    for url, names in zip(urls, asyncio.run(ask_all()), strict=True):
        for name in names:
            served.setdefault(name, []).append(url)
    return served


def sample_pdfs(bench_dir: str, n: int | None) -> list[str]:
    """The bench's PDFs to read: all, or ``n`` spread over its categories (round robin over the
    ``pdfs/`` sub-folders, each in name order), so a sample keeps every kind of page."""
    from llm_ocr.quality.bench import load_bench

    bench = load_bench(bench_dir)
    pdfs = sorted({t.pdf for t in bench.tests} & set(bench.pdfs))
    if n is None or n >= len(pdfs):
        chosen = pdfs
    else:
        groups: dict[str, list[str]] = {}
        for pdf in pdfs:
            groups.setdefault(pdf.split("/")[0] if "/" in pdf else "", []).append(pdf)
        chosen, queues = [], [list(g) for _, g in sorted(groups.items())]
        while len(chosen) < n:
            for queue in queues:
                if queue and len(chosen) < n:
                    chosen.append(queue.pop(0))
    return [str(bench.pdf_dir / p) for p in chosen]


def _several_models(args: argparse.Namespace, out: str) -> int:
    from llm_ocr.quality import CompareError, compare_runs, results
    from llm_ocr.storage import Storage

    models = [m.strip() for m in args.models.split(",") if m.strip()]
    if len(models) < 2:
        raise OptionError("--models needs at least two model names, comma-separated")
    if not args.endpoint:
        raise OptionError("--models needs --endpoint: the servers of those models (comma-separated URLs)")
    if not args.bench and not args.inputs:
        raise OptionError("--models needs a sample to read: --bench DIR (its PDFs) or --inputs")
    if "://" in out and not out.startswith("file://"):
        raise OptionError("--models writes several runs under OUT: give a local folder")
    urls = [u.strip() for u in args.endpoint.split(",") if u.strip()]
    served = _served(urls)
    missing = [m for m in models if m not in served]
    if missing:
        known = ", ".join(sorted(served)) or "nothing (no endpoint answered)"
        raise OptionError(f"no endpoint serves {', '.join(missing)}; the endpoints serve {known}")
    inputs = sample_pdfs(args.bench, args.sample) if args.bench else list(args.inputs)
    runs: list[str] = []
    summaries: dict[str, Any] = {}
    for model in models:
        run_out = str(Path(out) / "runs" / _slug(model))
        command = [sys.executable, "-m", "llm_ocr.cli", "extract", *inputs, "--output", run_out,
                   "--endpoint", ",".join(served[model]), "--model", model,
                   *shlex.split(args.extract_args)]  # fmt: skip
        log.info("reading %d input(s) with %s on %s", len(inputs), model, ", ".join(served[model]))
        done = subprocess.run(command, stdout=subprocess.DEVNULL, check=False)
        if done.returncode not in (0, 1):  # 1: finished with failed pages, which the scores count
            log.error("llm-ocr extract with --model %s exited %d; stopping", model, done.returncode)
            return 2
        runs.append(run_out)
        print(f"== {model} ({run_out})")
        if _one_run(args, run_out) == 2:
            return 2
        summaries[model] = results.load(Storage(run_out), results.BENCH if args.bench else results.CHECKS)
    try:
        compared = compare_runs(runs, str(Path(out) / "compare.html"), labels=models)
    except CompareError as exc:
        log.error("%s", exc)
        return 2
    print(f"== {len(models)} models side by side")
    print(_models_table(models, summaries, compared.runs))
    print(f"side by side: {compared.path}")
    return 0


def _models_table(models: list[str], summaries: Mapping[str, Any], stats: Sequence[Mapping[str, Any]]) -> str:
    head = f"{'model':<40} {'score':>16} {'flagged':>9} {'tok/page':>8} {'pages/s':>8} {'$/1k pages':>10}"
    lines = [head, "-" * len(head)]
    for model, stat in zip(models, stats, strict=True):
        summary = summaries.get(model) or {}
        if "overall" in summary and summary["overall"]["score"] is not None:
            o = summary["overall"]
            score = f"{o['score'] * 100:.1f}% ±{(o['ci'][1] - o['ci'][0]) * 50:.1f}"
        else:
            score = "-"
        flagged = f"{summary['flagged_pages']}/{summary['pages']}" if "flagged_pages" in summary else "-"
        tokens = stat.get("completion_tokens_per_page")
        speed = stat.get("pages_per_s")
        cost = stat.get("cost_per_1000_pages_usd")
        lines.append(
            f"{model[:40]:<40} {score:>16} {flagged:>9} {tokens or 0:>8.0f} {speed or 0:>8.2f} "
            f"{f'${cost:.2f}' if cost is not None else '-':>10}"
        )
    return "\n".join(lines)
