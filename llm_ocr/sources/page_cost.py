"""What a PDF page will cost to read, estimated from the file before the page is rendered.

A shard's run ends when its last long answer ends, so the pages whose answers are longest should
be rendered and sent first (:mod:`llm_ocr.runners.render_order`). Rendering a page to learn that
costs what it saves; reading the PDF costs far less. Per page, in a worker process (pypdfium2 is
not thread-safe), with the document opened once for all its pages:

- **the text layer's length**: ``FPDFText_CountChars`` (pypdfium2's ``count_chars``), visible
  text or an invisible OCR layer alike. It parses the page's content but draws nothing: 0.9 ms
  a page of the long-tail benchmark's (up to 16,000 characters), against 3 ms for the smallest
  render the benchmark makes (640 pixels on the longer side, JPEG) and 10-30 ms for a normal one.
- **a scan's image**: an image object covering at least :data:`SCAN_AREA` of the page is a
  scan. Its compressed size (``FPDFImageObj_GetImageDataRaw`` without a buffer: the stored
  length, nothing decoded) grows with the ink on it, and so with its text, at a rate set by its
  codec and resolution: measured on the benchmark's pages rasterised at 100-300 DPI, a character
  costs :data:`BYTES_PER_CHAR` (grey JPEG: 85 bytes at 150 DPI, 212 at 300, give or take half
  with the quality; CCITT G4: 10 and 20) above what blank paper costs
  (:data:`BLANK_BYTES_PER_PIXEL`). A photograph costs bytes and holds no text: a page that is
  mostly a photograph is over-estimated.

A scan with a text layer (its OCR, invisible over the image) has both: the larger is taken, and
the estimate says the page is a scan (:class:`PageEstimate`'s ``source``). The
two err in opposite ways for the run: a page over-estimated is sent early and ends early anyway,
a page under-estimated (an OCR layer that lost a column, a photo-free scan whose codec packs
tighter than assumed) is sent late and can end the run on its own. A page with neither is
expected to be short (0 characters). Only PDFs are read: an image or a dataset row gets no
estimate (None), and its page is ranked when it is rendered, by its ink
(:mod:`llm_ocr.sources.density`).
"""

from __future__ import annotations

import ctypes
import math
from collections.abc import Sequence
from typing import Any, NamedTuple

from llm_ocr.options import RenderOptions

from .base import DocumentRef
from .render import _open_pdf  # the render worker's cache of open documents: one parse for both

#: Share of the page an image must cover to be taken for a scan of it (figures are smaller).
SCAN_AREA = 0.8
#: Bytes a character of text costs in a scan at a DPI of ``dpi``: ``factor * dpi ** exponent``, by
#: the image's first filter. Measured on the long-tail benchmark's pages (Helvetica 5-10 pt)
#: rasterised at 100-300 DPI: JPEG of quality 75 costs 49, 85, 125 and 212 bytes a character at 100,
#: 150, 200 and 300 DPI (quality 50 and 90: 0.7 and 1.5 times that); CCITT G4 10.3, 13.3 and 19.9
#: at 150, 200 and 300. JBIG2 packs bilevel pages about as tightly as G4; JPEG 2000, Flate and the
#: rest are taken as JPEG.
BYTES_PER_CHAR: dict[str, tuple[float, float]] = {
    "DCTDecode": (0.1055, 1.333), "CCITTFaxDecode": (0.067, 1.0), "JBIG2Decode": (0.067, 1.0)}
DEFAULT_BYTES_PER_CHAR = BYTES_PER_CHAR["DCTDecode"]
#: What blank paper costs per pixel, by filter: a blank grey JPEG page of quality 75 is 0.012
#: bytes a pixel at 150 and 300 DPI (every 8 x 8 block costs a few bits); bilevel codecs nothing.
BLANK_BYTES_PER_PIXEL: dict[str, float] = {"CCITTFaxDecode": 0.0, "JBIG2Decode": 0.0}
DEFAULT_BLANK_BYTES_PER_PIXEL = 0.012
#: Form XObjects are looked into this deep for a scan's image (some producers wrap it in one).
MAX_FORM_DEPTH = 2


#: A page without a scan: its estimate is its text layer's length.
TEXT = "text"
#: A scan (an image covering :data:`SCAN_AREA` of the page, with some ink): its estimate is the
#: larger of its image's and its text layer's (an OCR layer's) length.
SCAN = "scan"


class PageEstimate(NamedTuple):
    """A page's expected characters, and whether the page is a scan (:data:`SCAN`) or not
    (:data:`TEXT`). A scan's estimate runs on a scale of its own (its codec, resolution and type
    size): a run ranks the two kinds on one (:class:`~llm_ocr.runners.cost_scale.CostScale`)."""

    chars: float
    source: str


def page_costs(ref: DocumentRef, opts: RenderOptions, pages: Sequence[int]) -> list[int | None]:
    """The characters of text each of ``pages`` (1-based) of ``ref`` is expected to hold, read from
    the PDF without rendering (see the module docstring); None for a page that cannot be read
    and for every page of a document that is not a PDF.

    Raises :class:`~llm_ocr.sources.render.DocumentError` when the PDF cannot be opened at all.
    """
    return [None if estimate is None else round(estimate.chars) for estimate in page_estimates(ref, opts, pages)]


