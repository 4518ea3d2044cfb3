"""``llm-ocr launch aws-batch`` against moto and a fake AWS Batch that runs the array children.

The launcher talks to real local AWS APIs (moto: S3, STS, CloudWatch Logs) with plain boto3;
Batch calls go to tests/fakes/fake_batch.py, which checks each request against botocore's model
and Batch's documented values, keeps job definition revisions, and runs each child's exact command
with the array index Batch gives it; the child fetches the llm-ocr wheel from S3 with the job
role's credentials from the container credentials endpoint, then bootstraps as on every platform.
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import boto3
import pyarrow.parquet as pq
import pytest

from tests.conftest import REPO
from tests.docs import make_corpus
from tests.fakes.fake_batch import SPOT_REASON, FakeBatch
from tests.launchers.common import expected_pages, llm_ocr_batch, wait_until
from tests.storage_servers import AWS_TEST_ENV, MotoS3

pytestmark = pytest.mark.timeout(600)

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
    found: list[dict[str, Any]] = []
    for key in moto.list("ocr", f"2024/{stage}/"):
        if key.endswith(".parquet"):
            found += pq.read_table(io.BytesIO(moto.read("ocr", key))).to_pylist()
    return found


def test_an_array_of_two_survives_a_spot_reclamation_and_makes_every_page_once(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    corpus = tmp_path_factory.mktemp("batch") / "docs"
    make_corpus(corpus, documents=4, pages=2)
    # Child 1 serves slowly, so it is reclaimed mid-shard (some parts stored, no marker yet);
    # static shards and one row per part, so its retry has parts to resume from.
    slow = {1: {"FAKE_VLLM_SIM_ARGS": f"--corpus {corpus} --prefill-ms 1500 --slots 1"}}
    args = ["launch", "aws-batch", INPUT, "--output", OUTPUT, "--num-shards", "2", "--job-queue", "llm-ocr-gpu",
            "--instance-type", "g6.xlarge", "--job-role", ROLE, "--workers", "0", "--part-rows", "1",
            "--progress-interval", "0.3", "--no-steal"]
    with batch_world(tmp_path / "jobs", corpus, child_env=slow) as (moto, fake):
        env = launcher_env(moto, fake, tmp_path)
        secrets = boto3.client("secretsmanager", endpoint_url=moto.url, region_name=REGION,
                               aws_access_key_id="admin", aws_secret_access_key="admin")
        arn = secrets.create_secret(Name="llm-ocr/hf-token", SecretString=TOKEN)["ARN"]
        args += ["--aws-secret", f"HF_TOKEN={arn}", "--execution-role", EXEC_ROLE]
        # The command lines run in one interpreter per batch (imports paid once), as the CLI does.
        dry, first = llm_ocr_batch([(args + ["--dry-run"], {}), (args, {})], env=env)
        assert dry["code"] == 0 and first["code"] == 0, dry["stderr"] + first["stderr"]
        plan = json.loads(dry["stdout"])
        (job_id,) = fake.jobs
        wait_until(lambda: any("part-00001-of-00002" in k for k in moto.list("ocr", "2024/extract/")),
                   timeout=300, period=0.1)
        assert not [k for k in moto.list("ocr", "2024/_state/") if "done-00001-of-00002" in k], "shard 1 ended first"
        fake.reclaim(job_id, 1)

        done, logs, again = llm_ocr_batch([(["jobs", "wait", OUTPUT, "--interval", "0.5"], {}),
                                           (["jobs", "logs", OUTPUT, "--shard", "1"], {}), (args, {})],
                                          env=env, timeout=400)
        assert done["code"] == 0, done["stdout"] + done["stderr"]

        # ONE array job of two children; the reclaimed child retried by Batch, not by a relaunch.
        (definition,) = fake.sent("RegisterJobDefinition")
        (sent,) = fake.sent("SubmitJob")
        assert sent["arrayProperties"] == {"size": 2} and sent["jobDefinition"] == "llm-ocr-run:1"
        assert {"type": "GPU", "value": "1"} in definition["containerProperties"]["resourceRequirements"]
        # The secret by reference; the fake resolved it for every child (a failed lookup fails the child).
        assert definition["containerProperties"]["secrets"] == [{"name": "HF_TOKEN", "valueFrom": arn}]
        child = fake.jobs[job_id].children[1]
        assert [a["statusReason"] for a in child.attempts] == [SPOT_REASON, "Essential container in task exited"]
        assert "exitCode" not in child.attempts[0]["container"] and child.attempts[1]["container"]["exitCode"] == 0
        assert [c.status for c in fake.jobs[job_id].children] == ["SUCCEEDED"] * 2
        # The dry run showed the bodies the launch then sent (but for the launch id and the revision).
        (shown,) = plan["requests"]
        real_id = sent["tags"]["llm-ocr-launch"]
        assert json.loads(json.dumps(shown).replace(plan["launch_id"], real_id)) == {
            "registerJobDefinition": definition, "submitJob": {**sent, "jobDefinition": "llm-ocr-run"}}

        # Every page exactly once in each stage, every document assembled.
        for stage in ("extract", "describe"):
            found = rows(moto, stage)
            assert sorted((r["doc_id"], r["page"]) for r in found) == expected_pages(corpus), stage
        assert sorted(d["doc_id"] for d in rows(moto, "assemble")) == sorted(p.name for p in corpus.glob("*.pdf"))

        # Shard 1's log from CloudWatch (its retry's stream); a relaunch submits and registers nothing.
        assert logs["code"] == 0, logs["stderr"]
        assert "[extract shard 2/2] pages seen" in logs["stdout"] and "[extract shard 1/2]" not in logs["stdout"]
        assert again["code"] == 0 and "nothing to launch" in again["stdout"], again["stderr"]
        assert len(fake.sent("SubmitJob")) == 1 and len(moto.list("ocr", "2024/_state/code/wheels/")) == 1

        places = {"launcher": json.dumps([dry, first, done, again]), "requests": json.dumps(fake.requests),
                  "children": fake.log_text(), "logs": logs["stdout"]}
        assert not [where for where, text in places.items() if PLANTED in text or TOKEN in text]
