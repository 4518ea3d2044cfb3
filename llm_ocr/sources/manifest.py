"""Manifest INPUTs: a list of the documents to read, as Parquet, JSONL or CSV.

An INPUT is a manifest when it is

- a file ending ``.jsonl``, ``.ndjson`` or ``.csv`` (on any store);
- a folder holding ``_manifest.json``: what ``llm-ocr plan --write-manifest`` and ``llm-ocr
  launch`` write (Parquet parts and an index of their row counts);
- a Parquet file, or a folder of them, with a string ``url`` or ``path`` column and no image
  column (and no ``--image-column`` given: that makes it a dataset).

Each row names one document: ``url`` (or ``path``: a URL on any store, an absolute path, or a
path relative to the manifest's folder), and optionally ``id`` (its ``doc_id``; else the path
as written, or the URL without its protocol), ``size``, ``sha256`` and ``pages``. A row that
names no document gets an error row of its own (:attr:`DocumentRef.error`); a row naming a
missing document gets the error of reading it, like any file.

A shard reads only its share, and numbers its rows (``doc_index``) without the others':

- **Parquet**: rows ``[s*R/N, (s+1)*R/N)``, a contiguous run balanced by count (every row is one
  document, whatever its bytes). ``R`` comes from the footers, or from ``_manifest.json`` alone,
  and only the row groups overlapping the run are read (with the index, only their files'
  footers too), so start-up does not grow with the manifest.
- **JSONL and CSV**: the rows that begin in bytes ``[s*B/N, (s+1)*B/N)`` of the file, split at
  line boundaries (one row per line: a CSV field must not hold a line break). Numbering them
  needs the count of the rows before: the shard reads the bytes before its share, counting lines
  (and every shard reads the whole file when work groups need every shard's size), so large
  manifests are better as Parquet.

Blank lines are not rows. The order is the manifest's, which every shard sees the same.
"""

from __future__ import annotations

import csv
import json
import posixpath
import re
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

import pyarrow as pa
from fsspec.core import split_protocol
from fsspec.implementations.local import LocalFileSystem

from .base import DocumentKind, DocumentRef
from .kinds import document_kind
from .parquet import ParquetFile, ParquetFiles, ReadStats, open_parquet_files

#: The index of a manifest folder: its Parquet files, in order, with their row counts.
MANIFEST_INDEX = "_manifest.json"
#: Columns naming the document, in order of preference.
URL_COLUMNS = ("url", "path")
#: Columns read when present.
OPTIONAL_COLUMNS = ("id", "size", "sha256", "pages")
#: Line manifests by extension.
LINE_FORMATS = {".jsonl": "jsonl", ".ndjson": "jsonl", ".csv": "csv"}
#: A sha256 as a manifest gives it (lower-cased first).
_HEX64 = re.compile(r"[0-9a-f]{64}")
#: Bytes read at a time from a line manifest.
LINE_BLOCK = 4 * 1024 * 1024


class ManifestError(Exception):
    """A manifest INPUT is unusable (no url/path column, unreadable header); listing raises it as
    an :class:`~.listing.InputError`."""


def line_format(path: str) -> str | None:
    """``jsonl`` or ``csv`` for a path that names a line manifest, else None."""
    return LINE_FORMATS.get(posixpath.splitext(path)[1].lower())


def looks_like_manifest(schema: pa.Schema) -> bool:
    """Whether a Parquet schema is a manifest's: a string ``url`` or ``path`` column and nothing
    that holds images (binary, ``{bytes, path}`` structs, or a column named ``image(s)``)."""
    names = set(schema.names)
    if not any(n in names and _is_string(schema.field(n).type) for n in URL_COLUMNS):
        return False
    if names & {"image", "images"}:
        return False
    return not any(_holds_bytes(f.type) for f in schema)


def _is_string(kind: pa.DataType) -> bool:
    return bool(pa.types.is_string(kind) or pa.types.is_large_string(kind))


def _holds_bytes(kind: pa.DataType) -> bool:
    if pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
        return True
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        return _holds_bytes(kind.value_type)
    if pa.types.is_struct(kind):
        return any(_holds_bytes(kind.field(i).type) for i in range(kind.num_fields))
    return False


