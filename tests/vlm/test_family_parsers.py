"""Each family's parser on answers of the family's real shape: the coordinate spaces and markup
of the sources' own examples, and a long page read in segments with every parser (its
segments' answers written by the family's writer; tests/vlm/test_family_round_trip.py proves
writer and parser against each other on whole pages)."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Sequence
from typing import Any

import pytest

from llm_ocr.engines.sim.checks import check_request
from llm_ocr.records import PageResult
from llm_ocr.sources.base import DocumentRef, PageImage
from llm_ocr.sources.segments import Segment, plan_segments
from llm_ocr.stages.attempts import Answer
from llm_ocr.stages.pieces.read import Job, Reader
from llm_ocr.vlm.box import Box
from llm_ocr.vlm.client import ChatResult
from llm_ocr.vlm.families import family_named
from llm_ocr.vlm.families.base import Reading
from llm_ocr.vlm.families.chandra import CHANDRA_1
from llm_ocr.vlm.families.docling import GRANITE_DOCLING
from llm_ocr.vlm.families.dots import DOTS_OCR, resized
from llm_ocr.vlm.families.olmocr import OLMOCR, front_matter
from llm_ocr.vlm.view import Element, View

#: Families read with one request per page (MinerU's two passes are proven end to end).
SINGLE = ["deepseek-ocr", "olmocr", "dots-ocr", "chandra", "chandra-1", "granite-docling"]


def test_dots_boxes_are_in_the_resized_image_and_scaled_back() -> None:
    rh, rw = resized(2200, 1700)
    assert (rh, rw) == (2212, 1708)  # multiples of 28, under 11,289,600 px
    cells = [{"bbox": [0, 0, rw, rh], "category": "Picture"}, {"bbox": [14, 28, 700, 56], "category": "Title",
              "text": "# Annual report"}]  # fmt: skip
    layout = DOTS_OCR.parse(json.dumps(cells), width=1700, height=2200, page=1)
    assert layout.figures[0].bbox == (0, 0, 1700, 2200)
    scaled = (int(14 * 1700 / 1708), int(28 * 2200 / 2212), int(700 * 1700 / 1708), int(56 * 2200 / 2212))
    assert layout.blocks[1].boxes == [scaled]
    # A cut-off answer keeps its complete cells, and says so.
    cut = DOTS_OCR.parse(json.dumps(cells)[:-30], width=1700, height=2200, page=1)
    assert len(cut.blocks) == 1 and "recovered" in cut.warnings[0]


def test_olmocr_front_matter_and_figure_links() -> None:
    text = (
        "---\nprimary_language: en\nis_rotation_valid: False\nrotation_correction: 270\nis_table: false\n"
        "is_diagram: true\n---\nIntro text.\n\n![Bars for 2019 to 2023](page_100_200_300_150.png)\n\nAfter."
    )
    fields, _, problem = front_matter(text)
    assert fields == {"primary_language": "en", "is_rotation_valid": False, "rotation_correction": 270,
                      "is_table": False, "is_diagram": True} and problem is None  # fmt: skip
    layout = OLMOCR.parse(text, width=1000, height=1288, page=1)
    (figure,) = layout.figures
    assert figure.bbox == (100, 200, 400, 350) and figure.description == "Bars for 2019 to 2023"
    assert layout.markdown == "Intro text.\n\n![Bars for 2019 to 2023](figure:p1-f1)\n\nAfter."
    assert [b.label for b in layout.blocks] == ["text", "image", "text"]
    outside = OLMOCR.parse("---\n---\n![x](page_5000_5000_10_10.png)", width=100, height=100, page=1)
    assert outside.figures == [] and any("outside" in w for w in outside.warnings)


def test_chandra_1_reads_json_boxes_and_chandra_2_space_separated() -> None:
    one = '<div data-bbox="[0, 0, 512, 1024]" data-label="Figure"><img alt="A map."/></div>'
    layout = CHANDRA_1.parse(one, width=2048, height=1000, page=1)
    assert layout.figures[0].bbox == (0, 0, 1024, 1000) and layout.figures[0].description == "A map."
    two = ('<div data-bbox="0 0 500 1000" data-label="Text"><p>Hello <b>world</b> '
           '<math>x^2</math></p></div><div data-bbox="1 1 2 2" data-label="Blank-Page"></div>')
    layout = family_named("chandra").parse(two, width=2000, height=1000, page=1)
    assert layout.blocks[0].boxes == [(0, 0, 1000, 1000)] and len(layout.blocks) == 1
    assert layout.markdown == "Hello **world** \\( x^2 \\)"


def test_docling_tables_captions_and_headings() -> None:
    text = (
        "<doctag><section_header_level_1><loc_10><loc_10><loc_200><loc_30>Results</section_header_level_1>"
        "<otsl><loc_50><loc_100><loc_450><loc_200><ched>Year<ched>Sales<nl><fcel>2023<fcel>12<nl>"
        "<caption><loc_50><loc_80><loc_300><loc_95>Table 1: Sales.</caption></otsl>"
        "<picture><loc_0><loc_250><loc_500><loc_470><caption><loc_0><loc_480><loc_300><loc_495>Figure 1: Quays."
        "</caption></picture></doctag>"
    )
    layout = GRANITE_DOCLING.parse(text, width=1000, height=1000, page=1)
    # Each caption where its box is: the table's above it, the picture's below.
    assert layout.markdown.startswith("## Results\n\nTable 1: Sales.\n\n<table><tr><th>Year</th><th>Sales</th></tr>"
                                      "<tr><td>2023</td>")
    assert layout.markdown.endswith("</table>\n\n![](figure:p1-f1)\n\nFigure 1: Quays.")
    assert layout.figures[0].bbox == (0, 500, 1000, 940)
    assert [b.label for b in layout.blocks] == ["section_header_level_1", "caption", "table", "picture", "caption"]


# -- a page read in segments, with every parser -------------------------------------------------


def strip_blocks(lines: int) -> list[tuple[int, int, str]]:
    """(top px, bottom px, text) of the lines of a long strip page, 40 px apart."""
    vocab = "harbour lantern orchard meadow copper willow granite saddle ferry quarry beacon thistle".split()
    return [(20 + 40 * i, 44 + 40 * i, f"Row{i:03d} {vocab[i % 12]} {vocab[(i * 5) % 12]}") for i in range(lines)]


def run_segmented(family: str, width: int, height: int, lines: list[tuple[int, int, str]],
                  figure: tuple[int, int]) -> PageResult:
    recipe = family_named(family)
    segments = plan_segments(width, height)
    crops: dict[bytes, list[int]] = {}

    async def crop(image: bytes, boxes: Sequence[Box]) -> list[bytes]:
        out = []
        for box in boxes:
            crops[key := json.dumps(box).encode()] = box
            out.append(key)
        return out

    async def read(page: PageImage) -> Reading:
        x1, y1, x2, y2 = crops[page.image]
        segment = next(s for s in segments if s.box == [x1, y1, x2, y2])
        text = recipe.write(View(segment.width, segment.height, visible(segment, lines, figure)))
        result = Answer(ChatResult(text, "stop", 500, len(text) // 3, 0.1, 1), 1)
        layout = recipe.parse(text, width=page.width, height=page.height, page=page.page)
        return Reading(layout, [result], text, page.image, page.width, page.height)

    ref = DocumentRef("strip.pdf", 0, "strip.pdf", "pdf")
    item = PageImage("strip.pdf", 1, b"page", "image/png", width, height)
    return asyncio.run(Reader(read=read, crop=crop, model="m").read_page(ref, item, 1, Job(segments)))


def visible(segment: Segment, lines: list[tuple[int, int, str]], figure: tuple[int, int]) -> tuple[Element, ...]:
    """What a segment shows, in its own fractions: the lines at least 60% inside, the figure
    if whole."""
    out = []
    for top, bottom, text in lines:
        if min(bottom, segment.bottom) - max(top, segment.top) >= 0.6 * (bottom - top):
            y1 = (max(top, segment.top) - segment.top) / segment.height
            y2 = (min(bottom, segment.bottom) - segment.top) / segment.height
            out.append(Element("text", Box(0.05, y1, 0.95, y2), text))
    top, bottom = figure
    if segment.top <= top and bottom <= segment.bottom:
        out.append(Element("image", Box(0.2, (top - segment.top) / segment.height, 0.8,
                                        (bottom - segment.top) / segment.height), "", "A chart"))  # fmt: skip
    out.sort(key=lambda e: e.box.y1)
    return tuple(out)


@pytest.mark.parametrize("family", SINGLE)
def test_a_long_page_is_read_in_segments_with_every_parser(family: str) -> None:
    lines = strip_blocks(120)
    width, height = 500, 20 + 40 * 120 + 20
    figure = (2000, 2300)
    row = run_segmented(family, width, height, lines, figure)
    assert row.segments == len(plan_segments(width, height)) > 3
    assert row.status == "ok", row.error
    found = [int(n) for n in re.findall(r"Row(\d{3})", row.markdown)]
    assert found == list(range(120)), (family, found)  # every line once, in order
    (fig,) = row.figures
    assert abs(fig.bbox[1] - 2000) <= 4 and abs(fig.bbox[3] - 2300) <= 4 and abs(fig.bbox[0] - 100) <= 4
    assert f"(figure:{fig.id})" in row.markdown
    for block in row.blocks:
        for x1, y1, x2, y2 in block.boxes:
            assert 0 <= x1 < x2 <= width and 0 <= y1 < y2 <= height


def test_every_family_builds_a_request_its_own_check_accepts() -> None:
    from llm_ocr.vlm.families import FAMILIES

    for recipe in FAMILIES:
        body: dict[str, Any] = recipe.body(b"png", "image/png", temperature=recipe.retries.temperatures[0], max_tokens=100)
        received = {k: v for k, v in body.items() if k != "extra_body"} | body.get("extra_body", {})
        assert check_request(recipe, json.loads(json.dumps(received))) is not None, recipe.name
