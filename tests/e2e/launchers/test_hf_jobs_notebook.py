"""hf-jobs/hf-jobs-pipeline.ipynb, executed headlessly against the fake Hub and Jobs API.

The kernel inherits this process's environment: HF_ENDPOINT points huggingface_hub (read at its
import, in the kernel) at the fake, HF_TOKEN is the planted token, and the notebook's
LLM_OCR_NB_* variables replace FineVision x 16 A100s by the test corpus x 2 L4 shards.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.docs import make_corpus
from tests.installed import skip_module_unless_installed
from tests.launchers.common import INPUT, OUTPUT, PLANTED, execute_notebook, expected_pages, fake_jobs, stage_rows

skip_module_unless_installed("nbformat", "nbclient")

NOTEBOOK = REPO / "hf-jobs" / "hf-jobs-pipeline.ipynb"


def test_hf_jobs_notebook_launches_waits_loads_shows_and_costs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    corpus = tmp_path / "docs"
    make_corpus(corpus, documents=4, pages=2)
    with fake_jobs(tmp_path / "jobs", corpus) as hub:
        for key, value in {
            "HF_ENDPOINT": hub.url, "HF_TOKEN": PLANTED, "HF_HOME": str(tmp_path / "hf-home"),
            "XDG_CACHE_HOME": str(tmp_path / "cache"), "PYTHONPATH": str(REPO), "HF_HUB_DISABLE_TELEMETRY": "1",
            "HF_HUB_DISABLE_XET": "1",
            "LLM_OCR_NB_INPUT": INPUT, "LLM_OCR_NB_OUTPUT": OUTPUT, "LLM_OCR_NB_STAGE_OPTIONS": json.dumps({"workers": 0}),
            "LLM_OCR_NB_SHARDS": "2", "LLM_OCR_NB_FLAVOR": "l4x1", "LLM_OCR_NB_POLL": "0.5",
        }.items():
            monkeypatch.setenv(key, value)
        text = execute_notebook(NOTEBOOK)

        # What the notebook launched really ran: 2 jobs, every page once, every document assembled.
        assert sorted(r["environment"]["LLM_OCR_SHARD_INDEX"] for r in hub.job_requests) == ["0", "1"]
        assert sorted((r["doc_id"], r["page"]) for r in stage_rows(hub, "describe")) == expected_pages(corpus)
        assert len(stage_rows(hub, "assemble")) == 4

    assert '"shard_index": 0' in text and '"HF_TOKEN"' in text  # the dry-run spec, the secret by name
    assert "(counted in the Parquet parts; duplicates: 0)" in text  # the final table
    assert "from the completion markers" in text and "l4x1" in text  # the cost table
    assert "data:image/" in text  # show_document drew the pages
    assert PLANTED not in text
