"""Types shared by every input kind: a document reference, a rendered page, a page failure.

A :class:`DocumentRef` is small and picklable: it is listed in the main process and handed to
worker processes, which turn it into :class:`PageImage` or :class:`PageFailure` values.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Literal

from .density import TextEstimate
from .pieces import PiecedPage

DocumentKind = Literal["pdf", "image", "dataset_row"]


@dataclass(frozen=True)
class DocumentRef:
    """One input document, cheap to pickle.

    ``location`` is a local path for files (remote files are downloaded to a local cache by the
    runner before rendering) and the dataset locator for dataset rows, whose page images travel
    in ``images`` as encoded bytes. A worker rendering a few pages of a long row gets only
    those: ``images`` then starts at page ``first_page``.
    """

    doc_id: str
    index: int
    source: str
    kind: DocumentKind
    location: str = ""
    images: tuple[bytes, ...] = field(default=(), repr=False)
    first_page: int = 1
    #: Why this ref names no readable document (a manifest row without a URL): its one error row.
    error: str = ""
    #: The document's sha256, as a manifest gives it (empty: computed as its bytes are read).
    sha256: str = ""

    def pages_slice(self, first: int, last: int) -> DocumentRef:
        """This dataset row with only the images of pages ``first..last`` (what a worker needs)."""
        start = self.first_page
        return replace(self, images=self.images[first - start : last - start + 1], first_page=first)


@dataclass(frozen=True)
class PageImage:
    """A page ready to send: encoded bytes plus the pixel size the model's boxes refer to."""

    doc_id: str
    page: int
    image: bytes = field(repr=False)
    mime: str
    width: int
    height: int
    #: How much text the page holds, estimated while it was rendered (None: no estimate).
    text_estimate: TextEstimate | None = None
    #: A long page's segments, each rendered from the source as a page of its own
    #: (:mod:`llm_ocr.sources.pieces`); None: the page is read whole.
    pieces: PiecedPage | None = field(default=None, repr=False)
    #: A PDF page's box as rendered (CropBox clipped to MediaBox: left, bottom, right, top, in
    #: user-space points) and its /Rotate; None for an image: the rows' PDF-point boxes come from it.
    pdf_page: tuple[float, float, float, float, int] | None = None


@dataclass(frozen=True)
class PageFailure:
    """A page (or, with ``page == 0``, a whole document) that could not be turned into an image."""

    doc_id: str
    page: int
    error: str
