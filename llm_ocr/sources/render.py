"""Documents → encoded page images. Runs inside worker processes.

PDFs render with pypdfium2 at ``opts.dpi`` (scaled down when a page would exceed
``opts.max_page_pixels``); images decode with Pillow (every TIFF frame is a page; the first frame
of an animation is the only page); dataset rows carry their page images as bytes.

A problem with the whole document raises :class:`DocumentError` (the caller writes one error row);
a problem with one page becomes a :class:`PageFailure` for that page only.

pypdfium2 is NOT thread-safe (FACTS): call these functions from one thread per process; parallel
rendering uses processes. The per-process cache of open PDFs below relies on that too.
"""

from __future__ import annotations

import io
import math
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from functools import partial
from typing import Any

import fsspec
import pypdfium2 as pdfium
import pypdfium2.raw as pdfium_c
from fsspec.implementations.local import LocalFileSystem
from PIL import Image

from llm_ocr.options import RenderOptions

from .base import DocumentRef, PageFailure, PageImage
from .density import TextEstimate, ink_estimate, text_layer_estimate
from .images import (
    ImageRefused,
    encode,
    fit,
    fit_long_side,
    fit_scale,
    open_image,
    page_count,
    prepare_frame,
    to_multiple,
)
from .pieces import PiecedPage, PieceImage, Region, plan_pieces


class DocumentError(Exception):
    """A whole document cannot be rendered; the message is the user-facing reason."""


def count_pages(ref: DocumentRef, opts: RenderOptions) -> int:
    """Number of pages of ``ref``; raises :class:`DocumentError` if it cannot be rendered at all."""
    if ref.error:
        raise DocumentError(ref.error)
    if ref.kind == "pdf":
        n = len(_open_pdf(ref.location))
    elif ref.kind == "image":
        with _open_image_file(ref.location, opts) as img:
            n = page_count(img)
    elif ref.kind == "dataset_row":
        n = ref.first_page - 1 + len(ref.images)
        if n == 0:
            raise DocumentError("dataset row has no images")
    else:
        raise DocumentError(f"unknown document kind {ref.kind!r}")
    if n > opts.max_pages:
        what = "PDF" if ref.kind == "pdf" else "document"
        raise DocumentError(f"{what} has {n} pages, over the limit of {opts.max_pages} (max_pages)")
    return n


def render_pages(
    ref: DocumentRef, opts: RenderOptions, first: int, last: int, estimate_text: bool = False,
    max_aspect: float = 0.0,
) -> list[PageImage | PageFailure]:
    """Render pages ``first..last`` (1-based, inclusive) of ``ref``, one result per page; with
    ``estimate_text``, each page's :attr:`~llm_ocr.sources.base.PageImage.text_estimate` is taken
    too (:mod:`llm_ocr.sources.density`: about 1 ms a PDF page, 2-4 ms an image page), for a run
    that may read dense pages in tiles. A page whose long side is more than ``max_aspect`` times
    its short side (0: never) also gets its segments, each rendered from the source at the
    resolution ``opts`` gives it as a page (:mod:`llm_ocr.sources.pieces`).

    Raises :class:`DocumentError` when the document cannot be opened at all (call
    :func:`count_pages` first to get the page range and to apply ``max_pages``).
    """
    return render_page_list(ref, opts, range(first, last + 1), estimate_text, max_aspect)