@dataclass
class ManifestRow:
    """One row: its number in the manifest and what it says (``error``: why it names no document)."""

    row: int
    url: str | None = None
    id: str | None = None
    size: int | None = None
    sha256: str | None = None
    pages: int | None = None
    error: str | None = None


def row_of(number: int, record: Any) -> ManifestRow:
    """A :class:`ManifestRow` from one record (a dict of column values), checked."""
    if not isinstance(record, dict):
        return ManifestRow(number, error=f"manifest row {number} is not an object: {str(record)[:80]!r}")
    url = next((str(record[c]).strip() for c in URL_COLUMNS if record.get(c) not in (None, "")), "")
    row = ManifestRow(number, url=url or None)
    if record.get("id") not in (None, ""):
        row.id = str(record["id"])
    if not url:
        return replace(row, error=f"manifest row {number} has no url or path")
    if record.get("sha256") not in (None, ""):
        digest = str(record["sha256"]).strip().lower()
        if not _HEX64.fullmatch(digest):
            # A wrong hash would make the document a copy of another: the row is an error instead.
            return replace(row, error=f"manifest row {number}: sha256 {str(record['sha256'])[:80]!r} is not 64 hex "
                                      "digits")
        row.sha256 = digest
    for name in ("size", "pages"):
        value = record.get(name)
        if value in (None, ""):
            continue
        try:
            setattr(row, name, int(value))
        except (TypeError, ValueError):
            return replace(row, error=f"manifest row {number}: {name} {value!r} is not a whole number")
    return row


@dataclass
class ManifestPlan:
    """A manifest INPUT, resolved: where it is, how its rows are read and numbered."""

    url: str
    fs: Any
    #: The folder relative paths resolve against, as the filesystem spells it.
    base: str
    table: ParquetTable | LineTable

    @property
    def num_rows(self) -> int:
        """Rows of the manifest (a line manifest counts its lines once, when first asked)."""
        return self.table.num_rows

    def shard_rows(self, num_shards: int, shard: int) -> int:
        """How many rows shard ``shard`` of ``num_shards`` holds."""
        return self.table.shard_rows(num_shards, shard)

    def shard_refs(self, offset: int, num_shards: int, shard: int, skip: int = 0) -> Iterator[DocumentRef]:
        """The refs of one shard's rows past the first ``skip``; ``offset``: the global number of row 0."""
        for row in self.table.rows(num_shards, shard, skip):
            yield self.ref(offset, row)

    def all_rows(self) -> Iterator[ManifestRow]:
        """Every row, in order."""
        return self.table.rows(1, 0, 0)

    def ref(self, offset: int, row: ManifestRow) -> DocumentRef:
        """The :class:`DocumentRef` of ``row``; ``offset``: the global number of row 0."""
        index = offset + row.row
        doc_id = row.id or (_default_id(row.url) if row.url else f"{posixpath.basename(self.url.rstrip('/'))}/"
                                                                    f"row-{row.row:08d}")
        if row.url is None or row.error is not None:
            # Named by what the row says, located at the manifest: the error row says which row.
            return DocumentRef(doc_id, index, self.url, "pdf", "", error=row.error or "no document")
        location = self.resolve(row.url)
        return DocumentRef(doc_id, index, location, _kind(row.url), location, sha256=row.sha256 or "")

    def resolve(self, url: str) -> str:
        """``url`` of a row as a URL (or local path) to read: relative to the manifest's folder."""
        if split_protocol(url)[0] is not None:
            return url
        if isinstance(self.fs, LocalFileSystem):
            return posixpath.normpath(posixpath.join(self.base, url))
        path = url.lstrip("/") if url.startswith("/") else posixpath.normpath(posixpath.join(self.base, url))
        return str(self.fs.unstrip_protocol(path))


def _default_id(url: str) -> str:
    protocol, path = split_protocol(url)
    path = posixpath.normpath(path) if protocol is None else path
    return path.lstrip("/").removeprefix("./")


