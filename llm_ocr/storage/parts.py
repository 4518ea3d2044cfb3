"""Parquet parts: the shard-named files each stage writes, how they are written and re-read.

A stage folder (``OUT/extract``...) holds ``part-{shard:05d}-of-{num_shards:05d}-{seq:06d}.parquet``
files (with work groups, ``...-{group:06d}-{slot:04d}.parquet``: :mod:`.group_parts`). Each is
written whole and atomically (see :mod:`llm_ocr.storage`), so a part either exists complete or
not at all; a part that is nevertheless unreadable (a store without atomic puts, a
disk that filled up) is detected when a shard starts and removed so its pages are redone.
"""

from __future__ import annotations

import asyncio
import io
import logging
import math
import re
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.parquet as pq

from llm_ocr.storage.url import Storage
from llm_ocr.storage.writer import SerialWriter

log = logging.getLogger(__name__)

#: A shard's parts: ``part-SSSSS-of-NNNNN-QQQQQQ.parquet`` numbered by the shard, or, with work
#: claims, ``part-SSSSS-of-NNNNN-GGGGGG-JJJJ.parquet``: slot J of page group G (:mod:`.group_parts`).
#: Group 3 is the part's number, or its group.
PART_RE = re.compile(r"part-(\d{5})-of-(\d{5})-(\d{6})(?:-(\d{4,}))?\.parquet$")


class ShardLayoutError(Exception):
    """The output folder was written with another number of shards."""


def part_name(shard: int, num_shards: int, seq: int) -> str:
    """File name of one part; the shard is in the name so shards never collide."""
    return f"part-{shard:05d}-of-{num_shards:05d}-{seq:06d}.parquet"


def part_glob(shard: int, num_shards: int) -> str:
    """Glob pattern of every part of one shard (see :func:`part_name`)."""
    return f"part-{shard:05d}-of-{num_shards:05d}-*.parquet"


def _parse(path: str) -> tuple[int, int, int] | None:
    match = PART_RE.search(path)
    if not match:
        return None
    return int(match.group(1)), int(match.group(2)), int(match.group(3))


def list_parts(stage: Storage, shard: int | None = None, num_shards: int | None = None) -> list[str]:
    """Part files of a stage folder, optionally only one shard's, in name order."""
    paths = [p for p in stage.glob("part-*.parquet") if _parse(p)]
    if num_shards is not None:
        foreign = sorted({_parse(p)[1] for p in paths} - {num_shards})  # type: ignore[index]
        if foreign:
            raise ShardLayoutError(
                f"{stage.display(stage.root)} holds parts written with --num-shards {foreign[0]}, "
                f"not {num_shards}: rerun with the same --num-shards, or write to a new --output"
            )
    if shard is not None:
        paths = [p for p in paths if _parse(p)[0] == shard]  # type: ignore[index]
    return paths


def remove_stale_temp_files(folder: Storage, pattern: str) -> int:
    """Delete the temporary files (``NAME.XXXXXXXX.tmp``, see ``Storage._write_now``) that a
    writer killed mid-write left next to the files matching ``pattern``; returns how many.

    A ``kill -9`` during a local write leaves its temporary file behind: harmless to readers
    (no ``*.parquet`` glob matches it) but litter that would stay forever. Only local disk writes
    temporary files, and only names the caller alone writes may be given (this shard's parts, one
    document's export), so a concurrent writer's temporary file is never removed.
    """
    if not folder.is_local:
        return 0
    # Exactly the 8 characters Storage._write_now inserts: "a.md" must not match "a.md.x.md.XXXXXXXX.tmp".
    stale = folder.glob(f"{pattern}.????????.tmp")
    for path in stale:
        folder.delete(path)
    if stale:
        log.info("removed %d temporary file(s) left by an interrupted write in %s", len(stale),
                 folder.display(folder.root))
    return len(stale)


@dataclass
class ShardIndex:
    """What a shard's existing parts already hold: the pages that need no more work."""

    done_pages: dict[str, set[int]] = field(default_factory=lambda: defaultdict(set))
    num_pages: dict[str, int | None] = field(default_factory=dict)
    status_counts: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    next_seq: int = 0
    removed_parts: int = 0
    dropped_error_rows: int = 0
    #: Error rows of pages quarantined by an earlier run, kept as their record (not retried).
    kept_quarantined: int = 0

    def is_document_done(self, doc_id: str) -> bool:
        """True when every page of the document has a finished (ok or truncated) row."""
        pages = self.done_pages.get(doc_id)
        total = self.num_pages.get(doc_id)
        if not pages or not total:
            return False
        return all(p in pages for p in range(1, total + 1))


