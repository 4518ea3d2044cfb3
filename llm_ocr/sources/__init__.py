"""Inputs → documents → page images: listing (main process) and rendering (worker processes)."""

from .base import DocumentKind, DocumentRef, PageFailure, PageImage, RenderOptions
from .listing import DatasetOptions, InputError, InputPlan, document_kind, list_documents, plan_inputs
from .render import DocumentError, close_documents, count_pages, render_pages

__all__ = [
    "DatasetOptions",
    "DocumentError",
    "DocumentKind",
    "DocumentRef",
    "InputError",
    "InputPlan",
    "PageFailure",
    "PageImage",
    "RenderOptions",
    "close_documents",
    "count_pages",
    "document_kind",
    "list_documents",
    "plan_inputs",
    "render_pages",
]
