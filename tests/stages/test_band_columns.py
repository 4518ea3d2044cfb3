"""Joining the bands of a page planned column by column, read by a family without boxes: each
column's bands are joined down it (the lines two bands of a column both show, once), and the
columns follow each other in the plan's order; nothing is dropped between two columns.

The model is stood in for by a reader that sees exactly what a band shows: the lines of a
two-column page under a masthead, a line read when it lies wholly inside the band, as plain
text (one block per paragraph, no boxes).
"""

from __future__ import annotations

from llm_ocr.sources.segments import Segment
from llm_ocr.stages.pieces.join import Piece, join_bands
from llm_ocr.vlm.box import Box
from llm_ocr.vlm.layout import FigureBox, PageBlock

PITCH = 20
COLUMN = 400


def page() -> list[tuple[int, int, str]]:
    """``(column, top, text)`` of each line: a masthead (column -1), then two columns of 40
    lines in paragraphs of 8; every line's words its own."""
    lines = [(-1, 10, "The Gazette masthead")]
    for column in range(2):
        for k in range(40):
            lines.append((column, 60 + k * PITCH, f"c{column}l{k} alpha{column}{k} beta{column}{k} gamma{column}{k}"))
    return lines


def seen(band: Segment, lines: list[tuple[int, int, str]]) -> list[Piece]:
    """What a band shows, as a boxless family answers: its paragraphs, in reading order."""
    paragraphs: dict[tuple[int, int], list[str]] = {}
    for column, top, text in lines:
        left = 0 if column < 0 else column * (COLUMN + 20)
        right = 2 * COLUMN + 20 if column < 0 else left + COLUMN
        if band.left <= left and right <= band.right and band.top <= top and top + PITCH - 4 <= band.bottom:
            paragraphs.setdefault((column, (top - 60) // (8 * PITCH)), []).append(text)
    return [Piece(band.index, PageBlock("text", [], " ".join(words))) for _, words in sorted(paragraphs.items())]


def test_the_bands_of_each_column_are_joined_down_it_and_the_columns_in_order() -> None:
    lines = page()
    bands = [Segment(0, 0, 0, 820, 50)]  # the masthead
    for column in range(2):
        left = column * 420
        # Three bands down the column, each reaching a line and a half into the next.
        for top, bottom in ((50, 350), (320, 650), (620, 900)):
            bands.append(Segment(len(bands), left, top, left + 400, bottom))
    per_band = [seen(b, lines) for b in bands]
    # A figure near the top of the second column (olmOCR-2 boxes its figures), in page pixels.
    chart = Box(430, 100, 810, 200)
    per_band[4].insert(0, Piece(4, PageBlock("image", [chart], ""), [FigureBox("", chart)]))
    joined = join_bands(bands, per_band, 1)
    words = " ".join(p.block.text for p in joined).split()
    truth = " ".join(text for _, _, text in lines).split()
    assert words == truth  # every line once, the masthead, then the first column, then the second
    # The figure is kept by the band it lies in (a band of another column is no neighbour).
    assert [f.bbox for p in joined for f in p.figures] == [chart]
    assert [f.id for p in joined for f in p.figures] == ["p1-f1"]
