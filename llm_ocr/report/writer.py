"""The report file: options, and writing one self-contained HTML page for an output folder."""

from __future__ import annotations

import logging
import os
import posixpath
import tempfile
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from llm_ocr.options import RenderOptions, ReportOptions
from llm_ocr.report.fragments import CSS, render_document, render_summary
from llm_ocr.report.reader import DocumentEntry, OutputReader, ReportError, Summary
from llm_ocr.report.safe_html import anchor, esc
from llm_ocr.sources.rerender import SourcePages
from llm_ocr.storage import Storage, retry_io

log = logging.getLogger("llm_ocr.report")

__all__ = ["ReportAnnotations", "ReportError", "ReportOptions", "ReportResult", "pages_to_show", "write_report"]


# ============================================================================================
# The report file

#: No scripts, nothing from the network: only inline styles and data: images. If a sanitizer
#: bug ever let markup through, the browser would still refuse to run or fetch anything.
CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"


@dataclass
class ReportResult:
    """Where the report went and what it holds."""

    path: str
    documents: int
    pages: int
    summary: Summary


@dataclass
class ReportAnnotations:
    """Findings about an output that a caller adds to its report (the quality checks' failures).

    The HTML is trusted: callers build it with :func:`llm_ocr.report.safe_html.esc`. The report
    still shows every document (up to its limit): ``documents`` come first, in that order, each
    marked with its ``document_html``; ``pages`` are always among the pages shown of a document.
    """

    summary_html: str = ""
    page_html: Mapping[tuple[str, int], str] = field(default_factory=dict)
    document_html: Mapping[str, str] = field(default_factory=dict)
    documents: Sequence[str] = ()
    pages: Mapping[str, set[int]] = field(default_factory=dict)


def pages_to_show(entry: DocumentEntry, limit: int, wanted: set[int] | None = None) -> set[int]:
    """Up to ``limit`` pages of a document: the ``wanted`` ones it has first (flagged pages),
    then its first pages; plus its document-level row, if any."""
    pages = sorted(p for p in entry.pages if p > 0)
    first = sorted(p for p in (wanted or set()) if p in entry.pages and p > 0)[:limit]
    shown = set(first)
    for page in pages:
        if len(shown) >= limit:
            break
        shown.add(page)
    return shown | ({0} if 0 in entry.pages else set())


def write_report(
    out: str,
    html_path: str | None = None,
    *,
    max_documents: int = 20,
    max_pages_per_document: int = 20,
    render: RenderOptions | None = None,
    storage_options: Mapping[str, Any] | None = None,
    annotations: ReportAnnotations | None = None,
) -> ReportResult:
    """Write the HTML report of output folder ``out``; returns where and how much.

    ``annotations`` adds a caller's findings: a section under the summary, marks on documents
    and notes on pages; the documents and pages they name are shown first.

    The file is written to a local temporary file as documents are rendered, then moved (or,
    for a remote ``html_path``, uploaded) in one piece, so a reader never sees half a report.
    """
    so = dict(storage_options or {})
    reader = OutputReader(out, so)
    if reader.stage is None:
        raise ReportError(f"no page rows under {out}: expected Parquet parts in {out}/describe or {out}/extract")
    first = list(annotations.documents) if annotations is not None else []
    summary, entries = reader.scan(max_documents=max_documents, first=first)
    summary.shown_documents = len(entries)
    notes_by_document: dict[str, dict[int, str]] = {}
    for (doc_id, page), note in (annotations.page_html if annotations is not None else {}).items():
        notes_by_document.setdefault(doc_id, {})[page] = note
    target = Storage(html_path or reader.storage.url + "/report.html", so)
    pages_written = 0
    local_dir = posixpath.dirname(target.root) if target.is_local else None
    if local_dir:
        os.makedirs(local_dir, exist_ok=True)
    handle, tmp = tempfile.mkstemp(prefix=".report-", suffix=".html.tmp", dir=local_dir)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as f:
            f.write(_head(f"llm-ocr report: {out}"))
            f.write(f"<h1>llm-ocr report</h1>{render_summary(summary)}")
            if annotations is not None:
                f.write(annotations.summary_html)
            marks = annotations.document_html if annotations is not None else {}
            if entries:
                f.write("<nav><strong>Documents</strong><ol>")
                for entry in entries:
                    status = ", ".join(f"{esc(s)} {n}" for s, n in sorted(Counter(entry.pages.values()).items()))
                    link = f'<a href="#{anchor("", "doc", entry.doc_id)}">{esc(entry.doc_id)}</a>'
                    mark = f" {marks[entry.doc_id]}" if entry.doc_id in marks else ""
                    f.write(f'<li>{link} <span class="llmocr-meta">({status})</span>{mark}</li>')
                f.write("</ol></nav>")
            for entry in entries:
                wanted = annotations.pages.get(entry.doc_id) if annotations is not None else None
                shown = pages_to_show(entry, max_pages_per_document, wanted)
                rows = reader.page_rows(entry, shown)
                assembled = reader.assembled_row(entry) if entry.assemble_parts else None
                fields = reader.fields_row(entry) if entry.fields_parts else None
                notes = notes_by_document.get(entry.doc_id, {})
                with SourcePages(entry.doc_id, entry.source, render, so) as source_pages:
                    for fragment in render_document(entry, rows, assembled=assembled, fields=fields, pages=source_pages,
                                                    page_notes=notes, note_html=marks.get(entry.doc_id, "")):
                        f.write(fragment)
                pages_written += len(rows)
                log.info("report: %s (%d pages)", entry.doc_id, len(rows))
            reader.release()
            f.write("</div></body></html>\n")
        if target.is_local:
            # mkstemp creates the file private (0600); give the report the usual permissions.
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o666 & ~umask)
            os.replace(tmp, target.root)
        else:
            retry_io(lambda: target.fs.put_file(tmp, target.root), what=f"writing {target.display(target.root)}")
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return ReportResult(target.display(target.root), len(entries), pages_written, summary)


def _head(title: str) -> str:
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<meta name="referrer" content="no-referrer">'
        f"<title>{esc(title)}</title><style>body{{margin:1.2em;background:#fff}}\n{CSS}</style></head>"
        '<body><div class="llmocr">'
    )
