"""The review page's HTML: the queue and recent documents, and one document to review.

A document's page is the report's (:mod:`llm_ocr.report.fragments`): each page's image with its
blocks' boxes, its Markdown and figures, the fields panel; the pages the no-ground-truth quality
signals flag (:func:`llm_ocr.quality.signals.page_signals`: error, empty, repetition, truncated,
stray characters...) come first, worst first, each with what was found. Under the fields, a form
per value to correct it, and one to approve the document.

Everything a document or a reviewer supplied is escaped (the report's ``esc`` and its Markdown
renderer, which drops raw HTML); the page has no script, and :data:`CSP` forbids one as a second
line of defence. Forms post to this origin only.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from llm_ocr.quality.signals import page_signals
from llm_ocr.report.fields_panel import render_fields
from llm_ocr.report.fragments import CSS, render_assembled, render_page
from llm_ocr.report.safe_html import anchor, esc
from llm_ocr.service.queue import Document, iso
from llm_ocr.service.reviews import Correction, leaves
from llm_ocr.sources.rerender import SourcePages

#: No script may run, nothing is loaded from elsewhere, forms post back here only.
CSP = ("default-src 'none'; img-src data:; style-src 'unsafe-inline'; base-uri 'none'; "
       "form-action 'self'; frame-ancestors 'none'")
#: Pages of a document shown (flagged pages first, then the first pages).
MAX_PAGES = 30

REVIEW_CSS = """
.llmocr table.review{border-collapse:collapse;margin:.5em 0}
.llmocr table.review th,.llmocr table.review td{border:1px solid #ccc;padding:.2em .5em;text-align:left;vertical-align:top}
.llmocr .review-flags{background:#fff0f0;border-left:4px solid #c62828;padding:.3em .6em;margin:.3em 0;font-size:.9em}
.llmocr form.inline{display:inline;margin:0}
.llmocr .approved{background:#d8f0d8;color:#185c18;padding:.2em .6em;border-radius:.7em;font-weight:600}
""".strip()  # noqa: E501 - CSS rules, one a line


def _page(title: str, body: str) -> str:
    return (f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{esc(title)}</title>'
            f'<style>{CSS}\n{REVIEW_CSS}</style></head><body class="llmocr">{body}</body></html>')


def login_page(message: str = "") -> str:
    """The form that asks for the service's token (kept in a cookie for the review pages)."""
    note = f'<div class="llmocr-error">{esc(message)}</div>' if message else ""
    return _page("llm-ocr review: token", f"<h1>llm-ocr review</h1>{note}"
                 '<form method="post" action="/review/login"><label>Service token '
                 '<input type="password" name="token" autocomplete="current-password"></label> '
                 '<button type="submit">Open</button></form>')


def queue_page(counts: Mapping[str, int], depth: int, documents: Sequence[Document]) -> str:
    """The queue (documents by status) and the recent documents, newest first."""
    tally = "".join(f'<tr><th>{esc(status)}</th><td class="n">{n}</td></tr>' for status, n in counts.items())
    rows = "".join(
        f'<tr><td><a href="/review/{esc(doc.id)}">{esc(doc.name)}</a></td><td>{esc(doc.status)}</td>'
        f"<td>{esc(iso(doc.created) or '')}</td><td class=\"n\">{doc.pages_done}/{doc.pages or '?'}</td>"
        f"<td>{esc(doc.error or '')}</td></tr>"
        for doc in documents
    )
    return _page("llm-ocr review", (
        f"<h1>llm-ocr review</h1><h2>Queue</h2><p>{depth} waiting</p>"
        f'<table class="llmocr-summary">{tally}</table><h2>Recent documents</h2>'
        f'<table class="review"><tr><th>Document</th><th>Status</th><th>Submitted</th><th>Pages read</th>'
        f"<th>Error</th></tr>{rows}</table>"
    ))


def flagged_first(rows: Sequence[Mapping[str, Any]]) -> list[tuple[Mapping[str, Any], dict[str, str]]]:
    """Each page row with its quality flags; flagged pages first (worst first), then in page order."""
    found = [(row, page_signals(row)) for row in rows]
    found.sort(key=lambda item: (-item[1].badness, int(item[0].get("page") or 0)))
    return [(row, signals.flags) for row, signals in found]


def _flags_html(flags: Mapping[str, str]) -> str:
    if not flags:
        return ""
    items = "".join(f"<li><strong>{esc(flag)}</strong>: {esc(detail)}</li>" for flag, detail in flags.items())
    return f'<div class="review-flags">Flagged by the quality checks:<ul>{items}</ul></div>'


def _corrections_form(doc_id: str, fields: Any, corrections: Sequence[Correction]) -> str:
    by_path = {c.path: c for c in corrections}
    rows = []
    for path, value in leaves(fields):
        mine = by_path.get(path)
        shown = value if isinstance(value, str) else json.dumps(value)
        now = mine.value if mine is not None else value
        current = now if isinstance(now, str) else json.dumps(now)
        rows.append(
            f"<tr><td><code>{esc(path)}</code></td><td>{esc(shown)}</td>"
            f"<td>{esc(current) if mine is not None else ''}</td><td>"
            f'<form class="inline" method="post" action="/review/{esc(doc_id)}/fields">'
            f'<input type="hidden" name="path" value="{esc(path)}">'
            f'<input type="text" name="value" value="{esc(current)}" aria-label="{esc(path)}">'
            f' <button type="submit">Save</button></form></td></tr>'
        )
    return ('<h2>Correct the fields</h2><table class="review"><tr><th>Field</th><th>Model</th>'
            f"<th>Corrected</th><th>Set</th></tr>{''.join(rows)}</table>")


def document_page(doc: Document, rows: Sequence[Mapping[str, Any]], *, assembled: Mapping[str, Any] | None,
                  fields: Mapping[str, Any] | None, corrections: Sequence[Correction], approved: float | None,
                  storage_options: Mapping[str, Any] | None = None) -> str:
    """One document to review: status, approval, fields (with their corrections), then its pages,
    flagged ones first. Page images are re-rendered from each row's ``source`` (call this under
    the renderer's lock: pypdfium2 is not thread-safe)."""
    name = str(rows[0].get("doc_id") or doc.name) if rows else doc.name
    parts = [f'<p><a href="/review">&larr; all documents</a></p><h1>{esc(doc.name)}</h1>',
             (f'<div class="llmocr-meta">{esc(doc.id)} &middot; {esc(doc.status)} &middot; '
              f"{doc.pages_done} of {doc.pages or '?'} pages read</div>")]
    if doc.error:
        parts.append(f'<div class="llmocr-error">{esc(doc.error)}</div>')
    if approved is not None:
        parts.append(f'<p><span class="approved">approved {esc(iso(approved) or "")}</span></p>')
    else:
        parts.append(f'<form method="post" action="/review/{esc(doc.id)}/approve">'
                     '<button type="submit" name="approve" value="1">Approve</button></form>')
    ordered = flagged_first(rows)
    flagged = [int(row.get("page") or 0) for row, flags in ordered if flags]
    if flagged:
        parts.append(f'<div class="review-flags">Pages flagged: {esc(", ".join(map(str, flagged)))}</div>')
    shown = {int(row.get("page") or 0) for row, _ in ordered[:MAX_PAGES]}
    if fields is not None:
        parts.append(render_fields(fields, lambda page: anchor("", name, page) if page in shown else None))
        try:
            values = json.loads(fields["fields"]) if fields.get("fields") else None
        except ValueError:
            values = None
        if isinstance(values, (dict, list)):
            parts.append(_corrections_form(doc.id, values, corrections))
    if assembled is not None:
        parts.append(render_assembled(assembled))
    with SourcePages(name, rows[0].get("source") if rows else None, storage_options=storage_options) as pages:
        for row, flags in ordered[:MAX_PAGES]:
            page = int(row.get("page") or 0)
            view = pages.page(page) if page > 0 else None
            parts.append(render_page(row, view, note_html=_flags_html(flags)))
    if len(ordered) > MAX_PAGES:
        parts.append(f'<p class="llmocr-note">{len(ordered) - MAX_PAGES} more pages: GET '
                     f"/v1/documents/{esc(doc.id)}/pages</p>")
    return _page(f"review: {doc.name}", "".join(parts))
