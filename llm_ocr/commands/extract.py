"""``llm-ocr extract``: run the Extract stage over this shard of the inputs."""

from __future__ import annotations

import argparse

from llm_ocr.commands.stage import EXIT_CODES_HELP, add_stage_options, run_stage


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``extract`` sub-command."""
    parser = sub.add_parser(
        "extract",
        help="page images -> the OCR model -> Markdown, layout blocks and figure crops (OUT/extract)",
        description="Run the Extract stage over this shard of the inputs.",
        epilog=EXIT_CODES_HELP,
    )
    add_stage_options(parser, "extract")
    parser.set_defaults(handler=lambda args: run_stage("extract", args))
