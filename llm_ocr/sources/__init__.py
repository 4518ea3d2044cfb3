"""Inputs → documents → page images: listing (main process) and rendering (worker processes).

- :mod:`.base`    the types every input kind shares (a document reference, a page, a failure)
- :mod:`.kinds`   which files are documents (PDF and image extensions)
- :mod:`.manifest` manifest INPUTs: lists of documents (Parquet, JSONL, CSV), read by shard
- :mod:`.manifest_write` the listing of folders written as a manifest (`plan --write-manifest`, launch)
- :mod:`.listing` inputs (files, folders, URLs, datasets) -> an ordered, sharded stream of documents
- :mod:`.render`  documents -> encoded page images (in worker processes)
- :mod:`.images`  Pillow helpers: open safely, convert, fit, encode
- :mod:`.text_layer` a PDF page's own text layer, and whether it reads as English
- :mod:`.rerender` one document's pages re-rendered after the run (the report, Fields' page images)
- :mod:`.counting` the pages of the inputs, counted without rendering (``llm-ocr plan``)

May import storage (to read any URL), records and resizing (the families' image sizes); never
vlm, stages, runners, servers or commands.
"""

from .base import DocumentKind, DocumentRef, PageFailure, PageImage
from .listing import InputError, InputPlan, document_kind, list_documents, plan_inputs
from .render import DocumentError, close_documents, count_pages, render_pages

__all__ = [
    "DocumentError",
    "DocumentKind",
    "DocumentRef",
    "InputError",
    "InputPlan",
    "PageFailure",
    "PageImage",
    "close_documents",
    "count_pages",
    "document_kind",
    "list_documents",
    "plan_inputs",
    "render_pages",
]