def _kind(url: str) -> DocumentKind:
    # Listing reads no document: a row without an image extension is read as a PDF (most
    # manifests' extensionless URLs are), and gets an error row if it is not one.
    return document_kind(url.split("?", 1)[0]) or "pdf"


def _share(total: int, num_shards: int, shard: int) -> tuple[int, int]:
    return shard * total // num_shards, (shard + 1) * total // num_shards


# --------------------------------------------------------------------------------------------
# Parquet


@dataclass
class ParquetTable:
    """The Parquet files of a manifest, with their row counts; footers read when needed."""

    fs: Any
    paths: list[str]
    sizes: list[int | None]
    counts: list[int]
    columns: list[str]
    stats: ReadStats
    #: Footers read so far, by file number (each as a one-file ParquetFiles numbering from 0).
    opened: dict[int, ParquetFiles] = field(default_factory=dict)

    @property
    def num_rows(self) -> int:
        return sum(self.counts)

    def shard_rows(self, num_shards: int, shard: int) -> int:
        first, stop = _share(self.num_rows, num_shards, shard)
        return stop - first

    def rows(self, num_shards: int, shard: int, skip: int) -> Iterator[ManifestRow]:
        first, stop = _share(self.num_rows, num_shards, shard)
        yield from self.between(first + skip, stop)

    def between(self, first: int, stop: int) -> Iterator[ManifestRow]:
        """Rows ``first .. stop - 1``, reading only the row groups that hold them."""
        offset = 0
        for number, count in enumerate(self.counts):
            if offset < stop and first < offset + count:
                files = self._open(number)
                groups = [g for g in files.row_groups(self.columns)
                          if g.first_row + offset < stop and first < g.first_row + offset + g.num_rows]
                for row, record in files.iter_records(groups, self.columns):
                    if first <= offset + row < stop:
                        yield row_of(offset + row, record)
            offset += count

    def _open(self, number: int) -> ParquetFiles:
        if number not in self.opened:
            self.opened[number] = open_parquet_files(self.fs, [self.paths[number]], [self.sizes[number]], self.stats)
        return self.opened[number]


def parquet_table(fs: Any, files: ParquetFiles) -> ParquetTable:
    """The table of a Parquet manifest whose footers are read already (``files``)."""
    schema = files.schema
    columns = _columns(schema.names)
    opened = {n: ParquetFiles(fs, [_from_zero(f)], files.stats) for n, f in enumerate(files.files)}
    return ParquetTable(fs, [f.path for f in files.files], [f.size for f in files.files],
                        [f.metadata.num_rows for f in files.files], columns, files.stats, opened)


def _from_zero(f: ParquetFile) -> ParquetFile:
    return replace(f, first_row=0)


def _columns(names: list[str]) -> list[str]:
    url = next((c for c in URL_COLUMNS if c in names), None)
    if url is None:
        raise ManifestError(f"no url or path column: columns are {names}")
    return [url, *(c for c in OPTIONAL_COLUMNS if c in names)]


def indexed_table(fs: Any, folder: str, stats: ReadStats) -> ParquetTable:
    """The table of a manifest folder from its ``_manifest.json``: no footer read but the first
    file's (to check its columns), whatever the number of files."""
    index_path = posixpath.join(folder, MANIFEST_INDEX)
    try:
        index = json.loads(fs.cat_file(index_path))
        entries = index["files"]
        paths = [posixpath.join(folder, e["name"]) for e in entries]
        counts = [int(e["rows"]) for e in entries]
        sizes = [int(e["size"]) if e.get("size") is not None else None for e in entries]
    except (ValueError, KeyError, TypeError) as exc:
        raise ManifestError(f"{index_path} is not a manifest index ({type(exc).__name__}: {exc})") from exc
    if not paths:
        raise ManifestError(f"{index_path} lists no files")
    table = ParquetTable(fs, paths, sizes, counts, [], stats)
    first = table._open(0)
    table.columns = _columns(first.schema.names)
    return table


# --------------------------------------------------------------------------------------------
# JSONL and CSV


