"""aws-batch/aws-batch-pipeline.ipynb, executed headlessly against moto and a fake AWS Batch that
runs the array children, with one child reclaimed as Spot reclaims it.

The kernel inherits this process's environment: AWS_ENDPOINT_URL points boto3 and s3fs at moto
(S3, STS, CloudWatch Logs, Secrets Manager), AWS_ENDPOINT_URL_BATCH at tests/fakes/fake_batch.py,
which checks each request against botocore's model and Batch's documented values, keeps job
definition revisions, and runs each child's exact command with the array index Batch gives it (the
child fetches the llm-ocr wheel from S3 with the job role's credentials from the container
credentials endpoint, then bootstraps as on every platform). The notebook's LLM_OCR_NB_* variables
replace FineVision x 16 L40S by the test corpus x 2 L4 children. The cells run one at a time, so
that the test can reclaim child 1 between the launch and the wait, and run the launch cell again
at the end (a relaunch of a finished output submits nothing).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import boto3
import pytest

from tests.conftest import REPO
from tests.docs import make_corpus
from tests.fakes.fake_batch import SPOT_REASON
from tests.installed import skip_module_unless_installed
from tests.launchers.aws_batch_common import (
    EXEC_ROLE,
    INPUT,
    OUTPUT,
    PLANTED,
    REGION,
    ROLE,
    TOKEN,
    batch_world,
    launcher_env,
    rows,
)
from tests.launchers.common import expected_pages, wait_until

# The hang guard (pytest-timeout; 300 s by default): the notebook's own cell timeout is 400 s.
pytestmark = pytest.mark.timeout(1200)

skip_module_unless_installed("nbformat", "nbclient")

NOTEBOOK = REPO / "aws-batch" / "aws-batch-pipeline.ipynb"


def _text(cell: dict) -> str:
    """What a code cell showed: its streams and its displayed data."""
    return "\n".join(o.get("text", "") + json.dumps(o.get("data", {})) for o in cell.get("outputs", []))


def test_the_notebook_runs_an_array_of_two_through_a_spot_reclamation_and_every_page_is_made_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    corpus = tmp_path / "docs"
    make_corpus(corpus, documents=4, pages=2)
    # Child 1 serves slowly, so it is reclaimed mid-shard (some parts stored, no marker yet);
    # static shards and one row per part, so its retry has parts to resume from.
    slow = {1: {"FAKE_VLLM_SIM_ARGS": f"--corpus {corpus} --prefill-ms 1500 --slots 1"}}
    with batch_world(tmp_path / "jobs", corpus, child_env=slow) as (moto, fake):
        secrets = boto3.client("secretsmanager", endpoint_url=moto.url, region_name=REGION,
                               aws_access_key_id="admin", aws_secret_access_key="admin")
        arn = secrets.create_secret(Name="llm-ocr/hf-token", SecretString=TOKEN)["ARN"]
        for key in [k for k in os.environ if k.startswith(("AWS_", "HF_", "LLM_OCR_"))]:
            monkeypatch.delenv(key)
        stage = {"workers": 0, "part_rows": 1, "progress_interval": 0.3, "steal": False}
        for key, value in {
            **launcher_env(moto, fake, tmp_path), "HF_HOME": str(tmp_path / "hf-home"),
            "LLM_OCR_NB_INPUT": INPUT, "LLM_OCR_NB_OUTPUT": OUTPUT, "LLM_OCR_NB_STAGE_OPTIONS": json.dumps(stage),
            "LLM_OCR_NB_SHARDS": "2", "LLM_OCR_NB_INSTANCE": "g6.xlarge", "LLM_OCR_NB_QUEUE": "llm-ocr-gpu",
            "LLM_OCR_NB_JOB_ROLE": ROLE, "LLM_OCR_NB_AWS_SECRETS": json.dumps({"HF_TOKEN": arn}),
            "LLM_OCR_NB_EXECUTION_ROLE": EXEC_ROLE, "LLM_OCR_NB_POLL": "1",
        }.items():
            monkeypatch.setenv(key, value)
        import nbclient
        import nbformat

        notebook = nbformat.read(NOTEBOOK, as_version=4)
        cells = [(i, c) for i, c in enumerate(notebook.cells) if c.cell_type == "code"]
        launch = next(i for i, c in cells if c.source.startswith("job = llm_ocr.launch("))
        client = nbclient.NotebookClient(notebook, timeout=400, kernel_name="python3",
                                         resources={"metadata": {"path": str(REPO / "aws-batch")}})
        with client.setup_kernel():
            for index, cell in cells:  # a failing cell raises CellExecutionError, with its traceback
                client.execute_cell(cell, index)
                if index == launch:
                    (job_id,) = fake.jobs
                    wait_until(lambda: any("part-00001-of-00002" in k for k in moto.list("ocr", "2024/extract/")),
                               timeout=900, period=0.1)  # a hang guard: over 300 s at load 10-24
                    assert not [k for k in moto.list("ocr", "2024/_state/") if "done-00001-of-00002" in k], \
                        "shard 1 ended first"
                    fake.reclaim(job_id, 1)
            first_launch = _text(notebook.cells[launch])
            client.execute_cell(notebook.cells[launch], launch)  # the launch cell again: nothing left to run
        texts = {index: _text(cell) for index, cell in cells}

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
        dry = next(i for i, c in cells if "dry_run=True" in c.source)
        shown = json.loads(notebook.cells[dry].outputs[0]["text"])
        dry_id, real_id = shown["submitJob"]["tags"]["llm-ocr-launch"], sent["tags"]["llm-ocr-launch"]
        assert json.loads(json.dumps(shown).replace(dry_id, real_id)) == {
            "registerJobDefinition": definition, "submitJob": {**sent, "jobDefinition": "llm-ocr-run"}}

        # Every page exactly once in each stage, every document assembled.
        for name in ("extract", "describe"):
            found = rows(moto, name)
            assert sorted((r["doc_id"], r["page"]) for r in found) == expected_pages(corpus), name
        assert sorted(d["doc_id"] for d in rows(moto, "assemble")) == sorted(p.name for p in corpus.glob("*.pdf"))
        # A relaunch submits and registers nothing, and uploads no second wheel.
        assert "1 job(s) submitted" in first_launch and "0 job(s) submitted" in texts[launch]
        assert len(fake.sent("SubmitJob")) == 1 and len(fake.sent("RegisterJobDefinition")) == 1
        assert len(moto.list("ocr", "2024/_state/code/wheels/")) == 1
        requests, children = json.dumps(fake.requests), fake.log_text()

    text = "\n".join(texts.values())
    assert "g6.xlarge Spot" in text and "price: Spot" in text  # the estimate, on-demand and on Spot
    assert "(counted in the Parquet parts; duplicates: 0)" in text  # the final table
    # Shard 1's log from CloudWatch: its retry's stream.
    logs = texts[next(i for i, c in cells if c.source.startswith("# The CloudWatch log"))]
    assert "[extract shard 2/2] pages seen" in logs and "[extract shard 1/2]" not in logs
    assert "g6.xlarge: $0.8048/h on-demand" in text and "read 2026-11-26" in text  # the price, its source and date
    assert "from the completion markers" in text  # the cost table
    assert "data:image/" in text  # show_document drew the pages
    places = {"notebook": text + first_launch, "requests": requests, "children": children}
    assert not [where for where, found in places.items() if PLANTED in found or TOKEN in found]
