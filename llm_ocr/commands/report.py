"""``llm-ocr report``: one self-contained HTML page to look at an output folder's results."""

from __future__ import annotations

import argparse
import json
import logging
import os
from typing import TYPE_CHECKING

from llm_ocr.config import ENV_PREFIX, OptionError, add_options, resolve_options
from llm_ocr.options import RenderOptions

if TYPE_CHECKING:
    from llm_ocr.report import ReportAnnotations

log = logging.getLogger(__name__)


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``report`` sub-command."""
    from llm_ocr.report import ReportOptions

    parser = sub.add_parser(
        "report",
        help="write one self-contained HTML page showing pages, layout boxes, Markdown and figures (OUT/report.html)",
        description=(
            "Write an HTML report of OUT: a summary, then per document and page the page image (re-rendered "
            "from its source) with the layout blocks drawn, the Markdown, the figures and their captions, "
            "status and errors. Images are inlined; the file needs no network and no JavaScript."
        ),
        epilog="exit status: 0 written; 2 could not run (bad options, no pages under OUT).",
    )
    parser.add_argument(
        "output", nargs="?", metavar="OUT", help=f"the output folder or URL of a run [env {ENV_PREFIX}OUTPUT]"
    )
    # max_pages is the renderer's refusal limit, which a report has no use for; it would also
    # be confused with --max-pages-per-document.
    add_options(parser, ReportOptions, RenderOptions, exclude={"max_pages"})
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Handle ``llm-ocr report``."""
    from llm_ocr.report import ReportError, ReportOptions, write_report

    out = args.output or os.environ.get(ENV_PREFIX + "OUTPUT")
    if not out:
        raise OptionError("give OUT, the output folder of a run (or set LLM_OCR_OUTPUT)")
    options = resolve_options(ReportOptions, args)
    render = resolve_options(RenderOptions, args)
    try:
        result = write_report(
            out,
            options.html,
            max_documents=options.max_documents,
            max_pages_per_document=options.max_pages_per_document,
            render=render,
            storage_options=options.storage_options,
            annotations=_quality(out, options.storage_options),
        )
    except ReportError as exc:
        log.error("%s", exc)
        return 2
    log.info("report written: %s", result.path)
    print(json.dumps({"report": result.path, "documents": result.documents, "pages": result.pages}))
    return 0


def _quality(out: str, storage_options: dict) -> ReportAnnotations | None:
    """The quality results saved by ``llm-ocr bench-quality``, shown in the report if any."""
    from llm_ocr.quality import results
    from llm_ocr.quality.findings import report_annotations
    from llm_ocr.storage import Storage

    storage = Storage(out, storage_options)
    bench, checks = results.load(storage, results.BENCH), results.load(storage, results.CHECKS)
    return report_annotations(bench, checks) if bench or checks else None
