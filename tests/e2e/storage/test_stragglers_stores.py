"""Work groups on object storage and the Hub, end to end: shards as CLI processes, one of them
stuck, the others reading its groups; every page once (docs/stragglers.md).

S3 is moto server; the Hub is the fake Hub, where claims are on only with ``--steal`` (each claim
is a commit) and each claim and each group's part is a commit conditional on its parent.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from llm_ocr.testing import SimulatedServer
from tests.conftest import REPO
from tests.docs import make_corpus
from tests.fakes.fake_hub import FakeHub
from tests.storage_servers import MotoS3, clean_env, hub_env, hub_rows, rows_of
from tests.waiting import hold_request, wait_until_held


@pytest.fixture(scope="module")
def s3() -> Iterator[MotoS3]:
    server = MotoS3()
    try:
        server.client().create_bucket(Bucket="ocr")
        yield server
    finally:
        server.stop()


def command(docs: Path, output: str, server: SimulatedServer, shard: int, *extra: str) -> list[str]:
    return [sys.executable, "-m", "llm_ocr.cli", "extract", str(docs), "--output", output, "--endpoint",
            server.base_url, "--workers", "0", "--progress", "off", "--num-shards", "2", "--shard-index", str(shard),
            "--group-docs", "1", *extra]


def stuck_then_taken_over(docs: Path, output: str, env: dict[str, str], *extra: str) -> None:
    """Shard 1 is stuck (every request held); shard 0 reads its own groups and shard 1's free
    ones; shard 1 is stopped (SIGTERM: it releases its groups), and its rerun reads the rest."""
    with SimulatedServer(corpus=docs) as stuck, SimulatedServer(corpus=docs) as fast:
        held_at = hold_request(stuck, after=0, count=1000)
        slow = subprocess.Popen(command(docs, output, stuck, 1, "--max-in-flight", "1", "--grace-period", "1", *extra),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=str(REPO),
                                start_new_session=True)
        try:
            wait_until_held(stuck, held_at, process=slow)
            done = subprocess.run(command(docs, output, fast, 0, *extra), capture_output=True, text=True, env=env,
                                  cwd=str(REPO), timeout=300)
            assert done.returncode == 0, done.stderr[-3000:]
            os.killpg(slow.pid, signal.SIGTERM)
            _, stopped = slow.communicate(timeout=300)
            assert slow.returncode == 3, stopped[-3000:]
        finally:
            if slow.poll() is None:
                os.killpg(slow.pid, signal.SIGKILL)
        taken = len(fast.requests())
        again = subprocess.run(command(docs, output, fast, 1, *extra), capture_output=True, text=True, env=env,
                               cwd=str(REPO), timeout=300)
        # The stopped shard's log too: it released (or failed to release) the groups it held.
        assert again.returncode == 0, f"{again.stderr[-3000:]}\n--- the stopped shard:\n{stopped[-6000:]}"
    pages = len(list(docs.glob("*.pdf")))
    assert taken > pages // 2  # shard 0 read its own documents and some of shard 1's
    assert len(fast.requests()) == pages  # and the rerun read only the rest: each page was sent once


def assert_each_page_once(rows: list[dict[str, Any]], docs: Path) -> None:
    keys = Counter((r["doc_id"], r["page"]) for r in rows)
    assert sorted(keys) == sorted((p.name, 1) for p in docs.glob("*.pdf"))
    assert set(keys.values()) == {1}


def test_s3_a_stuck_shards_groups_are_read_by_the_other(s3: MotoS3, tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    make_corpus(docs, documents=24, pages=1)
    stuck_then_taken_over(docs, "s3://ocr/stragglers", clean_env(**s3.env))
    keys = s3.list("ocr", "stragglers/extract/")
    assert_each_page_once(rows_of(lambda key: s3.read("ocr", key), keys), docs)
    assert any(k.startswith("stragglers/_state/claims/extract/00001-of-00002/") for k in s3.list("ocr", "stragglers/"))


def test_hub_with_steal_a_stuck_shards_groups_are_read_by_the_other(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    make_corpus(docs, documents=12, pages=1)
    with FakeHub() as hub:
        hub.create("tester/ocr")
        stuck_then_taken_over(docs, "hf://datasets/tester/ocr", hub_env(hub, tmp_path), "--steal")
        assert_each_page_once(hub_rows(hub, "tester/ocr"), docs)
        files = hub.files("tester/ocr")
    assert any(p.startswith("_state/claims/extract/00001-of-00002/") and p.endswith(".done.json") for p in files)
