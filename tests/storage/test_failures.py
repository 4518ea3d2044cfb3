"""The failed documents a run's end and ``llm-ocr status`` name (:mod:`llm_ocr.storage.reconcile`)."""

from __future__ import annotations

import random

from llm_ocr.storage.reconcile import FAILURES_SHOWN, Failures


def test_the_documents_named_are_the_first_by_name_whatever_order_the_rows_come_in() -> None:
    # Parts are written as pages finish, so two reads of one run (the run's end, then
    # `llm-ocr status`) can meet the same failed rows in another order; they must name the
    # same documents, in the same order, and count the same rest.
    documents = [f"doc-{n:03d}.pdf" for n in range(FAILURES_SHOWN + 7)]
    rows = [{"doc_id": d, "source": f"/in/{d}", "page": page, "status": "error", "error": f"HTTP 500 on {d} p{page}"}
            for d in documents for page in (1, 2, 3)]
    said = set()
    for seed in range(20):
        random.Random(seed).shuffle(rows)
        failures = Failures("extract", "/out/extract")
        for row in rows:
            failures.add(row)
        assert [d.doc_id for d in failures.shown] == documents[:FAILURES_SHOWN]
        assert all(d.text().startswith(f"{d.doc_id} pages 1, 2, 3: HTTP 500 on {d.doc_id}") for d in failures.shown)
        assert (failures.documents, failures.rows) == (len(documents), 3 * len(documents))
        said.add(tuple(failures.lines()))
    assert len(said) == 1
    assert next(iter(said))[-1] == "  7 more: the rows with status error in /out/extract"
