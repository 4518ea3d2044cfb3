"""Helpers of the Kubernetes launcher tests: moto as the object store with the inputs uploaded, the
fake API server running the pods (tests/fakes/fake_k8s.py) behind a kubeconfig, the launching
machine's environment, and readers of the output."""

from __future__ import annotations

import io
import json
import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from tests.conftest import REPO
from tests.fakes.fake_k8s import FakeKubernetes
from tests.launchers.common import llm_ocr
from tests.storage_servers import AWS_TEST_ENV, MotoS3, shared_moto

NAMESPACE = "ocr"
INPUT = "s3://scans/2024"
#: The outputs' bucket: each cluster writes under a prefix of its own (:attr:`Cluster.output`).
OUTPUT_BUCKET = "ocr"
TOKEN = "k8s-test-token-writer"
READER = "k8s-test-token-reader"
#: The pods' AWS secret key, held in a Kubernetes Secret (and, planted, in the launching machine's
#: environment): it must reach the pods through the secretKeyRef only and show up nowhere else.
PLANTED = "PLANTEDk8sSecret9a8b7c6d5e4f3a2b1c0d9e8f"
SECRET_REFS = ("--secret-ref", "AWS_ACCESS_KEY_ID=aws:access-key-id",
               "--secret-ref", "AWS_SECRET_ACCESS_KEY=aws:secret-access-key")


@dataclass
class Cluster:
    """moto and the fake API server, as one cloud account and its cluster."""

    moto: MotoS3
    api: FakeKubernetes
    kubeconfig: Path
    #: ``s3://ocr/PREFIX``, a prefix of this cluster's own: a test never reads what another
    #: test's jobs wrote, even if one of them outlived its cluster.
    output: str

    def env(self, tmp: Path, token: str = TOKEN) -> dict[str, str]:
        """The launching machine: its own kubeconfig and AWS credentials (the planted key among them,
        which the launcher must not send), moto as S3, its own launch cache."""
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("AWS_", "HF_", "LLM_OCR_", "KUBE", "GOOGLE_"))}
        config = self.api.kubeconfig(tmp / f"kubeconfig-{token[-6:]}", token, NAMESPACE)
        env.update(AWS_TEST_ENV, AWS_SECRET_ACCESS_KEY=PLANTED, AWS_ENDPOINT_URL_S3=self.moto.url, KUBECONFIG=str(config),
                   XDG_CACHE_HOME=str(tmp / "cache"), PYTHONPATH=str(REPO), HOME=str(tmp / "home"))
        return env

    @property
    def prefix(self) -> str:
        """The output's key prefix in its bucket."""
        return self.output.removeprefix(f"s3://{OUTPUT_BUCKET}/")

    def launch_args(self, *extra: str, shards: int = 3, inputs: tuple[str, ...] = (INPUT,)) -> list[str]:
        """``launch k8s INPUT --output OUT --num-shards N --secret-ref ... --workers 0 EXTRA``."""
        return ["launch", "k8s", *inputs, "--output", self.output, "--num-shards", str(shards), *SECRET_REFS,
                "--workers", "0", *extra]

    def status(self, env: dict[str, str]) -> dict[str, Any]:
        """``llm-ocr jobs status OUT --json``, as the user runs it."""
        result = llm_ocr("jobs", "status", self.output, "--json", env=env)
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)

    def rows(self, stage: str, output: str | None = None) -> list[dict[str, Any]]:
        """Every row of a stage folder of an s3:// output (this cluster's by default)."""
        bucket, _, prefix = (output or self.output).removeprefix("s3://").partition("/")
        rows: list[dict[str, Any]] = []
        for key in self.moto.list(bucket, f"{prefix}/{stage}/"):
            if key.endswith(".parquet"):
                rows += pq.read_table(io.BytesIO(self.moto.read(bucket, key))).to_pylist()
        return rows

    def marker(self, stage: str, shard: int, shards: int) -> dict[str, Any]:
        return json.loads(self.moto.read(OUTPUT_BUCKET, f"{self.prefix}/_state/{stage}/done-{shard:05d}-of-{shards:05d}.json"))

    def bucket_text(self, bucket: str) -> str:
        """Every object of a bucket, decoded leniently (to search for leaked values)."""
        return "\n".join(f"{k}\n{self.moto.read(bucket, k).decode('utf-8', 'replace')}" for k in self.moto.list(bucket, ""))


@contextmanager
def cluster(workdir: Path, corpus: Path, sim_args: str = "--instant", **options: Any) -> Iterator[Cluster]:
    """moto with ``corpus``'s PDFs at ``s3://scans/2024`` and an empty ``s3://ocr``; the fake API server
    with namespace ``ocr``, the AWS credentials in Secret ``aws`` (the secret key planted) and the
    pods' fake ``vllm`` serving the simulator from the corpus's text layer. The output is
    ``s3://ocr/2024-XXXXXXXX``, a prefix no other cluster writes to."""
    moto = shared_moto()  # emptied for this test
    s3 = moto.client()
    s3.create_bucket(Bucket="scans")
    s3.create_bucket(Bucket=OUTPUT_BUCKET)
    moto.upload_folder(corpus, "scans", "2024")
    job_env = {"FAKE_VLLM_SIM_ARGS": f"--corpus {corpus} {sim_args}", "AWS_ENDPOINT_URL_S3": moto.url,
               "AWS_EC2_METADATA_DISABLED": "true", "AWS_DEFAULT_REGION": "us-east-1",
               **options.pop("job_env", {})}
    secrets = {(NAMESPACE, "aws"): {"access-key-id": AWS_TEST_ENV["AWS_ACCESS_KEY_ID"], "secret-access-key": PLANTED}}
    with FakeKubernetes(tokens={TOKEN: "write", READER: "read", **options.pop("tokens", {})}, namespaces=(NAMESPACE,), secrets=secrets,
                        job_env=job_env, workdir=workdir, **options) as api:
        yield Cluster(moto, api, workdir / "kubeconfig", f"s3://{OUTPUT_BUCKET}/2024-{uuid.uuid4().hex[:8]}")


def expected_pages(corpus: Path, pages: int = 2) -> list[tuple[str, int]]:
    """Every (doc_id, page) of the corpus, sorted."""
    return sorted((p.name, n) for p in corpus.glob("*.pdf") for n in range(1, pages + 1))


def keys(rows: list[dict[str, Any]]) -> list[tuple[str, int]]:
    """The (doc_id, page) of each row, sorted, duplicates kept."""
    return sorted((r["doc_id"], r["page"]) for r in rows)
