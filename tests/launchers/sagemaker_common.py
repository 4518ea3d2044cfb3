"""Helpers of the SageMaker launcher tests: moto (S3, IAM, STS, CloudWatch Logs, Secrets Manager)
with the inputs uploaded and the execution role created, the fake SageMaker Processing in front
of it (tests/fakes/fake_sagemaker.py), the launching machine's environment, and output readers."""

from __future__ import annotations

import io
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from tests.conftest import REPO
from tests.fakes.fake_sagemaker import FakeSageMaker
from tests.storage_servers import AWS_TEST_ENV, MotoS3, shared_moto

REGION = "us-east-1"
ACCOUNT = "123456789012"  # moto's default account
ROLE = f"arn:aws:iam::{ACCOUNT}:role/llm-ocr-processing"
INPUT = "s3://scans/2024"
OUTPUT = "s3://ocr/2024"
#: The launching machine's AWS secret key, planted to be searched for: it must appear nowhere.
PLANTED = "PLANTEDawsSecret7c1d2e3f4a5b6c7d8e9f0a1b2c3d"
LAUNCHER_AWS = {**AWS_TEST_ENV, "AWS_SECRET_ACCESS_KEY": PLANTED, "AWS_DEFAULT_REGION": REGION}


@dataclass
class AwsWorld:
    """moto and the fake SageMaker, as one AWS account."""

    moto: MotoS3
    sagemaker: FakeSageMaker

    def client(self, service: str) -> Any:
        import boto3

        return boto3.client(service, endpoint_url=self.moto.url, region_name=REGION,
                            aws_access_key_id="test-admin", aws_secret_access_key="test-admin")

    def env(self, tmp: Path) -> dict[str, str]:
        """The launching machine: its own AWS credentials, moto as AWS, the fake as SageMaker."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "HF_", "LLM_OCR_", "HUGGING"))}
        env.update(LAUNCHER_AWS)
        env.update(AWS_ENDPOINT_URL=self.moto.url, AWS_ENDPOINT_URL_SAGEMAKER=self.sagemaker.url,
                   AWS_ENDPOINT_URL_SERVICE_QUOTAS=self.sagemaker.url, XDG_CACHE_HOME=str(tmp / "cache"),
                   PYTHONPATH=str(REPO), HF_HUB_DISABLE_TELEMETRY="1")
        return env

    def rows(self, stage: str, output: str = OUTPUT) -> list[dict[str, Any]]:
        """Every row of a stage folder of an s3:// output."""
        bucket, _, prefix = output.removeprefix("s3://").partition("/")
        rows: list[dict[str, Any]] = []
        for key in self.moto.list(bucket, f"{prefix}/{stage}/"):
            if key.endswith(".parquet"):
                rows += pq.read_table(io.BytesIO(self.moto.read(bucket, key))).to_pylist()
        return rows

    def bucket_text(self, bucket: str) -> str:
        """Every object of a bucket, decoded leniently (to search for leaked values)."""
        return "\n".join(f"{key}\n{self.moto.read(bucket, key).decode('utf-8', 'replace')}" for key in self.moto.list(bucket, ""))

    def cloudwatch_text(self) -> str:
        """Every log event of every Processing job, as CloudWatch Logs holds them."""
        logs = self.client("logs")
        lines = []
        try:
            streams = logs.describe_log_streams(logGroupName="/aws/sagemaker/ProcessingJobs")["logStreams"]
        except logs.exceptions.ResourceNotFoundException:
            return ""
        for stream in streams:
            events = logs.get_log_events(logGroupName="/aws/sagemaker/ProcessingJobs", logStreamName=stream["logStreamName"],
                                         startFromHead=True)["events"]
            lines += [e["message"] for e in events]
        return "\n".join(lines)


@contextmanager
def aws_world(workdir: Path, corpus: Path, sim_args: str = "--instant", **options: Any) -> Iterator[AwsWorld]:
    """moto with ``corpus``'s PDFs at ``s3://scans/2024``, an empty ``s3://ocr`` and the execution
    role; the fake SageMaker's hosts serve the simulated model from the corpus's text layer."""
    moto = shared_moto()  # emptied for this test
    job_env = {"FAKE_VLLM_SIM_ARGS": f"--corpus {corpus} {sim_args}", **options.pop("job_env", {})}
    with FakeSageMaker(moto.url, workdir=workdir, region=REGION, job_env=job_env, **options) as fake:
        world = AwsWorld(moto, fake)
        s3 = moto.client()
        s3.create_bucket(Bucket="scans")
        s3.create_bucket(Bucket="ocr")
        moto.upload_folder(corpus, "scans", "2024")
        world.client("iam").create_role(RoleName=ROLE.rsplit("/", 1)[-1], AssumeRolePolicyDocument="{}")
        yield world


def sm_args(*extra: str, shards: int = 4, inputs: tuple[str, ...] = (INPUT,), output: str = OUTPUT) -> list[str]:
    """``launch sagemaker INPUT --output OUT --num-shards N --instance-type ml.g6.xlarge --role R --workers 0 EXTRA``."""
    return ["launch", "sagemaker", *inputs, "--output", output, "--num-shards", str(shards),
            "--instance-type", "ml.g6.xlarge", "--role", ROLE, "--workers", "0", *extra]


@contextmanager
def launcher_here(world: AwsWorld, tmp: Path, monkeypatch: Any) -> Iterator[None]:
    """This process as the launching machine, for in-process calls of :mod:`llm_ocr.launchers.core.api`.
    fsspec keeps S3 filesystems by their arguments, endpoint not included: an earlier test's
    (talking to an earlier moto) is dropped before and after."""
    import s3fs

    for key in [k for k in os.environ if k.startswith("AWS_")]:
        monkeypatch.delenv(key)
    for key, value in world.env(tmp).items():
        if key.startswith(("AWS_", "XDG_")):
            monkeypatch.setenv(key, value)
    s3fs.S3FileSystem.clear_instance_cache()
    try:
        yield
    finally:
        s3fs.S3FileSystem.clear_instance_cache()