@dataclass
class LineTable:
    """A JSONL or CSV manifest: one row a line, read by byte ranges at line boundaries."""

    fs: Any
    path: str
    size: int
    format: str  # "jsonl" or "csv"
    #: CSV: the header's column names; the rows start after it.
    header: list[str] = field(default_factory=list)
    data_start: int = 0

    @cached_property
    def num_rows(self) -> int:
        return self._count(self.data_start, self.size)

    def bounds(self, num_shards: int, shard: int) -> tuple[int, int]:
        """The bytes whose lines shard ``shard`` reads: lines that begin in them."""
        lo, hi = _share(self.size - self.data_start, num_shards, shard)
        return self.data_start + lo, self.data_start + hi

    def shard_rows(self, num_shards: int, shard: int) -> int:
        return self._count(*self.bounds(num_shards, shard))

    def rows(self, num_shards: int, shard: int, skip: int) -> Iterator[ManifestRow]:
        lo, hi = self.bounds(num_shards, shard)
        first = self._count(self.data_start, lo) if lo > self.data_start else 0
        for k, line in enumerate(self._lines(lo, hi)):
            if k >= skip:
                yield self.parse(first + k, line)

    def parse(self, number: int, line: bytes) -> ManifestRow:
        """One line as a row (an error row if it does not parse)."""
        try:
            text = line.decode("utf-8").lstrip("\ufeff")
            if self.format == "jsonl":
                return row_of(number, json.loads(text))
            values = next(csv.reader([text]))
        except (UnicodeDecodeError, ValueError, csv.Error) as exc:
            return ManifestRow(number, error=f"manifest row {number} does not parse as {self.format}: {exc}")
        if len(values) != len(self.header):
            return ManifestRow(number, error=f"manifest row {number} has {len(values)} fields, the header "
                                             f"{len(self.header)}")
        return row_of(number, dict(zip(self.header, values)))

    def _count(self, lo: int, hi: int) -> int:
        """How many rows :meth:`_lines` gives for ``lo .. hi``, counted a block at a time: the
        rows before a shard's share number its own, and a line read one by one cost 12 µs."""
        if lo >= hi:
            return 0
        count = 0
        with self.fs.open(self.path, "rb", block_size=LINE_BLOCK) as f:
            if lo > 0:
                f.seek(lo - 1)
                f.readline()  # the line holding byte lo - 1 is the previous share's
            start, rest = f.tell(), b""  # where the line in ``rest`` begins
            while start < hi:
                block = f.read(LINE_BLOCK)
                if not block:
                    return count + bool(rest.strip())
                lines = (rest + block).split(b"\n")
                rest = lines.pop()
                for line in lines:
                    if start >= hi:
                        return count
                    count += bool(line.strip())
                    start += len(line) + 1
        return count

    def _lines(self, lo: int, hi: int) -> Iterator[bytes]:
        """The non-blank lines that begin in bytes ``lo .. hi - 1`` (the last may end past ``hi``)."""
        if lo >= hi:
            return
        with self.fs.open(self.path, "rb", block_size=LINE_BLOCK) as f:
            if lo > 0:
                f.seek(lo - 1)
                f.readline()  # the line holding byte lo - 1 is the previous share's
            while True:
                if f.tell() >= hi:
                    return
                line = f.readline()
                if not line:
                    return
                if line.strip():
                    yield line




def line_table(fs: Any, path: str, size: int, fmt: str) -> LineTable:
    """A JSONL or CSV manifest; a CSV's header read now (its first line)."""
    table = LineTable(fs, path, size, fmt)
    if fmt == "csv":
        with fs.open(path, "rb", block_size=64 * 1024) as f:
            head = f.readline()
        try:
            table.header = [h.strip() for h in next(csv.reader([head.decode("utf-8-sig")]))]
        except (UnicodeDecodeError, StopIteration, csv.Error) as exc:
            raise ManifestError(f"cannot read the CSV header of {path}: {exc}") from exc
        if not set(table.header) & set(URL_COLUMNS):
            raise ManifestError(f"the CSV header of {path} has no url or path column: {table.header}")
        table.data_start = len(head)
    return table
