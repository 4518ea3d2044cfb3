"""Work groups with the pages ranked before rendering (llm_ocr.runners.render_order): a shard of
more pages than a round of slots is read to its end, its own groups and the free ones of another.

Work groups hand the look-ahead a document only while the pages planned are fewer than a round
of slots (:class:`~llm_ocr.runners.group_state.Room`); a look-ahead that waited for two rounds
before rendering (as it did when the two were first put together) waited for ever, with 30 of 80
pages read. One process, in this test's own, against one simulated server.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

import llm_ocr
from llm_ocr.testing import SimulatedServer
from tests.docs import make_corpus


# The hang this guards against does not return to the test on pytest-timeout's signal (the run's
# cleanup waits for the intake's thread, which waits for room): the thread method ends the worker.
@pytest.mark.timeout(900, method="thread")
def test_a_shard_in_work_groups_with_pages_ranked_ahead_reads_every_page(tmp_path: Path) -> None:
    docs, out = tmp_path / "docs", tmp_path / "out"
    make_corpus(docs, documents=40, pages=2)  # 20 documents a shard, a group each
    with SimulatedServer("--slots", "4") as server:
        result = llm_ocr.extract(docs, out, endpoint=server.base_url, num_shards=2, shard_index=0, group_docs=1,
                                 max_in_flight=2, workers=0, progress="off")
    # Shard 1 never ran: shard 0 reads its own groups, then takes shard 1's free ones.
    rows = pq.read_table(out / "extract", columns=["doc_id", "page"]).to_pylist()
    keys = sorted((r["doc_id"], r["page"]) for r in rows)
    assert keys == sorted((f"doc{d:03d}.pdf", p) for d in range(40) for p in (1, 2))
    assert result.pages["ok"] == 80
