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

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .base import DocumentKind, DocumentRef, PageFailure, PageImage
    from .listing import InputError, InputPlan, document_kind, list_documents, plan_inputs
    from .render import DocumentError, close_documents, count_pages, render_pages

#: Where each name of the package lives. Imported when first asked for (PEP 562), not with the
#: package: a render worker imports ``.render`` and ``.base`` only, and the listing's pyarrow,
#: fsspec and dataset readers cost a worker's start-up about half its imports.
_HOME = {
    "DocumentKind": "base", "DocumentRef": "base", "PageFailure": "base", "PageImage": "base",
    "InputError": "listing", "InputPlan": "listing", "document_kind": "listing",
    "list_documents": "listing", "plan_inputs": "listing",
    "DocumentError": "render", "close_documents": "render", "count_pages": "render",
    "render_pages": "render",
}


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{home}", __name__), name)
    globals()[name] = value
    return value


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
