"""google-cloud-run/cloudrun-jobs-pipeline.ipynb, executed headlessly against the fake Cloud Run API
and the GCS emulator.

The kernel inherits this process's environment: LLM_OCR_CLOUD_RUN_ENDPOINT points the launcher at
the fake (anonymous credentials), STORAGE_EMULATOR_HOST points gcsfs at the emulator, and the
notebook's LLM_OCR_NB_* variables replace the placeholders by the test corpus x 2 shards.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.docs import make_corpus
from tests.installed import skip_module_unless_installed
from tests.launchers.cloud_run_common import INPUT, OUTPUT, PLANTED, PROJECT, REGION, fake_cloud_run, stage_rows
from tests.launchers.common import execute_notebook, expected_pages

skip_module_unless_installed("nbformat", "nbclient", "google.cloud.run_v2")

NOTEBOOK = REPO / "google-cloud-run" / "cloudrun-jobs-pipeline.ipynb"


def test_cloud_run_notebook_launches_waits_loads_shows_and_costs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    corpus = tmp_path / "docs"
    make_corpus(corpus, documents=4, pages=2)
    with fake_cloud_run(tmp_path / "api", corpus) as api:
        for key, value in {
            **api.gcs.env, "LLM_OCR_CLOUD_RUN_ENDPOINT": api.url, "HF_HOME": str(tmp_path / "hf-home"),
            "XDG_CACHE_HOME": str(tmp_path / "cache"), "PYTHONPATH": str(REPO), "HF_TOKEN": PLANTED,
            "LLM_OCR_NB_PROJECT": PROJECT, "LLM_OCR_NB_REGION": REGION, "LLM_OCR_NB_INPUT": INPUT, "LLM_OCR_NB_OUTPUT": OUTPUT,
            "LLM_OCR_NB_STAGE_OPTIONS": json.dumps({"workers": 0}), "LLM_OCR_NB_SHARDS": "2", "LLM_OCR_NB_POLL": "1",
            "LLM_OCR_NB_SECRET_REFS": json.dumps(["HF_TOKEN=hf-token"]),
        }.items():
            monkeypatch.setenv(key, value)
        text = execute_notebook(NOTEBOOK)

        # What the notebook launched really ran: one execution of 2 tasks, every page once.
        (execution,) = api.executions.values()
        assert execution.task_count == 2 and [t.state for t in execution.tasks] == ["SUCCEEDED"] * 2
        assert sorted((r["doc_id"], r["page"]) for r in stage_rows(api.gcs, "describe")) == expected_pages(corpus)
        assert len(stage_rows(api.gcs, "assemble")) == 4

    assert '"shard_index": 0' in text and '"HF_TOKEN"' in text and "LLM_OCR_TASK_SHARDS" in text  # the dry run
    assert "(counted in the Parquet parts; duplicates: 0)" in text  # the final table
    assert "[extract shard 1/2]" in text  # shard 0's log, from Cloud Logging
    assert "L4-seconds" in text and "vCPU-seconds" in text and "GiB-seconds" in text and "us-east4" in text  # the cost table
    assert "data:image/" in text  # show_document drew the pages
    assert PLANTED not in text