def parquet_file(data: bytes) -> pq.ParquetFile:
    """A whole Parquet file held in ``data``, opened from a copy in memory that Arrow owns.

    Not ``pq.ParquetFile(io.BytesIO(data))``: Arrow would read through the Python file object
    (``PyReadableFile``) from its I/O and CPU thread pools, and hold what it read as buffers that
    keep Python's ``bytes`` alive (``PyBuffer``). A pool thread that drops the last reference to
    one takes the GIL to do so, and that can happen just after ``read()`` returned. When the
    interpreter is shutting down by then (a short command such as ``llm-ocr status`` exits a few
    milliseconds after its last read, and on a busy machine the pool thread may not run for that
    long), CPython before 3.14 ends a thread that asks for the GIL with ``pthread_exit``, whose
    unwinding meets a ``noexcept`` frame of ``std::thread`` and aborts the process: ``terminate
    called without an active exception``, exit 134, after the command's output was printed
    (python/cpython#87135; apache/arrow#34314). Arrow's own buffer needs no GIL to be freed, so
    the copy (one memcpy of a file already in memory) leaves no pool thread anything to ask for.
    """
    buffer = pa.allocate_buffer(len(data))
    pa.FixedSizeBufferWriter(buffer).write(data)
    return pq.ParquetFile(pa.BufferReader(buffer))


def _read_table(stage: Storage, path: str, columns: list[str] | None = None) -> pa.Table:
    parquet = parquet_file(stage.read_bytes(path))
    missing = [name for name in columns or () if name not in parquet.schema_arrow.names]
    if missing:  # ParquetFile.read would leave it out; a caller that names a column needs it
        raise pa.ArrowInvalid(f"{stage.display(path)} has no column {missing[0]!r}")
    return parquet.read(columns=columns)


def scan_shard(
    stage: Storage, shard: int, num_shards: int, *, retry_errors: bool = True, keep_quarantined: bool = False
) -> ShardIndex:
    """Index a shard's parts before it (re)starts.

    Unreadable parts are deleted (their pages will be redone). With ``retry_errors``, rows
    whose status is ``error`` are removed from their part (rewritten atomically under the same
    name) so the retried pages appear exactly once; with ``keep_quarantined``, error rows of
    pages that crashed the model server (``quarantined``) stay, and their pages count as done.
    """
    index = ShardIndex()
    # A killed run's half-written parts of this shard (temporary files) are removed.
    remove_stale_temp_files(stage, part_glob(shard, num_shards))
    for path in list_parts(stage, shard, num_shards):
        seq = _parse(path)[2]  # type: ignore[index]
        index.next_seq = max(index.next_seq, seq + 1)
        try:
            table = _read_table(stage, path)
        except (pa.ArrowInvalid, OSError) as exc:
            log.warning("removing unreadable part %s (%s); its pages will be redone", stage.display(path), exc)
            stage.delete(path)
            index.removed_parts += 1
            continue
        statuses = table.column("status").to_pylist()
        held = _quarantined(table) if keep_quarantined else [False] * len(statuses)
        keep_flags = [s != "error" or q for s, q in zip(statuses, held)]
        if retry_errors and not all(keep_flags):
            index.dropped_error_rows += keep_flags.count(False)
            table = table.filter(pa.array(keep_flags))
            held = [q for q, k in zip(held, keep_flags) if k]
            if table.num_rows:
                stage.write_atomic(path, table_to_bytes(table))
            else:
                stage.delete(path)
        for doc_id, page, status, num_pages, quarantined in zip(
            table.column("doc_id").to_pylist(),
            table.column("page").to_pylist(),
            table.column("status").to_pylist(),
            table.column("num_pages").to_pylist(),
            held,
        ):
            index.status_counts[status] += 1
            index.kept_quarantined += quarantined
            if status != "error" or quarantined:
                index.done_pages[doc_id].add(page)
            if num_pages is not None:
                index.num_pages[doc_id] = num_pages
    return index


def _quarantined(table: pa.Table) -> list[bool]:
    # Parts written before the column existed have no quarantined rows.
    if "quarantined" not in table.column_names:
        return [False] * table.num_rows
    return [bool(q) for q in table.column("quarantined").to_pylist()]


def table_to_bytes(table: pa.Table) -> bytes:
    """Serialise a table as one Parquet file (zstd; images are already compressed)."""
    buffer = io.BytesIO()
    pq.write_table(table, buffer, compression="zstd")
    return buffer.getvalue()


#: Rows converted to Arrow at a time when a part is written (one Parquet row group each).
ROW_GROUP_ROWS = 128


#: Parts of fewer rows than this are written without zstd and dictionaries (:func:`_encoding`).
SMALL_PART_ROWS = 8


def _encoding(rows: int) -> dict[str, Any]:
    """How a part of ``rows`` rows is encoded. zstd and dictionary pages pay a set-up per column
    (the page schema has 36), which a part of a page or two does not earn back: writing a
    one-page part cost 2.4 ms with them and 1.05 ms with snappy and plain pages, for about the
    same size (36.9 and 34.6 KB; the column statistics are most of it), measured with
    ``time.thread_time`` over 300 writes. One-page parts are the service's checkpoints (a part
    per page, three stages a document); larger parts keep zstd, which packs text better."""
    if rows < SMALL_PART_ROWS:
        return {"compression": "snappy", "use_dictionary": False}
    return {"compression": "zstd"}


