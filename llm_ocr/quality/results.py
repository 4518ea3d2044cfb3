"""Where a run's quality results live: ``OUT/quality/bench.json`` (olmOCR-bench scores and every
verdict) and ``OUT/quality/checks.json`` (the no-ground-truth signals). Beside the data, outside
every stage's Parquet folder; ``llm-ocr report`` and ``llm-ocr compare`` read them back."""

from __future__ import annotations

import json
from typing import Any

from llm_ocr.storage import Storage

QUALITY_DIR = "quality"
BENCH = "bench.json"
CHECKS = "checks.json"


def save(out: Storage, name: str, result: dict[str, Any]) -> str:
    """Write ``result`` as ``OUT/quality/NAME`` (atomically); returns its display path."""
    path = out.path(QUALITY_DIR, name)
    data = json.dumps(result, indent=1, ensure_ascii=False, default=str).encode("utf-8")
    out.write_atomic(path, data)
    out.flush()
    return out.display(path)


def load(out: Storage, name: str) -> dict[str, Any] | None:
    """A saved result, or None if there is none (or it is unreadable)."""
    path = out.path(QUALITY_DIR, name)
    try:
        if not out.exists(path):
            return None
        return json.loads(out.read_bytes(path))
    except (OSError, ValueError):
        return None
