"""How a page is cut into pieces, and whether: segments, tiles, bands, columns.

One page, three cases, each planned here and read by :mod:`.read`:

- **a long page** (longer than ``--max-page-aspect``, 1:3, either way: a 234 x 14,295 pt log
  sheet, a receipt, a scroll): overlapping **segments** along its length, planned and rendered
  with the page (:mod:`llm_ocr.sources.segments`, :mod:`llm_ocr.sources.pieces`: the render
  workers cut them, and the render layer cannot import a stage). A segment whose answer runs
  out is cut in two between text lines along the page (:func:`segment_split`). A page much
  wider than tall is cut only at the gutters between its columns, or read whole
  (:mod:`llm_ocr.sources.wide`: a line cut across its length cannot be joined).
- **a dense page** (an old newspaper page, a two-column paper set small: more text than
  ``max_tokens``, 7,168 with an 8,192 context, lets the model write): read whole, its answer
  runs to ``max_tokens`` without repeating itself, and a hotter retry does the same again, so
  it is read in overlapping pieces instead, all at once, each a request whose answer fits:

  - **at once**, when the page's text is estimated, before any request, to need at least
    ``tile_at`` of ``max_tokens`` (:mod:`llm_ocr.sources.density`: a PDF page's text layer,
    or any page's ink; :func:`tiles_at_once`);
  - **after one answer**, when the page was read whole and the answer ran to ``max_tokens``
    without repeating itself (the stream's loop watch, :mod:`llm_ocr.vlm.loops`, saw no loop),
    and either the answer's words are the page's own text (:func:`.rate.coverage`) or the
    page's estimate says it may hold ``long_agrees`` of ``max_tokens``
    (:func:`may_be_long`, :func:`tiles_after`). A page that loops keeps the loop policy: cut,
    retried hotter.

  How the family cuts it is its recipe's ``Family.dense``: **tiles** (a grid whose edges fall in
  the page's whitespace, :func:`.cuts.plan_tiles`, joined by boxes) where its answers box every
  block; **bands** (full-width pieces cut between text lines, :func:`.cuts.plan_bands`; a page
  with **columns** column by column, :mod:`.columns`) where they do not.

Pieces are planned to need at most ``tile_share`` of ``max_tokens`` each, from
``tokens_per_char`` (**a first guess**, fitted to the project's simulator, not measured
on any model), then from the tokens a character this run's answers showed
(:class:`.rate.RateBook`); each piece's image must fit beside ``max_tokens`` in the server's
context (:func:`image_pieces`, :func:`oversize`, :func:`band_fits`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from llm_ocr.options import dense
from llm_ocr.sources.base import PageImage
from llm_ocr.sources.segments import Segment
from llm_ocr.sources.wide import split_at_gutter
from llm_ocr.stages.attempts import Answer
from llm_ocr.stages.pieces.cuts import split_piece
from llm_ocr.stages.pieces.rate import Coverage
from llm_ocr.vlm.families.base import Family, Reading

#: Cuts a piece (its image, its place on the page) in two: ``(halves, how)``, or ``([], why not)``.
Splitter = Callable[[bytes, Segment], tuple[list[Segment], str]]

#: Blocks whose boxes overlap by at most this share of the page are still apart (boxes are
#: approximate) when the reading order looks for the gaps between columns and rows.

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
    tile at a gutter or between lines, a band between lines only (by pixels where its lines
    cannot be found), never into halves under the family's smallest readable side."""
    across, least = family.dense_tiles, min_side(family)
    return lambda image, piece: split_piece(image, piece, across=across, min_side=least)


def segment_split(tall: bool) -> Splitter:
    """How a segment of a long page is cut in two when its answer ran out: between text lines
    across a tall page; at a gutter between a wide page's columns, or not at all (a line cut
    across its length cannot be joined: :mod:`llm_ocr.sources.wide`)."""
    if not tall:
        return split_at_gutter
    return lambda image, piece: split_piece(image, piece, across=False)


def tiles_at_once(item: PageImage, max_tokens: int, rate: float | None = None) -> TilePlan | None:
    """A plan when the page's estimated text, at ``rate`` tokens a character (the run's,
    :class:`~llm_ocr.stages.pieces.rate.RateBook`; at first ``tokens_per_char``), needs
    ``tile_at`` of ``max_tokens`` or more."""
    estimate = item.text_estimate
    if estimate is None:
        return None
    rate = dense().tokens_per_char if rate is None else rate
    tokens = round(estimate.chars * rate)
    if tokens < dense().tile_at * max_tokens:
        return None
    at = "" if rate == dense().tokens_per_char else f" at the {rate:.2f} tokens a character this run's answers showed"
    return TilePlan(
        _count(tokens, max_tokens),
        f"{estimate.describe()}, ~{tokens:,} tokens{at}, more than one answer holds (max_tokens {max_tokens})",
    )


