"""The complete part of a tile's answer that ran out, and the rest of the tile to read again."""

from __future__ import annotations

from llm_ocr.sources.segments import Segment
from llm_ocr.stages.pieces.rest import complete_part
from llm_ocr.vlm.box import Box
from llm_ocr.vlm.families.base import Reading
from llm_ocr.vlm.layout import PageBlock, PageLayout

#: A tile of the page, [left, top, right, bottom) in page pixels; its image is sent at twice that.
TILE = Segment(3, 1000, 500, 1600, 1300)


def reading(blocks: list[tuple[float, float, float, float]]) -> Reading:
    """An answer whose blocks have these boxes (page pixels of the tile), in this order."""
    scaled = [PageBlock("text", [Box((x1 - TILE.left) * 2, (y1 - TILE.top) * 2, (x2 - TILE.left) * 2,
                                     (y2 - TILE.top) * 2)], f"block {i}") for i, (x1, y1, x2, y2) in enumerate(blocks)]
    return Reading(PageLayout(scaled, [], ""), [], "raw", b"", TILE.width * 2, TILE.height * 2)


def test_read_column_by_column_the_rest_is_below_the_last_kept_block_and_the_columns_right_of_it() -> None:
    left, right = (1010, 1290), (1310, 1590)
    answer = reading([(*left[:1], 510, left[1], 800), (left[0], 810, left[1], 1290),  # the left column, whole
                      (right[0], 510, right[1], 700), (right[0], 710, right[1], 900)])  # the right one, cut off
    kept = complete_part(TILE, answer, min_side=64)
    assert kept is not None
    done, rest, how = kept
    assert [b.text for b in done.layout.blocks] == ["block 0", "block 1", "block 2"] and done.answers == []
    # The left column read to its bottom (within 3% of the tile's height): nothing left there.
    assert len(rest) == 1 and "3 complete blocks kept" in how
    (below,) = rest
    assert below.top == 700 and below.bottom == TILE.bottom and below.left <= right[0] and below.right == TILE.right
    assert below.left >= left[1] - 0.05 * TILE.width  # not the left column again


def test_read_row_by_row_every_column_is_read_again_below_its_last_kept_block() -> None:
    columns = [(1010, 1190), (1210, 1390), (1410, 1590)]
    answer = reading([(x1, 510, x2, 700) for x1, x2 in columns] + [(columns[0][0], 710, columns[0][1], 900)])
    kept = complete_part(TILE, answer, min_side=64)
    assert kept is not None
    _, rest, _ = kept
    tops = sorted((r.left, r.top) for r in rest)
    assert [top for _, top in tops] == [700, 700, 700] or (len(rest) == 1 and rest[0].top == 700)
    covered = sum(r.width for r in rest)
    assert covered >= 0.9 * TILE.width  # every column's lower part


def test_an_unread_column_is_read_whole_a_margin_is_not() -> None:
    answer = reading([(1010, 510, 1290, 800), (1010, 810, 1290, 1100), (1010, 1110, 1290, 1290)])
    kept = complete_part(TILE, answer, min_side=64)
    assert kept is not None
    _, rest, _ = kept
    below, unread = sorted(rest, key=lambda r: r.left)
    assert below.top == 1100 and below.bottom == TILE.bottom and below.left <= 1010  # the block cut in, again
    assert unread.top == TILE.top and unread.left <= 1300 and unread.right == TILE.right  # the right column, whole
    # A 40-pixel margin right of the only column is not read; the last block, 35 pixels above
    # the tile's bottom, is (a part that small grows up to the family's minimum side).
    narrow = Segment(0, 1000, 500, 1330, 1300)
    blocks = [PageBlock("text", [Box(20, 20, 560, 700)], "a"), PageBlock("text", [Box(20, 720, 560, 1500)], "b"),
              PageBlock("text", [Box(20, 1520, 560, 1590)], "c")]
    answer = Reading(PageLayout(blocks, [], ""), [], "raw", b"", narrow.width * 2, narrow.height * 2)
    kept = complete_part(narrow, answer, min_side=64)
    assert kept is not None
    # Only the block the answer was cut in is read again (grown to the minimum side), not the margin.
    (again,) = kept[1]
    assert again.right <= 1290 and again.bottom == narrow.bottom and again.height >= 64


def test_no_boxes_no_complete_block_or_little_kept_cuts_in_halves_instead() -> None:
    assert complete_part(TILE, reading([(1010, 510, 1290, 800)])) is None
    # One short block kept of a three-column tile: the rest is most of it.
    assert complete_part(TILE, reading([(1010, 510, 1190, 560), (1010, 570, 1190, 900)]), min_side=64) is None
    boxless = Reading(PageLayout([PageBlock("text", [], "a"), PageBlock("text", [], "b")], [], ""), [], "", b"", 10, 10)
    assert complete_part(TILE, boxless) is None
