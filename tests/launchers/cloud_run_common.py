"""Helpers of the Cloud Run launcher tests: the GCS emulator with the inputs uploaded, the fake
Cloud Run API running the tasks, the launching machine's environment, and readers of the output."""

from __future__ import annotations

import io
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from tests.conftest import REPO
from tests.fakes.fake_cloud_run import FakeCloudRun
from tests.launchers.common import llm_ocr
from tests.storage_servers import GcsEmulator

#: A token planted in the fake Secret Manager and in the launching machine's environment: it
#: must reach the tasks through the secret reference only, and show up nowhere else.
PLANTED = "hf_PLANTEDcloudrun5e6f7a8b9c0d1e2f3a4b5c6d"
PROJECT, REGION = "ocr-project", "us-central1"
INPUT = "gs://scans/pdfs"
OUTPUT = "gs://ocr/out"
CODE_PREFIX = "llm-ocr-code/"
JOB = f"projects/{PROJECT}/locations/{REGION}/jobs/llm-ocr-run"


@contextmanager
def fake_cloud_run(workdir: Path, corpus: Path, sim_args: str = "--instant", **kwargs: Any) -> Iterator[FakeCloudRun]:
    """The GCS emulator with ``corpus``'s PDFs under ``gs://scans/pdfs`` and an empty ``gs://ocr``,
    and the fake Cloud Run API whose tasks reach it (the emulator's address stands in for the
    job's service account) and run the fake ``vllm`` answering from the corpus's text layer."""
    gcs = GcsEmulator()
    try:
        for bucket in ("scans", "ocr"):
            gcs.create_bucket(bucket)
        gcs.upload_folder(corpus, "scans", "pdfs")
        job_env = {**gcs.env, "FAKE_VLLM_SIM_ARGS": f"--corpus {corpus} {sim_args}"}
        with FakeCloudRun(gcs, secrets={"hf-token": PLANTED}, job_env=job_env, workdir=workdir, **kwargs) as api:
            yield api
    finally:
        gcs.stop()


def launcher_env(api: FakeCloudRun, tmp: Path) -> dict[str, str]:
    """The launching machine: the emulator and the fake API, its own cache, no stray cloud
    credentials, and the planted token in its environment (which the launcher must not read)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "AWS_", "LLM_OCR_", "GOOGLE_", "CLOUDSDK_"))}
    env.update(api.gcs.env, PYTHONPATH=str(REPO), XDG_CACHE_HOME=str(tmp / "cache"), HF_TOKEN=PLANTED,
               LLM_OCR_CLOUD_RUN_ENDPOINT=api.url)
    return env


def launch_args(*extra: str, shards: int = 2, inputs: tuple[str, ...] = (INPUT,)) -> list[str]:
    """``launch cloud-run INPUT --output OUT --num-shards N --project P --region R --workers 0 EXTRA``."""
    return ["launch", "cloud-run", *inputs, "--output", OUTPUT, "--num-shards", str(shards), "--project", PROJECT,
            "--region", REGION, "--secret-ref", "HF_TOKEN=hf-token", "--workers", "0", *extra]


def status(env: dict[str, str]) -> dict[str, Any]:
    """``llm-ocr jobs status OUT --json``, run as the user would (the test process keeps gcsfs
    out of its own imports: see tests/storage_servers.py)."""
    result = llm_ocr("jobs", "status", OUTPUT, "--json", env=env)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def stage_rows(gcs: GcsEmulator, stage: str) -> list[dict[str, Any]]:
    """Every row of a stage folder of the output."""
    rows: list[dict[str, Any]] = []
    for name in gcs.list("ocr", f"out/{stage}/"):
        if name.endswith(".parquet"):
            rows += pq.read_table(io.BytesIO(gcs.read("ocr", name))).to_pylist()
    return rows


def bucket_text(gcs: GcsEmulator, bucket: str) -> str:
    """Every object of a bucket, decoded leniently, joined (to search for leaked values)."""
    return "\n".join(f"{n}\n{gcs.read(bucket, n).decode('utf-8', 'replace')}" for n in gcs.list(bucket, ""))
