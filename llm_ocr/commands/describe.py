"""``llm-ocr describe``: caption the figure crops of ``OUT/extract`` into ``OUT/describe``."""

from __future__ import annotations

import argparse
import json

from llm_ocr.commands.extract import EXIT_CODES_HELP
from llm_ocr.config import JobOptions, add_options, resolve_options
from llm_ocr.endpoint import ServerOptions
from llm_ocr.stages.describe import DescribeOptions
from llm_ocr.vlm.client import ClientOptions

#: Job options that mean nothing without rendering.
UNUSED_JOB_OPTIONS = {"workers"}


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``describe`` sub-command."""
    parser = sub.add_parser(
        "describe",
        help="figure crops of OUT/extract -> VLM descriptions (OUT/describe)",
        description="Run the Describe stage over this shard of OUT/extract: every figure without a description "
        "is sent to a vision-language model and the answer stored on the figure.",
        epilog=EXIT_CODES_HELP,
    )
    add_options(parser, JobOptions, ServerOptions, DescribeOptions, ClientOptions, exclude=UNUSED_JOB_OPTIONS)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Handle ``llm-ocr describe``."""
    from llm_ocr.runners.describe import DescribeJob, describe_shard
    from llm_ocr.runners.shard import run_sync

    spec = DescribeJob(
        job=resolve_options(JobOptions, args),
        describe=resolve_options(DescribeOptions, args),
        client=resolve_options(ClientOptions, args),
        server=resolve_options(ServerOptions, args),
    )
    outcome = run_sync(lambda stop: describe_shard(spec, stop))
    if outcome.stats:
        print(json.dumps(outcome.stats, sort_keys=True))
    return outcome.exit_code
