"""Reading order of the blocks of a page read in tiles: a recursive XY-cut on their boxes.

Serves **tiles** only (a family whose answers box every block, DeepSeek-OCR's grounding output):
the tiles of a multi-column page (a newspaper of 5 to 7 columns, a two-column paper) each
hold parts of several columns, and the joined blocks (:mod:`.join`) are put back in the
order a person reads them: columns left to right, each top to bottom, a headline that spans
columns before them. Bands and segments keep the order their pieces were read in.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from llm_ocr.options import dense
from llm_ocr.vlm.box import Box

if TYPE_CHECKING:
    from llm_ocr.stages.pieces.join import Piece


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
    ordered = _xy_cut(boxed, (dense().gap_tolerance * width, dense().gap_tolerance * height), 0)
    return [p for g in loose + ordered for p in g]


def _extent(group: list[Piece], axis: int) -> tuple[float, float]:
    """Where the group's first piece starts and ends across (``axis`` 0) or down (1) the page."""
    around = Box.union(group[0].block.boxes)
    return (around.x1, around.x2) if axis == 0 else (around.y1, around.y2)


def _xy_cut(groups: list[list[Piece]], tolerance: tuple[float, float], depth: int) -> list[list[Piece]]:
    if len(groups) <= 1 or depth > dense().order_depth:
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
