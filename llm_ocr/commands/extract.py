"""``llm-ocr extract``: run the Extract stage over this shard of the inputs."""

from __future__ import annotations

import argparse
import json

from llm_ocr.config import JobOptions, OptionError, add_options, resolve_options
from llm_ocr.endpoint import ServerOptions
from llm_ocr.sources import DatasetOptions
from llm_ocr.sources.base import RenderOptions
from llm_ocr.stages.extract import ExtractOptions
from llm_ocr.vlm.client import ClientOptions

EXIT_CODES_HELP = """exit status: 0 every page ok or truncated; 1 finished but some pages failed;
2 could not run (bad options, inputs, output or endpoint); 3 interrupted (rerun to resume)."""


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``extract`` sub-command."""
    parser = sub.add_parser(
        "extract",
        help="page images -> DeepSeek-OCR -> Markdown, layout blocks and figure crops (OUT/extract)",
        description="Run the Extract stage over this shard of the inputs.",
        epilog=EXIT_CODES_HELP,
    )
    parser.add_argument("inputs", nargs="*", metavar="INPUT", help="files, folders or URLs of PDFs/images, or a dataset")
    add_options(parser, JobOptions, ServerOptions, RenderOptions, DatasetOptions, ExtractOptions, ClientOptions)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Handle ``llm-ocr extract``."""
    from llm_ocr.runners.extract import ExtractJob, extract_shard
    from llm_ocr.runners.shard import run_sync

    inputs = list(args.inputs)
    if not inputs:
        raise OptionError("give at least one INPUT (a file, folder, URL or hf://datasets/OWNER/NAME)")
    spec = ExtractJob(
        inputs=inputs,
        job=resolve_options(JobOptions, args),
        render=resolve_options(RenderOptions, args),
        dataset=resolve_options(DatasetOptions, args),
        extract=resolve_options(ExtractOptions, args),
        client=resolve_options(ClientOptions, args),
        server=resolve_options(ServerOptions, args),
    )
    outcome = run_sync(lambda stop: extract_shard(spec, stop))
    if outcome.stats:
        print(json.dumps(outcome.stats, sort_keys=True))
    return outcome.exit_code
