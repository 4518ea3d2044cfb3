"""Reading another stage's rows for one shard: which parts to open, and whether they are final.

Describe and Assemble read the stage before them with their own ``--num-shards``, which need not
be the one the upstream stage was written with. Rows are selected by ``doc_index % num_shards ==
shard_index`` whatever part holds them; when the layouts agree, a part named ``part-I-of-N`` only
holds documents of shard I, so the other shards' parts are not even opened.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from llm_ocr.storage.parts import PART_RE, list_parts
from llm_ocr.storage.retry import retry_io
from llm_ocr.storage.state import list_markers
from llm_ocr.storage.url import Storage

log = logging.getLogger(__name__)


class UnreadablePart(Exception):
    """An upstream part cannot be read; the stage that wrote it repairs it when it reruns."""


def _unreadable(stage: Storage, path: str, exc: Exception) -> UnreadablePart:
    name = stage.url.rstrip("/").rsplit("/", 1)[-1]
    return UnreadablePart(
        f"cannot read {stage.display(path)} ({type(exc).__name__}: {exc}); rerun llm-ocr {name} "
        "with the same options: it removes unreadable parts and redoes their pages"
    )


def part_layout(path: str) -> tuple[int, int]:
    """``(shard, num_shards)`` of a part file name."""
    match = PART_RE.search(path)
    if match is None:
        raise ValueError(f"not a part file name: {path}")
    return int(match.group(1)), int(match.group(2))


def read_columns(stage: Storage, path: str, columns: list[str] | None) -> pa.Table:
    """Some columns of one part, opened for ranged reads: a projection fetches only its columns
    (an index pass over big parts full of images reads a few kilobytes per part)."""
    try:
        with retry_io(lambda: stage.fs.open(path, "rb"), what=f"opening {stage.display(path)}") as handle:
            return pq.ParquetFile(handle).read(columns=columns)
    except (pa.ArrowInvalid, OSError) as exc:
        raise _unreadable(stage, path, exc) from exc


def shard_mask(doc_index: pa.ChunkedArray | pa.Array, shard: int, num_shards: int) -> pa.Array:
    """Boolean mask of the rows whose ``doc_index % num_shards == shard``."""
    return pa.array([i is not None and i % num_shards == shard for i in doc_index.to_pylist()], pa.bool_())


def shard_parts(stage: Storage, shard: int, num_shards: int) -> list[str]:
    """The parts of ``stage`` that may hold rows of documents in ``shard`` of ``num_shards``."""
    paths = list_parts(stage)
    selected = []
    for path in paths:
        part_shard, part_shards = part_layout(path)
        # Same residue class modulo gcd: only then can a row satisfy both shard conditions.
        g = math.gcd(part_shards, num_shards)
        if part_shard % g == shard % g:
            selected.append(path)
    return selected


def stage_has_parts(stage: Storage) -> bool:
    """Whether a stage folder holds any part."""
    return bool(list_parts(stage))


def upstream_complete(out: Storage, stage_name: str, stage: Storage, shard: int, num_shards: int) -> bool:
    """Whether every upstream shard that can hold documents of our shard has its completion marker.

    The upstream layout is read from the part names; a stage with no parts is complete only if it
    has markers (a shard with no documents writes a marker and no part).
    """
    layouts = {part_layout(p)[1] for p in list_parts(stage)}
    markers = list_markers(out, stage_name)
    if not layouts:
        layouts = {int(m.get("num_shards", 0)) for m in markers if m.get("num_shards")}
        if not layouts:
            return False
    done = {(int(m.get("shard", -1)), int(m.get("num_shards", 0))) for m in markers}
    for upstream_shards in layouts:
        g = math.gcd(upstream_shards, num_shards)
        needed = [j for j in range(upstream_shards) if j % g == shard % g]
        if any((j, upstream_shards) not in done for j in needed):
            return False
    return True


def iter_shard_rows(
    stage: Storage,
    shard: int,
    num_shards: int,
    *,
    columns: list[str] | None = None,
    batch_rows: int = 64,
) -> Iterator[dict[str, Any]]:
    """Rows of ``stage`` belonging to our shard, one part (and one record batch) at a time."""
    if columns is not None and "doc_index" not in columns:
        columns = [*columns, "doc_index"]
    for path in shard_parts(stage, shard, num_shards):
        try:
            handle = retry_io(lambda: stage.fs.open(path, "rb"), what=f"opening {stage.display(path)}")  # noqa: B023
            with handle:
                parquet = pq.ParquetFile(handle)
                for batch in parquet.iter_batches(batch_size=batch_rows, columns=columns):
                    if num_shards > 1:
                        batch = batch.filter(shard_mask(batch.column("doc_index"), shard, num_shards))
                    rows = batch.to_pylist()
                    yield from rows
        except (pa.ArrowInvalid, OSError) as exc:
            raise _unreadable(stage, path, exc) from exc
