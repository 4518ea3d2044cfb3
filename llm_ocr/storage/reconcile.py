"""Account for every row of an output location from its Parquet parts and completion markers.

Reads only the ``status``/``doc_id``/``page``/``quarantined`` columns of each part (and extract's
``segments``/``cut_reason``: how each page was read, :mod:`llm_ocr.page_routes`), so it
is cheap on object storage too; of the failed rows only, also ``source``, ``error`` and
``failed_pages``, to name the failed documents (:class:`Failures`). ``llm-ocr status`` prints
it; launchers count shards' rows with it; the end of a run names its shard's failed documents
with :func:`stage_failures`.
"""

from __future__ import annotations

import bisect
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow.parquet as pq

from llm_ocr.page_routes import RouteTally
from llm_ocr.storage.parts import PART_RE, ShardLayoutError, list_parts, parquet_file
from llm_ocr.storage.retry import retry_io
from llm_ocr.storage.state import list_markers
from llm_ocr.storage.url import Storage

STAGES = ("extract", "escalate", "describe", "assemble", "fields")
#: Stages whose rows are documents, not pages.
DOCUMENT_STAGES = ("assemble", "fields")
#: Row statuses that count as failed (``partial``: an Assemble document some of whose pages failed).
FAILED = ("error", "partial")
#: How many failed documents are named (the rest are counted, and where to find them said).
FAILURES_SHOWN = 20
#: The columns read of a part's failed rows (those a part has; never the images or the text).
_FAILURE_COLUMNS = ("doc_id", "source", "page", "status", "error", "failed_pages", "quarantined")


@dataclass
class FailedDocument:
    """A document with failed rows in one stage folder: which pages, and the first one's error."""

    doc_id: str
    source: str | None
    error: str
    #: Pages with an error row (0: the document itself could not be read); none for a document row.
    pages: list[int] = field(default_factory=list)

    def text(self) -> str:
        """``zero.pdf: empty file (0 bytes)``, ``a.pdf pages 2, 5: HTTP 500 ...``."""
        pages = sorted(p for p in self.pages if p)
        where = ""
        if pages:
            listed = ", ".join(str(p) for p in pages[:5]) + (f" (+{len(pages) - 5} more)" if len(pages) > 5 else "")
            where = f" page{'s' if len(pages) > 1 else ''} {listed}"
        return f"{self.doc_id}{where}: {self.error}"


