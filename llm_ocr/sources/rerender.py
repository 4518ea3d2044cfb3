"""Page images re-rendered from a row's source with the code Extract used: for the report, and
for Fields reading page images (``--from images``)."""

from __future__ import annotations

import logging
import os
import posixpath
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from llm_ocr.options import RenderOptions
from llm_ocr.sources.base import DocumentRef, PageFailure
from llm_ocr.sources.listing import document_kind
from llm_ocr.sources.pieces import PiecedPage
from llm_ocr.storage import Storage, retry_io

log = logging.getLogger(__name__)


# ============================================================================================
# Page images, re-rendered from the source


@dataclass
class PageView:
    """The image of a page to draw boxes on: encoded bytes and size, or why there is none."""

    data: bytes | None = None
    mime: str | None = None
    width: int | None = None
    height: int | None = None
    note: str | None = None
    #: A long page's segments rendered from the source (asked for with ``max_aspect``).
    pieces: PiecedPage | None = None
    #: A PDF page's box and /Rotate (:attr:`~llm_ocr.sources.base.PageImage.pdf_page`).
    pdf_page: tuple[float, float, float, float, int] | None = None


class SourcePages:
    """Re-renders the pages of one source document, as Extract did; a context manager.

    Remote sources are copied to a temporary file through :class:`~llm_ocr.storage.Storage`
    (the renderer reads local files lazily and cannot take storage options). Closing releases
    the temporary file and the renderer's open PDFs. pypdfium2 is not thread-safe: use from
    one thread, and not while an in-process Extract renders.
    """

    def __init__(
        self,
        doc_id: str,
        source: str | None,
        options: RenderOptions | None = None,
        storage_options: Mapping[str, Any] | None = None,
        image_column: str | None = None,
    ) -> None:
        self.doc_id = doc_id
        self.source = source
        self.options = options or RenderOptions()
        self.storage_options = dict(storage_options or {})
        #: A dataset source's image column, if Extract was told it (``--image-column``).
        self.image_column = image_column
        self._ref: DocumentRef | None = None
        self._problem: str | None = None
        self._tmp: str | None = None
        self._opened = False

    def __enter__(self) -> SourcePages:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Release the temporary copy and the open PDFs."""
        if self._opened:
            from llm_ocr.sources.render import close_documents

            close_documents()
        if self._tmp is not None:
            try:
                os.unlink(self._tmp)
            except OSError:
                pass
            self._tmp = None

    def _open(self) -> None:
        self._opened = True
        source = self.source
        if not source:
            self._problem = "the row has no source"
            return
        try:
            store = Storage(source, self.storage_options)
            parquet = source.lower().endswith(".parquet")
            if parquet or not store.fs.isfile(store.root):
                if parquet or store.fs.isdir(store.root):
                    self._dataset_row()  # the row's images, read again from the dataset
                else:
                    self._problem = f"the source {source} is not reachable (moved or deleted since Extract read it?)"
                return
            kind = document_kind(source)
            if kind is None:
                # Extract sniffs unknown extensions the same way (see sources.listing).
                kind = "pdf" if b"%PDF" in retry_io(lambda: store.fs.cat_file(store.root, 0, 1024),
                                                    what="sniffing") else "image"
            location = store.root
            if not store.is_local:
                suffix = posixpath.splitext(store.root)[1]
                handle, self._tmp = tempfile.mkstemp(prefix="llm-ocr-source-", suffix=suffix)
                with os.fdopen(handle, "wb") as out:
                    out.write(store.read_bytes(store.root))
                location = self._tmp
            self._ref = DocumentRef(doc_id=self.doc_id, index=0, source=source, kind=kind, location=location)
        except Exception as exc:  # noqa: BLE001 -- an unreachable source only costs the picture
            self._problem = f"the source cannot be read ({type(exc).__name__}: {exc})"

    def _dataset_row(self) -> None:
        from llm_ocr.sources.listing import InputError, dataset_row

        assert self.source is not None
        try:
            self._ref = dataset_row(self.source, self.doc_id, self.image_column, self.storage_options)
        except InputError as exc:
            self._problem = f"the dataset row cannot be read again: {exc}"

    def page(self, number: int, max_aspect: float = 0.0) -> PageView:
        """The re-rendered page ``number`` (1-based), or a :class:`PageView` with a ``note``
        (with its segments when it is longer than ``max_aspect`` times its width, as Extract
        renders them)."""
        from llm_ocr.sources.render import render_pages

        if not self._opened:
            self._open()
        if self._ref is None:
            return PageView(note=self._problem)
        if number < 1:
            return PageView(note="no page image for a document-level row")
        try:
            (result,) = render_pages(self._ref, self.options, number, number, max_aspect=max_aspect)
        except Exception as exc:  # noqa: BLE001 -- DocumentError, a page out of range, a broken file
            return PageView(note=f"the page cannot be re-rendered ({exc})")
        if isinstance(result, PageFailure):
            return PageView(note=f"the page cannot be re-rendered ({result.error})")
        return PageView(result.image, result.mime, result.width, result.height, pieces=result.pieces,
                        pdf_page=result.pdf_page)
