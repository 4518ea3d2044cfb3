"""Reading an output folder for the report: which documents and pages there are, in bounded memory."""

from __future__ import annotations

import heapq
import logging
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from llm_ocr.page_routes import RouteTally
from llm_ocr.storage import Storage, retry_io
from llm_ocr.storage.parts import list_parts

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger(__name__)


# ============================================================================================
# Reading the output folder


class ReportError(Exception):
    """The report cannot be made (e.g. the output folder holds no pages)."""


#: Stages whose rows are one page each, in order of preference (Describe adds captions).
PAGE_STAGES = ("describe", "escalate", "extract")
ASSEMBLE_STAGE = "assemble"
FIELDS_STAGE = "fields"


@dataclass
class DocumentEntry:
    """What the index pass learned about one document: where its rows are and their status."""

    doc_id: str
    doc_index: int
    source: str | None = None
    num_pages: int | None = None
    pages: dict[int, str] = field(default_factory=dict)  # page → status
    parts: list[str] = field(default_factory=list)  # page-stage parts holding its rows, in order
    assemble_parts: list[str] = field(default_factory=list)
    fields_parts: list[str] = field(default_factory=list)

    @staticmethod
    def _add_part(path: str, into: list[str]) -> None:
        if path not in into:
            into.append(path)


@dataclass
class Summary:
    """Counts over a whole output folder (not only the documents a report shows)."""

    out: str
    stage: str | None = None
    documents: int = 0
    pages: int = 0
    status_counts: dict[str, int] = field(default_factory=dict)
    document_failures: int = 0
    assembled: dict[str, int] | None = None
    fields: dict[str, int] | None = None  # fields rows by status
    classes: dict[str, int] | None = None  # fields rows by class
    shown_documents: int | None = None
    #: Pages per way of reading them, and the pieces' cost (:meth:`llm_ocr.page_routes.RouteTally.as_dict`).
    read_as: dict[str, dict[str, Any]] = field(default_factory=dict)


_INDEX_COLUMNS = ["doc_id", "doc_index", "page", "status", "source", "num_pages", "segments", "cut_reason"]


