"""The pieces' answers joined into the page's blocks, each once: segments, bands and tiles.

Three joins, one per way a page is cut (:mod:`.plan`):

- **segments** of a long page (:func:`join_pieces`: a 1:61 log sheet, a receipt, a scroll cut
  into overlapping pieces along its length). Each segment's blocks come back with boxes in the
  segment's pixels; they are moved to page pixels, and each segment contributes the blocks
  whose centre lies in its share of the page (up to the middle of its overlap with the next). A
  block that spans a whole overlap is kept from both segments, each copy cut at one edge: the
  two copies (same label, boxes that overlap in page pixels) are merged into one block, and the
  words the second copy repeats from the first (the lines both segments showed) are removed;
  two copies of a figure become one figure whose box covers both. A family without boxes
  (olmOCR-2) is joined by the words the overlap repeats (:func:`repeated_start`).
- **bands** of a dense page read by a family without boxes (:func:`join_bands`: a newspaper
  page read column by column, each column in bands down it): each region's bands joined down
  it by the run of words a band's block starts with and a block of the band above ends with
  (:func:`drop_exact_repeat`).
- **tiles** of a dense page read by a family that boxes every block (:func:`join_tiles`: a
  7-column newspaper page in a grid of tiles): each tile keeps the blocks whose centre lies
  deepest inside it, copies of a block two tiles show merged, then the blocks put in reading
  order (:mod:`.order`).

A join by repeated text that cannot be verified (two pieces that start with the same words, a
line a model writes atop every crop, and no repeat removed) is kept with both pieces' text and
flagged on the block (:attr:`Piece.unverified`): the page's row is then ``truncated``, never
silently ``ok`` (:mod:`.row`). So is a block near a piece's top (its first ``header_reach``) that
starts as an earlier piece's first block does (:func:`flag_running_heads`): a running header a
model writes lower than its answer's first line, after a stray line.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from itertools import islice, pairwise

from llm_ocr.options import dense
from llm_ocr.sources.segments import Segment, cut_line
from llm_ocr.stages.pieces.order import reading_order
from llm_ocr.vlm.box import Box
from llm_ocr.vlm.families.base import Reading
from llm_ocr.vlm.layout import FigureBox, PageBlock, alt_text, clean_markdown

#: Tokens for the overlap search: tags, words, punctuation runs.
_TOKEN = re.compile(r"<[^<>\s]{1,40}>|[^\s<>]+")


@dataclass
class Piece:
    """A block of one segment, in page pixels, with its figures."""

    segment: int
    block: PageBlock
    figures: list[FigureBox] = field(default_factory=list)
    #: Why the join of this block to the piece before could not be verified (None: it was, or
    #: there was nothing to join): it starts with words the piece before holds, but not as the
    #: lines the two pieces' overlap showed (:func:`repeated_start`'s ``"dubious"``).
    unverified: str | None = None

    def centre(self, tall: bool) -> float | None:
        """The middle of the block's boxes down the page (``tall``) or across it."""
        if not self.block.boxes:
            return None
        x, y = Box.union(self.block.boxes).centre
        return y if tall else x


def _moved(box: Box, segment: Segment, size: tuple[int, int]) -> Box:
    """A box in the pixels of a piece's image (``size``) in the pixels the segment is planned in."""
    sx, sy = segment.width / max(1, size[0]), segment.height / max(1, size[1])
    return box.scaled(sx, sy).moved(segment.left, segment.top)


def blocks_of(reading: Reading, segment: Segment) -> tuple[list[Piece], list[str]]:
    """One segment's reading as blocks in page pixels (figures attached to their blocks)."""
    layout = reading.layout
    size = (reading.width, reading.height)
    pieces = [
        Piece(segment.index, PageBlock(block.label, [_moved(b, segment, size) for b in block.boxes], block.text))
        for block in layout.blocks
    ]
    for figure in layout.figures:
        if 0 <= figure.block < len(pieces):
            moved = FigureBox("", _moved(figure.bbox, segment, size), description=figure.description)
            pieces[figure.block].figures.append(moved)
    return pieces, layout.warnings


def to_page(pieces: list[Piece], sx: float, sy: float) -> list[Piece]:
    """The joined blocks with their boxes moved from the pieces' virtual render to the pixels of
    the page image the row describes."""
    if sx == sy == 1.0:
        return pieces
    out = []
    for piece in pieces:
        block = PageBlock(piece.block.label, [b.scaled(sx, sy) for b in piece.block.boxes], piece.block.text)
        figures = [replace(f, bbox=f.bbox.scaled(sx, sy)) for f in piece.figures]
        out.append(replace(piece, block=block, figures=figures))
    return out


def figures_to_page(figures: list[FigureBox], sx: float, sy: float) -> list[FigureBox]:
    return [replace(f, bbox=f.bbox.scaled(sx, sy)) for f in figures]