def render_page_list(
    ref: DocumentRef, opts: RenderOptions, pages: Sequence[int], estimate_text: bool = False,
    max_aspect: float = 0.0,
) -> list[PageImage | PageFailure]:
    """Render ``pages`` (1-based, in the order given, not necessarily adjacent) of ``ref``, one
    result per page, as :func:`render_pages` does: the pages a run renders in the order of their
    expected cost (:mod:`llm_ocr.runners.render_order`)."""
    n = count_pages(ref, opts)
    if not pages or not all(1 <= p <= n for p in pages):
        raise ValueError(f"pages {list(pages)[:8]} outside 1..{n} for {ref.doc_id}")
    if ref.kind == "pdf":
        pdf = _open_pdf(ref.location)
        return [_placed(pdf, p, _guard(ref, p, partial(_render_pdf_page, pdf, p - 1, opts, estimate_text, max_aspect)))
                for p in pages]
    if ref.kind == "image":
        with _open_image_file(ref.location, opts) as img:
            return [_guard(ref, p, partial(_frame_page, img, p - 1, opts, estimate_text, max_aspect)) for p in pages]
    if min(pages) < ref.first_page:
        raise ValueError(f"pages {min(pages)}..{max(pages)} of {ref.doc_id}: the slice starts at page {ref.first_page}")
    return [
        _guard(ref, p, partial(_dataset_page, ref, p, opts, estimate_text, max_aspect))
        for p in pages
    ]


# image bytes, mime type, width, height, text, the pieces of a long page
_Encoded = tuple[bytes, str, int, int, TextEstimate | None, PiecedPage | None]


def _frame_page(img: Image.Image, index: int, opts: RenderOptions, estimate_text: bool,
                max_aspect: float = 0.0) -> _Encoded:
    full = prepare_frame(img, index, _full_size(opts))
    return _image_page(full, opts, estimate_text, max_aspect)


def _dataset_page(ref: DocumentRef, page: int, opts: RenderOptions, estimate_text: bool,
                  max_aspect: float = 0.0) -> _Encoded:
    full = _dataset_image(ref.images[page - ref.first_page], _full_size(opts))
    return _image_page(full, opts, estimate_text, max_aspect)


def _full_size(opts: RenderOptions) -> RenderOptions:
    """``opts`` without the page sizing: the image as decoded, its pieces cut from full resolution."""
    return opts.model_copy(update={"long_side": None, "max_long_side": None, "max_page_pixels": 2**62})


def _image_page(full: Image.Image, opts: RenderOptions, estimate_text: bool, max_aspect: float) -> _Encoded:
    """An image page sized as ``opts`` says (as :func:`~.images.prepare_frame` sizes it), and its
    pieces, each cropped from the full-resolution ``full`` and sized as a page of its own."""
    page = fit(fit_long_side(full, opts), opts.max_page_pixels)
    pieces = _image_pieces(full, page.size, opts, max_aspect) if max_aspect > 0 else None
    return (*_encoded(page, opts, estimate_text)[:5], pieces)


def _image_scale(width: float, height: float, opts: RenderOptions) -> float:
    """The scale :func:`~.images.prepare_frame` gives a ``width`` x ``height`` image."""
    target = opts.long_side or max(width, height)
    if opts.max_long_side:
        target = min(target, opts.max_long_side)
    scale = target / max(width, height)
    return scale * min(1.0, fit_scale(round(width * scale), round(height * scale), opts.max_page_pixels))


def _image_pieces(full: Image.Image, page_size: tuple[int, int], opts: RenderOptions,
                  max_aspect: float) -> PiecedPage | None:
    segments, scale = plan_pieces(full.width, full.height, max_aspect, lambda w, h: _image_scale(w, h, opts), full)
    if not segments:
        return None
    pieces = []
    for segment in segments:
        x1, y1 = segment.left / scale, segment.top / scale
        x2, y2 = segment.right / scale, segment.bottom / scale
        crop = full.crop((round(x1), round(y1), round(x2), round(y2)))
        data, mime, width, height = _encode(fit(fit_long_side(crop, opts), opts.max_page_pixels), opts)
        pieces.append(PieceImage(segment, data, mime, width, height))
    return PiecedPage(tuple(pieces), round(full.width * scale), round(full.height * scale), scale)


