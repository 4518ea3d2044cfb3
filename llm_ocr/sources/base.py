"""Types shared by every input kind: a document reference, a rendered page, a page failure.

A :class:`DocumentRef` is small and picklable: it is listed in the main process and handed to
worker processes, which turn it into :class:`PageImage` or :class:`PageFailure` values.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Literal

from pydantic import BaseModel, Field

DocumentKind = Literal["pdf", "image", "dataset_row"]


class RenderOptions(BaseModel):
    """How pages become the images sent to the model."""

    dpi: float = Field(144.0, gt=0, description="PDF render resolution (default: the model family's, 144 for DeepSeek-OCR).")
    max_page_pixels: int = Field(
        12_000_000,
        gt=0,
        description="Pages larger than this are rendered or resized down to fit (huge posters, 600 DPI scans).",
    )
    long_side: int | None = Field(
        None,
        gt=0,
        description="Scale every page (PDF or image) so its longer side has exactly this many pixels, "
        "instead of --dpi (default: the model family's, e.g. 1288 for olmOCR-2; none for most).",
    )
    max_long_side: int | None = Field(
        None, gt=0, description="Scale pages down so their longer side has at most this many pixels (default: none)."
    )
    min_page_side: int = Field(
        640,
        ge=0,
        description="PDF pages whose longer side would render smaller than this many pixels (labels, "
        "cards, pages sized in odd units) are rendered at this size instead; 0 = never.",
    )
    max_image_pixels: int = Field(
        120_000_000,
        gt=0,
        description="Images with more pixels than this are refused as likely decompression bombs.",
    )
    max_pages: int = Field(
        100_000, gt=0, description="Documents with more pages than this are refused (error row)."
    )
    image_format: Literal["jpeg", "png"] = Field(
        "jpeg", description="Encoding of page images sent to the model: jpeg (fast) or png (lossless); default: the "
        "model family's (jpeg for DeepSeek-OCR, png for the families whose own code sends PNG)."
    )
    jpeg_quality: int = Field(95, ge=50, le=100, description="JPEG quality when image_format is jpeg.")


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


@dataclass(frozen=True)
class PageFailure:
    """A page (or, with ``page == 0``, a whole document) that could not be turned into an image."""

    doc_id: str
    page: int
    error: str
