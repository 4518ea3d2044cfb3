"""Fixtures of the quality tests: the generated bench, runs written from given Markdown, a renderer."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pytest

from llm_ocr.quality.katex import EquationRenderer
from llm_ocr.records import PageResult, page_schema
from llm_ocr.storage import Storage
from llm_ocr.storage.parts import part_name, rows_to_bytes
from llm_ocr.storage.state import write_marker
from tests.quality.benchgen import write_bench


@pytest.fixture(scope="session")
def bench_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bench of tests/quality/cases.py in olmOCR-bench's layout."""
    return write_bench(tmp_path_factory.mktemp("bench") / "bench_data")


@pytest.fixture(scope="session")
def renderer() -> EquationRenderer:
    """KaTeX in Chromium; the tests that need it fail under CI when it is missing."""
    found = EquationRenderer()
    if not found.available:
        pytest.skip(f"math rendering unavailable: {found.unavailable_reason}")
    return found


def write_run(
    out: Path,
    pages: Iterable[Mapping[str, Any]],
    *,
    model: str = "test/model",
    wall_time_s: float = 10.0,
    gpu: Mapping[str, Any] | None = None,
) -> Path:
    """A run's Extract output (one part) and completion marker, with the given page rows.

    Each mapping holds ``doc_id``, ``source``, ``markdown`` and optionally any other column;
    tokens default to a quarter of the Markdown's length.
    """
    rows = []
    for i, page in enumerate(pages):
        fields = {"doc_index": i, "page": 1, "status": "ok", "finish_reason": "stop", "model": model, "attempts": 1,
                  "prompt_tokens": 800, "completion_tokens": max(1, len(page.get("markdown", "")) // 4), **page}  # fmt: skip
        rows.append(PageResult(**fields).to_row())
    storage = Storage(str(out))
    storage.write_atomic(storage.path("extract", part_name(0, 1, 0)), rows_to_bytes(rows, page_schema()))
    stats = {
        "stage": "extract", "shard": 0, "num_shards": 1,
        "pages": {"ok": sum(r["status"] == "ok" for r in rows), "truncated": sum(r["status"] == "truncated" for r in rows),
                  "error": sum(r["status"] == "error" for r in rows), "quarantined": 0, "total": len(rows), "skipped": 0,
                  "seen": len(rows)},
        "tokens": {"prompt": sum(r["prompt_tokens"] or 0 for r in rows), "completion": sum(r["completion_tokens"] or 0 for r in rows)},
        "wall_time_s": wall_time_s, "pages_per_s": len(rows) / wall_time_s, "finished_at": time.time(),
        "gpu": dict(gpu) if gpu is not None else {"preset": None, "gpus": 1, "gpu_seconds": wall_time_s,
                                                  "price_per_gpu_hour": None, "estimated_cost_usd": None},
    }  # fmt: skip
    write_marker(storage, "extract", 0, 1, stats)
    return out