def _placed(pdf: pdfium.PdfDocument, page: int, result: PageImage | PageFailure) -> PageImage | PageFailure:
    """A rendered PDF page with its box and /Rotate (what maps its pixels to PDF points)."""
    if not isinstance(result, PageImage):
        return result
    pdf_page = pdf[page - 1]
    try:
        left, bottom, right, top = pdf_page.get_bbox()
        return replace(result, pdf_page=(left, bottom, right, top, pdf_page.get_rotation() % 360))
    finally:
        pdf_page.close()


def _guard(ref: DocumentRef, page: int, make: Callable[[], _Encoded]) -> PageImage | PageFailure:
    """Run one page's work; any failure is confined to that page."""
    try:
        data, mime, width, height, estimate, pieces = make()
        return PageImage(ref.doc_id, page, data, mime, width, height, estimate, pieces)
    except ImageRefused as e:
        return PageFailure(ref.doc_id, page, str(e))
    except Exception as e:  # noqa: BLE001 -- a broken page must not take its document down
        return PageFailure(ref.doc_id, page, f"page rendering failed: {type(e).__name__}: {e}")


def _encoded(img: Image.Image, opts: RenderOptions, estimate_text: bool, layer: TextEstimate | None = None) -> _Encoded:
    """The page encoded, with how much text it holds when ``estimate_text`` (its text ``layer``'s
    count when it has a usable one, else its ink)."""
    data, mime, width, height = _encode(img, opts)
    return data, mime, width, height, (layer or _ink(img)) if estimate_text else None, None


def _encode(img: Image.Image, opts: RenderOptions) -> tuple[bytes, str, int, int]:
    """An image sized as the family's client sends it (:func:`~.images.to_multiple`), encoded:
    bytes, mime type and size. Every image rendered to be sent goes through here."""
    sent = to_multiple(img, opts)
    data, mime = encode(sent, opts)
    return data, mime, sent.width, sent.height


def _ink(img: Image.Image) -> TextEstimate | None:
    try:
        return ink_estimate(img)
    except Exception:  # noqa: BLE001 - an estimate is a hint: never fail a page for it
        return None


# --------------------------------------------------------------------------------------------
# PDF

# Open documents of this worker process, most recent last. Chunks of one document arrive one
# after another, so 2 entries avoid reopening (and re-parsing the xref of) a big PDF per chunk.
_PDF_CACHE: OrderedDict[tuple[Any, ...], pdfium.PdfDocument] = OrderedDict()
#: PDFium is not thread-safe (the pipeline renders in processes for that reason: runners/workers.py),
#: and the cache below is shared: an in-process caller that may run beside another thread holds
#: this lock (the render thread of ``workers=0``, the service's gateway checking an upload).
PDFIUM_LOCK = threading.RLock()

_PDF_CACHE_SIZE = 2

# PDFium load error codes (FPDF_ERR_*) → user-facing reasons; others say "corrupt".
_PDF_LOAD_ERRORS = {
    2: "cannot read the file (PDFium: file access error)",
    4: "encrypted PDF: a password is required",
    5: "encrypted PDF: unsupported security handler",
}


def _open_pdf(location: str) -> pdfium.PdfDocument:
    fs, path = fsspec.core.url_to_fs(location)
    try:
        info = fs.info(path)
    except FileNotFoundError as e:
        raise DocumentError(f"file not found: {location}") from e
    except OSError as e:
        raise DocumentError(f"cannot read the file: {e}") from e
    if info.get("size") == 0:
        raise DocumentError("empty file (0 bytes)")
    # The runner may reuse a cache path for another download: the key includes size and mtime.
    key = (location, info.get("size"), info.get("mtime") or info.get("LastModified") or info.get("created"))
    if key in _PDF_CACHE:
        _PDF_CACHE.move_to_end(key)
        return _PDF_CACHE[key]
    local = isinstance(fs, LocalFileSystem)
    source = path if local else fs.cat_file(path)  # PDFium reads local files lazily, by itself
    try:
        pdf = pdfium.PdfDocument(source)
    except pdfium.PdfiumError as e:
        raise DocumentError(_load_failure_reason(source)) from e
    pdf.init_forms()  # so filled-in form fields are drawn; must precede loading any page
    _PDF_CACHE[key] = pdf
    while len(_PDF_CACHE) > _PDF_CACHE_SIZE:
        _PDF_CACHE.popitem(last=False)[1].close()
    return pdf


