"""Run state beside the data: per-shard completion markers with their stats, and progress.

Markers live in ``OUT/_state/{stage}/``, outside the stage folders that Parquet globs read.
A marker is written last, after every part of the shard is stored, so its presence means the
shard's rows are complete.

Progress files (``OUT/_state/progress/{stage}-{shard}-of-{num_shards}.json``) are rewritten
every ``--progress-interval`` while a shard runs, so that a launcher on another machine can show
pages done before the marker exists. They are a view, never a source of truth: the marker and
the Parquet parts are.
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
from collections.abc import Callable
from typing import Any

from llm_ocr.storage.url import Storage

STATE_DIR = "_state"
PROGRESS_DIR = "progress"

_MARKER_RE = re.compile(r"done-(\d{5})-of-(\d{5})\.json$")
_PROGRESS_RE = re.compile(r"([a-z]+)-(\d{5})-of-(\d{5})\.json$")

log = logging.getLogger(__name__)


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
    """Mark a shard finished, recording its stats (one line of JSON: ``json`` encodes an indented
    one in Python, not in C, about 1 ms for a page stage's marker against 0.14, and the service's
    worker writes three markers a document)."""
    out.write_atomic(marker_path(out, stage, shard, num_shards), json.dumps(stats, sort_keys=True).encode())


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


def marker_paths(out: Storage, stage: str, num_shards: int) -> dict[int, str]:
    """Where the completion markers of one stage for a ``num_shards`` layout are, by shard index
    (one listing, no file read)."""
    found = {}
    for path in out.glob(STATE_DIR, stage, f"done-*-of-{num_shards:05d}.json"):
        match = _MARKER_RE.search(path)
        if match is not None:
            found[int(match.group(1))] = path
    return found


def markers_by_shard(
    out: Storage, stage: str, num_shards: int, cache: dict[str, dict[str, Any]] | None = None
) -> dict[int, dict[str, Any]]:
    """The completion markers of one stage for a ``num_shards`` layout, by shard index.

    ``cache`` (path -> content) spares re-reading markers already read: a poller reads each one
    once (a marker is rewritten only by a rerun retrying failed pages).
    """
    cache = {} if cache is None else cache
    found: dict[int, dict[str, Any]] = {}
    for shard, path in marker_paths(out, stage, num_shards).items():
        if path not in cache:
            try:
                cache[path] = json.loads(out.read_bytes(path))
            except (ValueError, OSError):
                continue  # half-visible or unreadable: treated as absent, the shard is not done
        found[shard] = cache[path]
    return found


def marker_layouts(out: Storage, stage: str) -> set[int]:
    """The shard counts (``-of-N``) the markers of ``stage`` were written for."""
    return {int(m.group(2)) for path in out.glob(STATE_DIR, stage,
                                                 "done-*-of-*.json") if (m := _MARKER_RE.search(path))}


def progress_path(out: Storage, stage: str, shard: int, num_shards: int) -> str:
    """Where a running shard's progress file lives."""
    return out.path(STATE_DIR, PROGRESS_DIR, f"{stage}-{shard:05d}-of-{num_shards:05d}.json")


def progress_writer(out: Storage, stage: str, shard: int, num_shards: int) -> Callable[[dict[str, Any]], None]:
    """A function that records a shard's progress (a small JSON object) under ``OUT/_state``.

    On the Hub the write joins the queue of the next commit (a newer progress replaces the queued
    one), so it costs no commit of its own while parts are being written. A failed write is
    logged once and never fails the run.
    """
    path = progress_path(out, stage, shard, num_shards)
    warned = False

    def write(summary: dict[str, Any]) -> None:
        nonlocal warned
        record = {**summary, "updated_at": time.time(), "job_id": os.environ.get("JOB_ID")}
        try:
            out.write_atomic(path, json.dumps(record, sort_keys=True).encode())
        except Exception as exc:  # noqa: BLE001 - progress is a view; the run must go on
            if not warned:
                log.warning("could not write progress to %s: %s", out.display(path), exc)
                warned = True

    return write


def read_progress(out: Storage, num_shards: int) -> dict[tuple[str, int], dict[str, Any]]:
    """Every progress file of a ``num_shards`` layout, by ``(stage, shard)``."""
    found: dict[tuple[str, int], dict[str, Any]] = {}
    for path in out.glob(STATE_DIR, PROGRESS_DIR, f"*-of-{num_shards:05d}.json"):
        match = _PROGRESS_RE.search(path)
        if match is None:
            continue
        try:
            found[(match.group(1), int(match.group(2)))] = json.loads(out.read_bytes(path))
        except (ValueError, OSError):
            continue
    return found
