"""``llm-ocr fields``: documents of ``OUT/assemble`` → typed, validated fields (``OUT/fields``)."""

from __future__ import annotations

import argparse

from llm_ocr.commands.stage import add_stage_options, run_stage

EXIT_CODES_HELP = """exit status: 0 every document's fields are ok (or it is of no known class); 1 finished
but some documents' fields are invalid or failed (rerun to retry the failed ones), or Assemble is
not finished yet; 2 could not run (a schema or classes file that cannot be used, bad options,
unwritable output, endpoint down); 3 interrupted (rerun to resume)."""


def add_fields_aliases(parser: argparse.ArgumentParser) -> None:
    """``--schema`` and ``--from``: the short spellings of ``--fields-schema`` and ``--fields-from``."""
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
    add_stage_options(parser, "fields")
    add_fields_aliases(parser)
    parser.set_defaults(handler=lambda args: run_stage("fields", args))
