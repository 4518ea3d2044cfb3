"""Dataset shards on S3 (moto server) and GCS (gcp-storage-emulator): the rows of a local
listing, and bytes on the wire within the share, counted by a TCP proxy in front of the store.

The listing runs in a subprocess configured by the stores' standard variables (gcsfs reads its
emulator settings at import), as a shard job would.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from collections.abc import Iterator

import pytest

from llm_ocr.bench.finevision import GeneratedDataset, write_finevision
from llm_ocr.sources import list_documents
from llm_ocr.sources.parquet import FOOTER_GUESS
from tests.conftest import REPO
from tests.storage_servers import AWS_TEST_ENV, CuttableProxy, GcsEmulator, MotoS3, clean_env

SHARDS = 4

LIST = r"""
import hashlib, json, sys
from llm_ocr.sources import plan_inputs
url, num_shards = sys.argv[1], int(sys.argv[2])
plan = plan_inputs([url])
print(json.dumps({"planned": plan.stats.bytes}), flush=True)
input()  # the test reads the proxy's count of the footers, then lets the shards go
for shard in range(num_shards):
    docs = [(d.doc_id, d.index, [hashlib.sha1(i).hexdigest() for i in d.images]) for d in plan.documents(num_shards, shard)]
    print(json.dumps({"docs": docs, "read": plan.stats.bytes}), flush=True)
    input()
"""


@pytest.fixture(scope="module")
def fv(tmp_path_factory: pytest.TempPathFactory) -> GeneratedDataset:
    root = tmp_path_factory.mktemp("stores")
    return write_finevision(root / "fv", files=16, rows=(4, 12), row_group_rows=2, image_side=(40, 100), seed=9)


def expected(fv: GeneratedDataset) -> list[list]:
    docs = list_documents([str(fv.folder)])
    return [[d.doc_id, d.index, [hashlib.sha1(i).hexdigest() for i in d.images]] for d in docs]


def measure(url: str, env: dict[str, str], proxy: CuttableProxy) -> tuple[list, list[int]]:
    """Every shard's documents, and the bytes clients received per shard (footers apart)."""
    process = subprocess.Popen(
        [sys.executable, "-c", LIST, url, str(SHARDS)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, env={**env, "PYTHONPATH": str(REPO)}, cwd=str(REPO),
    )  # fmt: skip
    assert process.stdin and process.stdout
    docs, received = [], []
    try:
        before = proxy.received
        for step in range(SHARDS + 1):
            line = process.stdout.readline()
            assert line, process.stderr.read() if process.stderr else ""
            received.append(proxy.received - before)
            before = proxy.received
            if step:
                docs += json.loads(line)["docs"]
            process.stdin.write("\n")
            process.stdin.flush()
        assert process.wait(timeout=60) == 0
    finally:
        process.kill()
    return docs, received


def check(fv: GeneratedDataset, docs: list, received: list[int]) -> None:
    assert docs == expected(fv)  # each row once, with its global number and exact bytes
    footers = sum(min(FOOTER_GUESS, p.stat().st_size) for p in fv.files)
    assert received[0] <= footers + 64 * 1024  # the plan: footers (and the listing)
    for sent in received[1:]:
        # A shard's row groups, each once; HTTP headers of its few requests aside.
        assert sent <= 1.5 * fv.total_bytes / SHARDS + 32 * 1024, (sent, fv.total_bytes)


@pytest.fixture(scope="module")
def s3() -> Iterator[MotoS3]:
    server = MotoS3()
    try:
        server.client().create_bucket(Bucket="data")
        yield server
    finally:
        server.stop()


def test_s3_shards(fv: GeneratedDataset, s3: MotoS3) -> None:
    s3.upload_folder(fv.folder, "data", "fv")
    proxy = CuttableProxy(s3.port)
    try:
        env = clean_env(**{**AWS_TEST_ENV, **s3.env, "AWS_ENDPOINT_URL_S3": proxy.url})
        check(fv, *measure("s3://data/fv", env, proxy))
    finally:
        proxy.close()


def test_gcs_shards(fv: GeneratedDataset) -> None:
    gcs = GcsEmulator()
    try:
        gcs.create_bucket("data")
        gcs.upload_folder(fv.folder, "data", "fv")
        proxy = CuttableProxy(gcs.port)
        try:
            env = clean_env(**{**gcs.env, "STORAGE_EMULATOR_HOST": proxy.url})
            check(fv, *measure("gs://data/fv", env, proxy))
        finally:
            proxy.close()
    finally:
        gcs.stop()
