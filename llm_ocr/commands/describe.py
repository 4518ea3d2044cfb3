"""``llm-ocr describe``: caption the figure crops of ``OUT/extract`` into ``OUT/describe``."""

from __future__ import annotations

import argparse

from llm_ocr.commands.stage import EXIT_CODES_HELP, add_stage_options, run_stage


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``describe`` sub-command."""
    parser = sub.add_parser(
        "describe",
        help="figure crops of OUT/extract -> VLM descriptions (OUT/describe)",
        description="Run the Describe stage over this shard of OUT/extract: every figure without a description "
        "is sent to a vision-language model and the answer stored on the figure.",
        epilog=EXIT_CODES_HELP,
    )
    add_stage_options(parser, "describe")
    parser.set_defaults(handler=lambda args: run_stage("describe", args))
