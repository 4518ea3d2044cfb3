"""The images the pieces of a page are sent as: cut from the page image, or rendered from the source.

Serves every case (:mod:`.plan`). A long page's segments come rendered from the source with the
page (:mod:`llm_ocr.sources.pieces`: olmOCR-2 renders a 234 x 14,295 pt strip 22 x 1,288 px, and
a segment cut from that would be 22 x 44 px). A dense page's tiles and bands are planned on the
page image and, where the run can render regions of the page again (``sourced``), rendered from
the source at the family's resolution (a family that sizes a page by its longer side has shrunk
a broadsheet page until its 6 pt text is a few pixels tall); a piece cut again is cropped from
its own piece's image, or rendered again where that is sharper (a column's half).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence

from llm_ocr.options import dense
from llm_ocr.sources.base import PageImage
from llm_ocr.sources.pieces import PiecedPage, PieceImage, Region, containing, crop_from_pieces
from llm_ocr.sources.segments import Segment
from llm_ocr.vlm.box import Box
from llm_ocr.vlm.families.base import Family

#: Crops boxes from an encoded image: ``(image, boxes) -> PNGs``.
Crop = Callable[[bytes, Sequence[Box]], Awaitable[list[bytes]]]
#: Renders regions of one page from its source, each as a page of its own at the family's
#: resolution: ``regions -> [(image, mime, width, height) or None: not sharper than the page image]``.
Sourced = Callable[[list[Region]], Awaitable[list[tuple[bytes, str, int, int] | None]]]
#: Renders pieces (page-image pixels) from the source again: ``pieces -> [image or None: cut it]``.
Rerender = Callable[[list[Segment]], Awaitable[list[bytes | None]]]


class PieceImages:
    """Makes the images of a page's pieces (and of their halves, once cut again)."""

    def __init__(self, crop: Crop, item: PageImage, rendered: PiecedPage | None,
                 rerender: Rerender | None = None) -> None:
        self.crop, self.item, self.rendered, self.rerender = crop, item, rendered, rerender

    async def first(self, segments: list[Segment]) -> list[bytes]:
        """The images of the planned pieces: rendered with the page, else cut from its image."""
        if self.rendered is not None:
            return [p.image for p in self.rendered.pieces]
        return await self.of(segments)

    async def of(self, parts: list[Segment]) -> list[bytes]:
        """The images of ``parts``: cut from the page image, or from the rendered piece each lies
        in (as sharp as it was sent), or, with ``rerender``, rendered again where it gives one."""
        if self.rendered is None:
            return await self.crop(self.item.image, [Box(*s.box) for s in parts])
        shown = [(p.segment, p.image) for p in self.rendered.pieces]
        cut = await asyncio.to_thread(crop_from_pieces, shown, parts)
        if self.rerender is None:
            return cut
        try:
            again = await self.rerender(parts)
        except Exception:  # noqa: BLE001 - the source gone since: the halves cut from the pieces
            return cut
        return [image if image is not None else piece for image, piece in zip(again, cut)]


async def from_source(item: PageImage, tiles: list[Segment], sourced: Sourced | None,
                      crop: Crop) -> tuple[PiecedPage | None, str | None]:
    """The pieces ``tiles`` (page-image pixels), those the page image shows less sharply than
    the family reads them rendered from the source, the others cropped from the page image,
    on the page image's pixels as their plan (None: there is no ``sourced``, or every piece is
    as sharp in the page image), and why they are not rendered, if they could not be."""
    if sourced is None:
        return None, None
    regions = [(t.left / item.width, t.top / item.height, t.right / item.width, t.bottom / item.height) for t in tiles]
    try:
        images = await sourced(regions)
    except Exception as exc:  # noqa: BLE001 - the source gone (a download removed): cut from the page image
        return None, f"pieces cut from the page image (its source could not be rendered again: {exc})"
    if all(image is None for image in images):
        return None, None
    cut = iter(await crop(item.image, [Box(*t.box) for t, image in zip(tiles, images) if image is None]))
    pieces = tuple(
        PieceImage(tile, *image) if image is not None
        else PieceImage(tile, next(cut), "image/png", tile.width, tile.height)
        for tile, image in zip(tiles, images)
    )
    return PiecedPage(pieces, item.width, item.height, 1.0), None


def rerender(item: PageImage, sourced: Sourced | None, family: Family | None,
             prompt_room: int | None) -> Rerender | None:
    """The halves of pieces (page-image pixels) rendered from the source as pages of their own,
    each where the source shows it sharper than its piece and its image fits in
    ``image_share`` of ``prompt_room`` as ``family``'s processor counts it (else None:
    cut from its piece). A half of a column's band is shorter than the band and as narrow: a
    family that sizes an image by its longer side (olmOCR-2, LightOnOCR) reads it at a finer
    scale than the band was sent at, but squarer, in more image tokens. A half of a band across
    the page is cut from it, as before."""
    if sourced is None or family is None:
        return None
    room = dense().image_share * prompt_room if prompt_room else None

    async def again(halves: list[Segment]) -> list[bytes | None]:
        regions = [(h.left / item.width, h.top / item.height, h.right / item.width, h.bottom / item.height)
                   for h in halves]  # fmt: skip
        narrow = [h.width < item.width for h in halves]  # a column's (a band across the page: cut)
        if not any(narrow):
            return [None] * len(halves)
        out: list[bytes | None] = []
        for image, column in zip(await sourced(regions), narrow):
            tokens = family.image_tokens(image[2], image[3]) if image is not None else None
            fits = room is None or tokens is None or tokens <= room
            out.append(image[0] if image is not None and column and fits else None)
        return out

    return again


def as_sent(
    check: Callable[[Segment], str | None] | None, rendered: PiecedPage | None
) -> Callable[[Segment], str | None] | None:
    """``check`` of the image a piece is sent as: a piece rendered from the source (or a part of
    one) is as many times larger than its plan as that rendering is (a half rendered again fits
    by :func:`rerender`'s own check)."""
    if check is None or rendered is None:
        return check

    def why(piece: Segment) -> str | None:
        index = containing([p.segment for p in rendered.pieces], piece)
        if index is None:
            return check(piece)
        home = rendered.pieces[index]
        rx, ry = home.width / max(1, home.segment.width), home.height / max(1, home.segment.height)
        return check(Segment(piece.index, 0, 0, max(1, round(piece.width * rx)), max(1, round(piece.height * ry))))

    return why
