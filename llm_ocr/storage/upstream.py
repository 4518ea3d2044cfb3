"""Reading another stage's rows for one shard: which parts to open, and whether they are final.

Describe and Assemble read the stage before them with their own ``--num-shards``, which need not
be the one the upstream stage was written with. A row belongs to the shard
:func:`llm_ocr.sharding.output_owner` names from its part's shard (``part-U-of-N``) and its
``doc_index``: with the same number of shards, shard U takes exactly part U's rows (what that
upstream shard handled), and only the parts of the upstream shards that can hold our rows are
opened.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from llm_ocr.sharding import output_owner, upstream_shards_for
from llm_ocr.storage.parts import PART_RE, list_parts, part_glob, remove_stale_temp_files, table_to_bytes
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
            # In this thread only: Arrow's pool threads reading a Python file object can abort a
            # command that exits right after (llm_ocr.storage.parts.parquet_file says why).
            return pq.ParquetFile(handle, pre_buffer=False).read(columns=columns, use_threads=False)
    except (pa.ArrowInvalid, OSError) as exc:
        raise _unreadable(stage, path, exc) from exc


def owns_row(path: str, doc_index: int | None, shard: int, num_shards: int) -> bool:
    """Whether the row of ``doc_index`` in part ``path`` belongs to ``shard`` of ``num_shards``."""
    part_shard, part_shards = part_layout(path)
    return doc_index is not None and output_owner(doc_index, part_shard, part_shards, num_shards) == shard


def shard_mask(path: str, doc_index: pa.ChunkedArray | pa.Array, shard: int, num_shards: int) -> pa.Array:
    """Boolean mask of the rows of part ``path`` that belong to ``shard`` (:func:`owns_row`)."""
    return pa.array([owns_row(path, i, shard, num_shards) for i in doc_index.to_pylist()], pa.bool_())


def shard_parts(stage: Storage, shard: int, num_shards: int) -> list[str]:
    """The parts of ``stage`` that may hold rows of documents in ``shard`` of ``num_shards``."""
    selected = []
    for path in list_parts(stage):
        part_shard, part_shards = part_layout(path)
        if part_shard in upstream_shards_for(shard, num_shards, part_shards):
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
        if any((j, upstream_shards) not in done for j in upstream_shards_for(shard, num_shards, upstream_shards)):
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
            whole = part_layout(path)[1] == num_shards  # same layout: every row of the part is ours
            with handle:
                parquet = pq.ParquetFile(handle, pre_buffer=False)  # this thread only, as read_columns
                for batch in parquet.iter_batches(batch_size=batch_rows, columns=columns, use_threads=False):
                    if not whole:
                        batch = batch.filter(shard_mask(path, batch.column("doc_index"), shard, num_shards))
                    rows = batch.to_pylist()
                    yield from rows
        except (pa.ArrowInvalid, OSError) as exc:
            raise _unreadable(stage, path, exc) from exc


def keep_final_rows(
    stage: Storage, shard: int, num_shards: int, columns: list[str], final: Callable[[pa.Table], list[bool]]
) -> tuple[set[str], int]:
    """Scan a document stage's own parts of one shard before a rerun: the ``doc_id`` of every row
    ``final`` keeps (it is given each part's ``columns``, with the file's metadata), and the next
    part number.

    Rows it does not keep are removed from their parts (rewritten atomically) so they are done
    again; unreadable parts, and a killed run's temporary files, are deleted.
    """
    done: set[str] = set()
    next_seq = 0
    remove_stale_temp_files(stage, part_glob(shard, num_shards))
    for path in list_parts(stage, shard, num_shards):
        next_seq = max(next_seq, int(PART_RE.search(path).group(3)) + 1)  # type: ignore[union-attr]
        try:
            table = read_columns(stage, path, columns)
        except UnreadablePart as exc:
            log.warning("removing unreadable part %s (%s); its documents will be redone", stage.display(path), exc)
            stage.delete(path)
            continue
        keep = final(table)
        if not all(keep):
            kept = read_columns(stage, path, None).filter(pa.array(keep))
            if kept.num_rows:
                stage.write_atomic(path, table_to_bytes(kept))
            else:
                stage.delete(path)
        done.update(d for d, k in zip(table.column("doc_id").to_pylist(), keep) if k)
    return done, next_seq
