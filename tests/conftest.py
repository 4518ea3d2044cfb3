"""Shared fixtures: the CLI as a subprocess, Parquet output readers, the request recipe check."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from tests import skip_policy
from tests.fakes.container import VENVS
from tests.fixtures.cpu_engine import cpu_engine  # noqa: F401 - a fixture, for every test
from tests.fixtures.postgres import postgres, postgres_url  # noqa: F401 - fixtures, for every test
from tests.fixtures.ray import session as ray_session
from tests.fixtures.run_folder import RunFolder
from tests.fixtures.slurm import session as slurm_session

REPO = Path(__file__).resolve().parent.parent

#: DeepSeek-OCR's offline document prompt (docs/facts.md#deepseek-ocr), written independently of
#: llm_ocr's constants.
OFFLINE_DOCUMENT_PROMPT = "<image>\n<|grounding|>Convert the document to markdown."


def assert_deepseek_request(entry: dict[str, Any], max_model_len: int, min_image_bytes: int = 1) -> None:
    """One request from the simulated server's log follows the DeepSeek-OCR recipe exactly."""
    body = entry.get("body", entry)
    assert body["model"] == "deepseek-ai/DeepSeek-OCR"
    assert body["temperature"] == 0
    assert body["skip_special_tokens"] is False
    xargs = body["vllm_xargs"]
    assert type(xargs["ngram_size"]) is int and xargs["ngram_size"] == 30
    assert type(xargs["window_size"]) is int and xargs["window_size"] == 90
    assert xargs["whitelist_token_ids"] == [128821, 128822]
    assert all(type(t) is int for t in xargs["whitelist_token_ids"])
    # max_tokens must leave room in the context for the ~1k image tokens of the prompt.
    assert 0 < body["max_tokens"] <= max_model_len - 900
    assert "guided_json" not in body and entry["ignored_fields"] == []
    (message,) = body["messages"]
    assert message["role"] == "user"
    image_part, text_part = message["content"]
    assert image_part["type"] == "image_url"
    # The log replaces the data URI by its media type, digest and size.
    assert image_part["image_url"]["url"]["data_uri"] == "image/jpeg"
    assert image_part["image_url"]["url"]["bytes"] >= min_image_bytes
    assert text_part["type"] == "text"
    # vLLM prepends the missing "<image>" placeholder joined by "\n": the text part must be
    # the offline prompt without it, and must not carry its own placeholder.
    assert "<image>" not in text_part["text"]
    assert "<image>\n" + text_part["text"] == OFFLINE_DOCUMENT_PROMPT
    # Extract streams every page (to cut repetition loops as they arrive), asking vLLM for the
    # usage in every chunk and 64 tokens a chunk.
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    assert body["stream_interval"] == 64


def run_cli(*args: str, timeout: float = 120, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``llm-ocr ARGS`` in a subprocess, as a user would."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "llm_ocr.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=full_env,
        cwd=str(REPO),
    )


def read_stage(out: Path, stage: str) -> list[dict[str, Any]]:
    """Every row of a stage folder, in file then row order."""
    rows: list[dict[str, Any]] = []
    for path in sorted((out / stage).glob("*.parquet")):
        rows.extend(pq.read_table(path).to_pylist())
    return rows


@pytest.fixture
def cli():
    """The ``run_cli`` helper as a fixture."""
    return run_cli


def pytest_configure(config: pytest.Config) -> None:
    """Under ``CI=true`` (and in the vLLM tier), skips outside tests/skip_policy.py's allow-list fail the run."""
    skip_policy.register(config)


#: The corpus indexes every simulated server of the run shares (llm_ocr/engines/sim/corpus_cache.py):
#: a corpus is indexed once, not once per server (about 300 servers a run).
SIM_CORPORA = RunFolder("sim_corpora")
#: What a run starts once for every worker (tests/fixtures/run_folder.py): its one-node Slurm and
#: Ray, the venvs the fake platforms' jobs share (tests/fakes/fake_uv.py), the corpus indexes.
RUN_FOLDERS = (slurm_session.RUN, ray_session.RUN, VENVS, SIM_CORPORA)


def pytest_sessionstart(session: pytest.Session) -> None:
    """Name the folders of this run's shared Slurm, Ray, job venvs and corpus indexes before
    pytest-xdist starts its workers, so they all share the one of each the first of them starts."""
    if not hasattr(session.config, "workerinput"):
        for run in RUN_FOLDERS:
            run.claim()
        # Every simulated server a test starts, in any process below this one, inherits it.
        from llm_ocr.engines.sim.corpus_cache import CACHE_ENV

        os.environ.setdefault(CACHE_ENV, str(SIM_CORPORA.folder()))


def pytest_collection_finish(session: pytest.Session) -> None:
    """Tell each shared cluster which of the run's tests use it (after deselection)."""
    for run in RUN_FOLDERS:
        run.expect(session.items)


def pytest_runtest_logfinish(nodeid: str, location: tuple[str, int | None, str]) -> None:
    """A shared cluster is stopped once the last test that uses it has ended (RunFolder.finished)."""
    for run in RUN_FOLDERS:
        run.finished(nodeid)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Stop this run's Slurm and Ray and remove the shared venvs, if a test started them (on the
    controller, after every worker ended)."""
    if not hasattr(session.config, "workerinput"):
        for run in RUN_FOLDERS:
            run.release()
