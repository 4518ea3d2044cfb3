"""``llm-ocr bench-accuracy``: OCR accuracy (CER, word recall) and speed of an endpoint on
born-digital PDFs. The measurement is :mod:`llm_ocr.bench.accuracy`."""

from __future__ import annotations

import argparse
import json
import logging
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from llm_ocr.bench.accuracy import PageScore

log = logging.getLogger(__name__)


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``bench-accuracy`` sub-command."""
    parser = sub.add_parser(
        "bench-accuracy",
        help="OCR accuracy (CER, word recall) and speed of an endpoint on born-digital PDFs",
        description=_description(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("pdfs", nargs="*", metavar="PDF",
                        help="born-digital PDFs (with a text layer); default: the generated --corpus")
    parser.add_argument("--corpus", choices=["basic", "layout", "held-out", "sheets", "strip-sweep"], default="basic",
                        help="generated pages to measure without PDFs: basic (9 text pages, the default); layout "
                        "(text and figure pages: a small book page, a long strip, charts); held-out (pages of the "
                        "same kinds, made differently); sheets (a 1:61 well log, a printed encyclopedia article, "
                        "a 2 x 1 in label); strip-sweep (well logs of aspect 1:20 to 1:100 in 5.5 and 7 pt type)")
    parser.add_argument("--pages", type=int, default=None, metavar="N", help="at most N pages per PDF")
    parser.add_argument("--dpi", type=float, default=None,
                        help="render resolution (default: the model family's, as the pipeline renders)")
    parser.add_argument("--image-format", choices=["jpeg", "png"], default=None,
                        help="page image encoding (default: the model family's, as the pipeline sends)")
    parser.add_argument("--engine-url", metavar="URL",
                        help="OpenAI-compatible base URL (…/v1) to measure; default: launch the CPU engine")
    parser.add_argument("--model", default=None,
                        help="served model name (default: the endpoint's first; the CPU engine serves "
                        "deepseek-ai/DeepSeek-OCR)")
    parser.add_argument("--threads", type=int, default=1, help="--threads of the launched CPU engine (default "
                                                               "%(default)s)")
    parser.add_argument("--engine-args", default="", metavar="ARGS",
                        help="extra options for the launched CPU engine, one string, e.g. '--no-cls'")
    parser.add_argument("--concurrency", type=int, default=1, help="requests in flight (default %(default)s)")
    parser.add_argument("--gpu", default=None, metavar="GPU",
                        help="the GPU the endpoint runs on, one of the presets (l4-24gb, l40s-48gb, a100-40gb, "
                        "a100-80gb, h100-80gb, h200-141gb): record this run's pages/s for `llm-ocr plan` (in "
                        "$LLM_OCR_RATES_FILE, else ~/.cache/llm-ocr/rates.jsonl); measure with your own PDFs and "
                        "--concurrency as high as the server takes")
    parser.add_argument("--per-page", action="store_true", help="print one line per page too")
    parser.add_argument("--json", metavar="PATH", help="write per-page results and the summary as JSON")
    parser.add_argument("--keep", metavar="DIR", help="write each page's Markdown and text layer into DIR")
    parser.set_defaults(handler=run)


def _description() -> str | None:
    from llm_ocr.bench import accuracy

    return accuracy.__doc__.split("\n\n", 1)[1] if accuracy.__doc__ else None


def run(args: argparse.Namespace) -> int:
    """Handle ``llm-ocr bench-accuracy``."""
    from llm_ocr.config import OptionError

    if args.pages is not None and args.pages < 1:
        raise OptionError("--pages must be at least 1")
    if args.gpu is not None:
        from llm_ocr.planning.rates import GPU_NAMES

        if args.gpu not in GPU_NAMES:
            raise OptionError(f"--gpu must be one of {', '.join(GPU_NAMES)} (got {args.gpu!r})")
    from llm_ocr.bench.accuracy import AccuracyOptions, measure_accuracy
    from llm_ocr.vlm.client import EndpointDown

    try:
        scores, info = measure_accuracy(
            AccuracyOptions(
                pdfs=list(args.pdfs),
                pages=args.pages,
                dpi=args.dpi,
                image_format=args.image_format,
                engine_url=args.engine_url,
                model=args.model,
                threads=args.threads,
                engine_args=args.engine_args,
                concurrency=args.concurrency,
                keep=args.keep,
                corpus=args.corpus,
            )
        )
    except EndpointDown as exc:
        log.error("%s", exc)
        return 2
    return _report(args, scores, info)


def _report(args: argparse.Namespace, scores: list[PageScore], info: dict[str, Any]) -> int:
    from llm_ocr.bench.accuracy import summarise

    summary = summarise(scores, info["wall_s"])
    if "engine_cpu_s" in info:
        summary["engine_cpu_s_per_page"] = info["engine_cpu_s"] / max(1, summary["pages"])
    if args.per_page:
        print(f"{'document':32} {'page':>4} {'kind':>7} {'chars':>6} {'CER':>7} {'recall':>7} {'figures':>9} {'s':>6}")
        for s in scores:
            note = f"  {s.error}" if s.error else ("  (truncated)" if s.finish_reason == "length" else "")
            figures = str(s.figures)
            if s.figures_drawn:  # found of drawn, + answer figures that match none
                figures = f"{s.figures_found}/{s.figures_drawn}+{s.figures - s.figures_found}"
            print(f"{s.source[:32]:32} {s.page:>4} {s.kind:>7} {s.chars:>6} {s.cer:>7.2%} {s.recall:>7.2%} "
                  f"{figures:>9} {s.seconds:>6.2f}{note}")
    engine = info.get("ocr_engine") or {}
    label = f"{engine.get('name', info['model'])} {engine.get('version', '')}".strip()
    size = f"longest side {info['long_side']} px" if info.get("long_side") else f"{info['dpi']:g} DPI"
    print(
        f"{label}: {summary['pages']} pages at {size} ({info['image_format']}), "
        f"CER {summary['cer']:.2%}, word recall {summary['word_recall']:.2%}, "
        f"{summary['s_per_page']:.2f} s/page (concurrency {args.concurrency})"
        + (f", engine CPU {summary['engine_cpu_s_per_page']:.2f} s/page" if "engine_cpu_s_per_page" in summary else "")
        + (f", {summary['errors']} failed" if summary["errors"] else "")
        + (f", {summary['truncated']} truncated" if summary["truncated"] else "")
    )
    print(f"lowest page recall {summary['min_recall']:.2%} ({summary['min_recall_page']}); "
          f"{summary['figures']} figures in the answers")
    if summary["figures_drawn"] or summary["text_pages"] != summary["pages"]:
        print(f"text pages ({summary['text_pages']}): word recall {summary['text_word_recall']:.2%}, lowest "
              f"{summary['text_min_recall']:.2%}; drawn figures found {summary['figures_found']} of "
              f"{summary['figures_drawn']}, answer figures matching none {summary['figures_unmatched']}")
    if args.gpu is not None and summary["pages"] and not summary["errors"]:
        _record_rate(args, info, summary)
    if args.json:
        Path(args.json).write_text(
            json.dumps({"summary": summary, "run": info, "pages": [asdict(s) for s in scores]}, indent=2, default=str),
            encoding="utf-8",
        )
    return 1 if summary["errors"] else 0


def _record_rate(args: argparse.Namespace, info: dict[str, Any], summary: dict[str, Any]) -> None:
    """Keep this run's pages/s on ``--gpu`` for ``llm-ocr plan`` (pages over the wall time, at
    ``--concurrency``: a rate of the server under that load, not of one request)."""
    from llm_ocr.planning.rates import record_measurement
    from llm_ocr.vlm.families import family_for

    pages_per_s = summary["pages"] / info["wall_s"] if info["wall_s"] > 0 else 0.0
    if pages_per_s <= 0:
        return
    family = family_for(info["model"]).name
    path = record_measurement(family, info["model"], args.gpu, pages_per_s, summary["pages"], args.concurrency)
    print(f"recorded {pages_per_s:.3f} pages/s of {family} on {args.gpu} for llm-ocr plan ({path})")
