"""``/metrics``'s text (llm_ocr/service/metrics.py) from a real SQLite queue whose documents' times
are set: the stage histograms put each document in the buckets its times say."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from llm_ocr.service.metrics import exposition
from llm_ocr.service.sqlite import SQLiteQueue


def test_stage_histograms_count_each_ended_document_in_its_buckets(tmp_path: Path) -> None:
    queue = SQLiteQueue(tmp_path / "q.db")
    # (queued, read) seconds of three ended documents, and one still queued (not counted).
    spans = {"a": (0.2, 1.5), "b": (3.0, 0.7), "c": (40.0, 100.0)}
    for doc_id in (*spans, "later"):
        queue.submit(doc_id, name=f"{doc_id}.pdf", input_url=f"/in/{doc_id}.pdf", options={}, pages=1, key=None,
                     limit=10)
    for _ in spans:
        claimed = queue.claim("w", 30, 3)
        assert claimed is not None
        assert queue.finish(claimed.id, "w", "done", pages_done=1, pages_failed=0)
    with sqlite3.connect(tmp_path / "q.db") as db:
        for doc_id, (queued, read) in spans.items():
            db.execute("UPDATE documents SET created = 1000, started = ?, finished = ? WHERE id = ?",
                       (1000 + queued, 1000 + queued + read, doc_id))
    text = exposition(queue)
    samples = {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
               for line in text.splitlines() if line.startswith("llm_ocr_service_stage_seconds")}
    assert "# TYPE llm_ocr_service_stage_seconds histogram" in text

    def bucket(stage: str, le: str) -> float:
        return samples[f'llm_ocr_service_stage_seconds_bucket{{stage="{stage}",le="{le}"}}']

    # queued: 0.2, 3, 40 s
    assert [bucket("queued", le) for le in ("0.5", "2", "5", "30", "60", "+Inf")] == [1, 1, 2, 2, 3, 3]
    # read: 1.5, 0.7, 100 s
    assert [bucket("read", le) for le in ("0.5", "1", "2", "60", "120")] == [0, 1, 2, 2, 3]
    # total: 1.7, 3.7, 140 s
    assert [bucket("total", le) for le in ("1", "2", "5", "120", "300")] == [0, 1, 2, 2, 3]
    assert samples['llm_ocr_service_stage_seconds_count{stage="total"}'] == 3
    assert abs(samples['llm_ocr_service_stage_seconds_sum{stage="total"}'] - 145.4) < 1e-6
