"""A stage's page rows read by whole documents, in bounded batches: what Assemble and the
Docling export (:mod:`llm_ocr.runners.export`) both read.

A first pass reads only ``doc_id`` and ``doc_index`` of the source's parts (a column projection)
to learn which documents a shard owns and which parts hold their pages
(:func:`index_documents`); then documents are read in batches of at most so many page rows
(:func:`batches`, :func:`read_batch`), each batch reading just the parts that hold it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from llm_ocr.storage import Storage
from llm_ocr.storage.upstream import owns_row, read_columns, shard_parts, stage_has_parts


@dataclass
class DocumentEntry:
    """Where one document's page rows are: its id, how many rows, which parts."""

    doc_id: str
    rows: int = 0
    parts: set[str] = field(default_factory=set)


def source_stage(out: Storage) -> str:
    """The stage Assemble reads: Describe if it has written anything, else Escalate, else Extract."""
    for name in ("describe", "escalate"):
        if stage_has_parts(out.child(name)):
            return name
    return "extract"


def index_documents(source: Storage, shard: int, num_shards: int) -> dict[int, DocumentEntry]:
    """The documents of our shard in ``source``, by ``doc_index``, reading two columns per part."""
    entries: dict[int, DocumentEntry] = {}
    for path in shard_parts(source, shard, num_shards):
        table = read_columns(source, path, ["doc_id", "doc_index"])
        for doc_id, doc_index in zip(table.column("doc_id").to_pylist(), table.column("doc_index").to_pylist()):
            if not owns_row(path, doc_index, shard, num_shards):
                continue
            entry = entries.setdefault(doc_index, DocumentEntry(doc_id))
            entry.rows += 1
            entry.parts.add(path)
    return entries


def batches(todo: list[int], entries: dict[int, DocumentEntry], max_rows: int) -> Iterator[list[int]]:
    """Consecutive documents holding at most ``max_rows`` page rows together (at least one)."""
    batch: list[int] = []
    rows = 0
    for doc_index in todo:
        size = entries[doc_index].rows
        if batch and rows + size > max_rows:
            yield batch
            batch, rows = [], 0
        batch.append(doc_index)
        rows += size
    if batch:
        yield batch


def read_batch(source: Storage, entries: dict[int, DocumentEntry], batch: list[int],
               columns: list[str]) -> dict[int, list[dict[str, Any]]]:
    """The ``columns`` of the page rows of a batch of documents, grouped by ``doc_index``, one part
    read at a time."""
    wanted = pa.array(batch, pa.int64())
    grouped: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for path in sorted(set().union(*(entries[i].parts for i in batch))):
        table = read_columns(source, path, columns)
        table = table.filter(pc.is_in(table.column("doc_index"), value_set=wanted))
        for row in table.to_pylist():
            grouped[row["doc_index"]].append(row)
    return grouped
