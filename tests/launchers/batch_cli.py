"""Run several ``llm-ocr`` command lines in one interpreter (imports paid once), as a subprocess.

Reads ``[{"argv": [...], "env": {NAME: value}}]`` as JSON on stdin, runs each case with
:func:`tests.stages.common.run_in_process` (environment changes undone after each; an empty
value stands for unset where the reader treats it so, as huggingface_hub does ``HF_TOKEN``) and
prints ``[{"code", "stdout", "stderr"}]`` as JSON, stderr being the ``llm_ocr`` log.
``HF_ENDPOINT`` must be set before this starts: huggingface_hub reads it at import time.
"""

from __future__ import annotations

import json
import sys

from tests.stages.common import run_in_process

if __name__ == "__main__":
    results = [run_in_process(*case["argv"], env=case.get("env") or {}) for case in json.load(sys.stdin)]
    sys.stdout.write(json.dumps([{"code": r.returncode, "stdout": r.stdout, "stderr": r.stderr} for r in results]))
