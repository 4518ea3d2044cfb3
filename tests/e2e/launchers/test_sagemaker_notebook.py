"""sagemaker/sm-jobs-pipeline.ipynb, executed headlessly against moto and the fake SageMaker.

The kernel inherits this process's environment: AWS_ENDPOINT_URL points boto3 and s3fs at moto,
AWS_ENDPOINT_URL_SAGEMAKER at the fake Processing that runs the hosts, and the notebook's
LLM_OCR_NB_* variables replace FineVision x 16 L40S by the test corpus x 2 L4 hosts.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.docs import make_corpus
from tests.installed import skip_module_unless_installed
from tests.launchers.common import expected_pages
from tests.launchers.sagemaker_common import INPUT, OUTPUT, PLANTED, ROLE, aws_world

# The hang guard: the notebook's own cell timeout is 600 s.
pytestmark = pytest.mark.timeout(1200)

skip_module_unless_installed("nbformat", "nbclient")

NOTEBOOK = REPO / "sagemaker" / "sm-jobs-pipeline.ipynb"


def test_sagemaker_notebook_launches_waits_loads_shows_and_costs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    corpus = tmp_path / "docs"
    make_corpus(corpus, documents=4, pages=2)
    with aws_world(tmp_path / "jobs", corpus) as world:
        for key in [k for k in os.environ if k.startswith(("AWS_", "HF_", "LLM_OCR_"))]:
            monkeypatch.delenv(key)
        for key, value in {
            **world.env(tmp_path), "HF_HOME": str(tmp_path / "hf-home"),
            "LLM_OCR_NB_INPUT": INPUT, "LLM_OCR_NB_OUTPUT": OUTPUT, "LLM_OCR_NB_STAGE_OPTIONS": json.dumps({"workers": 0}),
            "LLM_OCR_NB_SHARDS": "2", "LLM_OCR_NB_INSTANCE": "ml.g6.xlarge", "LLM_OCR_NB_ROLE": ROLE, "LLM_OCR_NB_POLL": "0.5",
        }.items():
            monkeypatch.setenv(key, value)
        import nbclient
        import nbformat

        notebook = nbformat.read(NOTEBOOK, as_version=4)
        client = nbclient.NotebookClient(notebook, timeout=600, kernel_name="python3",
                                         resources={"metadata": {"path": str(REPO / "sagemaker")}})
        client.execute()  # raises CellExecutionError, with the cell and its traceback, if a cell fails

        # What the notebook launched really ran: one job of 2 hosts, every page once, every document.
        (sent,) = world.sagemaker.requests
        assert sent["ProcessingResources"]["ClusterConfig"]["InstanceCount"] == 2
        assert sorted((r["doc_id"], r["page"]) for r in world.rows("describe")) == expected_pages(corpus)
        assert len(world.rows("assemble")) == 4

    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.get("outputs", [])]
    text = "\n".join(json.dumps(o.get("data", {})) + o.get("text", "") for o in outputs)
    assert not any(o.get("output_type") == "error" for o in outputs)
    assert '"InstanceCount": 2' in text and '"LLM_OCR_TASK_SHARDS": "2:0-1"' in text  # the dry-run request
    assert "(counted in the Parquet parts; duplicates: 0)" in text  # the final table
    assert "[extract shard 1/2]" in text  # shard 0's CloudWatch log
    assert "ml.g6.xlarge: $1.1267/h, an estimate" in text and "as found on" in text  # the price, its source and date
    assert "from the completion markers" in text  # the cost table
    assert "data:image/" in text  # show_document drew the pages
    assert PLANTED not in text