def rows_to_bytes(rows: list[dict[str, Any]], schema: pa.Schema) -> bytes:
    """Serialise rows as one Parquet file, converting :data:`ROW_GROUP_ROWS` rows at a time.

    Converting a whole part at once (nested blocks and figure images for 1,000 pages) costs
    a transient ~200 MB on top of the rows themselves, and it grows with the part; a batch
    at a time keeps it to a few MB (``llm-ocr bench``: peak RSS of a 2,000-page run 634 MB
    before, 454 MB after). Row groups of 128 rows also let readers stream a part.
    """
    buffer = io.BytesIO()
    with pq.ParquetWriter(buffer, schema, **_encoding(len(rows))) as writer:
        for start in range(0, len(rows), ROW_GROUP_ROWS):
            writer.write_table(pa.Table.from_pylist(rows[start : start + ROW_GROUP_ROWS], schema=schema))
    return buffer.getvalue()


def iter_rows(stage: Storage, paths: list[str] | None = None,
              columns: list[str] | None = None) -> Iterator[dict[str, Any]]:
    """Rows of a stage's parts, one part in memory at a time."""
    for path in paths if paths is not None else list_parts(stage):
        table = _read_table(stage, path, columns)
        for batch in table.to_batches(max_chunksize=64):
            yield from batch.to_pylist()


def _row_bytes(row: dict[str, Any]) -> int:
    size = len(row.get("markdown") or "") + len(row.get("raw") or "")
    for figure in row.get("figures") or []:
        image = figure.get("image") or {}
        size += len(image.get("bytes") or b"")
    return size + 256


class RowSink(Protocol):
    """Where a page flow hands its rows (:class:`PartWriter`, or a writer of page groups' parts)."""

    async def add(self, row: dict[str, Any]) -> None:
        """Take one row (stored by :meth:`close` at the latest)."""

    async def flush(self) -> None:
        """Start storing what was taken so far."""

    async def close(self) -> None:
        """Store everything taken; raise if any write failed."""


def input_order(row: dict[str, Any]) -> tuple[float, int]:
    """Where a row stands in its shard's input: its document's index, then its page (a row that
    has neither, such as a document's, keeps its place among its likes: the sort is stable)."""
    index = row.get("doc_index")
    page = row.get("page")
    return (index if isinstance(index, int) else math.inf, page if isinstance(page, int) else 0)


class PartWriter(SerialWriter):
    """Buffers rows and writes them as parts, one part at a time in a worker thread
    (:class:`~llm_ocr.storage.writer.SerialWriter`), never blocking the event loop.

    A part is written when ``max_rows`` rows or ``max_bytes`` bytes are buffered, or when
    ``flush()`` is called (the runner calls it on a timer so a crash loses at most a few
    minutes of work).
    """

    def __init__(
        self,
        stage: Storage,
        schema: pa.Schema,
        shard: int,
        num_shards: int,
        *,
        start_seq: int = 0,
        max_rows: int = 1000,
        max_bytes: int = 128 * 1024 * 1024,
    ) -> None:
        super().__init__()
        self.stage = stage
        self.schema = schema
        self.shard = shard
        self.num_shards = num_shards
        self.seq = start_seq
        self.max_rows = max_rows
        self.max_bytes = max_bytes
        self._rows: list[dict[str, Any]] = []
        self._bytes = 0
        self.rows_written = 0
        self.parts_written = 0

    async def add(self, row: dict[str, Any]) -> None:
        """Buffer one row; starts a part write when the buffer is full."""
        self._rows.append(row)
        self._bytes += _row_bytes(row)
        if len(self._rows) >= self.max_rows or self._bytes >= self.max_bytes:
            await self.flush()

    async def flush(self) -> None:
        """Hand the buffered rows to a background write (waiting for the previous one first)."""
        if not self._rows:
            return
        rows, self._rows, self._bytes = self._rows, [], 0
        # Rows come as their pages finish (longest first, retries, several slots), but a reader
        # of the dataset expects input order: each part is written in it. A run small enough
        # for one part is then in input order throughout, and a larger one within each part.
        rows.sort(key=input_order)
        path = self.stage.path(part_name(self.shard, self.num_shards, self.seq))
        self.seq += 1
        await self.submit(lambda: self._write(path, rows))

    async def settle(self) -> None:
        """Store everything taken so far and wait until it is readable (raises if a store failed)."""
        await self.flush()
        async with self._turn:
            await self._wait_pending()
        if self.failure is not None:
            raise self.failure
        await asyncio.to_thread(self.stage.flush)

    def _write(self, path: str, rows: list[dict[str, Any]]) -> None:
        self.stage.write_atomic(path, rows_to_bytes(rows, self.schema))
        self.rows_written += len(rows)
        self.parts_written += 1
        log.debug("wrote %s (%d rows)", self.stage.display(path), len(rows))
