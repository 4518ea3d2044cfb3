"""What a user's own Kubernetes Indexed Job runs: `llm-ocr extract` processes with
JOB_COMPLETION_INDEX, and LLM_OCR_NUM_SHARDS from the Job's env; without the count, a clear stop.
The shard each engine's variables give is tested in process in tests/launchers/test_slurm_units.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO, read_stage
from tests.docs import make_corpus

ENGINE_PREFIXES = ("SLURM_", "JOB_COMPLETION_INDEX", "AWS_BATCH_", "BATCH_TASK_", "CLOUD_RUN_", "LLM_OCR_")


def test_indexed_job_pods_shard_with_the_count_they_are_given(tmp_path: Path) -> None:
    # What a user's own Kubernetes Indexed Job runs: `llm-ocr extract` with JOB_COMPLETION_INDEX
    # from Kubernetes and LLM_OCR_NUM_SHARDS from the Job's env; without the count, a clear stop.
    corpus = tmp_path / "docs"
    make_corpus(corpus, documents=3, pages=2)
    base = {k: v for k, v in os.environ.items() if not k.startswith(ENGINE_PREFIXES)}

    def pod(index: int, **env: str) -> subprocess.Popen[str]:
        argv = [sys.executable, "-m", "llm_ocr.cli", "extract", str(corpus), "--output", str(tmp_path / "out"),
                "--engine", "sim", "--server-args", f"--corpus {corpus} --instant"]
        return subprocess.Popen(argv, env={**base, "JOB_COMPLETION_INDEX": str(index), **env}, cwd=REPO,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    lone = pod(1)
    pods = [pod(i, LLM_OCR_NUM_SHARDS="3") for i in range(3)]
    results = [p.communicate(timeout=240) + (p.returncode,) for p in (lone, *pods)]
    assert results[0][2] == 2 and "gives this task's index but not the shard count" in results[0][1]
    assert [code for *_, code in results[1:]] == [0, 0, 0], [err for _, err, _ in results[1:]]
    rows = read_stage(tmp_path / "out", "extract")
    assert sorted((r["doc_id"], r["page"]) for r in rows) == sorted(
        (f"doc{d:03d}.pdf", p) for d in range(3) for p in (1, 2))
    assert sorted(p.name for p in (tmp_path / "out" / "_state" / "extract").glob("done-*")) == [
        f"done-{i:05d}-of-00003.json" for i in range(3)]