def close_documents() -> None:
    """Close the PDFs this process keeps open (e.g. before deleting downloaded files)."""
    while _PDF_CACHE:
        _PDF_CACHE.popitem()[1].close()


def close_document(location: str) -> None:
    """Close the PDF at ``location`` if this process keeps it open; the others stay open.
    Called, like every PDFium call, under :data:`PDFIUM_LOCK`."""
    for key in [key for key in _PDF_CACHE if key[0] == location]:
        _PDF_CACHE.pop(key).close()


def _load_failure_reason(source: str | bytes) -> str:
    """Why PDFium refused ``source``.

    pypdfium2 also raises when a document *loads* but has zero pages, and then reports PDFium's
    last error, which nothing has set: a stale code from an earlier document (e.g. "Incorrect
    password" after an encrypted file). So load once more through the raw API: a handle means
    "no pages", no handle means a fresh, trustworthy error code.
    """
    if isinstance(source, bytes):
        handle = pdfium_c.FPDF_LoadMemDocument64(source, len(source), None)
    else:
        handle = pdfium_c.FPDF_LoadDocument((source + "\x00").encode("utf-8", errors="surrogateescape"), None)
    if handle:
        pdfium_c.FPDF_CloseDocument(handle)
        return "PDF has no pages"
    code = pdfium_c.FPDF_GetLastError()
    if code in _PDF_LOAD_ERRORS:
        return _PDF_LOAD_ERRORS[code]
    reason = {1: "unknown error", 3: "data format error"}.get(code, f"error {code}")
    return f"{_pdf_shape_problem(source)} (PDFium: {reason})"


def _pdf_shape_problem(source: str | bytes) -> str:
    """What the bytes say about a PDF PDFium refused: not a PDF at all, cut off, or corrupt.

    PDFium says "data format error" for all three; the user's fix differs (wrong file, redo an
    interrupted download or copy, or give up on the file), so the message tells them apart.
    """
    if isinstance(source, bytes):
        head, tail = source[:1024], source[-2048:]
    else:
        with open(source, "rb") as f:
            head = f.read(1024)
            f.seek(max(0, os.fstat(f.fileno()).st_size - 2048))
            tail = f.read()
    if b"%PDF-" not in head:
        return f"not a PDF: the file does not start with %PDF- (it starts with {head[:16]!r})"
    if b"%%EOF" not in tail:
        return "truncated PDF: it ends before its %%EOF trailer (an interrupted download or copy?)"
    return "corrupt PDF"


def _render_pdf_page(pdf: pdfium.PdfDocument, index: int, opts: RenderOptions, estimate_text: bool = False,
                     max_aspect: float = 0.0) -> _Encoded:
    page = pdf[index]
    try:
        # get_size() already accounts for /Rotate, and render() applies it (rotated pages come
        # out as the viewer shows them).
        width, height = page.get_size()
        scale = _pdf_scale(width, height, opts)
        bitmap = page.render(scale=scale, rev_byteorder=True)  # RGB byte order: no channel swap
        img = bitmap.to_pil()
        # Encode while the bitmap is alive: the PIL image shares its buffer.
        layer = _layer(page) if estimate_text else None
        encoded = _encoded(img if img.mode == "RGB" else img.convert("RGB"), opts, estimate_text, layer)
        return (*encoded[:5], _pdf_pieces(page, width, height, opts, max_aspect, img) if max_aspect > 0 else None)
    finally:
        page.close()


