"""What the AWS Batch end-to-end tests share: moto with a corpus in S3 and the fake Batch beside it,
the launching machine's environment, and the rows of an output's stage."""

from __future__ import annotations

import io
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from tests.conftest import REPO
from tests.fakes.fake_batch import FakeBatch
from tests.storage_servers import AWS_TEST_ENV, MotoS3

REGION = "us-east-1"
ROLE = "arn:aws:iam::123456789012:role/llm-ocr-batch-job"
INPUT, OUTPUT = "s3://scans/2024", "s3://ocr/2024"
#: The launching machine's AWS secret key, planted to be searched for: it must appear nowhere.
PLANTED = "PLANTEDbatchSecret7c1d2e3f4a5b6c7d8e9f0a1b2c"
#: A secret the children get by reference (Secrets Manager in moto): its value must appear nowhere either.
TOKEN = "hf_PLANTEDbatchToken0a1b2c3d4e5f6a7b8c9d0e1f"
EXEC_ROLE = "arn:aws:iam::123456789012:role/llm-ocr-batch-exec"


@contextmanager
def batch_world(workdir: Path, corpus: Path, **options: Any) -> Iterator[tuple[MotoS3, FakeBatch]]:
    """moto with ``corpus``'s PDFs at ``s3://scans/2024`` and an empty ``s3://ocr``; the fake Batch
    (queue ``llm-ocr-gpu``), whose children serve the simulated model from the corpus's text layer."""
    moto = MotoS3()
    try:
        with FakeBatch(moto.url, workdir=workdir, region=REGION,
                       job_env={"FAKE_VLLM_SIM_ARGS": f"--corpus {corpus} --instant"}, **options) as fake:
            s3 = moto.client()
            s3.create_bucket(Bucket="scans")
            s3.create_bucket(Bucket="ocr")
            moto.upload_folder(corpus, "scans", "2024")
            yield moto, fake
    finally:
        moto.stop()


def launcher_env(moto: MotoS3, fake: FakeBatch, tmp: Path) -> dict[str, str]:
    """The launching machine: its own AWS credentials, moto as AWS, the fake as Batch."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "HF_", "LLM_OCR_", "HUGGING"))}
    env.update(AWS_TEST_ENV)
    env.update(AWS_SECRET_ACCESS_KEY=PLANTED, AWS_DEFAULT_REGION=REGION, AWS_ENDPOINT_URL=moto.url,
               AWS_ENDPOINT_URL_BATCH=fake.url, XDG_CACHE_HOME=str(tmp / "cache"), PYTHONPATH=str(REPO))
    return env


def rows(moto: MotoS3, stage: str) -> list[dict[str, Any]]:
    """Every row of a stage folder of ``s3://ocr/2024``."""
    found: list[dict[str, Any]] = []
    for key in moto.list("ocr", f"2024/{stage}/"):
        if key.endswith(".parquet"):
            found += pq.read_table(io.BytesIO(moto.read("ocr", key))).to_pylist()
    return found