def page_estimates(ref: DocumentRef, opts: RenderOptions, pages: Sequence[int]) -> list[PageEstimate | None]:
    """:func:`page_costs`, each saying whether its page is a scan."""
    if ref.kind != "pdf":
        return [None] * len(pages)
    pdf = _open_pdf(ref.location)
    out: list[PageEstimate | None] = []
    for number in pages:
        try:
            page = pdf[number - 1]
        except Exception:  # noqa: BLE001 - an estimate is a hint: the render reports the page's error
            out.append(None)
            continue
        try:
            out.append(page_estimate(page))
        except Exception:  # noqa: BLE001 - same
            out.append(None)
        finally:
            page.close()
    return out


def page_estimate(page: Any) -> PageEstimate:
    """The characters of text a pypdfium2 page is expected to hold: its text layer's count, or
    what its scanned image's size says, whichever is larger (see the module docstring); and
    whether it is a scan."""
    textpage = page.get_textpage()
    try:
        chars = int(textpage.count_chars())
    finally:
        textpage.close()
    scanned = scan_chars(page)
    # A scan is a scan whichever estimate is larger: the run ranks a scan among scans
    # (:class:`~llm_ocr.runners.cost_scale.CostScale`), and which of its two estimates won says
    # more about its OCR layer's losses than about its length.
    return PageEstimate(max(chars, scanned), SCAN if scanned > 0 else TEXT)


def scan_chars(page: Any) -> int:
    """The characters a page's scanned image seems to hold (0 when no image covers at least
    :data:`SCAN_AREA` of it)."""
    import pypdfium2.raw as pdfium_c

    width, height = page.get_size()
    area = max(width * height, 1.0)
    chars = 0.0
    for obj, matrices in _images(pdfium_c, page.raw, (), 0):
        left, bottom, right, top = _bounds(pdfium_c, obj, matrices)
        shown_w, shown_h = right - left, top - bottom
        if shown_w * shown_h < SCAN_AREA * area or shown_w <= 0:
            continue
        stored = pdfium_c.FPDFImageObj_GetImageDataRaw(obj, None, 0)
        px_w, px_h = ctypes.c_uint(), ctypes.c_uint()
        if not stored or not pdfium_c.FPDFImageObj_GetImagePixelSize(obj, ctypes.byref(px_w), ctypes.byref(px_h)):
            continue
        codec = _first_filter(pdfium_c, obj)
        dpi = px_w.value / (shown_w / 72.0)
        blank = BLANK_BYTES_PER_PIXEL.get(codec, DEFAULT_BLANK_BYTES_PER_PIXEL) * px_w.value * px_h.value
        factor, exponent = BYTES_PER_CHAR.get(codec, DEFAULT_BYTES_PER_CHAR)
        per_char = factor * max(dpi, 1.0) ** exponent
        chars += max(0.0, stored - blank) / per_char
    return round(chars)


def _images(pdfium_c: Any, parent: Any, matrices: tuple[Any, ...], depth: int) -> Any:
    """The image objects of a page (``parent`` a page handle) or of a Form XObject in it, each with
    the matrices of the forms it is inside (innermost last)."""
    in_form = depth > 0
    count = pdfium_c.FPDFFormObj_CountObjects(parent) if in_form else pdfium_c.FPDFPage_CountObjects(parent)
    for index in range(max(count, 0)):
        obj = pdfium_c.FPDFFormObj_GetObject(parent, index) if in_form else pdfium_c.FPDFPage_GetObject(parent, index)
        kind = pdfium_c.FPDFPageObj_GetType(obj)
        if kind == pdfium_c.FPDF_PAGEOBJ_IMAGE:
            yield obj, matrices
        elif kind == pdfium_c.FPDF_PAGEOBJ_FORM and depth < MAX_FORM_DEPTH:
            matrix = pdfium_c.FS_MATRIX()
            if pdfium_c.FPDFFormObj_GetMatrix(obj, ctypes.byref(matrix)):
                yield from _images(pdfium_c, obj, (*matrices, matrix), depth + 1)


def _bounds(pdfium_c: Any, obj: Any, matrices: tuple[Any, ...]) -> tuple[float, float, float, float]:
    """An image object's bounds on the page: pdfium gives those of an object inside a form in the
    form's space, so the forms' matrices are applied, innermost first."""
    left, bottom, right, top = ctypes.c_float(), ctypes.c_float(), ctypes.c_float(), ctypes.c_float()
    if not pdfium_c.FPDFPageObj_GetBounds(obj, *(ctypes.byref(v) for v in (left, bottom, right, top))):
        return 0.0, 0.0, 0.0, 0.0
    corners = [(left.value, bottom.value), (right.value, bottom.value), (right.value, top.value),
               (left.value, top.value)]
    for m in reversed(matrices):
        corners = [(m.a * x + m.c * y + m.e, m.b * x + m.d * y + m.f) for x, y in corners]
    xs, ys = [x for x, _ in corners], [y for _, y in corners]
    if not all(math.isfinite(v) for v in xs + ys):
        return 0.0, 0.0, 0.0, 0.0
    return min(xs), min(ys), max(xs), max(ys)


def _first_filter(pdfium_c: Any, obj: Any) -> str:
    """The name of an image's first decode filter ("" when it has none)."""
    if pdfium_c.FPDFImageObj_GetImageFilterCount(obj) < 1:
        return ""
    buffer = ctypes.create_string_buffer(64)
    pdfium_c.FPDFImageObj_GetImageFilter(obj, 0, buffer, len(buffer))
    return buffer.value.decode("ascii", errors="replace")
