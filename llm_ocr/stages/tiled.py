"""Dense pages read in tiles: a page whose text is longer than one answer may hold.

An old newspaper page holds more text than ``max_tokens`` (7,168 with an 8,192 context) lets the
model write: read whole, its answer runs to ``max_tokens`` without repeating itself, and a
hotter retry does the same again, so the page costs two full answers and still loses its end.
Such a page is read in overlapping tiles instead (:mod:`llm_ocr.sources.tiles`), all at once,
each a request whose answer fits:

- **at once**, when the page's text is estimated, before any request, to need at least
  :data:`TILE_AT` of ``max_tokens`` (:mod:`llm_ocr.sources.density`: a PDF page's text layer, or
  any page's ink);
- **after one answer**, when the page was read whole and the answer ran to ``max_tokens``
  without repeating itself (the stream's loop watch, :mod:`llm_ocr.vlm.loops`, saw no loop: the
  text is long, not looping), and either the answer's words are the page's own text
  (:func:`~llm_ocr.stages.rate.coverage`: its text layer's, none repeated) or the page's
  estimate says it may hold :data:`LONG_AGREES` of ``max_tokens``: an answer that is neither is
  a loop the watch cannot see (one that counts), and is retried hotter like any loop. A page
  that loops keeps the loop policy: cut, retried hotter.

Tiles are planned to need at most :data:`TILE_SHARE` of ``max_tokens`` each, so that a dense
page costs about what reading it once costs, and no tile is the run's last long request. The
answers are joined as the segments of a long page are (:mod:`llm_ocr.stages.segmented`): boxes
moved to page pixels, each tile keeping the blocks whose centre lies deepest inside it, a block
two tiles both show merged into one; then the blocks are put in reading order by their boxes
(a recursive XY-cut that prefers columns: left to right, each top to bottom), so the columns
of a page cut into bands read one after the other, not band by band.

Each tile is read the family's way (its :meth:`~llm_ocr.vlm.families.base.Family.read`, as a
page or a segment is). Every family reads dense pages so; how it cuts them is its recipe's
``Family.dense``: **tiles** (the grid above, joined by boxes) where its answers carry every
block's box; **bands** (full-width pieces cut between text lines, :func:`~llm_ocr.sources.tiles.plan_bands`)
where they do not, joined as the segments of a long page are, by the words their overlap
repeats (:func:`~llm_ocr.stages.segmented.drop_repeated_start`). Without boxes the join cannot
put the columns of a page back in order, so a page with columns is planned column by column
(:mod:`llm_ocr.sources.columns`: a masthead first, then each column in bands down it) and each
column's bands are joined down it (:func:`join_bands`).

The number of pieces is planned from :data:`~llm_ocr.stages.rate.TOKENS_PER_CHAR`, **a first
guess** (fitted to the project's simulator, not measured on any model), then from the tokens a
character this run's answers showed (:class:`~llm_ocr.stages.rate.RateBook`): a piece whose
answer still runs to ``max_tokens`` without repeating itself is cut in two and both halves are
read again, or, for tiles, keeps its answer's complete blocks and only the rest of it is read
again, until every piece fits or a piece is a few text lines tall (:mod:`llm_ocr.stages.split`,
the adaptive split). The row's ``segments`` is the number of pieces finally read, its ``cut_reason`` says why
the page was cut and which pieces were cut again.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, replace
from functools import partial
from itertools import pairwise
from typing import Any

from llm_ocr.records import PageResult
from llm_ocr.sources.base import DocumentRef, PageImage
from llm_ocr.sources.pieces import PiecedPage, PieceImage, Region, containing
from llm_ocr.sources.segments import Segment
from llm_ocr.sources.tiles import plan_bands, plan_tiles, split_piece
from llm_ocr.sources.wide import split_at_gutter
from llm_ocr.stages.attempts import Answer
from llm_ocr.stages.rate import TOKENS_PER_CHAR, Coverage
from llm_ocr.stages.segmented import (
    Piece,
    Stitch,
    box_union,
    drop_exact_repeat,
    dubious_start,
    join_pieces,
    number_figures,
    read_in_segments,
    repeated_start,
)
from llm_ocr.stages.split import Splitter, complete_part
from llm_ocr.vlm.box import Box
from llm_ocr.vlm.families.base import Family, Reading
from llm_ocr.vlm.layout import PageBlock

#: A page estimated to need this share of ``max_tokens`` or more is tiled at once.
TILE_AT = 0.9
#: Each tile is planned to need at most this share of ``max_tokens`` (1,434 tokens of 7,168:
#: about a long normal page) ...
TILE_SHARE = 0.2
#: ... or, where that share is less (a small context), this many tokens (a long normal page,
#: whatever the context: every cut costs the lines two tiles both show and the markup of blocks
#: cut in two, so more, smaller tiles than that only add cost) ...
TILE_TOKENS = 1434
#: ... but never more than this share of ``max_tokens`` (room for an answer denser than planned).
TILE_MAX_SHARE = 0.5
#: After an answer that ran to ``max_tokens``, the page is taken to hold at least this many
#: times ``max_tokens`` (unless its estimate says more) ...
LONG_FACTOR = 2.0
#: ... provided its estimate (if any) says at least this share of ``max_tokens``: the ink
#: estimate is within 0.65-1.35 times the truth, the tokens per character a guess.
LONG_AGREES = 0.7
#: A piece's image may take this share of the context beside ``max_tokens`` (the rest: the
#: prompt text, the chat template, the pieces' overlaps and uneven cuts).
IMAGE_SHARE = 0.6
#: Prompt tokens kept for a request's text and chat template beside its image (olmOCR-2's
#: prompt, the longest, is about 200 tokens).
PROMPT_TEXT_TOKENS = 256
#: Blocks whose boxes overlap by at most this share of the page are still apart (boxes are
#: approximate) when the reading order looks for the gaps between columns and rows.
GAP_TOLERANCE = 0.004


@dataclass(frozen=True)
class TilePlan:
    """How many tiles to read a page in, and why (for the row's ``cut_reason``)."""

    count: int
    why: str
    #: What the plan rests on beyond ``why``, said after how the page was read (None: nothing).
    detail: str | None = None


def tiling_allowed(family: Family, enabled: bool) -> bool:
    """Whether pages of a model ``family`` may be read in pieces when dense (``enabled``: the
    option): every family may, in tiles or bands as its recipe says (``Family.dense``), except
    one that reads a page block by block (``"blocks"``, MinerU2.5: no answer holds its text)."""
    return enabled and family.dense != "blocks"


def dense_split(family: Family) -> Splitter:
    """How a piece of a dense page read by ``family`` is cut in two when its answer ran out: a
    tile at a gutter or between lines, a band between lines only."""
    across = family.dense_tiles
    return lambda image, piece: split_piece(image, piece, across=across)


def segment_split(tall: bool) -> Splitter:
    """How a segment of a long page is cut in two when its answer ran out: between text lines
    across a tall page; at a gutter between a wide page's columns, or not at all (a line cut
    across its length cannot be joined: :mod:`llm_ocr.sources.wide`)."""
    if not tall:
        return split_at_gutter
    return lambda image, piece: split_piece(image, piece, across=False)


def tiles_at_once(item: PageImage, max_tokens: int, rate: float = TOKENS_PER_CHAR) -> TilePlan | None:
    """A plan when the page's estimated text, at ``rate`` tokens a character (the run's,
    :class:`~llm_ocr.stages.rate.RateBook`; at first :data:`TOKENS_PER_CHAR`), needs
    :data:`TILE_AT` of ``max_tokens`` or more."""
    estimate = item.text_estimate
    if estimate is None:
        return None
    tokens = round(estimate.chars * rate)
    if tokens < TILE_AT * max_tokens:
        return None
    at = "" if rate == TOKENS_PER_CHAR else f" at the {rate:.2f} tokens a character this run's answers showed"
    return TilePlan(
        _count(tokens, max_tokens),
        f"{estimate.describe()}, ~{tokens:,} tokens{at}, more than one answer holds (max_tokens {max_tokens})",
    )


def may_be_long(item: PageImage, max_tokens: int, rate: float = TOKENS_PER_CHAR) -> bool:
    """Whether an answer of ``item`` that runs to ``max_tokens`` without repeating itself is to
    be taken as long (and the page read in tiles) whatever it says: no estimate says its text
    needs under :data:`LONG_AGREES` of ``max_tokens`` at ``rate`` tokens a character. Otherwise
    the answer decides (:func:`~llm_ocr.stages.rate.coverage`: its words are the page's)."""
    estimate = item.text_estimate
    return estimate is None or estimate.chars * rate >= LONG_AGREES * max_tokens


def tiles_after(reading: Reading, item: PageImage, max_tokens: int, rate: float = TOKENS_PER_CHAR,
                covered: Coverage | None = None) -> TilePlan | None:
    """A plan when ``reading`` (the whole page's) ended in an answer that ran to ``max_tokens``
    without repeating itself (:attr:`~llm_ocr.stages.attempts.Answer.long`). ``covered``: how
    much of the page's text layer that answer had written (then the page needs ``max_tokens``
    over that share; else at least :data:`LONG_FACTOR` times ``max_tokens``)."""
    long = [a for a in reading.answers if isinstance(a, Answer) and a.long]
    if not long:
        return None
    estimate = item.text_estimate
    share = covered.share if covered is not None else None
    ran = round(max_tokens / share) if share else round(LONG_FACTOR * max_tokens)
    tokens = max(ran, round(estimate.chars * rate) if estimate else 0)
    return TilePlan(
        _count(tokens, max_tokens),
        f"the whole page's answer ran to max_tokens ({long[0].result.completion_tokens} tokens) without repeating "
        "itself",
        f"planned from that answer: {covered.why}" if covered is not None and covered.share else None,
    )


def image_pieces(family: Family | None, width: int, height: int, prompt_room: int | None) -> int:
    """The fewest pieces a ``width`` x ``height`` page must be cut into for each piece's image to
    fit, as ``family``'s processor counts it, in :data:`IMAGE_SHARE` of ``prompt_room`` (the
    context beside ``max_tokens``): vLLM refuses a request whose prompt and ``max_tokens`` exceed
    the context, and a family at 200 or 300 DPI makes more image tokens of a band of a page than
    a small context leaves (1 when unknown)."""
    if family is None or not prompt_room:
        return 1
    tokens = family.image_tokens(width, height)
    if tokens is None:
        return 1
    return max(1, math.ceil(tokens / (IMAGE_SHARE * prompt_room)))


def tallest_band(family: Family | None, item: PageImage) -> int | None:
    """The tallest piece of a column of ``item`` (page pixels) ``family`` reads in bands (None:
    any). A family that sizes an image by its longer side (olmOCR-2, LightOnOCR: 1,288 and 1,540
    px) would get a column as tall as the page no sharper than the whole page; no taller than
    the page is wide, each piece is at least as sharp as a band across the page. A family that
    renders at a DPI, capped by pixels, gets a narrow column at its DPI whatever its height."""
    if family is None or not family.rendering.long_side:
        return None
    return item.width


def reads_columns(family: Family | None, prompt_room: int | None) -> bool:
    """Whether ``family`` reads a page with columns column by column at a context that leaves
    ``prompt_room`` beside ``max_tokens`` (else in full-width bands: every word, the bands'
    order). A family that sizes an image by its longer side renders the pieces of a column,
    and their halves once cut again, squarer as they get shorter, in up to
    ``long_side`` x ``long_side`` pixels (olmOCR-2: ~2,100 image tokens; LightOnOCR: ~3,000): at a
    context that cannot hold such an image in :data:`IMAGE_SHARE` of the room, a column's
    pieces could not be read at the family's resolution, and full-width bands (as wide as the
    page, as sharp whatever their height) are read instead. At their recipes' contexts (16,384)
    both read columns."""
    if family is None or not family.rendering.long_side or not prompt_room:
        return True
    side = family.rendering.long_side
    tokens = family.image_tokens(side, side)
    return tokens is None or tokens <= IMAGE_SHARE * prompt_room


def band_fits(family: Family | None, prompt_room: int | None) -> Callable[[int, int], bool] | None:
    """Whether a piece of a column, ``width`` x ``height`` page-image pixels, makes an image that
    fits in :data:`IMAGE_SHARE` of ``prompt_room`` as ``family``'s processor counts it (None:
    any does). A family that sizes an image by its longer side renders any piece that long
    (LightOnOCR: 1,540 px): its image tokens grow with the piece's width over its height, not
    with its share of the page, so a column is cut into fewer, taller bands to fit, not more."""
    if family is None or not prompt_room:
        return None
    room = IMAGE_SHARE * prompt_room
    long_side = family.rendering.long_side

    def fits(width: int, height: int) -> bool:
        scale = long_side / max(width, height, 1) if long_side else 1.0
        tokens = family.image_tokens(max(1, round(width * scale)), max(1, round(height * scale)))
        return tokens is None or tokens <= room

    return fits


def oversize(family: Family | None, prompt_room: int | None) -> Callable[[Segment], str | None] | None:
    """Why a piece's image cannot be sent beside ``max_tokens`` (None: it can): more image tokens,
    as ``family``'s processor counts them, than ``prompt_room`` less the prompt's text."""
    if family is None or not prompt_room:
        return None
    room = prompt_room - PROMPT_TEXT_TOKENS

    def why(piece: Segment) -> str | None:
        tokens = family.image_tokens(piece.width, piece.height)
        if tokens is None or tokens <= room:
            return None
        return f"is an image of ~{tokens:,} tokens, more than the context leaves beside max_tokens ({room:,})"

    return why


def _min_side(family: Family | None) -> int:
    """The fewest page-image pixels a side of a piece may have: the family's minimum readable
    size (a piece is sent at least as large as the page image shows it)."""
    return family.min_readable_side if family is not None else 0


def _count(tokens: int, max_tokens: int) -> int:
    per_tile = min(max(TILE_SHARE * max_tokens, TILE_TOKENS), TILE_MAX_SHARE * max_tokens)
    return max(2, math.ceil(tokens / per_tile))


async def read_in_tiles(
    ref: DocumentRef,
    item: PageImage,
    num_pages: int | None,
    plan: TilePlan,
    *,
    read: Callable[[PageImage], Awaitable[Reading]],
    crop: Callable[[bytes, Sequence[Box]], Awaitable[list[bytes]]],
    model: str,
    first: Reading | None = None,
    limit: AbstractAsyncContextManager[Any] | None = None,
    family: Family | None = None,
    prompt_room: int | None = None,
    sourced: Callable[[list[Region]], Awaitable[list[tuple[bytes, str, int, int] | None]]] | None = None,
    stitch: Stitch | None = None,
) -> PageResult | None:
    """Read ``item`` in the pieces of ``plan`` (each with ``read``, the family's reading of one
    image, which stops at an answer that runs out), all at once, cut again where an answer ran
    out, and join them into its one row (None when the page cannot be cut: read it whole).
    ``family``'s recipe says tiles or bands (default tiles). ``first`` is the whole page's
    reading that ran out of tokens, if there was one: its tokens and text stay in the row. Each
    piece holds a permit of ``limit`` (the run's piece limit) while it is asked.

    The pieces are planned on the page image; with ``sourced`` (the page's regions rendered from
    its source, each as a page of its own at the family's resolution) they are sent so rendered,
    not cut from the page image, which a family that sizes pages by their longer side or pixel
    count has shrunk (``stitch`` then crops the figures from them). When the source cannot be
    read again, they are cut from the page image, and the row says so."""
    bands = family is not None and not family.dense_tiles
    count = max(plan.count, image_pieces(family, item.width, item.height, prompt_room))
    if bands:
        tiles = await asyncio.to_thread(plan_bands, item.image, count, tallest_band(family, item),
                                        band_fits(family, prompt_room), reads_columns(family, prompt_room))
    else:
        tiles = await asyncio.to_thread(plan_tiles, item.image, count)
    if len(tiles) < 2:
        return None
    kind = "band" if bands else "tile"
    split = dense_split(family) if family is not None else dense_split_tiles
    rendered, unsourced = await _from_source(item, tiles, sourced, crop)
    # The halves of a column's band cut again are rendered from the source again: a family that
    # sizes an image by its longer side reads such a half (shorter, as narrow) at a finer scale
    # than the band was sent at. A band across the page is cut as before.
    again = _rerender(item, sourced, family, prompt_room) if rendered is not None and bands else None
    row = await read_in_segments(
        ref, item, num_pages, tiles, read=read, crop=crop, model=model, join=join_bands if bands else join_tiles,
        kind=kind, limit=limit, split=split, too_big=_as_sent(oversize(family, prompt_room), rendered),
        pieces=rendered, stitch=stitch, rerender=again,
        rest=None if bands else partial(complete_part, min_side=_min_side(family)),
    )
    if unsourced:
        row = replace(row, error=f"{row.error}; {unsourced}" if row.error else unsourced)
    pieces = f"{len(tiles)} {kind}s"
    if row.segments and row.segments != len(tiles):
        pieces += f" ({row.segments} pieces once cut again)"
    how = f"read in {pieces} at once" if first is None else f"read again in {pieces}"
    detail = f" ({plan.detail})" if plan.detail else ""
    notes = [f"{plan.why}: {how}{detail}"] + ([row.cut_reason] if row.cut_reason else [])
    if first is None:
        return replace(row, cut_reason="; ".join(notes))
    whole = first.answers
    return replace(
        row,
        raw=f"<--- whole page: ran to max_tokens --->\n{first.raw}\n{row.raw}",
        cut_reason="; ".join(notes),
        prompt_tokens=(row.prompt_tokens or 0) + sum(a.result.prompt_tokens or 0 for a in whole),
        completion_tokens=(row.completion_tokens or 0) + sum(a.result.completion_tokens or 0 for a in whole),
        attempts=row.attempts + sum(a.attempts for a in whole),
    )


async def _from_source(
    item: PageImage, tiles: list[Segment],
    sourced: Callable[[list[Region]], Awaitable[list[tuple[bytes, str, int, int] | None]]] | None,
    crop: Callable[[bytes, Sequence[Box]], Awaitable[list[bytes]]],
) -> tuple[PiecedPage | None, str | None]:
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


def _rerender(
    item: PageImage,
    sourced: Callable[[list[Region]], Awaitable[list[tuple[bytes, str, int, int] | None]]] | None,
    family: Family | None,
    prompt_room: int | None,
) -> Callable[[list[Segment]], Awaitable[list[bytes | None]]] | None:
    """The halves of pieces (page-image pixels) rendered from the source as pages of their own,
    each where the source shows it sharper than its piece and its image fits in
    :data:`IMAGE_SHARE` of ``prompt_room`` as ``family``'s processor counts it (else None: cut
    from its piece): ``read_in_segments``' ``rerender``. A half of a column's band is shorter
    than the band and as narrow: a family that sizes an image by its longer side (olmOCR-2,
    LightOnOCR) reads it at a finer scale than the band was sent at, but squarer, in more image
    tokens. A half of a band across the page is cut from it, as before."""
    if sourced is None or family is None:
        return None
    room = IMAGE_SHARE * prompt_room if prompt_room else None

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


def _as_sent(
    check: Callable[[Segment], str | None] | None, rendered: PiecedPage | None
) -> Callable[[Segment], str | None] | None:
    """``check`` of the image a piece is sent as: a piece rendered from the source (or a part of
    one) is as many times larger than its plan as that rendering is (a half rendered again fits
    by :func:`_rerender`'s own check)."""
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


def dense_split_tiles(image: bytes, piece: Segment) -> tuple[list[Segment], str]:
    """A tile cut in two (at a gutter, else between lines): the split of a tiles family."""
    return split_piece(image, piece, across=True)


# -- joining ---------------------------------------------------------------------------------


def join_bands(bands: list[Segment], per_band: list[list[Piece]], page: int) -> list[Piece]:
    """The blocks of a page read in bands by a family without boxes, each once, in the bands'
    order: region by region (a page with columns is planned as a masthead, then each column,
    each cut into bands along its height, :func:`~llm_ocr.sources.tiles.plan_bands`), each
    region's bands joined down it (:func:`join_region`). A region is a run of bands one below
    the other, as wide as each other (a band cut in two again, its halves too)."""
    runs: list[list[int]] = []
    for i, band in enumerate(bands):
        last = bands[runs[-1][-1]] if runs else None
        if last is not None and (last.left, last.right) == (band.left, band.right) and band.top < last.bottom:
            runs[-1].append(i)
        else:
            runs.append([i])
    joined: list[Piece] = []
    for run in runs:
        # Each region joined on its own, its bands numbered from 0 (the join pairs a band with
        # the one before it by number), then given back their page-wide numbers.
        own = [replace(bands[i], index=k) for k, i in enumerate(run)]
        pieces = [[replace(p, segment=k) for p in per_band[i]] for k, i in enumerate(run)]
        joined += [replace(p, segment=run[p.segment]) for p in join_region(own, pieces, page)]
    return number_figures(joined, page)


def join_region(bands: list[Segment], per_band: list[list[Piece]], page: int) -> list[Piece]:
    """The blocks of one region read in bands, one below the other, each once, band by band.

    A band shows every column of the region, so the lines its overlap with the band above repeats
    are at the start of one of its blocks per column, and at the end of one of that band's
    blocks, not at the end of its whole text: each block loses the run of words that starts it
    and ends a block of the band above (:func:`~llm_ocr.stages.segmented.drop_exact_repeat`);
    a block that was all overlap is dropped. Blocks with boxes (figures) are kept by the band
    whose share of the page their centre is in (:func:`~llm_ocr.stages.segmented.join_pieces`).
    """
    kept = [list(per_band[0])] if per_band else []
    for k, (above, pieces) in enumerate(pairwise(per_band)):
        tails = [p.block.text for p in above if not p.block.boxes and p.block.text.strip()]
        mine = []
        repeated = False
        for piece in pieces:
            text = piece.block.text
            if not piece.block.boxes:
                for tail in tails:
                    cut = drop_exact_repeat(tail, text)
                    if cut != text:
                        text, repeated = cut, True
                        break
                if not text.strip():
                    continue
            same = text == piece.block.text
            mine.append(piece if same else replace(piece, block=PageBlock(piece.block.label, [], text)))
        texts = [i for i, p in enumerate(mine) if not p.block.boxes and p.block.text.strip()]
        if texts and tails and not repeated and dubious_start(tails[0], mine[texts[0]].block.text):
            note = f"bands {k + 1} and {k + 2} both start with the same words"  # a header atop every band
            mine[texts[0]] = replace(mine[texts[0]], unverified=note)
        kept.append(mine)
    return join_pieces(bands, kept, page, text_overlap=False)


def join_tiles(tiles: list[Segment], per_tile: list[list[Piece]], page: int) -> list[Piece]:
    """The blocks of the page, each once, in reading order (see the module docstring)."""
    width = max(t.right for t in tiles)
    height = max(t.bottom for t in tiles)
    kept: list[Piece] = []
    for tile, pieces in zip(tiles, per_tile):
        for piece in pieces:
            centre = _centre(piece)
            if centre is None or _owner(tiles, centre, width, height) in (None, tile.index):
                kept.append(piece)
    merged: list[Piece] = []
    for piece in kept:
        twin = _twin(merged, piece, tiles)
        if twin is None:
            merged.append(piece)
            continue
        head, tail = sorted((merged[twin], piece), key=lambda p: _position(p))
        text, how = repeated_start(head.block.text, tail.block.text)
        note = head.unverified or tail.unverified or (
            "a block two tiles show starts with the same words in both" if how == "dubious" else None)
        boxes = box_union(head.block.boxes + tail.block.boxes)
        block = PageBlock(head.block.label, boxes, f"{head.block.text} {text}".strip())
        merged[twin] = replace(head, block=block, figures=head.figures + tail.figures, unverified=note)
    return number_figures(reading_order(merged, width, height), page)


def _centre(piece: Piece) -> tuple[float, float] | None:
    boxes = piece.block.boxes
    return Box.union(boxes).centre if boxes else None


def _position(piece: Piece) -> tuple[float, float]:
    """(top, left) of the piece's boxes."""
    if not piece.block.boxes:
        return (0, 0)
    around = Box.union(piece.block.boxes)
    return (around.y1, around.x1)


def _owner(tiles: list[Segment], point: tuple[float, float], width: int, height: int) -> int | None:
    """The tile ``point`` lies deepest inside (its distance to the nearest edge that is not the
    page's): the tile whose share of the page it is in, overlaps split down the middle. A piece
    inside another (the rest of a piece whose answer ran out, :func:`~llm_ocr.stages.split.complete_part`)
    owns its part of it."""
    x, y = point
    best: tuple[float, int] | None = None
    holding = [t for t in tiles if t.left <= x <= t.right and t.top <= y <= t.bottom]
    for tile in holding:
        if any(other is not tile and _nested(other, tile) for other in holding):
            continue  # the rest of a piece whose answer ran out is read inside it: the rest owns it
        edges = [x - tile.left if tile.left > 0 else math.inf, tile.right - x if tile.right < width else math.inf,
                 y - tile.top if tile.top > 0 else math.inf,
                 tile.bottom - y if tile.bottom < height else math.inf]  # fmt: skip
        depth = min(edges)
        if best is None or depth > best[0]:
            best = (depth, tile.index)
    return best[1] if best else None


def _nested(inner: Segment, outer: Segment) -> bool:
    """Whether ``inner`` lies inside ``outer`` and is smaller (the rest of a piece read again)."""
    inside = outer.left <= inner.left and inner.right <= outer.right and outer.top <= inner.top
    return inside and inner.bottom <= outer.bottom and inner.width * inner.height < outer.width * outer.height


def _twin(merged: list[Piece], piece: Piece, tiles: list[Segment]) -> int | None:
    """The block of another, overlapping tile that ``piece`` is another copy of: the same label
    and overlapping boxes (blocks of one page never overlap; copies of one block in two tiles do)."""
    if not piece.block.boxes:
        return None
    mine = tiles[piece.segment]
    for index in range(len(merged) - 1, -1, -1):
        other = merged[index]
        theirs = tiles[other.segment]
        if other.segment == piece.segment or other.block.label != piece.block.label:
            continue
        if not Box(*mine.box).overlaps(Box(*theirs.box)):
            continue
        if any(a.overlaps(b) for a in other.block.boxes for b in piece.block.boxes):
            return index
    return None


def reading_order(pieces: list[Piece], width: int, height: int) -> list[Piece]:
    """``pieces`` in reading order by their boxes: a recursive XY-cut that splits a region at the
    gaps between columns when it has any (left to right), else between rows (top to bottom).
    A block without a box stays behind the block it followed in its tile's answer."""
    groups: list[list[Piece]] = []
    for piece in pieces:
        if piece.block.boxes or not groups:
            groups.append([piece])
        else:
            groups[-1].append(piece)
    boxed = [g for g in groups if g[0].block.boxes]
    loose = [g for g in groups if not g[0].block.boxes]  # only a boxless first piece
    ordered = _xy_cut(boxed, (GAP_TOLERANCE * width, GAP_TOLERANCE * height), 0)
    return [p for g in loose + ordered for p in g]


def _extent(group: list[Piece], axis: int) -> tuple[float, float]:
    """Where the group's first piece starts and ends across (``axis`` 0) or down (1) the page."""
    around = Box.union(group[0].block.boxes)
    return (around.x1, around.x2) if axis == 0 else (around.y1, around.y2)


def _xy_cut(groups: list[list[Piece]], tolerance: tuple[float, float], depth: int) -> list[list[Piece]]:
    if len(groups) <= 1 or depth > 64:
        return groups
    parts = _split(groups, 0, tolerance[0])  # columns first
    if len(parts) == 1:
        # Rows. Two neighbouring rows that are columns again once joined are one region: their
        # paragraph breaks merely line up (the classic XY-cut failure, which would read the
        # columns row by row); a row an element spans (a headline across columns) stays apart.
        parts = []
        for row in _split(groups, 1, tolerance[1]):
            if parts and len(_split(parts[-1] + row, 0, tolerance[0])) > 1:
                parts[-1] = parts[-1] + row
            else:
                parts.append(row)
    if len(parts) > 1:
        return [g for part in parts for g in _xy_cut(part, tolerance, depth + 1)]
    return sorted(groups, key=lambda g: (_extent(g, 1)[0], _extent(g, 0)[0]))


def _split(groups: list[list[Piece]], axis: int, tolerance: float) -> list[list[list[Piece]]]:
    """``groups`` cut at every gap along ``axis`` (0: x, 1: y) that no block spans."""
    spans = sorted(groups, key=lambda g: _extent(g, axis))
    parts: list[list[list[Piece]]] = [[spans[0]]]
    reach = _extent(spans[0], axis)[1]
    for group in spans[1:]:
        start, end = _extent(group, axis)
        if start >= reach - tolerance:
            parts.append([group])
        else:
            parts[-1].append(group)
        reach = max(reach, end)
    return parts
