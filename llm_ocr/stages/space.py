"""The spaces a page row's boxes are in: page pixels, and for a PDF page, PDF points.

A row's ``blocks[].boxes`` and ``figures[].bbox`` are in pixels of the image the model read
(``width`` x ``height``, origin top left): the page as rendered, or as olmOCR-2 turned it
(``turned``). A PDF page's row also says where those pixels are on the page
(:func:`place`): ``pdf_page`` (its box as PDFium renders it, the CropBox clipped to the
MediaBox, and its ``/Rotate``), ``dpi``, and each box again in PDF points of the page's user
space (``pdf_boxes``, ``pdf_bbox``: ``[left, bottom, right, top]``, origin bottom left), the
coordinates its text, its links and any annotation a reader adds are in.

The image covers the displayed page exactly (the render is of the whole page, resized, if at
all, to another size but never cropped), so a pixel's fractions of the image are its fractions
of the displayed page, and :class:`~llm_ocr.pdf_space.PageFrame` maps those to user space.
"""

from __future__ import annotations

from collections.abc import Sequence

from llm_ocr.pdf_space import PageFrame
from llm_ocr.records import PageResult, PdfPage

Fractions = tuple[float, float, float, float]


def page_fractions(box: Sequence[float], width: int, height: int, turned: int = 0) -> Fractions:
    """A pixel box ``[x1, y1, x2, y2]`` of a ``width`` x ``height`` image turned ``turned``
    degrees counter-clockwise from the page as rendered, as fractions ``(x1, y1, x2, y2)`` of the
    page as rendered (displayed, origin top left)."""
    corners = [(box[0] / width, box[1] / height), (box[2] / width, box[3] / height)]
    turn = turned % 360
    if turn == 90:  # PIL's ROTATE_90 moved (u, v) to (v, 1 - u)
        corners = [(1.0 - fy, fx) for fx, fy in corners]
    elif turn == 180:
        corners = [(1.0 - fx, 1.0 - fy) for fx, fy in corners]
    elif turn == 270:
        corners = [(fy, 1.0 - fx) for fx, fy in corners]
    (ax, ay), (bx, by) = corners
    return min(ax, bx), min(ay, by), max(ax, bx), max(ay, by)


def frame_of(pdf_page: PdfPage) -> PageFrame:
    """The mapping between the displayed page and user space of a row's ``pdf_page``."""
    return PageFrame(box=(pdf_page.left, pdf_page.bottom, pdf_page.right, pdf_page.top), rotation=pdf_page.rotation)


def place(row: PageResult, pdf_page: tuple[float, float, float, float, int] | None) -> PageResult:
    """``row`` (changed in place, and returned) with its PDF page, DPI and every box in PDF
    points, when it is a PDF page's row with a page image size; without them otherwise.

    Whatever PDF space ``row`` held before is dropped first: a row copied from another page's
    reading (a pixel-identical page of another PDF, :class:`~llm_ocr.runners.dedup.PageReuse`)
    takes the geometry of the page it is placed on, never its first's."""
    if row.turned is None:
        row.turned = 0
    row.pdf_page, row.dpi = None, None
    for block in row.blocks:
        block.pdf_boxes = None
    for figure in row.figures:
        figure.pdf_bbox = None
    if pdf_page is None or not row.width or not row.height:
        return row
    row.pdf_page = PdfPage(*pdf_page)
    frame = frame_of(row.pdf_page)
    shown_width, shown_height = frame.displayed_size
    across = shown_height if row.turned % 180 else shown_width  # the displayed side the image's width shows
    row.dpi = round(72.0 * row.width / across, 3) if across > 0 else None

    def points(box: Sequence[int]) -> list[float]:
        fractions = page_fractions(box, row.width or 1, row.height or 1, row.turned or 0)
        return [round(v, 2) for v in frame.user_box(*fractions)]

    for block in row.blocks:
        block.pdf_boxes = [points(b) for b in block.boxes if len(b) == 4]
    for figure in row.figures:
        figure.pdf_bbox = points(figure.bbox) if len(figure.bbox) == 4 else None
    return row


def displayed_points(row: PageResult, box: Sequence[int]) -> tuple[float, float, float, float] | None:
    """A pixel box of a PDF page's row in points of the displayed page, origin bottom left, as
    ``(left, top, right, bottom)`` (docling's ``BoundingBox`` with ``CoordOrigin.BOTTOMLEFT``,
    the space docling's own PDF conversion gives); None for a row without ``pdf_page``."""
    if row.pdf_page is None or not row.width or not row.height:
        return None
    width, height = frame_of(row.pdf_page).displayed_size
    x1, y1, x2, y2 = page_fractions(box, row.width, row.height, row.turned or 0)
    return round(x1 * width, 2), round((1.0 - y1) * height, 2), round(x2 * width, 2), round((1.0 - y2) * height, 2)
