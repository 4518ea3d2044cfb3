"""Notebook helpers: look at an output folder's pages, documents and counts inline.

Each helper returns an :class:`HTML` object, which Jupyter (and anything else that honours
``_repr_html_``) displays as HTML; ``str()`` gives the markup. IPython is not imported, so
these work, and can be tested, without it. The markup is the report's
(:mod:`llm_ocr.report`): same escaping of model text, same figures and layout boxes, with the
report's CSS carried along in each fragment (classes are prefixed ``llmocr``)::

    from llm_ocr.report.display import show_page, show_document, summary
    summary("out/")
    show_page("out/", "report.pdf", 1)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from llm_ocr.options import RenderOptions
from llm_ocr.report import CSS, OutputReader, SourcePages, pages_to_show, render_document, render_page, render_summary
from llm_ocr.report.fields_panel import render_fields

__all__ = ["HTML", "show_document", "show_fields", "show_page", "summary"]


class HTML:
    """A piece of HTML that notebooks display (like ``IPython.display.HTML``)."""

    def __init__(self, data: str) -> None:
        self.data = data

    def _repr_html_(self) -> str:
        return self.data

    def __str__(self) -> str:
        return self.data

    def __repr__(self) -> str:
        return f"<llm_ocr.report.display.HTML, {len(self.data)} characters>"


def _fragment(body: str) -> HTML:
    # Notebook outputs have no <head>: the styles travel with each fragment, scoped by class.
    return HTML(f'<div class="llmocr"><style>{CSS}</style>{body}</div>')


def summary(out: str, *, storage_options: Mapping[str, Any] | None = None) -> HTML:
    """A table of counts for output folder ``out``: documents, pages by status, assembled documents."""
    counts, _ = OutputReader(out, storage_options).scan(max_documents=1)
    return _fragment(render_summary(counts))


def show_page(
    out: str,
    doc_id: str,
    page: int,
    *,
    render: RenderOptions | None = None,
    storage_options: Mapping[str, Any] | None = None,
) -> HTML:
    """One page of ``doc_id``: its image with layout boxes, Markdown, figures, status and error.

    ``page`` is 1-based (0 shows a document-level error row). Raises ``KeyError`` when the
    output has no such page.
    """
    reader = OutputReader(out, storage_options)
    _, entries = reader.scan(only={doc_id})
    if not entries or page not in entries[0].pages:
        raise KeyError(f"no row for page {page} of document {doc_id!r} in {out}")
    rows = reader.page_rows(entries[0], {page})
    with SourcePages(doc_id, entries[0].source, render, storage_options) as pages:
        view = pages.page(page) if page > 0 else None
        return _fragment(render_page(rows[0], view))


def show_document(
    out: str,
    doc_id: str,
    *,
    max_pages: int = 20,
    render: RenderOptions | None = None,
    storage_options: Mapping[str, Any] | None = None,
) -> HTML:
    """A whole document: its assembled Markdown (if assembled) and its first ``max_pages`` pages.

    Raises ``KeyError`` when the output has no rows for ``doc_id``.
    """
    reader = OutputReader(out, storage_options)
    _, entries = reader.scan(only={doc_id})
    if not entries:
        raise KeyError(f"no rows for document {doc_id!r} in {out}")
    entry = entries[0]
    rows = reader.page_rows(entry, pages_to_show(entry, max_pages))
    assembled = reader.assembled_row(entry) if entry.assemble_parts else None
    fields = reader.fields_row(entry) if entry.fields_parts else None
    with SourcePages(doc_id, entry.source, render, storage_options) as pages:
        return _fragment("".join(render_document(entry, rows, assembled=assembled, fields=fields, pages=pages)))


def show_fields(out: str, doc_id: str, *, storage_options: Mapping[str, Any] | None = None) -> HTML:
    """The fields of ``doc_id`` (its ``OUT/fields`` row): values with their pages, values found
    nowhere in the text marked, validation errors. Raises ``KeyError`` when it has no fields row."""
    reader = OutputReader(out, storage_options)
    _, entries = reader.scan(only={doc_id})
    row = reader.fields_row(entries[0]) if entries and entries[0].fields_parts else None
    if row is None:
        raise KeyError(f"no fields row for document {doc_id!r} in {out}")
    return _fragment(render_fields(row))
