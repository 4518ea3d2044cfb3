"""Reading Parquet datasets by byte ranges: footers first, then only the row groups asked for.

Every read is one ranged request through fsspec (``cat_file(path, start, end)``), so the same
code serves local files, ``s3://``, ``gs://``, ``hf://`` and plain ``http(s)://``, and reads each
byte once: no block cache reading ahead, no file opened twice, no footer parsed twice.

- :func:`open_parquet_files` reads every file's footer (the last 64 KiB, a second request only
  for a bigger footer), a few files at a time, and numbers the rows across files;
- :meth:`ParquetFiles.row_groups` lists the row groups with the bytes a reader of the chosen
  columns fetches, which is what sharding balances;
- :meth:`ParquetFiles.iter_rows` streams the chosen column of some row groups a few rows at a
  time: consecutive small row groups are fetched together in one request (their byte span,
  at most :data:`READ_AHEAD`), a bigger one through a bounded buffer, so a huge row group never
  sits in memory whole.

:class:`ReadStats` counts the requests and bytes, for ``llm-ocr bench-reads`` and the tests.
"""

from __future__ import annotations

import io
import threading
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from itertools import groupby
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from fsspec import AbstractFileSystem
from fsspec.asyn import AsyncFileSystem

from llm_ocr.storage import retry_io

#: Bytes read from the end of a file hoping to get the whole footer in one request.
FOOTER_GUESS = 64 * 1024
#: Footers read at once: files are independent, and each read is mostly latency.
FOOTER_THREADS = 16
#: Consecutive row groups spanning at most this many bytes are fetched in one request (small
#: row groups would otherwise cost a round trip each); also the memory that read holds.
READ_AHEAD = 32 * 1024 * 1024
#: Read size within a column chunk of a bigger row group: bounds the memory of decoding it.
CHUNK_BUFFER = 8 * 1024 * 1024
#: Rows decoded at a time.
BATCH_ROWS = 16
#: Rows decoded at a time from a manifest (a few short strings each, not images).
MANIFEST_BATCH_ROWS = 4096
_MAGIC = b"PAR1"


class ParquetFooterError(Exception):
    """A file is not a readable Parquet file (no footer, or a corrupt one)."""


@dataclass
class ReadStats:
    """What a reader fetched: requests and bytes, footers and data apart. Thread-safe."""

    footer_requests: int = 0
    footer_bytes: int = 0
    data_requests: int = 0
    data_bytes: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, kind: str, size: int) -> None:
        """Count one request of ``size`` bytes; ``kind`` is ``footer`` or ``data``."""
        with self._lock:
            setattr(self, f"{kind}_requests", getattr(self, f"{kind}_requests") + 1)
            setattr(self, f"{kind}_bytes", getattr(self, f"{kind}_bytes") + size)

    @property
    def bytes(self) -> int:
        """Every byte fetched."""
        return self.footer_bytes + self.data_bytes

    @property
    def requests(self) -> int:
        """Every request made."""
        return self.footer_requests + self.data_requests


@dataclass(frozen=True)
class ParquetFile:
    """One file: where it is, its size, its footer, the dataset row number of its first row,
    and the bytes read with the footer (the end of the last row group, often: never read twice)."""

    path: str  # as the filesystem spells it
    size: int
    metadata: pq.FileMetaData = field(repr=False)
    first_row: int
    tail: bytes = field(default=b"", repr=False)


@dataclass(frozen=True)
class RowGroup:
    """One row group: which file, which group, its first dataset row, its rows, the bytes of
    the chosen column's chunks (what a reader fetches) and where in the file they lie."""

    file: int
    index: int
    first_row: int
    num_rows: int
    weight: int
    start: int = 0  # byte range of the chosen column's chunks
    end: int = 0


