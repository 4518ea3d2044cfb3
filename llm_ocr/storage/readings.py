"""Where each distinct document was read: its content hash, its ``doc_id`` and the folder of its rows.

A run records the documents it read in ``OUT/_state/hashes/``: small Parquet files, one per
shard run, with the columns of :data:`COLUMNS` (``sha256``, ``doc_id``, ``num_pages``, ``rows``:
the URL of the output folder whose stage folders, ``extract/`` and ``describe/``, hold that
document's page rows). A later run into the same OUT
reads them all, so a document it has read under another name is copied, not read again; a run
into another OUT may name them too (``--dedup-index OUT/_state/hashes/``), or any Parquet file
or folder with those columns.

The rows of a document are found again by its ``doc_id`` in the Parquet files of a stage folder
of ``rows``; the row groups whose ``doc_id`` statistics exclude it are not read.
"""

from __future__ import annotations

import io
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from llm_ocr.storage.url import Storage

log = logging.getLogger(__name__)

#: Where a run records the documents it read, under OUT.
HASHES = "_state/hashes"
#: The columns of a hash record.
SCHEMA = pa.schema([
    pa.field("sha256", pa.string()),
    pa.field("doc_id", pa.string()),
    pa.field("num_pages", pa.int32()),
    pa.field("rows", pa.string()),
])
COLUMNS = tuple(SCHEMA.names)


@dataclass(frozen=True)
class Reading:
    """A document read once: its ``doc_id``, its pages (None: unknown) and the output folder
    holding its rows (``rows``)."""

    doc_id: str
    num_pages: int | None
    rows: str


def load_readings(urls: Iterable[str], storage_options: dict[str, Any] | None = None) -> dict[str, Reading]:
    """The readings recorded at ``urls`` (each a Parquet file or a folder of them; a missing
    folder holds none), by sha256. The first record of a hash wins."""
    found: dict[str, Reading] = {}
    for url in urls:
        for table in _tables(url, storage_options or {}):
            missing = {"sha256", "doc_id", "rows"} - set(table.column_names)
            if missing:
                raise ValueError(f"{url}: a dedup index needs the columns sha256, doc_id and rows (the output "
                                 "folder holding the rows) "
                                 f"(missing: {', '.join(sorted(missing))})")
            pages = table.column("num_pages").to_pylist() if "num_pages" in table.column_names \
                else [None] * table.num_rows
            for sha, doc_id, num_pages, rows in zip(table.column("sha256").to_pylist(),
                                                    table.column("doc_id").to_pylist(), pages,
                                                    table.column("rows").to_pylist()):
                if sha and doc_id and rows:
                    found.setdefault(str(sha).lower(), Reading(doc_id, num_pages, rows))
    return found


def _tables(url: str, storage_options: dict[str, Any]) -> list[pa.Table]:
    """The hash tables at ``url``: the file, or every Parquet file of the folder."""
    store = Storage(url, storage_options)
    if store.fs.isfile(store.root):
        return [pq.read_table(io.BytesIO(store.fs.cat_file(store.root)))]
    paths = sorted(store.glob("*.parquet")) if store.fs.isdir(store.root) else []
    return [pq.read_table(io.BytesIO(store.read_bytes(p))) for p in paths]


def write_readings(out: Storage, shard: int, num_shards: int, readings: dict[str, Reading]) -> str | None:
    """Record ``readings`` (by sha256) in ``OUT/_state/hashes`` as one new file of this shard's
    (named by the time, so a rerun adds a file beside the earlier run's); None: nothing to record."""
    if not readings:
        return None
    table = pa.table({
        "sha256": list(readings),
        "doc_id": [r.doc_id for r in readings.values()],
        "num_pages": [r.num_pages for r in readings.values()],
        "rows": [r.rows for r in readings.values()],
    }, schema=SCHEMA)
    sink = io.BytesIO()
    pq.write_table(table, sink)
    folder = out.child(HASHES)
    path = folder.path(f"hashes-{shard:05d}-of-{num_shards:05d}-{time.time_ns()}.parquet")
    folder.write_atomic(path, sink.getvalue())
    folder.flush()
    return path


def stored_rows(output: str, stage: str, doc_ids: Iterable[str], storage_options: dict[str, Any] | None = None,
                pattern: str = "*.parquet") -> dict[str, list[dict[str, Any]]]:
    """The page rows of ``doc_ids`` in the Parquet files of ``output/stage`` (those ``pattern``
    matches: one page group's parts, say), by ``doc_id``, each document's in page order (a page a
    rerun wrote again, once: its reading that is not an error)."""
    wanted = sorted(set(doc_ids))
    found: dict[str, dict[int, dict[str, Any]]] = {d: {} for d in wanted}
    if not wanted:
        return {}
    store = Storage(output, storage_options).child(stage)
    for path in sorted(store.glob(pattern)):
        with store.fs.open(path, "rb") as handle:
            table = pq.read_table(handle, filters=[("doc_id", "in", wanted)])
        for row in table.to_pylist():
            pages = found[row["doc_id"]]
            held = pages.get(row["page"])
            # A page a rerun read again (its error row retried): the reading that is not an error.
            if held is None or (held.get("status") == "error" and row.get("status") != "error"):
                pages[row["page"]] = row
    return {d: [pages[p] for p in sorted(pages)] for d, pages in found.items() if pages}
