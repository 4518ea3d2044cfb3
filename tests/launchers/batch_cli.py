"""Run several ``llm-ocr`` command lines in one interpreter (imports paid once), as a subprocess.

Reads ``[{"argv": [...], "env": {NAME: value or null}}]`` as JSON on stdin; each case runs
``llm_ocr.cli.main(argv)`` with its environment changes applied (null: unset) and undone after;
prints ``[{"code", "stdout", "stderr"}]`` as JSON, stderr being what the ``llm_ocr`` log and
anything else wrote to stderr. ``HF_ENDPOINT`` must be set before this starts: huggingface_hub
reads it at import time.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import sys


def run_case(argv: list[str], env: dict[str, str | None]) -> dict[str, object]:
    from llm_ocr.cli import main

    saved = {k: os.environ.get(k) for k in env}
    for key, value in env.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    out, err = io.StringIO(), io.StringIO()
    handler = logging.StreamHandler(err)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(argv)
            except SystemExit as exc:  # argparse errors
                code = exc.code if isinstance(exc.code, int) else 2
    finally:
        root.removeHandler(handler)
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    return {"code": code, "stdout": out.getvalue(), "stderr": err.getvalue()}


if __name__ == "__main__":
    cases = json.load(sys.stdin)
    results = [run_case(case["argv"], case.get("env") or {}) for case in cases]
    sys.__stdout__.write(json.dumps(results))
