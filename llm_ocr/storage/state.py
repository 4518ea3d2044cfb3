"""Run state beside the data: per-shard completion markers with their stats.

Markers live in ``OUT/_state/{stage}/``, outside the stage folders that Parquet globs read.
A marker is written last, after every part of the shard is stored, so its presence means the
shard's rows are complete.
"""

from __future__ import annotations

import json
from typing import Any

from llm_ocr.storage.url import Storage

STATE_DIR = "_state"


def marker_path(out: Storage, stage: str, shard: int, num_shards: int) -> str:
    """Where a shard's completion marker lives."""
    return out.path(STATE_DIR, stage, f"done-{shard:05d}-of-{num_shards:05d}.json")


def read_marker(out: Storage, stage: str, shard: int, num_shards: int) -> dict[str, Any] | None:
    """The stats a finished shard recorded, or None if it has not finished."""
    path = marker_path(out, stage, shard, num_shards)
    if not out.exists(path):
        return None
    try:
        return json.loads(out.read_bytes(path))
    except (ValueError, OSError):
        return None


def write_marker(out: Storage, stage: str, shard: int, num_shards: int, stats: dict[str, Any]) -> None:
    """Mark a shard finished, recording its stats."""
    out.write_atomic(marker_path(out, stage, shard, num_shards), json.dumps(stats, indent=2, sort_keys=True).encode())


def clear_marker(out: Storage, stage: str, shard: int, num_shards: int) -> None:
    """Forget that a shard finished (it is about to retry failed pages)."""
    out.delete(marker_path(out, stage, shard, num_shards))


def list_markers(out: Storage, stage: str) -> list[dict[str, Any]]:
    """Every completion marker of a stage, with the shard numbers added."""
    markers = []
    for path in out.glob(STATE_DIR, stage, "done-*-of-*.json"):
        try:
            data = json.loads(out.read_bytes(path))
        except (ValueError, OSError):
            continue
        markers.append(data)
    return markers