def _pdf_pieces(page: pdfium.PdfPage, width: float, height: float, opts: RenderOptions,
                max_aspect: float, image: Image.Image | None = None) -> PiecedPage | None:
    """The segments of a long PDF page, each rendered from the page at the scale ``opts`` give
    it as a page of its own (a region of the page rendered: pypdfium2's ``crop``, in points
    from each edge, after rotation); a wide page's gutters are found in ``image``, its render."""
    segments, scale = plan_pieces(width, height, max_aspect, lambda w, h: _pdf_scale(w, h, opts), image)
    if not segments:
        return None
    pieces = []
    for segment in segments:
        x1, y1 = segment.left / scale, segment.top / scale
        x2, y2 = segment.right / scale, segment.bottom / scale
        piece_scale = _pdf_scale(x2 - x1, y2 - y1, opts)
        crop = (x1, height - y2, width - x2, y1)  # left, bottom, right, top
        bitmap = page.render(scale=piece_scale, crop=crop, rev_byteorder=True)
        img = bitmap.to_pil()
        data, mime, sent_width, sent_height = _encode(img if img.mode == "RGB" else img.convert("RGB"), opts)
        pieces.append(PieceImage(segment, data, mime, sent_width, sent_height))
    return PiecedPage(tuple(pieces), round(width * scale), round(height * scale), scale)


def _layer(page: pdfium.PdfPage) -> TextEstimate | None:
    try:
        return text_layer_estimate(page)
    except Exception:  # noqa: BLE001 - a text layer pdfium cannot read: the ink tells instead
        return None


# The default floor of ``RenderOptions.min_page_side``, 640 px, comes from vLLM's DeepSeek-OCR
# processor (``vllm/transformers_utils/processors/deepseek_ocr.py``, ``tokenize_with_images``): it
# pads and resizes any image of at most 640x640 px to its 1024 px global view and adds no tiles,
# so at 144 DPI alone a tiny page (a 1-inch label: 144 px; a page whose MediaBox is in inches,
# 8.5x11: 17x22 px) reached the model as a blurry blow-up, and figure boxes collapsed to zero
# pixels. Rendering the vector page at 640 px costs no extra image tokens; more would switch the
# processor to 640 px tiles, hundreds more tokens on every small page. A higher --dpi still
# applies: the floor only raises the scale.


def _pdf_scale(width: float, height: float, opts: RenderOptions) -> float:
    """``dpi / 72`` (or what makes the longer side ``long_side`` pixels, capped at
    ``max_long_side``), raised so that the longer side has at least ``min_page_side`` pixels,
    and lowered so that the rendered bitmap stays within ``max_page_pixels`` (which wins)."""
    long_side = max(width, height)
    scale = opts.long_side / long_side if opts.long_side else opts.dpi / 72
    if opts.max_long_side and long_side * scale > opts.max_long_side:
        scale = opts.max_long_side / long_side
    exact = min(filter(None, (opts.long_side, opts.max_long_side)), default=0)
    # pypdfium2 sizes the bitmap with ceil(): a rounding error must not make it one pixel longer.
    while exact and math.ceil(long_side * scale) > exact:
        scale = math.nextafter(scale, 0.0)
    floor = opts.min_page_side
    if 0 < long_side * scale < floor:
        scale = floor / long_side
        # pypdfium2 sizes the bitmap with ceil(): a rounding error must not make it 641 px.
        while math.ceil(long_side * scale) > floor:
            scale = math.nextafter(scale, 0.0)
    limit = opts.max_page_pixels
    if width * scale * height * scale > limit:
        scale = math.sqrt(limit / (width * height))
        # pypdfium2 sizes the bitmap with ceil(); shave the scale until that fits too.
        while math.ceil(width * scale) * math.ceil(height * scale) > limit:
            scale *= 0.999
    return scale


# --------------------------------------------------------------------------------------------
# Images


