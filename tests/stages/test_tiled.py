"""Joining a dense page's tiles: every line once, the columns in reading order; when to tile.

The model is stood in for by a reader that sees exactly what a tile shows: the paragraphs of a
multi-column page laid out line by line, each line read if at least 60% of its height and of its
width is inside the tile (a line cut by a band's edge is read by both neighbours, as a real
model does), each paragraph a block with the box of its visible lines, in the tile's 0..999
coordinates.
"""

from __future__ import annotations

import asyncio
import itertools
import random
from collections.abc import Sequence
from dataclasses import dataclass

from llm_ocr.records import PageResult
from llm_ocr.sources.base import DocumentRef, PageImage
from llm_ocr.sources.density import TextEstimate
from llm_ocr.sources.segments import Segment
from llm_ocr.stages.attempts import Answer, is_long
from llm_ocr.stages.pieces.join import Piece, join_tiles
from llm_ocr.stages.pieces.order import reading_order
from llm_ocr.stages.pieces.plan import may_be_long, tiles_after, tiles_at_once
from llm_ocr.stages.pieces.read import Job, Reader
from llm_ocr.vlm.box import Box
from llm_ocr.vlm.client import ChatResult
from llm_ocr.vlm.families import DEEPSEEK_OCR
from llm_ocr.vlm.families.base import Reading
from llm_ocr.vlm.layout import PageBlock, PageLayout
from llm_ocr.vlm.loops import LoopPolicy

LINE = 20  # pixels per text line
COLUMN = 300  # pixels per column, gutters of 40
WIDTH, HEIGHT = 3 * COLUMN + 2 * 40 + 40, 1200


@dataclass(frozen=True)
class Line:
    label: str
    block: int
    box: tuple[int, int, int, int]
    text: str


def newspaper(seed: int = 5, across: int = 2, aligned: bool = False) -> list[Line]:
    """Three columns of paragraphs (with ``aligned``, their paragraph breaks all at the same
    heights) under a headline across the first ``across`` columns (the others start at the top)."""
    rng = random.Random(seed)
    words = "survey district coastal sample annual report volunteers transect figure table".split()
    lines: list[Line] = []
    block = 0
    right = 20 + across * COLUMN + (across - 1) * 40
    lines.append(Line("sub_title", block, (20, 20, right, 60), f"Headline Across {across} Columns"))
    block += 1
    for column in range(3):
        left = 20 + column * (COLUMN + 40)
        y = 80 if column < across else 20
        while y < HEIGHT - 3 * LINE:
            length = 5 if aligned else rng.randint(3, 9)
            for _ in range(length):
                if y >= HEIGHT - 2 * LINE:
                    break
                text = f"C{column}L{len(lines):03d} " + " ".join(rng.choice(words) for _ in range(3))
                lines.append(Line("text", block, (left, y, left + COLUMN, y + LINE - 4), text))
                y += LINE
            block += 1
            y += LINE  # paragraph gap
    return lines


def read(lines: list[Line], tile: Segment) -> str:
    blocks: dict[int, list[Line]] = {}
    for line in lines:
        x0, y0, x1, y1 = line.box
        seen_h = min(y1, tile.bottom) - max(y0, tile.top)
        seen_w = min(x1, tile.right) - max(x0, tile.left)
        if seen_h >= 0.6 * (y1 - y0) and seen_w >= 0.6 * (x1 - x0):
            blocks.setdefault(line.block, []).append(line)
    out = []
    for shown in sorted(blocks.values(), key=lambda b: (b[0].box[1], b[0].box[0])):  # as the model reads: rows
        x0 = max(min(ln.box[0] for ln in shown), tile.left) - tile.left
        x1 = min(max(ln.box[2] for ln in shown), tile.right) - tile.left
        y0 = max(min(ln.box[1] for ln in shown), tile.top) - tile.top
        y1 = min(max(ln.box[3] for ln in shown), tile.bottom) - tile.top
        det = [int(x0 / tile.width * 999), int(y0 / tile.height * 999), int(x1 / tile.width * 999), int(y1 / tile.height * 999)]
        out.append(f"<|ref|>{shown[0].label}<|/ref|><|det|>[{det}]<|/det|>\n{' '.join(ln.text for ln in shown)}\n\n")
    return "".join(out)


def grid(bands: int, overlap: int = 50, across: int = 2) -> list[Segment]:
    """``bands`` overlapping bands, each cut in the gutters into three tiles, as
    :func:`llm_ocr.stages.pieces.cuts.plan_tiles` cuts them: not where the headline (across the
    first ``across`` columns) spans a gutter."""
    cuts = [round(k * HEIGHT / bands) for k in range(bands + 1)]
    gutters = [20 + COLUMN + 20, 20 + 2 * COLUMN + 60]
    tiles = []
    for top, bottom in itertools.pairwise(cuts):
        edges = [0, *(gutters[across - 1 :] if top == 0 else gutters), WIDTH]
        for left, right in itertools.pairwise(edges):
            tiles.append(Segment(len(tiles), left, max(0, top - overlap), right, min(HEIGHT, bottom + overlap)))
    return tiles


