"""Results people can look at: one self-contained HTML page per output folder.

``write_report(OUT)`` reads ``OUT/describe`` (else ``OUT/extract``) and, when present,
``OUT/assemble``, and writes a single HTML file: a summary table, then per document and page
the page image with the detected layout blocks drawn over it, the rendered Markdown, the
figures with their captions, the page status and error. Everything is inline (images as
``data:`` URIs, CSS in a ``<style>`` element); the page needs no JavaScript and loads nothing
from the network. The same fragments back the notebook helpers in :mod:`llm_ocr.report.display`.

Page images are not stored in the output, so they are re-rendered from each row's ``source``
with :mod:`llm_ocr.sources.render` (the same code Extract used; boxes are in pixels of the
image that was sent, ``width`` x ``height``, and are scaled to whatever size the re-render has).
When the source cannot be read the boxes are drawn on a blank canvas and the page says why.

Model output is untrusted: a document can contain text that looks like HTML. Markdown is
rendered by markdown-it-py with raw HTML disabled, links are restricted to harmless schemes,
and the only HTML that survives is DeepSeek-OCR's tables, passed through a small whitelist
sanitizer (see :func:`sanitize_table`). The report also carries a Content-Security-Policy that
forbids scripts and remote loads, as a second line of defence.

Memory stays bounded: a first pass reads only a few small columns of every part (counts and
which parts hold the selected documents); documents are then rendered one at a time, with at
most one part's table and one document's rows and page images in memory.

- :mod:`.writer`       :func:`write_report` and its options
- :mod:`.reader`       which documents and pages an output folder holds (bounded memory)
- :mod:`.fragments`    the HTML of a page, a document, the summary, and the CSS
- :mod:`.fields_panel` a document's fields (OUT/fields) with their pages and flagged values
- :mod:`.safe_html`    untrusted model text -> safe HTML (Markdown, table sanitizer, data URIs)
- :mod:`.display`      notebook helpers (also importable as :mod:`llm_ocr.report.display`)

May import sources (to re-render pages) and storage; never runners, servers or commands.
"""

from llm_ocr.report.fragments import CSS, render_document, render_page, render_summary
from llm_ocr.report.reader import DocumentEntry, OutputReader, Summary
from llm_ocr.report.safe_html import markdown_to_html, sanitize_table
from llm_ocr.report.writer import (
    ReportAnnotations,
    ReportError,
    ReportOptions,
    ReportResult,
    pages_to_show,
    write_report,
)
from llm_ocr.sources.rerender import PageView, SourcePages

__all__ = [
    "CSS",
    "DocumentEntry",
    "OutputReader",
    "PageView",
    "ReportAnnotations",
    "ReportError",
    "ReportOptions",
    "ReportResult",
    "SourcePages",
    "Summary",
    "markdown_to_html",
    "pages_to_show",
    "render_document",
    "render_page",
    "render_summary",
    "sanitize_table",
    "write_report",
]
