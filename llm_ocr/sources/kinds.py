"""Which files are documents: PDFs and images, by extension."""

from __future__ import annotations

import posixpath

from .base import DocumentKind

PDF_EXTENSIONS = frozenset({".pdf"})
#: Files listed as images: what Pillow reads (HEIF/HEIC with the ``heif`` extra, AVIF with Pillow
#: 11.3 or later), and page formats it cannot read (JPEG XL, DjVu), listed so that each gets an
#: error row that says so instead of being left out of the run.
IMAGE_EXTENSIONS = frozenset({
    ".png", ".jpg", ".jpeg", ".jpe", ".jfif", ".tif", ".tiff", ".webp", ".gif", ".bmp", ".dib",
    ".heic", ".heif", ".avif", ".jp2", ".j2k", ".pbm", ".pgm", ".ppm", ".pnm", ".jxl", ".djvu", ".djv",
})


def document_kind(name: str) -> DocumentKind | None:
    """The kind of a document file from its extension (case-insensitive), or None if unsupported."""
    ext = posixpath.splitext(name)[1].lower()
    if ext in PDF_EXTENSIONS:
        return "pdf"
    if ext in IMAGE_EXTENSIONS:
        return "image"
    return None