def join(lines: list[Line], tiles: list[Segment]) -> PageResult:
    boxes: dict[bytes, Segment] = {}

    async def crop(image: bytes, wanted: Sequence[Box]) -> list[bytes]:
        out = []
        for box in wanted:
            key = f"{list(box)}".encode()
            boxes[key] = next((t for t in tiles if t.box == list(box)), None)  # type: ignore[assignment]
            out.append(key)
        return out

    async def read_tile(page: PageImage) -> Reading:  # as Extract reads a page, the family's way
        text = read(lines, boxes[page.image])
        answer = Answer(ChatResult(text, "stop", 300, len(text) // 3, 0.1, 1), 1)
        layout = DEEPSEEK_OCR.parse(text, width=page.width, height=page.height, page=page.page)
        return Reading(layout, [answer], text, page.image, page.width, page.height)

    ref = DocumentRef("gazette.pdf", 0, "gazette.pdf", "pdf")
    item = PageImage("gazette.pdf", 1, b"page", "image/png", WIDTH, HEIGHT)
    reader = Reader(read=read_tile, crop=crop, model="m")
    return asyncio.run(reader.read_page(ref, item, 1, Job(tiles, join=join_tiles, kind="tile")))


def reading(lines: list[Line]) -> list[str]:
    """The page's line texts in reading order: the headline, then each column top to bottom."""
    return [ln.text for ln in sorted(lines, key=lambda ln: (ln.label != "sub_title", ln.box[0], ln.box[1]))]


def test_every_line_once_with_the_columns_in_reading_order() -> None:
    lines = newspaper()
    row = join(lines, grid(3))
    assert row.status == "ok" and row.segments == 8 and "<--- tile 1/8" in row.raw
    words = row.markdown.replace("## ", "").split()
    assert words == " ".join(reading(lines)).split()  # nothing lost, nothing twice, column by column
    # A paragraph cut by a band's edge is one block again.
    assert len(row.blocks) == len({ln.block for ln in lines})


def test_paragraph_breaks_that_line_up_across_columns_do_not_interleave_the_columns() -> None:
    # The classic XY-cut trap: below a headline across the page, every gap between two rows of
    # paragraphs is a gap across the page too.
    lines = newspaper(across=3, aligned=True)
    row = join(lines, grid(2, across=3))
    assert row.markdown.replace("## ", "").split() == " ".join(reading(lines)).split()


def test_reading_order_keeps_a_boxless_block_behind_the_one_it_followed() -> None:
    def piece(segment: int, text: str, box: Box | None) -> Piece:
        return Piece(segment, PageBlock("text", [box] if box else [], text))

    pieces = [piece(0, "right column", Box(500, 0, 900, 400)), piece(0, "note", None),
              piece(0, "left column", Box(0, 0, 400, 400))]
    assert [p.block.text for p in reading_order(pieces, 900, 400)] == ["left column", "right column", "note"]


def test_a_page_is_tiled_at_once_when_its_estimate_needs_most_of_max_tokens() -> None:
    def page(chars: int | None) -> PageImage:
        estimate = TextEstimate(chars, "text layer") if chars is not None else None
        return PageImage("d", 1, b"", "image/png", 1584, 2448, estimate)

    plan = tiles_at_once(page(25_000), 7168)  # ~8,750 tokens
    assert plan is not None and plan.count == 7 and "25,000 characters" in plan.why
    assert tiles_at_once(page(4_000), 7168) is None and tiles_at_once(page(None), 7168) is None
    # After an answer that ran out without repeating itself: only a page that may hold that much.
    assert may_be_long(page(None), 7168) and may_be_long(page(16_000), 7168)
    assert not may_be_long(page(4_000), 7168)  # ~1,400 tokens of text cannot fill 7,168: a loop
    def whole(answer: Answer) -> Reading:
        return Reading(PageLayout([], [], answer.text), [answer], answer.text, b"", 1584, 2448)

    long = Answer(ChatResult("text " * 5000, "length", 900, 7168, 1.0, 1), 1, long=True)
    plan = tiles_after(whole(long), page(None), 7168)
    assert plan is not None and plan.count == 10 and "ran to max_tokens (7168 tokens)" in plan.why
    assert tiles_after(whole(Answer(ChatResult("ok", "stop", 900, 10, 1.0, 1), 1)), page(None), 7168) is None
    # An answer that ran out after looping (not long) keeps the loop policy: no tiles.
    looped = Answer(ChatResult("text " * 5000, "length", 900, 7168, 1.0, 1), 2)
    assert tiles_after(whole(looped), page(None), 7168) is None


def test_an_answer_is_long_only_when_it_ran_out_without_repeating_itself() -> None:
    rng = random.Random(1)
    words = "survey district coastal sample annual report volunteers transect".split()
    prose = " ".join(rng.choice(words) for _ in range(3000))
    policy = LoopPolicy()
    assert is_long(ChatResult(prose, "length", 10, 7168, 1.0, 1), policy)
    looping = prose[:2000] + "<tr><td>same row again</td></tr>" * 200
    assert not is_long(ChatResult(looping, "length", 10, 7168, 1.0, 1), policy)  # a loop nobody cut
    assert not is_long(ChatResult(prose, "stop", 10, 900, 1.0, 1), policy)
