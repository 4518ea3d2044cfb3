"""Where things are on a PDF page as PDFium renders it: user-space points to fractions of the
displayed page (top-left origin, ``/Rotate`` applied), and the page's objects with the forms
they are drawn in.

Two readers of a page's text layer map with it: the text-layer reader
(``llm_ocr/sources/text_lines.py``: lines in pixels of the rendered page, for the CPU engine's
layout and the bad-pages checks) and the simulated server's corpus
(``llm_ocr/engines/sim/corpus.py``: the layout of a known page, in fractions of it). Neither
layer may import the other, so the mapping sits below both and imports nothing of the package.
``page`` is a ``pypdfium2.PdfPage``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

#: Form XObjects nested deeper than this are not entered (a malformed file may nest them forever).
MAX_FORM_DEPTH = 8


class PageFrame:
    """Maps PDF user-space points to fractions of the displayed page (top-left origin, the page's
    ``/Rotate`` applied, as PDFium renders it)."""

    def __init__(self, page: Any = None, *, box: tuple[float, float, float, float] = (0.0, 0.0, 0.0, 0.0),
                 rotation: int = 0) -> None:
        # The page's box as PDFium renders it: the CropBox clipped to the MediaBox (its
        # ``get_bbox``), in user-space points; or ``box`` and ``rotation`` as a row stores them.
        bounds: tuple[float, float, float, float] = tuple(page.get_bbox()) if page is not None else box
        self.left, self.bottom, self.right, self.top = bounds
        #: The page's /Rotate (degrees clockwise, 0, 90, 180 or 270).
        self.rotation = (page.get_rotation() if page is not None else rotation) % 360

    @property
    def displayed_size(self) -> tuple[float, float]:
        """``(width, height)`` in points of the page as displayed (its box turned by /Rotate)."""
        width, height = self.right - self.left, self.top - self.bottom
        return (height, width) if self.rotation in (90, 270) else (width, height)

    def user_point(self, fx: float, fy: float) -> tuple[float, float]:
        """The user-space point at fractions ``(fx, fy)`` of the displayed page: the inverse of
        :meth:`point`."""
        if self.rotation == 90:
            fx, fy = fy, 1.0 - fx
        elif self.rotation == 180:
            fx, fy = 1.0 - fx, 1.0 - fy
        elif self.rotation == 270:
            fx, fy = 1.0 - fy, fx
        return self.left + fx * (self.right - self.left), self.top - fy * (self.top - self.bottom)

    def user_box(self, x1: float, y1: float, x2: float, y2: float) -> tuple[float, float, float, float]:
        """A box in fractions of the displayed page as ``(left, bottom, right, top)`` in user-space
        points (the coordinates of the page's content stream, of its text and its annotations)."""
        (ax, ay), (bx, by) = self.user_point(x1, y1), self.user_point(x2, y2)
        return min(ax, bx), min(ay, by), max(ax, bx), max(ay, by)

    def point(self, x: float, y: float) -> tuple[float, float]:
        """The fractions ``(fx, fy)`` of the displayed page at user-space point ``(x, y)`` (not
        clamped: a point off the page's box lies outside 0..1)."""
        fx = (x - self.left) / ((self.right - self.left) or 1.0)
        fy = (self.top - y) / ((self.top - self.bottom) or 1.0)
        # /Rotate turns the page clockwise for display, and PDFium renders it that way.
        if self.rotation == 90:
            fx, fy = 1.0 - fy, fx
        elif self.rotation == 180:
            fx, fy = 1.0 - fx, 1.0 - fy
        elif self.rotation == 270:
            fx, fy = fy, 1.0 - fx
        return fx, fy

    def box(self, left: float, bottom: float, right: float, top: float) -> tuple[float, float, float, float]:
        """A user-space rectangle as ``(x1, y1, x2, y2)`` in fractions of the displayed page,
        clamped to it."""
        (ax, ay), (bx, by) = self.point(left, bottom), self.point(right, top)
        return _clamp(min(ax, bx)), _clamp(min(ay, by)), _clamp(max(ax, bx)), _clamp(max(ay, by))


def _clamp(v: float) -> float:
    return min(1.0, max(0.0, v))


def page_objects(page: Any) -> Iterator[tuple[Any, list[Any]]]:
    """Every object of ``page`` but forms, in drawing order, each with the matrices of the forms
    it is drawn in (outermost first), descending into Form XObjects up to
    :data:`MAX_FORM_DEPTH` deep."""
    import pypdfium2.raw as pdfium_c

    def walk(objects: Any, matrices: list[Any]) -> Iterator[tuple[Any, list[Any]]]:
        for obj in objects:
            if obj.type != pdfium_c.FPDF_PAGEOBJ_FORM:
                yield obj, matrices
            elif len(matrices) < MAX_FORM_DEPTH:
                yield from walk(page.get_objects(form=obj, max_depth=0, level=obj.level + 1),
                                matrices + [obj.get_matrix()])

    yield from walk(page.get_objects(max_depth=0), [])


def object_bounds(obj: Any, matrices: list[Any]) -> tuple[float, float, float, float]:
    """``(left, bottom, right, top)`` of an object in the page's user space: PDFium reports a
    nested object's bounds in its form's space, so the forms' matrices (``matrices``, outermost
    first, as :func:`page_objects` gives them) are applied innermost first."""
    getter = getattr(obj, "get_bounds", None) or obj.get_pos  # get_pos before pypdfium2 5
    left, bottom, right, top = getter()
    corners = [(left, bottom), (right, bottom), (right, top), (left, top)]
    for m in reversed(matrices):
        corners = [(m.a * x + m.c * y + m.e, m.b * x + m.d * y + m.f) for x, y in corners]
    xs, ys = [c[0] for c in corners], [c[1] for c in corners]
    return min(xs), min(ys), max(xs), max(ys)