def _normal(match: re.Match[str]) -> str:
    """A token as joins compare it: lower case, without trailing or leading punctuation."""
    return match.group().lower().strip(".,;:!?")


def _tokens(text: str, start: int = 0) -> list[tuple[str, int]]:
    """``(normalised token, end offset)`` of each token of ``text`` from offset ``start`` on."""
    return [(_normal(m), m.end()) for m in _TOKEN.finditer(text, start)]


def _head(text: str, n: int) -> list[str]:
    """The first ``n`` normalised tokens of ``text`` (fewer if it has fewer), without reading the
    rest: a page's joined text grows piece by piece, and tokenising all of it at every join made
    the join quadratic in the page's length (on a 1:60 strip, about 0.3 CPU-s of a run's 4)."""
    return [_normal(m) for m in islice(_TOKEN.finditer(text), n)]


def _tail(text: str, n: int) -> list[str]:
    """The last ``n`` normalised tokens of ``text`` (all, if it has fewer): those of a window at
    its end, widened until it holds more than ``n`` (its first token may be cut by the window's
    edge, so it is not counted; a token ends at a space, ``<`` or ``>``, so the scan is back in
    step after it)."""
    if n <= 0:
        return []
    window = 16 * n + 64
    while True:
        start = max(0, len(text) - window)
        found = [t for t, _ in _tokens(text, start)]
        if start == 0 or len(found) > n:
            return found[-n:]
        window *= 4


def drop_repeated_start(first: str, second: str) -> str:
    """``second`` without the words at its start that repeat the end of ``first``
    (:func:`repeated_start`)."""
    return repeated_start(first, second)[0]


def repeated_start(first: str, second: str) -> tuple[str, str]:
    """``(second without the words at its start that repeat the end of first, how)``: ``how`` is
    ``"repeated"`` (a repeat was removed), ``"none"`` (``second`` starts with nothing of ``first``:
    the pieces' overlap may be blank) or ``"dubious"`` (see below: the join cannot be verified).

    The longest run of tokens that ends ``first`` and starts ``second`` is removed; failing
    that (the line cut by the first segment's edge read differently), ``second``'s first
    ``anchor_words`` tokens are looked for near the end of ``first`` and everything up to the end of ``first``'s
    copy is removed, provided at least the ``anchor_agrees`` knob's share of the tokens removed
    are the ones ``first`` holds there: a line a model writes atop every piece (a running header)
    starts both texts, and what follows it in ``first`` is not what follows it in ``second``
    (removing it lost 40% of a page, issue 47). Nothing removed, the join is ``"dubious"`` when
    both texts start with the same words (:func:`dubious_start`).
    """
    knobs = dense()
    a = _tail(first, knobs.max_overlap_tokens)
    b_full = _tokens(second)
    b = [t for t, _ in b_full][:knobs.max_overlap_tokens]
    for k in range(min(len(a), len(b)), knobs.min_tail_tokens - 1, -1):
        if a[-k:] == b[:k]:
            return second[b_full[k - 1][1] :].lstrip(), "repeated"
    n = knobs.anchor_words
    anchor = b[:n]
    if len(anchor) == n:
        for start in range(len(a) - n, -1, -1):
            if a[start : start + n] == anchor:
                k = min(len(a) - start, len(b_full))
                if sum(x == y for x, y in zip(a[start:], b[:k])) >= knobs.anchor_agrees * k:
                    return second[b_full[k - 1][1] :].lstrip(), "repeated"
    return second, "dubious" if dubious_start(first, second) else "none"


def dubious_start(first: str, second: str) -> bool:
    """Whether ``first`` and ``second`` start with the same ``same_start_words`` words, not
    removed as the lines two pieces' overlap showed: a line a model writes atop every piece,
    whose join cannot be verified."""
    n = dense().same_start_words
    a, b = _head(first, n), _head(second, n)
    return len(a) == n and a == b


def drop_exact_repeat(first: str, second: str, min_tokens: int | None = None) -> str:
    """``second`` without the longest run of at least ``min_tokens`` tokens (None: the
    ``min_repeat_tokens`` knob) that both ends
    ``first`` and starts it (``second`` unchanged when there is none): the lines two pieces of
    a page both showed, with no looking further (a multi-column band's text ends elsewhere)."""
    knobs = dense()
    least = knobs.min_repeat_tokens if min_tokens is None else min_tokens
    a = _tail(first, knobs.max_overlap_tokens)
    b_full = _tokens(second)
    b = [t for t, _ in b_full][:knobs.max_overlap_tokens]
    for k in range(min(len(a), len(b)), least - 1, -1):
        if a[-k:] == b[:k]:
            return second[b_full[k - 1][1] :].lstrip()
    return second


