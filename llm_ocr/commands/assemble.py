"""``llm-ocr assemble``: pages → one Markdown document per document (``OUT/assemble``), CPU only."""

from __future__ import annotations

import argparse

from llm_ocr.commands.stage import add_stage_options, run_stage

EXIT_CODES_HELP = """exit status: 0 every document ok; 1 finished but some documents are partial or
failed, or the upstream stage is not finished yet; 2 could not run; 3 interrupted (rerun to resume)."""


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``assemble`` sub-command."""
    parser = sub.add_parser(
        "assemble",
        help="pages of OUT/describe (else OUT/extract) -> one Markdown document each (OUT/assemble)",
        description="Run the Assemble stage over this shard: each document's pages in order, figures linked "
        "with their captions. CPU only; no model server.",
        epilog=EXIT_CODES_HELP,
    )
    add_stage_options(parser, "assemble")
    parser.set_defaults(handler=lambda args: run_stage("assemble", args))
