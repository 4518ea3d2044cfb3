"""Inputs and outputs on S3, GCS and the Hub, end to end, against real protocol servers.

moto server (S3) and gcp-storage-emulator (GCS) run as subprocesses on free loopback ports; a
fake Hub (tests/fakes/fake_hub.py) runs in a thread. The CLI runs in subprocesses configured
only through each ecosystem's standard variables (AWS_*, STORAGE_EMULATOR_HOST, HF_ENDPOINT,
HF_TOKEN), as on a real platform.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from llm_ocr.testing import SimulatedServer
from tests.conftest import REPO
from tests.docs import make_corpus
from tests.fakes.fake_hub import FakeHub
from tests.storage_servers import (
    AWS_TEST_ENV,
    CuttableProxy,
    GcsEmulator,
    MotoS3,
    clean_env,
    hub_env,
    hub_rows,
    rows_of,
)


@pytest.fixture(scope="module")
def s3() -> Iterator[MotoS3]:
    server = MotoS3()
    try:
        for bucket in ("in-bucket", "out-bucket"):
            server.client().create_bucket(Bucket=bucket)
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def gcs() -> Iterator[GcsEmulator]:
    server = GcsEmulator()
    try:
        for bucket in ("in-bucket", "out-bucket"):
            server.create_bucket(bucket)
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def hub() -> Iterator[FakeHub]:
    with FakeHub() as server:
        yield server


def _corpus(factory: pytest.TempPathFactory, name: str, documents: int) -> Path:
    folder = factory.mktemp(name) / "docs"
    make_corpus(folder, documents=documents, pages=2)
    return folder


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _corpus(tmp_path_factory, "corpus", documents=3)


def cli(
    command: str, inputs: list[str], output: str, server: SimulatedServer, env: dict[str, str], *extra: str,
    timeout: float = 120, verbose: bool = False,
):
    """``llm-ocr COMMAND INPUT... --output OUTPUT --endpoint SERVER`` in a subprocess."""
    return subprocess.run(
        [sys.executable, "-m", "llm_ocr.cli", *(["-v"] if verbose else []), command, *inputs, "--output", output,
         "--endpoint", server.base_url, "--workers", "0", "--progress", "off", *extra],
        capture_output=True, text=True, timeout=timeout, env=env, cwd=str(REPO),
    )


def extract(inputs: list[str], output: str, server: SimulatedServer, env: dict[str, str], *extra: str, **kw: Any):
    return cli("extract", inputs, output, server, env, *extra, **kw)


def assert_every_page_once(rows: list[dict[str, Any]], corpus: Path, pages: int = 2) -> None:
    keys = sorted((r["doc_id"], r["page"]) for r in rows)
    assert keys == sorted((p.name, n) for p in corpus.glob("*.pdf") for n in range(1, pages + 1))
    assert {r["status"] for r in rows} == {"ok"}, [r["error"] for r in rows if r["status"] != "ok"]


# --------------------------------------------------------------------------------------------
# S3 <-> GCS


def test_run_s3_input_to_gcs_output(s3: MotoS3, gcs: GcsEmulator, corpus: Path) -> None:
    s3.upload_folder(corpus, "in-bucket", "docs")
    env = clean_env(**s3.env, **gcs.env)
    del env["GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT"]  # llm-ocr must set it itself for the emulator
    with SimulatedServer(corpus=corpus) as server:
        started = time.monotonic()
        result = cli("run", ["s3://in-bucket/docs"], "gs://out-bucket/s3-to-gcs", server, env, "--export-markdown")
        elapsed = time.monotonic() - started
        assert result.returncode == 0, result.stderr
        # Without llm-ocr's GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT=false every one of the run's store calls waits
        # 60 s for an API the emulator lacks (tens of minutes in all); a loaded machine can take minutes.
        assert elapsed < 240, f"took {elapsed:.0f}s: did gcsfs wait on the emulator?"
    names = gcs.list("out-bucket", "s3-to-gcs/")

    def stage_rows(stage: str) -> list[dict[str, Any]]:
        return rows_of(lambda n: gcs.read("out-bucket", n), [n for n in names if n.startswith(f"s3-to-gcs/{stage}/")])

    rows = stage_rows("extract")
    assert_every_page_once(rows, corpus)
    assert all(r["source"].startswith("s3://in-bucket/docs/") for r in rows)
    described_rows = stage_rows("describe")
    assert_every_page_once(described_rows, corpus)
    figures = [f for r in described_rows for f in r["figures"]]
    assert figures and all(f["description"] for f in figures)
    documents = stage_rows("assemble")
    assert sorted(d["doc_id"] for d in documents) == sorted(p.name for p in corpus.glob("*.pdf"))
    assert {d["status"] for d in documents} == {"ok"}
    for document in documents:
        # every figure of the document, with its caption, in the final Markdown
        for figure in document["figures"]:
            assert f"(figure:{figure['id']})" in document["markdown"]
            assert figure["description"].split(".")[0] in document["markdown"]
        exported = gcs.read("out-bucket", f"s3-to-gcs/markdown/{document['doc_id']}.md").decode()
        assert exported.count("<--- Page Split --->") == document["num_pages"] - 1
    assert any(n.startswith("s3-to-gcs/markdown/figures/") and n.endswith(".png") for n in names)
    for stage in ("extract", "describe", "assemble"):
        assert f"s3-to-gcs/_state/{stage}/done-00000-of-00001.json" in names
    marker = json.loads(gcs.read("out-bucket", "s3-to-gcs/_state/extract/done-00000-of-00001.json"))
    assert marker["pages"]["ok"] == 6
    assert not [n for n in names if "write-probe" in n or n.endswith(".tmp")]


def test_run_gcs_input_to_s3_output_then_rerun_skips(s3: MotoS3, gcs: GcsEmulator, corpus: Path) -> None:
    gcs.upload_folder(corpus, "in-bucket", "docs")
    env = clean_env(**s3.env, **gcs.env)
    with SimulatedServer(corpus=corpus) as server:
        first = cli("run", ["gs://in-bucket/docs"], "s3://out-bucket/gcs-to-s3", server, env)
        assert first.returncode == 0, first.stderr
        requests = len(server.requests())
        assert requests > 6  # the pages, then their figures
        again = cli("run", ["gs://in-bucket/docs"], "s3://out-bucket/gcs-to-s3", server, env)
        assert again.returncode == 0, again.stderr
        assert len(server.requests()) == requests  # the completion markers on S3 say: nothing to do
    keys = s3.list("out-bucket", "gcs-to-s3/")
    for stage in ("extract", "describe"):
        rows = rows_of(lambda k: s3.read("out-bucket", k), [k for k in keys if k.startswith(f"gcs-to-s3/{stage}/")])
        assert_every_page_once(rows, corpus)
        assert all(r["source"].startswith("gs://in-bucket/docs/") for r in rows)
        assert f"gcs-to-s3/_state/{stage}/done-00000-of-00001.json" in keys
    documents = rows_of(lambda k: s3.read("out-bucket", k), [k for k in keys if k.startswith("gcs-to-s3/assemble/")])
    assert sorted(d["doc_id"] for d in documents) == sorted(p.name for p in corpus.glob("*.pdf"))


# --------------------------------------------------------------------------------------------
# Resume after a hard kill, and a store that goes away


def _wait_until(predicate, timeout: float = 60, period: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(period)
    return False


@pytest.fixture(scope="module")
def long_corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _corpus(tmp_path_factory, "long", documents=5)


# One page at a time, 0.5 s each: a run lasts 5 s, so a kill after the first part lands mid-run.
SLOW = ("--prefill-ms", "500", "--slots", "1")
SMALL_PARTS = ("--part-rows", "2", "--flush-interval", "0.2", "--max-in-flight", "1")


def _popen_extract(inputs: list[str], output: str, server: SimulatedServer, env: dict[str, str], *extra: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "llm_ocr.cli", "extract", *inputs, "--output", output, "--endpoint", server.base_url,
         "--workers", "0", "--progress", "off", *extra],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=str(REPO),
    )


def test_sigkill_mid_run_on_s3_then_rerun_does_only_the_missing_pages(s3: MotoS3, long_corpus: Path) -> None:
    env = clean_env(**s3.env)
    out, prefix = "s3://out-bucket/killed", "killed/extract/"
    with SimulatedServer(*SLOW, corpus=long_corpus) as server:
        process = _popen_extract([str(long_corpus)], out, server, env, *SMALL_PARTS)
        try:
            assert _wait_until(lambda: any(k.endswith(".parquet") for k in s3.list("out-bucket", prefix)))
            time.sleep(random.Random(7).uniform(0.0, 0.3))
        finally:
            os.kill(process.pid, signal.SIGKILL)
            process.wait()
        partial = rows_of(lambda k: s3.read("out-bucket", k), s3.list("out-bucket", prefix))
        assert 0 < len(partial) < 10, "the kill should land mid-run"
        rerun_started = time.time()  # the rerun's requests by their arrival: see the Hub's test below
        final = extract([str(long_corpus)], out, server, env, *SMALL_PARTS)
        assert final.returncode == 0, final.stderr
        # Resume is exact: what the parts on S3 held is skipped, everything else is redone.
        assert len([r for r in server.requests() if r["time"] >= rerun_started]) == 10 - len(partial)
    keys = s3.list("out-bucket", "killed/")
    assert_every_page_once(rows_of(lambda k: s3.read("out-bucket", k), [k for k in keys if k.startswith(prefix)]), long_corpus)
    assert "killed/_state/extract/done-00000-of-00001.json" in keys


@pytest.mark.slow  # ~15-25 s: a run, a cut store, the whole retry budget
def test_store_going_away_stops_the_shard_cleanly_and_keeps_completed_parts(s3: MotoS3, long_corpus: Path) -> None:
    proxy = CuttableProxy(s3.port)
    env = clean_env(**{**s3.env, "AWS_ENDPOINT_URL_S3": proxy.url}, LLM_OCR_STORAGE_RETRIES="2",
                    LLM_OCR_STORAGE_RETRY_DELAY="0.2", AWS_MAX_ATTEMPTS="2", AWS_RETRY_MODE="standard")
    out, prefix = "s3://out-bucket/cut", "cut/extract/"
    try:
        with SimulatedServer(*SLOW, corpus=long_corpus) as server:
            process = subprocess.Popen(
                [sys.executable, "-m", "llm_ocr.cli", "extract", str(long_corpus), "--output", out, "--endpoint",
                 server.base_url, "--workers", "0", "--progress", "off", *SMALL_PARTS],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=str(REPO),
            )
            assert _wait_until(lambda: any(k.endswith(".parquet") for k in s3.list("out-bucket", prefix)))
            proxy.cut()
            # The timeout only turns a retry loop without end into a failure; the exit code and the
            # message below show the shard stopped on the store's failure (no stopwatch: a loaded
            # machine can take a minute to get here).
            _, stderr = process.communicate(timeout=300)
            assert process.returncode == 2, stderr
            assert "s3://out-bucket/cut" in stderr and "rerun" in stderr, stderr
            assert "failed unexpectedly" not in stderr  # a clean stop, not a crash
            kept = rows_of(lambda k: s3.read("out-bucket", k), s3.list("out-bucket", prefix))
            assert kept, "parts written before the failure are kept"
            assert not [k for k in s3.list("out-bucket", "cut/_state/") if "done-" in k]  # no completion marker
            # (Resuming from the kept parts is what the SIGKILL test above checks.)
    finally:
        proxy.close()


# --------------------------------------------------------------------------------------------
# Credentials


def test_bad_credentials_fail_before_any_request_naming_the_store_without_secrets(
    gcs: GcsEmulator, corpus: Path, hub: FakeHub
) -> None:
    secret = "wrong-secret-Zx81Qv"
    strict = MotoS3(enforce_auth=True)  # checks every request's credentials, like AWS
    try:
        options = json.dumps({"s3": {"key": "AKIAWRONGKEY0000", "secret": secret}, "gs": {"token": "anon"}})
        with SimulatedServer(corpus=corpus) as server:
            results = {
                "s3 output, wrong keys": extract(
                    [str(corpus)], "s3://out-bucket/denied", server,
                    clean_env(AWS_ENDPOINT_URL=strict.url, AWS_EC2_METADATA_DISABLED="true",
                              AWS_CONFIG_FILE=os.devnull, AWS_SHARED_CREDENTIALS_FILE=os.devnull),
                    "--storage-options", options, verbose=True,  # debug logs must not leak either
                ),
                "s3 input, no credentials": extract(
                    ["s3://in-bucket/docs"], str(corpus.parent / "unused-out"), server,
                    clean_env(AWS_ENDPOINT_URL_S3=strict.url, AWS_EC2_METADATA_DISABLED="true",
                              AWS_CONFIG_FILE=os.devnull, AWS_SHARED_CREDENTIALS_FILE=os.devnull),
                ),
                "hub output, invalid token": extract(
                    [str(corpus)], "hf://datasets/tester/denied", server,
                    clean_env(HF_ENDPOINT=hub.url, HF_TOKEN="hf_invalidTokenValue123456"),
                ),
                "gcs output, no such bucket": extract(
                    [str(corpus)], "gs://no-such-bucket/out", server, clean_env(**gcs.env),
                ),
            }
            assert server.requests() == []  # no page was sent: nothing ran on the GPU
    finally:
        strict.stop()
    expected = {
        # The first request is the completion-marker lookup (a HEAD: no error body, just 403).
        "s3 output, wrong keys": ["s3://out-bucket/denied", "403", "AWS_ACCESS_KEY_ID"],
        "s3 input, no credentials": ["cannot read INPUT s3://in-bucket/docs", "NoCredentialsError", "AWS_PROFILE"],
        "hub output, invalid token": ["cannot write to hf://datasets/tester/denied", "HF_TOKEN"],
        "gcs output, no such bucket": ["cannot write to gs://no-such-bucket/out", "exists"],
    }
    for case, result in results.items():
        output = result.stdout + result.stderr
        print(f"{case}: {result.stderr.strip().splitlines()[-1] if result.stderr.strip() else ''}")
        assert result.returncode == 2, (case, output)
        for fragment in expected[case]:
            assert fragment in output, (case, fragment, output)
        assert "Traceback" not in output, (case, output)
        for leaked in (secret, "hf_invalidTokenValue123456", "testing-secret-key"):
            assert leaked not in output, (case, output)


# --------------------------------------------------------------------------------------------
# The Hugging Face Hub (fake server; HF_ENDPOINT is read at import time, hence subprocesses)


def assert_parts_went_through_lfs(hub: FakeHub, repo: str, parts: list[str]) -> None:
    """Each part was stored the way the real Hub stores Parquet: preupload said ``lfs``, the
    content was PUT to LFS storage under its sha256, and a commit referred to it (``lfsFile``)."""
    files, lfs = hub.files(repo), hub.lfs_paths(repo)
    via_lfs = {path for commit in hub.commits_to(repo) for path in commit.lfs}
    for part in parts:
        assert part in via_lfs and lfs.get(part) == hashlib.sha256(files[part]).hexdigest(), part
        assert lfs[part] in hub.lfs_uploads, part


def test_hub_input_and_output_with_batched_commits_that_load_dataset_opens(hub: FakeHub, tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    make_corpus(docs, documents=10, pages=3)
    hub.create("tester/scans", files={f"pdfs/{p.name}": p.read_bytes() for p in docs.glob("*.pdf")}, private=False)
    env = hub_env(hub, tmp_path)
    with SimulatedServer("--instant", corpus=docs) as server:
        result = extract(["hf://datasets/tester/scans/pdfs"], "hf://datasets/tester/ocr", server, env, "--part-rows", "1")
        assert result.returncode == 0, result.stderr
        commits = hub.commits_to("tester/ocr")
        again = extract(["hf://datasets/tester/scans/pdfs"], "hf://datasets/tester/ocr", server, env, "--part-rows", "1")
        assert again.returncode == 0, again.stderr
        assert len(server.requests()) == 30  # the rerun found the shard's marker on the Hub
        assert hub.commits_to("tester/ocr") == commits  # and committed nothing
    assembled = subprocess.run(
        [sys.executable, "-m", "llm_ocr.cli", "assemble", "--output", "hf://datasets/tester/ocr"],
        capture_output=True, text=True, timeout=120, env=env, cwd=str(REPO),
    )
    assert assembled.returncode == 0, assembled.stderr
    files = hub.files("tester/ocr")
    parts = [p for p in files if p.startswith("extract/part-")]
    assert len(parts) == 30
    # 30 parts + the dataset card + the completion marker: one commit, not 32.
    print(f"hub commits for 30 parts: {len(commits)}")
    assert 1 <= len(commits) <= 2
    assert len(hub.commits_to("tester/ocr")) == len(commits) + 1  # Assemble: one more commit
    assert "_state/extract/done-00000-of-00001.json" in commits[-1].added  # the marker comes last
    assert "README.md" in commits[0].added and "config_name: extract" in files["README.md"].decode()
    assert_parts_went_through_lfs(hub, "tester/ocr", parts)
    assert_parts_went_through_lfs(hub, "tester/ocr", [p for p in files if p.startswith("assemble/")])
    assert not {"README.md", "_state/extract/done-00000-of-00001.json"} & set(hub.lfs_paths("tester/ocr"))  # text: regular
    rows = hub_rows(hub, "tester/ocr")
    assert_every_page_once(rows, docs, pages=3)
    assert all(r["source"].startswith("hf://datasets/tester/scans/pdfs/") for r in rows)
    loaded = subprocess.run(
        [sys.executable, "-c", ("import datasets; ds = datasets.load_dataset('tester/ocr', 'extract', split='train');"
                                " docs = datasets.load_dataset('tester/ocr', 'assemble', split='train'); print(len(ds), len(docs))")],
        capture_output=True, text=True, timeout=120, env=env,
    )
    assert loaded.returncode == 0, loaded.stderr
    assert loaded.stdout.split() == ["30", "10"], loaded.stdout


def test_hub_output_resumes_after_sigkill_and_never_touches_other_shards_files(hub: FakeHub, long_corpus: Path, tmp_path: Path) -> None:
    # Another shard's part, already on the Hub: it must survive this shard's run untouched.
    foreign_name = "extract/part-00001-of-00002-000000.parquet"
    buffer = io.BytesIO()
    pq.write_table(pa.table({"doc_id": ["elsewhere"], "page": [1], "status": ["ok"], "num_pages": [1]}), buffer)
    hub.create("tester/resume", files={foreign_name: buffer.getvalue()})
    # Commit every 2 operations so the kill lands after some commits (the default batches 64).
    env = hub_env(hub, tmp_path, LLM_OCR_HUB_COMMIT_FILES="2")
    shard = ("--num-shards", "2", "--shard-index", "0")
    out = "hf://datasets/tester/resume"
    with SimulatedServer(*SLOW, corpus=long_corpus) as server:
        process = _popen_extract([str(long_corpus)], out, server, env, *SMALL_PARTS, *shard)
        try:
            assert _wait_until(lambda: any(p.startswith("extract/part-00000") for p in hub.files("tester/resume")), period=0.05)
        finally:
            os.kill(process.pid, signal.SIGKILL)
            process.wait()
        committed = [r for r in hub_rows(hub, "tester/resume") if r["doc_id"] != "elsewhere"]
        # The rerun's requests are those that arrived after it started: a request the killed
        # process had in flight is still read by the server and logged when it ends (its line
        # carries its arrival time), so counting the log's lines before and after the rerun
        # counted it as the rerun's (seen on a loaded machine: 5 against 4).
        rerun_started = time.time()
        final = extract([str(long_corpus)], out, server, env, *SMALL_PARTS, *shard)
        assert final.returncode == 0, final.stderr
        mine = {p.name for i, p in enumerate(sorted(long_corpus.glob("*.pdf"))) if i % 2 == 0}
        expected_pages = 2 * len(mine)
        assert 0 < len(committed) < expected_pages, "the kill should land mid-run"
        reread = [r for r in server.requests() if r["time"] >= rerun_started]
        assert len(reread) == expected_pages - len(committed)  # only what was not committed
    files = hub.files("tester/resume")
    assert files[foreign_name] == buffer.getvalue()
    rows = [r for r in hub_rows(hub, "tester/resume") if r["doc_id"] != "elsewhere"]
    assert sorted((r["doc_id"], r["page"]) for r in rows) == sorted((d, p) for d in mine for p in (1, 2))
    assert_parts_went_through_lfs(hub, "tester/resume", [p for p in files if p.startswith("extract/part-00000")])
    assert all(not c.deleted or all(d.startswith(("extract/part-00000", "_state/")) for d in c.deleted)
               for c in hub.commits_to("tester/resume"))


# --------------------------------------------------------------------------------------------
# Atomicity on object storage


def test_s3_writes_are_atomic_for_a_concurrent_reader(s3: MotoS3) -> None:
    from llm_ocr.storage import Storage
    from tests.storage.test_storage_units import _concurrent_reader_never_sees_a_partial_part

    options = {"s3": {"endpoint_url": s3.url, "key": AWS_TEST_ENV["AWS_ACCESS_KEY_ID"],
                      "secret": AWS_TEST_ENV["AWS_SECRET_ACCESS_KEY"], "client_kwargs": {"region_name": "us-east-1"}}}
    _concurrent_reader_never_sees_a_partial_part(Storage("s3://out-bucket/atomic", options).child("extract"))


def test_s3_multipart_upload_is_invisible_until_completed(s3: MotoS3) -> None:
    """What Storage relies on for parts over s3fs's single-PUT limit (2 x 50 MB chunks)."""
    client = s3.client()
    upload = client.create_multipart_upload(Bucket="out-bucket", Key="mpu/part.parquet")
    etag = client.upload_part(Bucket="out-bucket", Key="mpu/part.parquet", PartNumber=1,
                              UploadId=upload["UploadId"], Body=b"x" * (5 * 2**20))["ETag"]
    assert s3.list("out-bucket", "mpu/") == []  # uploaded bytes, no object yet
    client.complete_multipart_upload(Bucket="out-bucket", Key="mpu/part.parquet", UploadId=upload["UploadId"],
                                     MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": etag}]})
    assert s3.list("out-bucket", "mpu/") == ["mpu/part.parquet"]
