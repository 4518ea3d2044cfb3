"""Opt-in: the Hub writer against the real Hugging Face Hub (LFS/Xet uploads included).

The fake Hub used elsewhere stores Parquet parts through the Git LFS batch API, with Xet turned
off in the client (``HF_HUB_DISABLE_XET=1``): the Xet upload path inside
``HfApi.create_commit``, which production takes when ``hf_xet`` is installed (a dependency of
huggingface_hub on x86_64 and arm64), is only exercised here. Runs only with both

    HF_TOKEN=<a token with write access>  LLM_OCR_TEST_HUB_REPO=<owner>/<dataset repo to scribble in>

The repo is created private if absent; the test writes under a fresh ``llm-ocr-test-*`` folder
and deletes that folder afterwards (one more commit). It runs in a subprocess because
huggingface_hub reads ``HF_ENDPOINT`` at import time.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.skipif(
    not (os.environ.get("HF_TOKEN") and os.environ.get("LLM_OCR_TEST_HUB_REPO")),
    reason="set HF_TOKEN and LLM_OCR_TEST_HUB_REPO=owner/name to test against the real Hub",
)

SCRIPT = r"""
import io, sys
import pyarrow as pa, pyarrow.parquet as pq
from huggingface_hub import CommitOperationDelete, HfApi
from llm_ocr.storage.access import check_output
from llm_ocr.storage import Storage

repo, folder = sys.argv[1], sys.argv[2]
out = Storage(f"hf://datasets/{repo}/{folder}")
check_output(out)
stage = out.child("extract")
for i in range(3):
    buffer = io.BytesIO()
    pq.write_table(pa.table({"i": list(range(1000 * (i + 1)))}), buffer)
    stage.write_atomic(stage.path(f"part-00000-of-00001-{i:06d}.parquet"), buffer.getvalue())
out.write_atomic(out.path("_state", "extract", "done-00000-of-00001.json"), b"{}")
out.flush()
parts = stage.glob("part-*.parquet")
rows = [pq.read_table(io.BytesIO(stage.read_bytes(p))).num_rows for p in parts]
print("commits", out.sink.commits, "rows", rows)
HfApi().create_commit(repo, [CommitOperationDelete(f"{folder}/", is_folder=True)], commit_message="llm-ocr test cleanup",
                      repo_type="dataset")
assert rows == [1000, 2000, 3000], rows
assert out.sink.commits == 1, out.sink.commits
"""


def test_parts_and_marker_reach_the_real_hub_in_one_commit() -> None:
    folder = f"llm-ocr-test-{uuid.uuid4().hex[:8]}"
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT, os.environ["LLM_OCR_TEST_HUB_REPO"], folder],
        capture_output=True, text=True, timeout=600, cwd=str(REPO),
    )
    assert result.returncode == 0, result.stderr
    assert "commits 1" in result.stdout