@contextmanager
def _open_image_file(location: str, opts: RenderOptions) -> Iterator[Image.Image]:
    """Open an image file lazily (header only) and safely; raises :class:`DocumentError`."""
    fs, path = fsspec.core.url_to_fs(location)
    try:
        fp = fs.open(path, "rb")
    except FileNotFoundError as e:
        raise DocumentError(f"file not found: {location}") from e
    except OSError as e:
        raise DocumentError(f"cannot read the file: {e}") from e
    with fp:
        if not fp.read(1):
            raise DocumentError("empty file (0 bytes)")
        fp.seek(0)
        try:
            img = open_image(fp, opts)
        except ImageRefused as e:
            raise DocumentError(str(e)) from e
        with img:
            yield img


def _dataset_image(data: bytes, opts: RenderOptions) -> Image.Image:
    if not data:
        raise ImageRefused("empty image (0 bytes) in the dataset row")
    with open_image(io.BytesIO(data), opts) as img:
        return prepare_frame(img, 0, opts)  # a row's image is one page: first frame only


# --------------------------------------------------------------------------------------------
# Regions of a page, each rendered as a page of its own

def render_regions(
    ref: DocumentRef, page: int, opts: RenderOptions, regions: list[Region]
) -> list[tuple[bytes, str, int, int] | None]:
    """Each of ``regions`` of page ``page`` of ``ref`` rendered from the source as a page of its
    own, at the scale ``opts`` (the family's rendering) give a page of that size, when that is
    sharper than the page's own render (by more than :data:`SHARPER`): the tiles and bands of a
    dense page, which must not be cut from the page's render when the family sizes pages by
    their longer side or pixel count (a band of olmOCR-2's 1,288 px page is read as a page of
    its own). None for a region the page's render shows as sharp (cut it from there). Each
    result is ``(image, mime, width, height)``.

    Raises when the source cannot be read (the caller then cuts the regions from the page image).
    """
    out: list[tuple[bytes, str, int, int] | None] = []
    if ref.kind == "pdf":
        pdf = _open_pdf(ref.location)
        pdf_page = pdf[page - 1]
        try:
            width, height = pdf_page.get_size()
            whole = _pdf_scale(width, height, opts)
            # A piece is not raised to the smallest page side: that floor keeps tiny pages
            # legible, and a piece of a page is as legible as the page at the page's scale.
            unfloored = opts.model_copy(update={"min_page_side": 0})
            for fx1, fy1, fx2, fy2 in regions:
                x1, x2, y1, y2 = fx1 * width, fx2 * width, fy1 * height, fy2 * height
                scale = _pdf_scale(x2 - x1, y2 - y1, unfloored)
                if scale <= SHARPER * whole:
                    out.append(None)
                    continue
                crop = (x1, height - y2, width - x2, y1)  # left, bottom, right, top (points from each edge)
                img = pdf_page.render(scale=scale, crop=crop, rev_byteorder=True).to_pil()
                out.append(_encode(img if img.mode == "RGB" else img.convert("RGB"), opts))
        finally:
            pdf_page.close()
        return out
    if ref.kind == "image":
        with _open_image_file(ref.location, opts) as img:
            full = prepare_frame(img, page - 1, _full_size(opts))
    else:
        full = _dataset_image(ref.images[page - ref.first_page], _full_size(opts))
    whole = _image_scale(full.width, full.height, opts)
    for fx1, fy1, fx2, fy2 in regions:
        box = (round(fx1 * full.width), round(fy1 * full.height), round(fx2 * full.width), round(fy2 * full.height))
        if _image_scale(box[2] - box[0], box[3] - box[1], opts) <= SHARPER * whole:
            out.append(None)
            continue
        out.append(_encode(fit(fit_long_side(full.crop(box), opts), opts.max_page_pixels), opts))
    return out


#: A region is rendered on its own when that is this many times sharper than the page's render.
SHARPER = 1.05