@dataclass
class ParquetFiles:
    """The files of one Parquet dataset, in order, with their footers."""

    fs: Any
    files: list[ParquetFile]
    stats: ReadStats

    @property
    def num_rows(self) -> int:
        """Rows of all the files."""
        return sum(f.metadata.num_rows for f in self.files)

    @property
    def schema(self) -> pa.Schema:
        """The Arrow schema of the first file (with its ``datasets`` metadata, if any)."""
        return self.files[0].metadata.schema.to_arrow_schema()

    def row_groups(self, column: str | Sequence[str]) -> list[RowGroup]:
        """Every row group in dataset order, weighed by the bytes of ``column``'s chunks (or of
        every column named, when ``column`` is a list)."""
        columns = {column} if isinstance(column, str) else set(column)
        groups = []
        for number, f in enumerate(self.files):
            first = f.first_row
            for index in range(f.metadata.num_row_groups):
                meta = f.metadata.row_group(index)
                chunks = [meta.column(j) for j in range(meta.num_columns)]
                chunks = [c for c in chunks if _top_level(c.path_in_schema) in columns]
                weight = sum(c.total_compressed_size for c in chunks)
                start = min((_chunk_start(c) for c in chunks), default=0)
                end = max((_chunk_start(c) + c.total_compressed_size for c in chunks), default=0)
                groups.append(RowGroup(number, index, first, meta.num_rows, weight, start, end))
                first += meta.num_rows
        return groups

    def iter_rows(self, groups: Iterable[RowGroup], column: str) -> Iterator[tuple[int, Any]]:
        """``(dataset row number, value of column)`` for every row of ``groups``, in order.

        Groups of one file share one pyarrow reader (and the footer already read); values are
        plain Python (an image is a ``{"bytes", "path"}`` dict, still encoded).
        """
        for number, run in groupby(groups, key=lambda g: g.file):
            f = self.files[number]
            source = _RangeFile(self.fs, f, self.stats)
            reader = pq.ParquetFile(source, metadata=f.metadata, buffer_size=CHUNK_BUFFER, pre_buffer=False)
            yield from self._file_rows(list(run), column, source, reader)

    def iter_records(self, groups: Iterable[RowGroup], columns: list[str]) -> Iterator[tuple[int, dict[str, Any]]]:
        """``(dataset row number, {column: value})`` for every row of ``groups``, in order: the
        columns named only, read as :meth:`iter_rows` reads one (their row groups' spans only)."""
        for number, run in groupby(groups, key=lambda g: g.file):
            f = self.files[number]
            source = _RangeFile(self.fs, f, self.stats)
            reader = pq.ParquetFile(source, metadata=f.metadata, buffer_size=CHUNK_BUFFER, pre_buffer=False)
            yield from self._file_rows(list(run), columns, source, reader)

    def _file_rows(self, groups: list[RowGroup], column: str | list[str], source: _RangeFile,
                   reader: Any) -> Iterator[tuple[int, Any]]:
        for together in _read_together(groups):
            start, end = together[0].start, together[-1].end
            if end - start <= READ_AHEAD:
                source.hold(start, end)
            for group in together:
                row = group.first_row
                names = [column] if isinstance(column, str) else column
                batches = reader.iter_batches(batch_size=BATCH_ROWS if isinstance(column, str) else MANIFEST_BATCH_ROWS,
                                              row_groups=[group.index], columns=names, use_threads=False)
                for batch in batches:
                    values = batch.column(0).to_pylist() if isinstance(column, str) else batch.to_pylist()
                    for value in values:
                        yield row, value
                        row += 1
            source.release()


def _read_together(groups: list[RowGroup]) -> Iterator[list[RowGroup]]:
    """Runs of consecutive row groups (of one file) whose byte span fits :data:`READ_AHEAD`."""
    run: list[RowGroup] = []
    for group in groups:
        if run and (group.index != run[-1].index + 1 or group.end - run[0].start > READ_AHEAD):
            yield run
            run = []
        run.append(group)
    if run:
        yield run


def _chunk_start(chunk: Any) -> int:
    # The dictionary page, when there is one, comes first (some writers set its offset to 0
    # when there is none).
    if chunk.has_dictionary_page and chunk.dictionary_page_offset:
        return min(chunk.dictionary_page_offset, chunk.data_page_offset)
    return chunk.data_page_offset


def _top_level(path_in_schema: str) -> str:
    return path_in_schema.split(".", 1)[0]


def open_parquet_files(fs: Any, paths: Sequence[str], sizes: Sequence[int | None], stats: ReadStats) -> ParquetFiles:
    """Read the footers of ``paths`` (sizes unknown as None are asked for) and number the rows.

    Raises :class:`ParquetFooterError` naming the first file that is not Parquet.
    """

    def footer(item: tuple[str, int | None]) -> tuple[int, pq.FileMetaData, bytes]:
        path, size = item
        if size is None:
            size = int(retry_io(lambda: fs.info(path), what=f"reading the size of {path}")["size"])
        return (size, *read_footer(fs, path, size, stats))

    with ThreadPoolExecutor(min(FOOTER_THREADS, max(1, len(paths))), thread_name_prefix="llm-ocr-footer") as pool:
        footers = list(pool.map(footer, zip(paths, sizes)))
    files = []
    first = 0
    for path, (size, metadata, tail) in zip(paths, footers):
        files.append(ParquetFile(path, size, metadata, first, tail))
        first += metadata.num_rows
    return ParquetFiles(fs, files, stats)


