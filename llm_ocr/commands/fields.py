"""``llm-ocr fields``: documents of ``OUT/assemble`` → typed, validated fields (``OUT/fields``)."""

from __future__ import annotations

import argparse
import json

from llm_ocr.config import JobOptions, add_options, resolve_options
from llm_ocr.endpoint import ServerOptions
from llm_ocr.sources.base import RenderOptions
from llm_ocr.stages.fields import FieldsOptions
from llm_ocr.vlm.client import ClientOptions

EXIT_CODES_HELP = """exit status: 0 every document's fields are ok (or it is of no known class); 1 finished
but some documents' fields are invalid or failed (rerun to retry the failed ones), or Assemble is
not finished yet; 2 could not run (a schema or classes file that cannot be used, bad options,
unwritable output, endpoint down); 3 interrupted (rerun to resume)."""

#: Job options about rendering pages: Fields re-renders only with --from images, in-process.
UNUSED_JOB_OPTIONS = {"workers"}


def add_fields_options(parser: argparse.ArgumentParser) -> None:
    """Fields' options, with the short spellings ``--schema`` and ``--from`` beside
    ``--fields-schema`` and ``--fields-from``."""
    add_options(parser, FieldsOptions)
    parser.add_argument("--schema", dest="fields_schema", default=None, metavar="SCHEMA",
                        help="the same as --fields-schema: a JSON Schema file, inline JSON, or package.module:Model")
    parser.add_argument("--from", dest="fields_from", default=None, choices=["markdown", "images", "both"],
                        help="the same as --fields-from")


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``fields`` sub-command."""
    parser = sub.add_parser(
        "fields",
        help="documents of OUT/assemble -> fields validated against a schema (OUT/fields)",
        description="Run the Fields stage over this shard of OUT/assemble: each document is classified (with "
        "--classes), its fields extracted by a model with structured outputs, validated against the schema "
        "and its checks, and every value looked up in the document's text.",
        epilog=EXIT_CODES_HELP,
    )
    add_options(parser, JobOptions, ServerOptions, RenderOptions, ClientOptions, exclude=UNUSED_JOB_OPTIONS)
    add_fields_options(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Handle ``llm-ocr fields``."""
    from llm_ocr.runners.fields import FieldsJob, fields_shard
    from llm_ocr.runners.shard import run_sync

    spec = FieldsJob(
        job=resolve_options(JobOptions, args),
        fields=resolve_options(FieldsOptions, args),
        client=resolve_options(ClientOptions, args),
        server=resolve_options(ServerOptions, args),
        render=resolve_options(RenderOptions, args),
    )
    outcome = run_sync(lambda stop: fields_shard(spec, stop))
    if outcome.stats:
        print(json.dumps(outcome.stats, sort_keys=True))
    return outcome.exit_code