@dataclass
class Failures:
    """The failed documents of one stage folder (or of one shard's parts of it): the first
    :data:`FAILURES_SHOWN` by ``doc_id`` named, the others counted."""

    stage: str
    #: The folder the failed rows are in (a path or URL, for the user).
    where: str
    shown: list[FailedDocument] = field(default_factory=list)
    #: Documents with a failed row, and failed rows.
    documents: int = 0
    rows: int = 0
    _others: set[str] = field(default_factory=set, repr=False)

    def add(self, row: dict[str, Any]) -> None:
        """Count one failed row (a dict of :data:`_FAILURE_COLUMNS`). The documents named are
        the first :data:`FAILURES_SHOWN` by ``doc_id``, whatever order the parts hold the rows
        in: parts are written as pages finish, so an order of arrival would change between two
        reads of the same run (and "1 more" would be another document each time)."""
        self.rows += 1
        doc_id = str(row.get("doc_id"))
        for named in self.shown:
            if named.doc_id == doc_id:
                page = int(row.get("page") or 0)
                if page < min(named.pages, default=page + 1):  # the error said is its first page's
                    named.error = _error_text(row)
                named.pages.append(page)
                return
        if doc_id in self._others:
            return
        self.documents += 1
        if len(self.shown) >= FAILURES_SHOWN:
            last = self.shown[-1]
            if doc_id > last.doc_id:
                self._others.add(doc_id)
                return
            # Named now; the last named one joins the counted (its later rows are only counted).
            self.shown.pop()
            self._others.add(last.doc_id)
        bisect.insort(self.shown, FailedDocument(doc_id, row.get("source"), _error_text(row),
                                                 [int(row["page"] or 0)] if "page" in row else []),
                      key=lambda d: d.doc_id)

    def lines(self, named: dict[str, str] | None = None, *, stage: bool = True) -> list[str]:
        """What the console says: a head line (naming the stage, with ``stage``), a line per
        document named, and where the rest are. Documents in ``named`` (document -> the stage
        whose lines named it) are not described again; the ones named here are added to it."""
        if not self.documents:
            return []
        named = {} if named is None else named
        new = [d for d in self.shown if d.doc_id not in named]
        earlier = sorted({named[d.doc_id] for d in self.shown if d.doc_id in named})
        head = (f"{self.stage}: " if stage else "") + \
            f"{self.documents} failed document{'s' if self.documents != 1 else ''}"
        for document in new:
            named[document.doc_id] = self.stage
        more = self.documents - len(self.shown)
        statuses = " or ".join(FAILED if self.stage == "assemble" else FAILED[:1])
        rest = f"{more} more: the rows with status {statuses} in {self.where}" if more else ""
        if not new:
            return [f"{head}, as named for {' and '.join(earlier)}" + (f"; {rest}" if rest else "")]
        lines = [f"{head}:"] + [f"  {d.text()}" for d in new]
        if earlier:
            lines.append(f"  and {len(self.shown) - len(new)} named for {' and '.join(earlier)}")
        return lines + ([f"  {rest}"] if rest else [])

    def as_dict(self) -> dict[str, Any]:
        """The JSON of ``llm-ocr status --json``: counts, the documents named, where the rest are."""
        return {"documents": self.documents, "rows": self.rows, "where": self.where,
                "shown": [{"doc_id": d.doc_id, "source": d.source, "pages": d.pages, "error": d.error}
                          for d in self.shown]}

    @classmethod
    def from_dict(cls, stage: str, data: dict[str, Any]) -> Failures:
        """The failures :meth:`as_dict` wrote (``llm-ocr status`` prints them from its report)."""
        shown = [FailedDocument(d["doc_id"], d.get("source"), d["error"], list(d.get("pages") or []))
                 for d in data.get("shown", [])]
        return cls(stage, data["where"], shown, data.get("documents", 0), data.get("rows", 0))


def failure_lines(failures: Sequence[Failures]) -> list[str]:
    """The failed documents of several stage folders, in order: a document an earlier folder
    named (Extract's unreadable file fails in Describe and Assemble too) is not described again."""
    named: dict[str, str] = {}
    return [line for failed in failures for line in failed.lines(named)]


def _error_text(row: dict[str, Any]) -> str:
    """A row's error on one line (at most 300 characters), or what a partial document lacks."""
    error = " ".join(str(row.get("error") or "").split())
    if not error and row.get("failed_pages"):
        error = "pages " + ", ".join(str(p) for p in row["failed_pages"]) + " failed"
    error = error or f"status {row.get('status')}"
    return error if len(error) <= 300 else error[:299] + "…"


def _failed_rows(parquet: pq.ParquetFile, statuses: list[Any]) -> list[dict[str, Any]]:
    """The failed rows of one part, read with the few columns that name them (none of them when
    ``statuses``, the part's status column, has no failure)."""
    failed = [i for i, status in enumerate(statuses) if status in FAILED]
    if not failed:
        return []
    names = set(parquet.schema_arrow.names)
    table = parquet.read(columns=[c for c in _FAILURE_COLUMNS if c in names], use_threads=False)
    return table.take(failed).to_pylist()


def _open(folder: Storage, path: str) -> Any:
    """``path`` opened for ranged reads (a column is fetched, not the whole part)."""
    return retry_io(lambda: folder.fs.open(path, "rb"), what=f"opening {folder.display(path)}")


def stage_failures(out: Storage, stage: str, shard: int | None = None, num_shards: int | None = None) -> Failures:
    """The failed documents of ``OUT/STAGE`` (only shard ``shard``'s parts, given one), read
    from each part's status column, then the failed rows' few columns: ranged reads, never a
    page image."""
    folder = out.child(stage)
    failures = Failures(stage, folder.display(folder.root))
    try:
        parts = list_parts(folder, shard, num_shards)
    except ShardLayoutError:  # parts of another shard count: none of them is this shard's
        return failures
    for path in parts:
        with _open(folder, path) as handle:
            # Read in this thread only: Arrow's pool threads reading a Python file object would
            # hold Python buffers that a run's exit, right after this, can abort on (see
            # llm_ocr.storage.parts.parquet_file).
            parquet = pq.ParquetFile(handle, pre_buffer=False)
            statuses = parquet.read(columns=["status"], use_threads=False).column("status").to_pylist()
            for row in _failed_rows(parquet, statuses):
                failures.add(row)
    return failures