def flag_running_heads(per_piece: list[list[Piece]]) -> list[list[Piece]]:
    """Each piece's blocks, those among its first ``header_reach`` paragraphs flagged unverified
    when they start with the same ``same_start_words`` words as the first block of an earlier
    piece, somewhere else on the page: the page's first line (a running header) or the piece
    before's, which a model may write above what a crop shows, as its second or third paragraph
    after a stray line. Only first blocks are compared with: sections that start alike lower in
    two columns are no header; nor is one block seen by two pieces (boxes that overlap: the rest
    of a tile read again inside it, two pieces' overlap)."""
    reach = dense().header_reach
    heads: list[tuple[int, Piece]] = []  # (piece, its first block that has text)
    out = []
    for i, pieces in enumerate(per_piece):
        flagged = list(pieces)
        for k, text in _near_top(pieces, reach):
            j = next((j for j, head in heads if dubious_start(head.block.text, text)
                      and not _same_place(head, pieces[k])), None)
            if j is not None and not flagged[k].unverified:
                flagged[k] = replace(flagged[k], unverified=f"piece {i + 1} writes near its top a block that starts "
                                                            f"as piece {j + 1}'s first does (a running header?)")
        out.append(flagged)
        first = next((p for p in pieces if p.block.text.strip()), None)
        if first is not None:
            heads.append((i, first))
    return out


def _same_place(a: Piece, b: Piece) -> bool:
    """Whether two blocks' boxes overlap in page pixels: one block seen by two pieces."""
    return any(x.overlaps(y) for x in a.block.boxes for y in b.block.boxes)


def _near_top(pieces: list[Piece], reach: int) -> list[tuple[int, str]]:
    """``(block index, text)`` of the first ``reach`` paragraphs of a piece's blocks: a block
    with boxes is one; a block without (a boxless family's whole answer) is one per part its
    blank lines separate."""
    units: list[tuple[int, str]] = []
    for k, piece in enumerate(pieces):
        text = piece.block.text
        parts = [text] if piece.block.boxes else [t for t in re.split(r"\n\s*\n", text) if t.strip()]
        units += [(k, part) for part in parts]
        if len(units) >= reach:
            break
    return units[:reach]


def join_pieces(
    segments: list[Segment], per_segment: list[list[Piece]], page: int, *, text_overlap: bool = True
) -> list[Piece]:
    """The blocks of the page, in order, each once (see the module docstring). ``text_overlap``
    False: the boxless blocks' repeated lines were already dropped (the bands of a dense page)."""
    per_segment = flag_running_heads(per_segment)
    tall = len(segments) < 2 or segments[1].top > segments[0].top
    kept: list[Piece] = []
    head_before: Piece | None = None  # the first block of the last segment's share
    for i, pieces in enumerate(per_segment):
        mine = _in_share(segments, i, pieces, tall)
        if mine:
            mine[0] = _checked_head(mine[0], head_before, per_segment[i - 1] if i > 0 else [], i,
                                    text_overlap=text_overlap, copy=_twin(kept, mine[0]) is not None)
            head_before = mine[0]
        for piece in mine:
            twin = _twin(kept, piece)
            if twin is None:
                kept.append(piece)
                continue
            head = kept[twin]
            text, how = repeated_start(head.block.text, piece.block.text)
            note = head.unverified or piece.unverified or (
                f"a block of pieces {i} and {i + 1} starts with the same words in both" if how == "dubious" else None)
            boxes = box_union(head.block.boxes + piece.block.boxes)
            merged = PageBlock(head.block.label, boxes, f"{head.block.text} {text}".strip())
            kept[twin] = replace(head, block=merged, figures=merge_figures(head.figures + piece.figures),
                                 unverified=note)
    return number_figures(kept, page)


def _checked_head(head: Piece, head_before: Piece | None, previous: list[Piece], i: int, *, text_overlap: bool,
                  copy: bool) -> Piece:
    """The first block of segment ``i``'s share, joined to the segment before: without boxes,
    the words it starts with that repeat the end of ``previous`` (that segment's blocks) are
    dropped (a family without text boxes, olmOCR-2, reads the overlap twice; ``text_overlap``
    False: already dropped); with boxes and no ``copy`` of it kept (a block whose boxes overlap
    one of the segment before), it is checked against ``head_before``
    (:func:`_flag_repeated_head`)."""
    if text_overlap and not head.block.boxes and previous and not previous[-1].block.boxes:
        before = " ".join(p.block.text for p in previous if not p.block.boxes)
        text, how = repeated_start(before, head.block.text)
        note = f"pieces {i} and {i + 1} both start with the same words" if how == "dubious" else None
        return replace(head, block=PageBlock(head.block.label, [], text), unverified=note or head.unverified)
    return head if copy else _flag_repeated_head(head_before, head, i)


