"""``llm-ocr compare``: two or more runs over the same documents, side by side on one HTML page."""

from __future__ import annotations

import argparse
import json
import logging

from llm_ocr.config import OptionError, add_options, resolve_options
from llm_ocr.options import RenderOptions

log = logging.getLogger(__name__)


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``compare`` sub-command."""
    parser = sub.add_parser(
        "compare",
        help="two or more runs over the same documents side by side: page image, each run's Markdown with "
        "differences highlighted, scores, tokens, pages/s and cost per 1,000 pages (one HTML page)",
        description=(
            "Write one self-contained HTML page comparing runs over the same documents (by different models or "
            "settings): a table of each run's olmOCR-bench scores (if `llm-ocr bench-quality --bench` was run on "
            "it), its no-ground-truth signals, tokens per page, pages/s and GPU time and cost per 1,000 pages "
            "from its completion markers; then the pages the runs disagree on most, each with its page image and "
            "every run's Markdown, differing words highlighted."
        ),
        epilog="exit status: 0 written; 2 could not run (fewer than two runs, no page in common).",
    )
    parser.add_argument("outputs", nargs="+", metavar="OUT", help="output folders or URLs of two or more runs")
    parser.add_argument("--html", metavar="PATH", help="where to write the page (default: OUT_A/compare.html)")
    parser.add_argument("--labels", metavar="A,B,...", help="names for the runs (default: their models)")
    parser.add_argument("--max-pages", type=int, default=30, metavar="N", help="pages shown, most different first "
                                                                               "(default %(default)s)")
    parser.add_argument("--storage-options", default=None, metavar="JSON", help="fsspec storage options for the runs, "
                                                                                "a JSON object")
    add_options(parser, RenderOptions, exclude={"max_pages"})
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Handle ``llm-ocr compare``."""
    from llm_ocr.quality import CompareError, compare_runs
    from llm_ocr.quality.pages import NoPagesError

    if len(args.outputs) < 2:
        raise OptionError("give at least two output folders to compare")
    if args.max_pages < 1:
        raise OptionError("--max-pages must be at least 1")
    try:
        storage_options = json.loads(args.storage_options) if args.storage_options else {}
    except ValueError as exc:
        raise OptionError(f"--storage-options is not a JSON object: {exc}") from exc
    labels = [label.strip() for label in args.labels.split(",")] if args.labels else None
    try:
        result = compare_runs(
            args.outputs, args.html, labels=labels, max_pages=args.max_pages,
            render=resolve_options(RenderOptions, args), storage_options=storage_options,
        )  # fmt: skip
    except (CompareError, NoPagesError) as exc:
        log.error("%s", exc)
        return 2
    log.info("comparison written: %s", result.path)
    print(json.dumps({"compare": result.path, "pages_compared": result.pages_compared,
                      "pages_shown": result.pages_shown}))
    return 0