class OutputReader:
    """Reads an output folder for the report and the notebook helpers.

    ``scan()`` makes one pass over small columns of every part; ``page_rows()`` and
    ``assembled_row()`` then read one document's rows, keeping at most one part in memory.
    """

    def __init__(self, out: str, storage_options: Mapping[str, Any] | None = None) -> None:
        self.out = out
        self.storage = Storage(out, dict(storage_options or {}))
        self.stage_name: str | None = None
        self.stage: Storage | None = None
        for name in PAGE_STAGES:
            stage = self.storage.child(name)
            if list_parts(stage):
                self.stage_name, self.stage = name, stage
                break
        self.assemble = self.storage.child(ASSEMBLE_STAGE)
        self.fields = self.storage.child(FIELDS_STAGE)
        self._cached: tuple[str, pa.Table] | None = None

    def _table(self, stage: Storage, path: str, columns: list[str] | None = None) -> pa.Table:
        import pyarrow.parquet as pq

        if columns is None and self._cached and self._cached[0] == path:
            return self._cached[1]

        def read() -> pa.Table:
            # Through the storage door, with a file handle: only the requested columns' bytes
            # are read, which keeps the index pass cheap on object stores too.
            with stage.fs.open(path, "rb") as handle:
                # In this thread only: Arrow's pool threads reading a Python file object can abort
                # the command at exit (storage.parts.parquet_file says why).
                return pq.ParquetFile(handle, pre_buffer=False).read(columns=columns, use_threads=False)

        table = retry_io(read, what=f"reading {stage.display(path)}")
        if columns is None:
            self._cached = (path, table)  # documents tend to sit together in one part
        return table

    def scan(
        self, max_documents: int | None = None, first: Sequence[str] = (), only: set[str] | None = None
    ) -> tuple[Summary, list[DocumentEntry]]:
        """Count everything and index the documents to show.

        The documents kept are those of ``first`` that the output holds, in that order (a caller's
        flagged documents), then the earliest others in input order (``doc_index``), up to
        ``max_documents`` in all; the others are chosen with a bounded heap so memory does not
        grow with the output. With ``only``, no other document is kept. Documents are counted by
        their page-1 (or document-level page-0) row.
        """
        summary = Summary(out=self.out, stage=self.stage_name)
        status: Counter[str] = Counter()
        read_as = RouteTally()
        wanted = list(first)[:max_documents] if max_documents is not None else list(first)
        preferred: dict[str, int] = {}
        for i, doc_id in enumerate(wanted):
            preferred.setdefault(doc_id, i)
        kept: dict[str, DocumentEntry] = {}
        heap: list[tuple[int, str]] = []  # (-doc_index, doc_id): the worst kept other document on top
        if self.stage is not None:
            for path in list_parts(self.stage):
                cols = self._index_columns(path)
                rows = zip(*(cols[c] for c in _INDEX_COLUMNS), strict=True)
                for doc_id, doc_index, page, state, source, num_pages, segments, cut_reason in rows:
                    page = page or 0
                    if page <= 1:
                        summary.documents += 1
                    if page == 0:
                        summary.document_failures += 1
                    else:
                        summary.pages += 1
                        status[state or "unknown"] += 1
                        read_as.add(segments, cut_reason)
                    entry = kept.get(doc_id)
                    if entry is None:
                        if only is not None and doc_id not in only:
                            continue
                        rank = doc_index if doc_index is not None else 2**62
                        if doc_id not in preferred and max_documents is not None:
                            if len(heap) >= max_documents:
                                if rank >= -heap[0][0]:
                                    continue
                                _, evicted = heapq.heappop(heap)
                                del kept[evicted]
                            heapq.heappush(heap, (-rank, doc_id))
                        entry = kept[doc_id] = DocumentEntry(doc_id, rank)
                    entry.source = entry.source or source
                    entry.num_pages = num_pages if num_pages is not None else entry.num_pages
                    entry.pages[page] = state or "unknown"
                    entry._add_part(path, entry.parts)
        chosen = sorted((e for e in kept.values() if e.doc_id in preferred), key=lambda e: preferred[e.doc_id])
        others = (e for e in kept.values() if e.doc_id not in preferred)
        chosen += sorted(others, key=lambda e: (e.doc_index, e.doc_id))
        kept = {e.doc_id: e for e in (chosen[:max_documents] if max_documents is not None else chosen)}
        summary.status_counts = dict(status)
        summary.read_as = read_as.as_dict()
        assembled = list_parts(self.assemble)
        if assembled:
            counts: Counter[str] = Counter()
            for path in assembled:
                table = self._table(self.assemble, path, ["doc_id", "status"])
                for doc_id, state in zip(table.column("doc_id").to_pylist(), table.column("status").to_pylist(),
                                         strict=True):
                    counts[state or "unknown"] += 1
                    if doc_id in kept:
                        kept[doc_id]._add_part(path, kept[doc_id].assemble_parts)
            summary.assembled = dict(counts)
        extracted = list_parts(self.fields)
        if extracted:
            by_status: Counter[str] = Counter()
            by_class: Counter[str] = Counter()
            for path in extracted:
                table = self._table(self.fields, path, ["doc_id", "status", "class"])
                for doc_id, state, klass in zip(*(table.column(c).to_pylist() for c in ("doc_id", "status", "class")),
                                                strict=True):
                    by_status[state or "unknown"] += 1
                    by_class[klass or "unknown"] += 1
                    if doc_id in kept:
                        kept[doc_id]._add_part(path, kept[doc_id].fields_parts)
            summary.fields, summary.classes = dict(by_status), dict(by_class)
        return summary, list(kept.values())

    def _index_columns(self, path: str) -> dict[str, list[Any]]:
        """The index columns of one part; a column the part lacks (a hand-made file with only
        ``doc_id``, ``page`` and ``markdown``) reads as all None."""
        import pyarrow.parquet as pq

        stage = self.stage
        assert stage is not None

        def read() -> pa.Table:
            with stage.fs.open(path, "rb") as handle:
                parquet = pq.ParquetFile(handle, pre_buffer=False)  # this thread only: parts.parquet_file says why
                return parquet.read(columns=[c for c in _INDEX_COLUMNS if c in parquet.schema_arrow.names],
                                    use_threads=False)

        table = retry_io(read, what=f"reading {stage.display(path)}")
        if "doc_id" not in table.column_names:
            raise ReportError(f"{stage.display(path)} has no doc_id column: its rows cannot be shown")
        names = table.column_names
        return {c: table.column(c).to_pylist() if c in names else [None] * table.num_rows for c in _INDEX_COLUMNS}

    def _rows(self, stage: Storage, paths: list[str], doc_id: str, pages: set[int] | None) -> list[dict[str, Any]]:
        import pyarrow.compute as pc

        rows: list[dict[str, Any]] = []
        for path in paths:
            table = self._table(stage, path)
            mask = pc.equal(table.column("doc_id"), doc_id)
            if pages is not None and "page" in table.column_names:
                wanted = _int_array(pages, table.schema.field("page").type)
                mask = pc.and_(mask, pc.is_in(table.column("page"), value_set=wanted))
            rows.extend(table.filter(mask).to_pylist())
        return rows

    def page_rows(self, entry: DocumentEntry, pages: set[int] | None = None) -> list[dict[str, Any]]:
        """The page rows of one document (only ``pages`` if given), in page order."""
        if self.stage is None:
            return []
        rows = self._rows(self.stage, entry.parts, entry.doc_id, pages)
        # A page should appear once; if a store without atomic writes left a duplicate, show
        # the most useful row (a finished one over an error).
        best: dict[int, dict[str, Any]] = {}
        for row in rows:
            page = row.get("page") or 0
            if page not in best or best[page].get("status") == "error":
                best[page] = row
        return [best[p] for p in sorted(best)]

    def assembled_row(self, entry: DocumentEntry) -> dict[str, Any] | None:
        """The Assemble row of one document, if there is one."""
        rows = self._rows(self.assemble, entry.assemble_parts, entry.doc_id, None)
        return rows[-1] if rows else None

    def fields_row(self, entry: DocumentEntry) -> dict[str, Any] | None:
        """The Fields row of one document, if there is one."""
        rows = self._rows(self.fields, entry.fields_parts, entry.doc_id, None)
        return rows[-1] if rows else None

    def release(self) -> None:
        """Drop the cached part table."""
        self._cached = None


def _int_array(values: set[int], of_type: pa.DataType) -> pa.Array:
    import pyarrow as pa

    return pa.array(sorted(values), type=of_type)  # the column's own type: a hand-made part may hold int64