def _flag_repeated_head(before: Piece | None, head: Piece, i: int) -> Piece:
    """``head``, the first block of segment ``i`` (its boxes overlapping no block kept), flagged
    when it starts with the same words as ``before``, the first block of segment ``i - 1``: a
    line a model writes atop every piece (a running header) put at the top of each column of a
    wide page read in its columns. No box tells such a copy from a column that starts so; the
    block is kept and the join is not verified. A block without boxes is checked by the text it
    repeats (:func:`repeated_start`)."""
    if before is None or not head.block.boxes or head.unverified:
        return head
    if not dubious_start(before.block.text, head.block.text):
        return head
    return replace(head, unverified=f"pieces {i} and {i + 1} both start with the same words")


def _in_share(segments: list[Segment], i: int, pieces: list[Piece], tall: bool) -> list[Piece]:
    """The blocks of segment ``i`` in its share of the page (up to the middles of its overlaps);
    a block without a box is kept where the segment put it."""
    lower = cut_line(segments, i - 1) if i > 0 else None
    upper = None if i == len(segments) - 1 else cut_line(segments, i)
    mine = []
    for piece in pieces:
        centre = piece.centre(tall)
        if centre is None or ((lower is None or centre >= lower) and (upper is None or centre < upper)):
            mine.append(piece)
    return mine


def merge_figures(figures: list[FigureBox]) -> list[FigureBox]:
    """Figures with the copies of one figure made one: a figure cut by a segment's edge is seen
    in part by each segment, and the two parts (their boxes overlap in page pixels, in the lines
    both segments show) are one figure with the box around both, cropped once from the page."""
    out: list[FigureBox] = []
    for figure in figures:
        copy = next((i for i, f in enumerate(out) if f.bbox.overlaps(figure.bbox)), None)
        if copy is None:
            out.append(figure)
            continue
        first = out[copy]
        box = Box.union([first.bbox, figure.bbox])
        out[copy] = replace(first, bbox=box, description=first.description or figure.description)
    return out


def number_figures(pieces: list[Piece], page: int) -> list[Piece]:
    """``pieces`` with their figures numbered in order (``p{page}-f1``, ...)."""
    counter = 0
    for piece in pieces:
        for k, figure in enumerate(piece.figures):
            counter += 1
            piece.figures[k] = replace(figure, id=f"p{page}-f{counter}")
    return pieces


def _twin(kept: list[Piece], piece: Piece) -> int | None:
    """The index of the block of the previous segment that ``piece`` is another copy of: the
    same label and overlapping boxes (blocks of one page never overlap, copies of one block
    in two segments do, in their shared lines)."""
    if not piece.block.boxes:
        return None
    for index in range(len(kept) - 1, max(-1, len(kept) - dense().twin_lookback), -1):
        other = kept[index]
        if other.segment != piece.segment - 1:
            if other.segment < piece.segment - 1:
                return None
            continue
        if other.block.label == piece.block.label and any(
            a.overlaps(b) for a in other.block.boxes for b in piece.block.boxes
        ):
            return index
    return None


def box_union(boxes: list[Box]) -> list[Box]:
    """The one box around ``boxes``, as a list of one box (a block's boxes)."""
    return [Box.union(boxes)]


def markdown_of(pieces: list[Piece]) -> str:
    parts = []
    for piece in pieces:
        links = "".join(f"![{alt_text(f.description)}](figure:{f.id})\n" for f in piece.figures)
        parts.append(links + piece.block.text)
    return clean_markdown("\n\n".join(p for p in parts if p))


#: How the pieces' answers become the page's blocks in order: ``(pieces, their blocks, page)``.
Join = Callable[[list[Segment], list[list[Piece]], int], list[Piece]]


def join_bands(bands: list[Segment], per_band: list[list[Piece]], page: int) -> list[Piece]:
    """The blocks of a page read in bands by a family without boxes, each once, in the bands'
    order: region by region (a page with columns is planned as a masthead, then each column,
    each cut into bands along its height, :func:`~llm_ocr.stages.pieces.cuts.plan_bands`), each
    region's bands joined down it (:func:`join_region`). A region is a run of bands one below
    the other, as wide as each other (a band cut in two again, its halves too)."""
    per_band = flag_running_heads(per_band)  # across regions: a header atop a column's first band
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
    and ends a block of the band above (:func:`~llm_ocr.stages.pieces.join.drop_exact_repeat`);
    a block that was all overlap is dropped. Blocks with boxes (figures) are kept by the band
    whose share of the page their centre is in (:func:`~llm_ocr.stages.pieces.join.join_pieces`).
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
    per_tile = flag_running_heads(per_tile)
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
        twin = _tile_twin(merged, piece, tiles)
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
    inside another (the rest of a piece whose answer ran out, :func:`~llm_ocr.stages.pieces.rest.complete_part`)
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


def _tile_twin(merged: list[Piece], piece: Piece, tiles: list[Segment]) -> int | None:
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


