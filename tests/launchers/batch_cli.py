"""Run several ``llm-ocr`` command lines in one interpreter (imports paid once), as a subprocess.

Reads ``[{"argv": [...], "env": {NAME: value}}]`` as JSON on stdin, runs each case with
:func:`tests.stages.common.run_in_process` (environment changes undone after each; an empty
value stands for unset where the reader treats it so, as huggingface_hub does ``HF_TOKEN``) and
prints ``[{"code", "stdout", "stderr"}]`` as JSON, stderr being the ``llm_ocr`` log followed by
whatever else the case wrote to ``sys.stderr`` (a library's warning: the secret-leak checks read
it too). ``HF_ENDPOINT`` must be set before this starts: huggingface_hub reads it at import time.
"""

from __future__ import annotations

import contextlib
import faulthandler
import io
import json
import os
import sys
from typing import Any

from tests.stages.common import run_in_process


def run_case(case: dict[str, Any]) -> dict[str, Any]:
    """One command line: its exit code, stdout and stderr."""
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr):
        try:
            result = run_in_process(*case["argv"], env=case.get("env") or {})
        except SystemExit as exc:  # argparse's refusal, as the command line exits with it
            return {"code": exc.code if isinstance(exc.code, int) else 1, "stdout": "", "stderr": stderr.getvalue()}
    return {"code": result.returncode, "stdout": result.stdout, "stderr": result.stderr + stderr.getvalue()}


if __name__ == "__main__":
    if os.environ.get("TESTS_DUMP_STACKS_AFTER_S"):  # a hang shows where it is (tests/launchers/common.py)
        faulthandler.dump_traceback_later(float(os.environ["TESTS_DUMP_STACKS_AFTER_S"]), file=sys.__stderr__)
    sys.stdout.write(json.dumps([run_case(case) for case in json.load(sys.stdin)]))