def stage_status(out: Storage, stage: str) -> dict[str, Any]:
    """Rows by status per shard of one stage, plus duplicates and finished shards."""
    folder = out.child(stage)
    shards: dict[str, Counter[str]] = defaultdict(Counter)
    seen: Counter[tuple[str, int]] = Counter()
    key_column = "page" if stage not in DOCUMENT_STAGES else None
    unreadable = []
    failures = Failures(stage, folder.display(folder.root))
    read_as = RouteTally()
    for path in list_parts(folder):
        match = PART_RE.search(path)
        shard = f"{int(match.group(1)):05d}-of-{int(match.group(2)):05d}" if match else "?"
        try:
            # How each page was read (whole, in pieces): extract's rows say it (describe's copy it).
            how = ["segments", "cut_reason"] if stage == "extract" else []
            columns = ["doc_id", "status"] + ([key_column, "quarantined"] if key_column else []) + how
            # ParquetFile.read skips a column a part lacks (parts written before "quarantined").
            parquet = parquet_file(folder.read_bytes(path))
            table = parquet.read(columns=columns)
            for row in _failed_rows(parquet, table.column("status").to_pylist()):
                failures.add(row)
        except Exception:  # noqa: BLE001 - an unreadable part is reported, not fatal
            unreadable.append(folder.display(path))
            continue
        pages = table.column(key_column).to_pylist() if key_column else [0] * table.num_rows
        held = (table.column("quarantined").to_pylist() if "quarantined" in table.column_names
                else [None] * table.num_rows)
        if "segments" in table.column_names and "cut_reason" in table.column_names:
            for segments, reason, page in zip(table.column("segments").to_pylist(),
                                              table.column("cut_reason").to_pylist(), pages):
                if page:  # a document's page-0 row (it could not be opened) was read no way
                    read_as.add(segments, reason)
        for doc_id, status, page, quarantined in zip(table.column("doc_id").to_pylist(),
                                                     table.column("status").to_pylist(), pages, held):
            # A quarantined page is an error row counted in its own column (as the run's line does).
            shards[shard]["quarantined" if quarantined else status] += 1
            seen[(doc_id, page)] += 1
    markers = list_markers(out, stage)
    finished = sorted(f"{m.get('shard', 0):05d}-of-{m.get('num_shards', 1):05d}" for m in markers)
    routes: Counter[str] = Counter()
    models: dict[str, Counter[str]] = defaultdict(Counter)
    # Each finished shard's pages/s, beside what a plan estimated for its model and GPUs.
    speed = {f"{m.get('shard', 0):05d}-of-{m.get('num_shards', 1):05d}": {
        "pages_per_s": m.get("pages_per_s"), "estimate": m["estimate"]} for m in markers if m.get("estimate")}
    for marker in markers:  # how the finished shards' pages were read (markers written since routes)
        routes.update(marker.get("routes") or {})
        for model, counts in (marker.get("models") or {}).items():
            models[model].update({k: v for k, v in counts.items() if isinstance(v, (int, float))})
    total: Counter[str] = Counter()
    for counts in shards.values():
        total.update(counts)
    return {
        "stage": stage,
        "rows": sum(total.values()),
        "by_status": dict(total),
        "shards": {k: dict(v) for k, v in sorted(shards.items())},
        "finished_shards": finished,
        "duplicates": sum(n - 1 for n in seen.values() if n > 1),
        "unreadable_parts": unreadable,
        "routes": dict(routes),
        # Pages per way of reading them (whole, segments, tiles, bands) and the pieces' cost
        # against reading the same pages whole (llm_ocr/page_routes.py).
        "read_as": read_as.as_dict(),
        "models": {model: dict(counts) for model, counts in sorted(models.items())},
        "speed": dict(sorted(speed.items())),
        "failed": failures.as_dict(),
    }
