"""``llm-ocr export``: an output folder's page rows as DoclingDocument JSON files and chunk rows.

Reads the stage Assemble reads (Describe, else Escalate, else Extract: the page rows with their
``blocks``, page sizes and figure crops) as Assemble does, in batches of whole documents (memory
stays bounded), in ``doc_index`` order, and writes

* ``OUT/docling/NAME.json``: the document's DoclingDocument (NAME as ``OUT/markdown``'s, see
  :func:`~llm_ocr.stages.export.safe_name`), built and checked by loading it back with docling-core;
* ``OUT/chunks/chunks-SSSSS-of-NNNNN.parquet`` (with ``--chunks``): one row per chunk,
  :data:`CHUNK_SCHEMA`, one file per shard.

A shard takes the documents Assemble's shard of the same number takes
(:func:`~llm_ocr.runners.documents.index_documents`), so shards export in parallel and no two write
one file; ``llm-ocr run --chunks`` (and ``assemble --chunks``) call :func:`export_docling` for
their shard once Assemble is done.

A document whose rows cannot be made into a DoclingDocument is logged with its error and counted;
the others are still written.
"""

from __future__ import annotations

import io
import logging
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

from llm_ocr.records import PageResult
from llm_ocr.runners.documents import batches, index_documents, read_batch, source_stage
from llm_ocr.sharding import check_shard
from llm_ocr.stages.docling_export import build_document, chunk_rows
from llm_ocr.stages.export import safe_name
from llm_ocr.storage import Storage

if TYPE_CHECKING:
    from docling_core.transforms.chunker.base import BaseChunker

log = logging.getLogger("llm_ocr")

DOCLING_DIR = "docling"
CHUNKS_DIR = "chunks"
#: A shard's chunk file: its shard and the number of shards in the name, as a stage's parts.
CHUNKS_FILE = re.compile(r"chunks-(\d{5})-of-(\d{5})\.parquet$")

#: The columns of ``OUT/chunks/chunks-SSSSS-of-NNNNN.parquet``. Boxes are in page pixels of the rendered page
#: image, origin top left (the rows' ``blocks`` space; the page sizes are in the DoclingDocument).
CHUNK_SCHEMA = pa.schema([
    pa.field("doc_id", pa.string()),
    pa.field("chunk_id", pa.string()),
    pa.field("chunk_index", pa.int32()),
    pa.field("text", pa.string()),
    pa.field("headings", pa.list_(pa.string())),
    pa.field("pages", pa.list_(pa.int32())),
    pa.field("boxes", pa.list_(pa.struct([("page", pa.int32()), ("x1", pa.float64()), ("y1", pa.float64()),
                                          ("x2", pa.float64()), ("y2", pa.float64())]))),
    pa.field("figure_ids", pa.list_(pa.string())),
    # The same boxes in PDF points of the page's user space, origin bottom left (PDF pages only).
    pa.field("pdf_boxes", pa.list_(pa.struct([("page", pa.int32()), ("left", pa.float64()), ("bottom", pa.float64()),
                                              ("right", pa.float64()), ("top", pa.float64())]))),
])

#: Page-row columns the export reads (``raw`` is large and unused).
COLUMNS = ["doc_id", "doc_index", "page", "source", "num_pages", "markdown", "figures", "blocks", "width", "height",
           "status", "error", "dpi", "turned", "pdf_page"]


@dataclass
class ExportResult:
    """What an export wrote."""

    documents: int = 0
    chunks: int = 0
    errors: dict[str, str] = field(default_factory=dict)
    paths: list[str] = field(default_factory=list)


def docling_path(out: Storage, doc_id: str) -> str:
    """Where the DoclingDocument of a document goes."""
    return out.path(DOCLING_DIR, safe_name(doc_id) + ".json")


def chunks_path(out: Storage, shard: int, num_shards: int) -> str:
    """Where shard ``shard`` of ``num_shards`` writes its chunk rows."""
    return out.path(CHUNKS_DIR, f"chunks-{shard:05d}-of-{num_shards:05d}.parquet")


def export_docling(out: Storage, chunks: bool = False, batch_pages: int = 2000, shard: int = 0,
                   num_shards: int = 1, chunker: BaseChunker | None = None) -> ExportResult:
    """Write every document of shard ``shard`` of ``num_shards`` of ``out`` as a DoclingDocument,
    and its chunks by ``chunker`` (default the hierarchical one,
    :func:`~llm_ocr.stages.docling_chunkers.make_chunker`) if ``chunks``; at most ``batch_pages``
    page rows are held at once (a document's pages always together)."""
    check_shard(num_shards, shard)
    source = out.child(source_stage(out))
    # Assemble's bounded reading: an index of two columns, then batches of documents.
    entries = index_documents(source, shard, num_shards)
    result = ExportResult()
    rows: list[dict[str, Any]] = []
    for batch in batches(sorted(entries), entries, batch_pages):
        grouped = read_batch(source, entries, batch, COLUMNS)
        for doc_index in batch:
            _export_one(out, entries[doc_index].doc_id, [PageResult.from_row(r) for r in grouped[doc_index]],
                        chunks, result, rows, chunker)
    if chunks:
        buffer = io.BytesIO()
        pq.write_table(pa.Table.from_pylist(rows, schema=CHUNK_SCHEMA), buffer)
        out.write_atomic(chunks_path(out, shard, num_shards), buffer.getvalue())
        result.chunks = len(rows)
        _remove_other_layouts(out, num_shards)
    return result


def _remove_other_layouts(out: Storage, num_shards: int) -> None:
    # Chunk files of an export with another --num-shards hold the same documents split another
    # way: left there, a reader of OUT/chunks/*.parquet would count them twice. Files of this
    # number of shards are never removed (another shard of this export may be writing them).
    for path in out.glob(CHUNKS_DIR, "chunks-*-of-*.parquet"):
        match = CHUNKS_FILE.search(path)
        if match and int(match.group(2)) != num_shards:
            out.delete(path)


def _export_one(out: Storage, doc_id: str, pages: list[PageResult], chunks: bool, result: ExportResult,
                rows: list[dict[str, Any]], chunker: BaseChunker | None) -> None:
    """Write one document's DoclingDocument and add its chunks to ``rows`` (or its error to ``result``)."""
    from docling_core.types.doc import DoclingDocument

    try:
        export = build_document(doc_id, pages)
        text = export.document.model_dump_json(by_alias=True, exclude_none=True)
        DoclingDocument.model_validate_json(text)  # what a reader will do: fail here, not there
        if chunks:
            rows.extend(chunk_rows(doc_id, export, chunker))
    except Exception as exc:  # noqa: BLE001 - one bad document must not stop the others
        result.errors[doc_id] = f"{type(exc).__name__}: {exc}"
        log.error("export: %s: %s", doc_id, result.errors[doc_id])
        return
    path = docling_path(out, doc_id)
    out.write_atomic(path, text.encode("utf-8"))
    result.paths.append(path)
    result.documents += 1
