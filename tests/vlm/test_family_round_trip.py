"""Every family's writer and parser as a round trip, for every registered family.

A page's layout (a title, paragraphs, a figure with its caption, a table, an equation) is read the
family's own way (``Family.read``: its requests, one or several) from a model that answers with
the family's writer (``Family.write``); what the parser makes of the answers must be the layout
that was written: the text in order, the heading, the table's cells, the equation, the blocks'
kinds, the boxes in page pixels (within the family's coordinate rounding) and the figure cropped
where the family gives boxes. Expected values come from the layout (``tests/vlm/family_pages.py``),
never from a writer.

A family added without a writer fails here (``Family.write`` raises), as does one whose writer
and parser disagree about its format.
"""

from __future__ import annotations

import re

import pytest

from llm_ocr.engines.sim.checks import check_request
from llm_ocr.vlm.box import Box
from llm_ocr.vlm.families import FAMILIES, Family
from llm_ocr.vlm.layout import PageLayout
from llm_ocr.vlm.view import Element, View
from tests.vlm.family_pages import (
    CAPTION,
    CELLS,
    CHART,
    CLOSING,
    EQUATION,
    FIGURE_BOXES_ONLY,
    INTRO,
    PAGE,
    PLAIN_TEXT,
    TABLE,
    TITLE,
    flat,
    read,
    tolerance,
)

#: Page images of several sizes and shapes: Letter at 144 DPI upright and sideways, A4 at 300
#: DPI, a small scan, a long strip, a wide panorama, and one past dots' and Qwen's pixel caps.
SIZES = [(1224, 1584), (1584, 1224), (2480, 3508), (640, 905), (500, 4820), (3000, 1000), (4000, 6000)]


def words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", re.sub(r"<[^>]*>", " ", text).lower())


def in_order(wanted: list[str], have: list[str]) -> bool:
    """Whether ``wanted`` is a subsequence of ``have`` (other words may come between)."""
    found = iter(have)
    return all(any(w == h for h in found) for w in wanted)


def near(box: Box, expected: Box, width: int, height: int) -> bool:
    dx, dy = tolerance(width), tolerance(height)
    return all(abs(a - b) <= d for a, b, d in zip(box, expected, (dx, dy, dx, dy)))


def block_of(layout: PageLayout, element: Element) -> int:
    """The index of the parsed block holding ``element``'s text (its first words)."""
    head = words(element.text)[:4] if element.label != "equation" else ["frac"]
    for index, block in enumerate(layout.blocks):
        if in_order(head, words(block.text)) and len(words(block.text)) < len(words(element.text)) + 12:
            return index
    raise AssertionError(f"no block holds {element.text[:40]!r}: {[b.text[:40] for b in layout.blocks]}")


@pytest.mark.parametrize("size", SIZES, ids=[f"{w}x{h}" for w, h in SIZES])
@pytest.mark.parametrize("family", FAMILIES, ids=[f.name for f in FAMILIES])
def test_what_a_family_writes_its_parser_reads_back(family: Family, size: tuple[int, int]) -> None:
    width, height = size
    layout, kinds = read(family, width, height)
    md = layout.markdown
    assert layout.warnings == [], layout.warnings
    # The text, in reading order; the table's cells in order; the equation in the one form.
    text = [w for e in PAGE if e.label in ("title", "text", "image_caption", "table") for w in words(e.text)]
    assert in_order(text, words(md)), (family.name, md)
    assert in_order([c.lower() for c in CELLS], words("".join(re.findall(r"<t[hd][^>]*>.*?</t[hd]>", md)))), md
    assert "<table" in md and "|" not in md
    assert "\\[ t = \\frac{c}{d} \\]" in md
    if family.name not in PLAIN_TEXT:
        assert f"\n# {TITLE.text}\n" in f"\n{md}\n", md  # the title is a heading
    # The figure: cropped where the family gives boxes (its box in page pixels), else not.
    if family.outputs.figure_crops:
        (figure,) = layout.figures
        assert near(figure.bbox, CHART.box.scaled(width, height), width, height), (figure.bbox, CHART.box)
        assert f"](figure:{figure.id})" in md and figure.id == "p7-f1"
        assert layout.blocks[figure.block].boxes == [figure.bbox]
        if family.outputs.figure_descriptions:
            assert figure.description == CHART.description
    else:
        assert layout.figures == [] and "(figure:" not in md
    # Every element's box in page pixels, and its kind kept, where the family boxes its blocks.
    if family.outputs.boxes and family.name not in FIGURE_BOXES_ONLY:
        blocks = {e: layout.blocks[block_of(layout, e)] for e in (TITLE, INTRO, CAPTION, TABLE, EQUATION, CLOSING)}
        for element, block in blocks.items():
            (box,) = block.boxes
            assert near(box, element.box.scaled(width, height), width, height), (element.label, box)
        # Each kind keeps a label of its own (the family's name for it): paragraphs share one.
        assert blocks[INTRO].label == blocks[CLOSING].label
        assert blocks[INTRO].label not in {blocks[TITLE].label, blocks[TABLE].label, blocks[EQUATION].label}
    assert kinds and all(isinstance(k, str) for k in kinds)


@pytest.mark.parametrize("family", [f for f in FAMILIES if f.outputs.boxes and f.name not in FIGURE_BOXES_ONLY],
                         ids=lambda f: f.name)
def test_a_piece_of_a_page_is_written_and_read_back_in_its_own_pixels(family: Family) -> None:
    """A writer can be asked for a piece of a page (a tile or segment, as dense pages are read):
    the view is of the piece, and the boxes read back, moved to the page, are the page's."""
    width, height = 1224, 1584
    piece = Box(0, 0.555, 1, 1).scaled(width, height).truncated()  # below the caption, above the table
    shown = tuple(Element(e.label, e.box.scaled(width, height).within(piece), e.text)
                  for e in PAGE if e.box.y1 >= 0.555)  # fmt: skip
    view = View(int(piece.width), int(piece.height), shown)
    # The kind of the family's first request for a page (MinerU's: its layout pass).
    kind = check_request(family, flat(family.body(b"piece", "image/png", temperature=family.retries.temperatures[0], max_tokens=9)))
    assert kind is not None
    layout = family.parse(family.write(view, kind), width=view.width, height=view.height, page=1)
    boxes = [box.moved(piece.x1, piece.y1) for block in layout.blocks for box in block.boxes]
    assert len(boxes) == len(shown)
    for box, element in zip(boxes, shown):
        original = next(e for e in PAGE if e.text == element.text)
        assert near(box, original.box.scaled(width, height), width, height), (element.label, box)


#: A page where markup leaves nothing behind: a figure, then blocks written empty or blank (a
#: line of spaces, as DeepSeek-OCR writes after an image block), between two paragraphs.
HOLLOW = (INTRO, CHART, Element("text", Box(0.10, 0.50, 0.90, 0.52), " \n  "),
          Element("text", Box(0.10, 0.53, 0.90, 0.55), ""), CLOSING)


@pytest.mark.parametrize("family", FAMILIES, ids=[f.name for f in FAMILIES])
def test_no_paragraph_is_left_blank_where_markup_was_removed(family: Family) -> None:
    layout, _ = read(family, 1224, 1584, HOLLOW)
    paragraphs = layout.markdown.split("\n\n")
    assert all(p.strip() for p in paragraphs), (family.name, layout.markdown)
    assert in_order(words(INTRO.text) + words(CLOSING.text), words(layout.markdown)), layout.markdown
