"""Inputs → documents → page images: listing (main process) and rendering (worker processes)."""

from .base import DocumentKind, DocumentRef, PageFailure, PageImage, RenderOptions
from .listing import DatasetOptions, InputError, document_kind, list_documents, shard_documents
from .render import DocumentError, close_documents, count_pages, render_pages

__all__ = [
    "DatasetOptions",
    "DocumentError",
    "DocumentKind",
    "DocumentRef",
    "InputError",
    "PageFailure",
    "PageImage",
    "RenderOptions",
    "close_documents",
    "count_pages",
    "document_kind",
    "list_documents",
    "render_pages",
    "shard_documents",
]
