"""``llm-ocr assemble``: pages → one Markdown document per document (``OUT/assemble``), CPU only."""

from __future__ import annotations

import argparse
import json

from llm_ocr.config import JobOptions, add_options, resolve_options
from llm_ocr.stages.assemble import AssembleOptions

EXIT_CODES_HELP = """exit status: 0 every document ok; 1 finished but some documents are partial or
failed, or the upstream stage is not finished yet; 2 could not run; 3 interrupted (rerun to resume)."""

#: Job options about the model server and rendering: Assemble uses neither.
SERVER_JOB_OPTIONS = {
    "endpoint", "model", "api_key", "max_in_flight", "workers", "grace_period", "flush_interval", "progress",
    "progress_interval",
}


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``assemble`` sub-command."""
    parser = sub.add_parser(
        "assemble",
        help="pages of OUT/describe (else OUT/extract) -> one Markdown document each (OUT/assemble)",
        description="Run the Assemble stage over this shard: each document's pages in order, figures linked "
        "with their captions. CPU only; no model server.",
        epilog=EXIT_CODES_HELP,
    )
    add_options(parser, JobOptions, AssembleOptions, exclude=SERVER_JOB_OPTIONS)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Handle ``llm-ocr assemble``."""
    from llm_ocr.runners.assemble import AssembleJob, assemble_shard
    from llm_ocr.runners.shard import run_sync

    spec = AssembleJob(job=resolve_options(JobOptions, args), assemble=resolve_options(AssembleOptions, args))
    outcome = run_sync(lambda stop: assemble_shard(spec, stop))
    if outcome.stats:
        print(json.dumps(outcome.stats, sort_keys=True))
    return outcome.exit_code
