"""What the four stage commands share: their options, and running them through the Python API.

``llm-ocr run|extract|describe|assemble`` parse flags into the same option models as
``llm_ocr.run(...)`` and friends take as keyword arguments (:mod:`llm_ocr.options`), then call
the same :func:`llm_ocr.api.execute`; only signals (SIGTERM too) and the exit code are theirs.
"""

from __future__ import annotations

import argparse
import json

from llm_ocr.config import add_options
from llm_ocr.options import STAGE_EXCLUDED, STAGES_WITH_INPUTS, stage_models

EXIT_CODES_HELP = """exit status: 0 every page ok or truncated; 1 finished but some pages failed;
2 could not run (bad options, inputs, output or endpoint); 3 interrupted (rerun to resume)."""


def add_stage_options(parser: argparse.ArgumentParser, stage: str) -> None:
    """The INPUTs (if the stage reads any) and every option of ``stage``, as flags."""
    if stage in STAGES_WITH_INPUTS:
        parser.add_argument("inputs", nargs="*", metavar="INPUT", help="files, folders or URLs of PDFs/images, or a dataset")
    add_options(parser, *stage_models(stage).values(), exclude=STAGE_EXCLUDED[stage])


def run_stage(stage: str, args: argparse.Namespace) -> int:
    """Handle ``llm-ocr STAGE``: run it over this shard, print its stats as JSON, return the exit code."""
    from llm_ocr.api import execute, stage_spec

    spec = stage_spec(stage, getattr(args, "inputs", None), args, naming="flag")
    outcome = execute(stage, spec, command_line=True)
    if outcome.stats:
        print(json.dumps(outcome.stats, sort_keys=True))
    return outcome.exit_code
