"""``llm-ocr run``: Extract, Describe and Assemble over this shard in one process."""

from __future__ import annotations

import argparse
import json

from llm_ocr.commands.extract import EXIT_CODES_HELP
from llm_ocr.config import JobOptions, OptionError, add_options, resolve_options
from llm_ocr.endpoint import ServerOptions
from llm_ocr.sources import DatasetOptions
from llm_ocr.sources.base import RenderOptions
from llm_ocr.stages.assemble import AssembleOptions
from llm_ocr.stages.describe import DescribeOptions
from llm_ocr.stages.extract import ExtractOptions
from llm_ocr.commands.fields import add_fields_options
from llm_ocr.stages.fields import FieldsOptions
from llm_ocr.vlm.client import ClientOptions


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
    parser.add_argument("inputs", nargs="*", metavar="INPUT", help="files, folders or URLs of PDFs/images, or a dataset")
    add_options(
        parser,
        JobOptions,
        ServerOptions,
        RenderOptions,
        DatasetOptions,
        ExtractOptions,
        DescribeOptions,
        AssembleOptions,
        ClientOptions,
    )
    add_fields_options(parser)  # with --schema or --classes, Fields runs after Assemble
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Handle ``llm-ocr run``."""
    from llm_ocr.runners.run import RunJob, run_shard
    from llm_ocr.runners.shard import run_sync

    inputs = list(args.inputs)
    if not inputs:
        raise OptionError("give at least one INPUT (a file, folder, URL or hf://datasets/OWNER/NAME)")
    spec = RunJob(
        inputs=inputs,
        job=resolve_options(JobOptions, args),
        render=resolve_options(RenderOptions, args),
        dataset=resolve_options(DatasetOptions, args),
        extract=resolve_options(ExtractOptions, args),
        describe=resolve_options(DescribeOptions, args),
        assemble=resolve_options(AssembleOptions, args),
        client=resolve_options(ClientOptions, args),
        server=resolve_options(ServerOptions, args),
        fields=resolve_options(FieldsOptions, args),
    )
    outcome = run_sync(lambda stop: run_shard(spec, stop))
    if outcome.stats:
        print(json.dumps(outcome.stats, sort_keys=True))
    return outcome.exit_code
