"""``llm-ocr run|extract|describe|assemble|fields``: one sub-command per stage of the stage table.

Each parses its flags into the same option models as ``llm_ocr.run(...)`` and friends take as
keyword arguments (:mod:`llm_ocr.options`), then calls the same :func:`llm_ocr.api.execute`;
only signals (SIGTERM too) and the exit code are the command's. What each command is called,
says and takes comes from its entry in :data:`llm_ocr.stage_table.STAGES`.
"""

from __future__ import annotations

import argparse
import json
from functools import partial

from llm_ocr.commands.option_help import add_help_option, stage_usage
from llm_ocr.config import add_options
from llm_ocr.stage_table import STAGES


def register(sub: argparse._SubParsersAction) -> None:
    """Add a sub-command for every stage, in the table's order."""
    for stage in STAGES.values():
        parser = sub.add_parser(stage.name, help=stage.summary, description=stage.description,
                                epilog=stage.epilog, usage=stage_usage(stage.name), add_help=False)
        add_help_option(parser, stage.name)  # --help [GROUP]: short, one group, or all
        add_stage_options(parser, stage.name)
        # How the command ends, not an option of the stage (a launched job's command has none).
        parser.add_argument("--json", action="store_true",
                            help="end with the run's stats as one line of JSON (the completion markers' content) "
                                 "instead of the summary in words")
        parser.set_defaults(handler=partial(run_stage, stage.name))


def add_stage_options(parser: argparse.ArgumentParser, stage: str) -> None:
    """The INPUTs (if the stage reads any) and every option of ``stage``, as flags (with the short
    spellings of the Fields options for a stage that runs Fields)."""
    entry = STAGES[stage]
    if entry.reads_inputs:
        parser.add_argument("inputs", nargs="*", metavar="INPUT", help="files, folders or URLs of PDFs/images, or a "
                                                                       "dataset")
    add_options(parser, *entry.models().values(), exclude=entry.excluded)
    if "fields" in entry.groups:
        add_fields_aliases(parser)


def add_fields_aliases(parser: argparse.ArgumentParser) -> None:
    """``--schema`` and ``--from``: the short spellings of ``--fields-schema`` and ``--fields-from``."""
    parser.add_argument("--schema", dest="fields_schema", default=None, metavar="SCHEMA",
                        help="the same as --fields-schema: a JSON Schema file, inline JSON, or package.module:Model")
    parser.add_argument("--from", dest="fields_from", default=None, choices=["markdown", "images", "both"],
                        help="the same as --fields-from")


def run_stage(stage: str, args: argparse.Namespace) -> int:
    """Handle ``llm-ocr STAGE``: run it over this shard, end with what the Python API's result
    says (the exit code in words, the counts, the failed documents named) or, with ``--json``,
    its stats as one line of JSON; return the exit code."""
    from llm_ocr.api import execute, stage_spec, summarize

    spec = stage_spec(stage, getattr(args, "inputs", None), args, naming="flag")
    outcome = execute(stage, spec, command_line=True)
    if not outcome.stats:  # it could not run: the error logged is the last word
        return outcome.exit_code
    if args.json:
        print(json.dumps(outcome.stats, sort_keys=True))
    else:
        print(summarize(stage, spec, outcome), flush=True)
    return outcome.exit_code
