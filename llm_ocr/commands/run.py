"""``llm-ocr run``: Extract, Describe and Assemble over this shard in one process."""

from __future__ import annotations

import argparse

from llm_ocr.commands.fields import add_fields_aliases
from llm_ocr.commands.stage import EXIT_CODES_HELP, add_stage_options, run_stage


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``run`` sub-command."""
    parser = sub.add_parser(
        "run",
        help="all stages in one process: OCR, figure descriptions, assembled documents",
        description="Run Extract -> Describe -> Assemble over this shard of the inputs against one endpoint: "
        "each page is described in memory right after its OCR; writes OUT/extract, OUT/describe and "
        "OUT/assemble; with --schema or --classes, then Fields (OUT/fields) on the same endpoint.",
        epilog=EXIT_CODES_HELP,
    )
    add_stage_options(parser, "run")
    add_fields_aliases(parser)  # with --schema or --classes, Fields runs after Assemble
    parser.set_defaults(handler=lambda args: run_stage("run", args))