def read_footer(fs: Any, path: str, size: int, stats: ReadStats) -> tuple[pq.FileMetaData, bytes]:
    """The footer of one Parquet file and the bytes read to get it (the file's last 64 KiB, or
    all of the footer if bigger): one ranged read, two for a footer over 64 KiB."""
    if size < 12:
        raise ParquetFooterError(f"{path} is not a Parquet file ({size} bytes)")
    tail = _fetch(fs, path, size, max(0, size - FOOTER_GUESS), size, stats, "footer")
    if tail[-4:] != _MAGIC:
        raise ParquetFooterError(f"{path} is not a Parquet file (no PAR1 footer)")
    length = int.from_bytes(tail[-8:-4], "little")
    if length + 8 > size - 4:
        raise ParquetFooterError(f"{path} has a corrupt footer (length {length} in a file of {size} bytes)")
    if length + 8 > len(tail):
        tail = _fetch(fs, path, size, size - length - 8, size - len(tail), stats, "footer") + tail
    try:
        return pq.read_metadata(pa.BufferReader(tail[-(length + 8) :])), tail
    except (pa.ArrowInvalid, OSError) as exc:
        raise ParquetFooterError(f"{path} has a corrupt footer: {exc}") from exc


def _fetch(fs: Any, path: str, size: int, start: int, end: int, stats: ReadStats, kind: str) -> bytes:
    data = retry_io(lambda: _read_range(fs, path, size, start, end), what=f"reading {path}")
    stats.add(kind, len(data))
    if len(data) != end - start:  # e.g. a server that ignores Range and sends the whole file
        raise OSError(f"reading {path} bytes {start}-{end}: got {len(data)} bytes (does the server support ranges?)")
    return data


def _read_range(fs: Any, path: str, size: int, start: int, end: int) -> bytes:
    """Bytes ``start:end`` of a file in one request, whatever the filesystem."""
    if not isinstance(fs, AsyncFileSystem) and type(fs).cat_file is AbstractFileSystem.cat_file:
        # The generic cat_file opens the file with fsspec's read-ahead cache, which fetches whole
        # blocks past the range (HfFileSystem: 5 MB a read). No cache: one request, the range.
        with fs.open(path, "rb", cache_type="none", size=size) as f:
            f.seek(start)
            return f.read(end - start)
    return fs.cat_file(path, start=start, end=end)  # a ranged GET of its own (HTTP, S3, GCS, local)


class _RangeFile(io.RawIOBase):
    """A read-only file over ranged requests, for pyarrow: each ``read`` is one request, unless
    its bytes are held already (the footer read's tail, or a span fetched by :meth:`hold`).

    Knowing the size up front saves the ``HEAD`` (or ``info``) request opening a file costs.
    """

    def __init__(self, fs: Any, file: ParquetFile, stats: ReadStats) -> None:
        super().__init__()
        self.fs, self.path, self.size, self.stats = fs, file.path, file.size, stats
        self.tail, self.tail_start = file.tail, file.size - len(file.tail)
        self.held, self.held_start = b"", 0
        self.position = 0

    def hold(self, start: int, end: int) -> None:
        """Fetch ``start:end`` in one request (what the tail holds aside) and serve reads from it."""
        self.release()
        self.held_start = start
        self.held = self.read_at(start, end) if start < end else b""

    def release(self) -> None:
        """Forget the held span."""
        self.held = b""

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.position, io.SEEK_END: self.size}[whence]
        self.position = base + offset
        return self.position

    def read(self, size: int = -1) -> bytes:
        end = self.size if size is None or size < 0 else min(self.size, self.position + size)
        if end <= self.position:
            return b""
        start, self.position = self.position, end
        if self.held_start <= start and end <= self.held_start + len(self.held):
            return self.held[start - self.held_start : end - self.held_start]
        return self.read_at(start, end)

    def read_at(self, start: int, end: int) -> bytes:
        """Bytes ``start:end``: what the tail holds from memory, the rest in one request."""
        fetched = b""
        if start < self.tail_start:
            fetched = _fetch(self.fs, self.path, self.size, start, min(end, self.tail_start), self.stats, "data")
        if end <= self.tail_start:
            return fetched
        return fetched + self.tail[max(start, self.tail_start) - self.tail_start : end - self.tail_start]

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)