def tiles_always(item: PageImage, max_tokens: int, rate: float | None = None) -> TilePlan:
    """The plan of ``--pieces always`` for a page :func:`tiles_at_once` would read whole: the
    pieces its estimated text needs at ``rate`` tokens a character, at least two."""
    rate = dense().tokens_per_char if rate is None else rate
    estimate = item.text_estimate
    tokens = round(estimate.chars * rate) if estimate is not None else 0
    return TilePlan(_count(tokens, max_tokens), "--pieces always")


def may_be_long(item: PageImage, max_tokens: int, rate: float | None = None) -> bool:
    """Whether an answer of ``item`` that runs to ``max_tokens`` without repeating itself is to
    be taken as long (and the page read in tiles) whatever it says: no estimate says its text
    needs under ``long_agrees`` of ``max_tokens`` at ``rate`` tokens a character. Otherwise
    the answer decides (:func:`~llm_ocr.stages.pieces.rate.coverage`: its words are the page's)."""
    estimate = item.text_estimate
    rate = dense().tokens_per_char if rate is None else rate
    return estimate is None or estimate.chars * rate >= dense().long_agrees * max_tokens


def tiles_after(reading: Reading, item: PageImage, max_tokens: int, rate: float | None = None,
                covered: Coverage | None = None) -> TilePlan | None:
    """A plan when ``reading`` (the whole page's) ended in an answer that ran to ``max_tokens``
    without repeating itself (:attr:`~llm_ocr.stages.attempts.Answer.long`). ``covered``: how
    much of the page's text layer that answer had written (then the page needs ``max_tokens``
    over that share; else at least ``long_factor`` times ``max_tokens``)."""
    long = [a for a in reading.answers if isinstance(a, Answer) and a.long]
    if not long:
        return None
    rate = dense().tokens_per_char if rate is None else rate
    estimate = item.text_estimate
    share = covered.share if covered is not None else None
    ran = round(max_tokens / share) if share else round(dense().long_factor * max_tokens)
    tokens = max(ran, round(estimate.chars * rate) if estimate else 0)
    return TilePlan(
        _count(tokens, max_tokens),
        f"the whole page's answer ran to max_tokens ({long[0].result.completion_tokens} tokens) without repeating "
        "itself",
        f"planned from that answer: {covered.why}" if covered is not None and covered.share else None,
    )


def image_pieces(family: Family | None, width: int, height: int, prompt_room: int | None) -> int:
    """The fewest pieces a ``width`` x ``height`` page must be cut into for each piece's image to
    fit, as ``family``'s processor counts it, in ``image_share`` of ``prompt_room`` (the
    context beside ``max_tokens``): vLLM refuses a request whose prompt and ``max_tokens`` exceed
    the context, and a family at 200 or 300 DPI makes more image tokens of a band of a page than
    a small context leaves (1 when unknown)."""
    if family is None or not prompt_room:
        return 1
    tokens = family.image_tokens(width, height)
    if tokens is None:
        return 1
    return max(1, math.ceil(tokens / (dense().image_share * prompt_room)))


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
    context that cannot hold such an image in ``image_share`` of the room, a column's
    pieces could not be read at the family's resolution, and full-width bands (as wide as the
    page, as sharp whatever their height) are read instead. At their recipes' contexts (16,384)
    both read columns."""
    if family is None or not family.rendering.long_side or not prompt_room:
        return True
    side = family.rendering.long_side
    tokens = family.image_tokens(side, side)
    return tokens is None or tokens <= dense().image_share * prompt_room


def band_fits(family: Family | None, prompt_room: int | None) -> Callable[[int, int], bool] | None:
    """Whether a piece of a column, ``width`` x ``height`` page-image pixels, makes an image that
    fits in ``image_share`` of ``prompt_room`` as ``family``'s processor counts it (None:
    any does). A family that sizes an image by its longer side renders any piece that long
    (LightOnOCR: 1,540 px): its image tokens grow with the piece's width over its height, not
    with its share of the page, so a column is cut into fewer, taller bands to fit, not more."""
    if family is None or not prompt_room:
        return None
    room = dense().image_share * prompt_room
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
    room = prompt_room - dense().prompt_text_tokens

    def why(piece: Segment) -> str | None:
        tokens = family.image_tokens(piece.width, piece.height)
        if tokens is None or tokens <= room:
            return None
        return f"is an image of ~{tokens:,} tokens, more than the context leaves beside max_tokens ({room:,})"

    return why


def min_side(family: Family | None) -> int:
    """The fewest page-image pixels a side of a piece may have: the family's minimum readable
    size (a piece is sent at least as large as the page image shows it)."""
    return family.min_readable_side if family is not None else 0


def _count(tokens: int, max_tokens: int) -> int:
    per_tile = min(max(dense().tile_share * max_tokens, dense().tile_tokens), dense().tile_max_share * max_tokens)
    return max(2, math.ceil(tokens / per_tile))


def dense_split_tiles(image: bytes, piece: Segment) -> tuple[list[Segment], str]:
    """A tile cut in two (at a gutter, else between lines): the split of a tiles family."""
    return split_piece(image, piece, across=True)
