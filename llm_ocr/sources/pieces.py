"""The pieces of a long page, rendered from the source at the resolution the family reads them.

A page far longer than it is wide (a 234 x 14,295 pt log sheet, 1:61) is read in overlapping
segments (:mod:`llm_ocr.sources.segments`). The family-sized render of the whole page is no
place to cut them from: olmOCR-2 renders every page 1,288 px on its longer side, so that strip
becomes 22 x 1,288 px and a segment of it 22 x 44 px, which no model reads. So each segment is
planned in the page's own units (points for a PDF, source pixels for an image) and rendered
from the source *as if it were a page*: the family's rendering (DPI or longest side, pixel
caps, the 640 px floor; :func:`llm_ocr.sources.render.piece_scale`) applied to the segment's
own size. For olmOCR-2 the strip's segments are then 644 x 1,288 px each.

The segments are planned on a *virtual* render of the whole page at the scale a nominal segment
(as wide as the page, ``segment_aspect`` times as long) gets: the join
(:mod:`llm_ocr.stages.pieces.join`) works in those pixels, where every piece is about as large as
it was sent, and moves the result to the pixels of the page image the row describes at the end.

Runs in the render workers, beside the page's own render (the source is at hand there: a
downloaded copy is removed once its pages are rendered); the pieces travel with the page
(:attr:`~llm_ocr.sources.base.PageImage.pieces`) and count in the look-ahead's bytes.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from llm_ocr.options import dense

from .segments import Segment, plan_segments
from .wide import image_gutters, wide_segments

#: A region of a page as fractions of its width and height: ``(x1, y1, x2, y2)``.
Region = tuple[float, float, float, float]


@dataclass(frozen=True)
class PieceImage:
    """One piece of a page, rendered on its own: where it lies and the image sent for it.

    ``segment`` is the piece in the pixels of the page's *virtual* render (:attr:`PiecedPage.scale`
    pixels per page unit), where the pieces are joined; ``image`` is ``width`` x ``height`` pixels.
    """

    segment: Segment
    image: bytes = field(repr=False)
    mime: str
    width: int
    height: int


@dataclass(frozen=True)
class PiecedPage:
    """A page's pieces and the virtual render they are planned on: ``width`` x ``height`` pixels
    (``scale`` pixels per page unit: points or source pixels)."""

    pieces: tuple[PieceImage, ...]
    width: int
    height: int
    scale: float

    @property
    def nbytes(self) -> int:
        """The bytes the pieces' images hold (what a waiting page holds beside its own)."""
        return sum(len(p.image) for p in self.pieces)


def plan_pieces(
    width: float, height: float, max_aspect: float, scale_of: Callable[[float, float], float],
    image: Any = None,
) -> tuple[list[Segment], float]:
    """The segments of a ``width`` x ``height`` page (page units) in the pixels of its virtual
    render, and that render's scale; ``([], 0)`` when the page reads whole.

    ``scale_of(w, h)`` is the family's scale for a ``w`` x ``h`` page (pixels per unit). A page
    wider than tall is cut only at the gutters between its columns found in ``image`` (a PIL
    image of the whole page, any scale; :mod:`llm_ocr.sources.wide`), else read whole.
    """
    if max_aspect <= 0 or width <= 0 or height <= 0:
        return [], 0.0
    short, long = min(width, height), max(width, height)
    if long <= max_aspect * short:
        return [], 0.0
    nominal = (short, short * min(dense().segment_aspect, max_aspect))
    scale = scale_of(*nominal) if height >= width else scale_of(*reversed(nominal))
    virtual_w, virtual_h = max(1, round(width * scale)), max(1, round(height * scale))
    if width > height:  # a line cut across its length cannot be joined: cut between columns or not at all
        found = image_gutters(image) if image is not None else []
        wide = wide_segments(virtual_w, virtual_h, found, max_aspect=max_aspect)
        return (wide, scale) if wide else ([], 0.0)
    return plan_segments(virtual_w, virtual_h, max_aspect=max_aspect), scale


def stitch(pieces: Sequence[tuple[Segment, bytes]], box: Sequence[float]) -> bytes:
    """The region ``box`` (``[x1, y1, x2, y2]`` in virtual pixels) as one PNG, put together from
    the pieces that show it (a figure cut by a segment's edge is in two): each piece's share
    is cropped from its own image and scaled to the virtual render's pixels."""
    from PIL import Image

    x1, y1, x2, y2 = (round(v) for v in box)
    canvas = Image.new("RGB", (max(1, x2 - x1), max(1, y2 - y1)), "white")
    for segment, data in pieces:
        left, top = max(x1, segment.left), max(y1, segment.top)
        right, bottom = min(x2, segment.right), min(y2, segment.bottom)
        if right <= left or bottom <= top:
            continue
        with Image.open(io.BytesIO(data)) as img:
            sx, sy = img.width / segment.width, img.height / segment.height
            part = img.convert("RGB").crop((
                round((left - segment.left) * sx), round((top - segment.top) * sy),
                round((right - segment.left) * sx), round((bottom - segment.top) * sy),
            ))  # fmt: skip
        canvas.paste(part.resize((right - left, bottom - top), Image.Resampling.LANCZOS), (left - x1, top - y1))
    buffer = io.BytesIO()
    canvas.save(buffer, format="PNG", compress_level=1)
    return buffer.getvalue()


def stitch_figures(pieces: Sequence[tuple[Segment, bytes]], boxes: Sequence[Sequence[float]]) -> list[bytes]:
    """:func:`stitch` for each of ``boxes`` (one call to a render worker for a page's figures)."""
    return [stitch(pieces, box) for box in boxes]


def crop_from_pieces(pieces: Sequence[tuple[Segment, bytes]], halves: Sequence[Segment]) -> list[bytes]:
    """Each of ``halves`` (in virtual pixels, each inside one piece: a piece cut again because
    its answer ran out) cropped from the image of the piece it lies in, at that image's own
    resolution (as sharp as the piece was sent), as PNG."""
    from PIL import Image

    out = []
    for half in halves:
        home = containing([s for s, _ in pieces], half)
        segment, data = pieces[home] if home is not None else min(pieces, key=lambda p: _outside(p[0], half))
        with Image.open(io.BytesIO(data)) as img:
            sx, sy = img.width / segment.width, img.height / segment.height
            part = img.convert("RGB").crop((
                round((half.left - segment.left) * sx), round((half.top - segment.top) * sy),
                round((half.right - segment.left) * sx), round((half.bottom - segment.top) * sy),
            ))  # fmt: skip
        buffer = io.BytesIO()
        part.save(buffer, format="PNG", compress_level=1)
        out.append(buffer.getvalue())
    return out


def containing(segments: Sequence[Segment], inner: Segment) -> int | None:
    """The index of the first of ``segments`` that ``inner`` lies wholly inside (None: none)."""
    return next((i for i, s in enumerate(segments) if s.left <= inner.left and s.top <= inner.top
                 and inner.right <= s.right and inner.bottom <= s.bottom), None)


def _outside(segment: Segment, half: Segment) -> int:
    """How far ``half`` reaches outside ``segment`` (0: inside it)."""
    return (max(0, segment.left - half.left) + max(0, segment.top - half.top)
            + max(0, half.right - segment.right) + max(0, half.bottom - segment.bottom))


def image_info(data: bytes) -> tuple[str, int, int]:
    """``(mime, width, height)`` of an encoded image, from its header."""
    from PIL import Image

    with Image.open(io.BytesIO(data)) as img:
        mime = Image.MIME.get(img.format or "", "image/png")
        return mime, img.width, img.height
