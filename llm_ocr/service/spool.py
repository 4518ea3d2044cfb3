"""Where the service keeps documents and results, and what it checks of a document it is given.

Under the spool's root (a local folder or any store URL :class:`~llm_ocr.storage.Storage` opens)::

    documents/ID/document.EXT      an uploaded document; EXT from its name, lowercased, if the
                                   pipeline reads that kind (the uploaded name is never a path)
    results/ID/                    the ``run`` stage's output for that document: extract/,
                                   describe/, assemble/ (one part per page: the checkpoints)

A document named by URL is read where it is; only its results are here.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterator
from typing import Any

from llm_ocr.options import RenderOptions
from llm_ocr.sources.base import DocumentRef
from llm_ocr.sources.listing import IMAGE_EXTENSIONS, PDF_EXTENSIONS, document_kind
from llm_ocr.sources.render import PDFIUM_LOCK, DocumentError, close_document, count_pages
from llm_ocr.storage import Storage
from llm_ocr.storage.parts import iter_rows, list_parts

#: What a document's name may end with.
SUPPORTED = sorted(PDF_EXTENSIONS | IMAGE_EXTENSIONS)


class Unreadable(Exception):
    """A submitted document the pipeline cannot read; the message says why."""


def suffix_of(name: str) -> str:
    """The lowercased extension of ``name`` if the pipeline reads that kind of file, else
    :class:`Unreadable` naming the kinds it reads."""
    ext = posixpath.splitext(name.replace("\\", "/").rsplit("/", 1)[-1])[1].lower()
    if document_kind(f"x{ext}") is None:
        raise Unreadable(f"{name!r} is not a kind of document llm-ocr reads: its name must end with one of "
                         f"{', '.join(SUPPORTED)}")
    return ext


def count_document(location: str, name: str, max_pages: int) -> int:
    """The pages of the document at ``location`` (a local path or URL); :class:`Unreadable` when
    it cannot be opened or holds more than ``max_pages`` pages."""
    kind = document_kind(f"x{suffix_of(name)}")
    assert kind is not None
    ref = DocumentRef(doc_id=name, index=0, source=location, kind=kind, location=location)
    if kind != "pdf":  # Pillow's: no PDFium, so no wait behind the renders that hold its lock
        return _count(ref, name, max_pages)
    with PDFIUM_LOCK:
        try:
            return _count(ref, name, max_pages)
        finally:
            # The gateway keeps this document closed, and only this one: in the one-process service
            # the worker's renders keep theirs open in the same cache (closing them all made every
            # upload cost the worker a reopen of each PDF it was reading).
            close_document(location)


def _count(ref: DocumentRef, name: str, max_pages: int) -> int:
    try:
        return count_pages(ref, RenderOptions(max_pages=max_pages))
    except DocumentError as exc:
        raise Unreadable(f"cannot read {name!r}: {exc}") from None
    except OSError as exc:  # an image Pillow refuses, a store that does not answer
        raise Unreadable(f"cannot read {name!r}: {exc}") from None


def _plain(value: Any) -> Any:
    # Rows as JSON: image bytes are left out (a figure's image is a file of its own, not a page field).
    if isinstance(value, bytes):
        return None
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_plain(item) for item in value]
    return value


class Spool:
    """The spool at ``url``: documents and results."""

    def __init__(self, url: str, storage_options: dict[str, Any] | None = None) -> None:
        self.url = url
        self.storage_options = dict(storage_options or {})
        self.root = Storage(url, self.storage_options)

    def store_upload(self, doc_id: str, ext: str, data: bytes) -> str:
        """Keep an uploaded document; the URL the worker reads it from."""
        folder = self.root.child("documents", doc_id)
        path = folder.path(f"document{ext}")
        folder.write_atomic(path, data)
        folder.flush()
        return folder.display(path) if not folder.is_local else path

    def results_url(self, doc_id: str) -> str:
        """The output folder of ``doc_id``'s run."""
        return self.root.child("results", doc_id).url

    def rows(self, doc_id: str, stage: str, columns: list[str] | None = None, *,
             keep_bytes: bool = False) -> list[dict[str, Any]]:
        """``doc_id``'s rows of ``stage`` (``extract``, ``describe``, ``assemble``), in page order,
        as JSON values (image bytes left out unless ``keep_bytes``); only ``columns``, if given."""
        folder = self.root.child("results", doc_id, stage)
        parts = list_parts(folder)
        keep = (lambda row: row) if keep_bytes else _plain
        rows = [keep(row) for row in iter_rows(folder, parts, columns)] if parts else []
        return sorted(rows, key=lambda row: row.get("page") or 0)

    def figure(self, doc_id: str, figure_id: str) -> bytes | None:
        """The image of figure ``figure_id`` of ``doc_id`` (the id its Markdown links to:
        ``figure:ID``), or None when the document has no such figure or no image of it."""
        folder = self.root.child("results", doc_id, "assemble")
        parts = list_parts(folder)
        for row in iter_rows(folder, parts, ["figures"]) if parts else ():
            for figure in row.get("figures") or ():
                if figure.get("id") == figure_id:
                    image = figure.get("image")
                    found = image.get("bytes") if isinstance(image, dict) else image
                    return found if isinstance(found, bytes) else None
        return None

    def page_rows(self, doc_id: str, *, keep_bytes: bool = False) -> Iterator[dict[str, Any]]:
        """``doc_id``'s page rows: Describe's (figures described) where it wrote them, else
        Escalate's (the reading a stronger model made or kept), else Extract's (figures' image
        bytes left out unless ``keep_bytes``)."""
        described = {row["page"]: row for row in self.rows(doc_id, "describe", keep_bytes=keep_bytes)}
        escalated = {row["page"]: row for row in self.rows(doc_id, "escalate", keep_bytes=keep_bytes)}
        for row in self.rows(doc_id, "extract", keep_bytes=keep_bytes):
            yield described.get(row["page"]) or escalated.get(row["page"], row)
