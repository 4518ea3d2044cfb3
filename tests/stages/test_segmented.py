"""Joining a long page's segments: every line once, in order, boxes back in page pixels.

The model is stood in for by a reader that sees exactly what a segment shows: the paragraphs of
a page laid out line by line, each line read if at least 60% of its height is inside the
segment (so a line cut by an edge is read by both neighbours, as a real model does), each
paragraph a block with the box of its visible lines, in the segment's 0..999 coordinates.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence

from llm_ocr.records import PageResult
from llm_ocr.sources.base import DocumentRef, PageImage
from llm_ocr.sources.segments import Segment, plan_segments
from llm_ocr.stages.attempts import Answer
from llm_ocr.stages.pieces.join import _head, _tail, _tokens, drop_repeated_start, repeated_start
from llm_ocr.stages.pieces.read import Job, Reader
from llm_ocr.vlm.box import Box
from llm_ocr.vlm.client import ChatResult, RequestFailed
from llm_ocr.vlm.families.base import Reading
from llm_ocr.vlm.families.deepseek import DEEPSEEK_OCR

LINE = 30  # pixels per text line
WIDTH = 443


def page_lines(paragraphs: int, seed: int = 3) -> list[tuple[int, int, str]]:
    """``(paragraph, top pixel, text)`` of each line: paragraphs of 2-9 lines, a gap between."""
    rng = random.Random(seed)
    words = "survey district coastal sample annual report volunteers transect figure table".split()
    lines, y = [], 20
    for p in range(paragraphs):
        for _ in range(rng.randint(2, 9)):
            lines.append((p, y, f"L{len(lines):03d} " + " ".join(rng.choice(words) for _ in range(6))))
            y += LINE
        y += LINE // 2
    return lines


def reader(lines: list[tuple[int, int, str]], fig_at: int | None = None, fig_height: int = 100):
    """The stand-in model: a segment's answer from the lines it shows, and the figure drawn at
    ``fig_at`` (``fig_height`` pixels tall) as far as the segment shows it."""

    def read(segment: Segment) -> str:
        blocks: dict[int, list[tuple[int, str]]] = {}
        for p, top, text in lines:
            visible = min(top + LINE, segment.bottom) - max(top, segment.top)
            if visible >= 0.6 * LINE:
                blocks.setdefault(p, []).append((top, text))
        out = []
        for rows in blocks.values():
            y1 = max(rows[0][0], segment.top) - segment.top
            y2 = min(rows[-1][0] + LINE, segment.bottom) - segment.top
            det = [20, int(y1 / segment.height * 999), 980, int(y2 / segment.height * 999)]
            text = " ".join(t for _, t in rows)
            out.append(f"<|ref|>text<|/ref|><|det|>[{det}]<|/det|>\n{text}\n\n")
        if fig_at is not None and fig_at < segment.bottom and fig_at + fig_height > segment.top:
            y1 = max(fig_at, segment.top) - segment.top
            y2 = min(fig_at + fig_height, segment.bottom) - segment.top
            det = [100, int(y1 / segment.height * 999), 400, int(y2 / segment.height * 999)]
            out.append(f"<|ref|>image<|/ref|><|det|>[{det}]<|/det|>\n\n")
        return "".join(out) + "<｜end▁of▁sentence｜>"

    return read


def run(lines, height: int, fig_at: int | None = None, fail: set[int] = frozenset(),
        fig_height: int = 100) -> tuple[PageResult, int]:
    read = reader(lines, fig_at, fig_height)
    segments = plan_segments(WIDTH, height)
    by_size = {}
    calls = 0

    async def crop(image: bytes, boxes: Sequence[Box]) -> list[bytes]:
        out = []
        for box in boxes:
            key = f"{box}".encode()
            by_size[key] = box
            out.append(key)
        return out

    async def read_segment(page: PageImage) -> Reading:
        nonlocal calls
        calls += 1
        x1, y1, x2, y2 = by_size[page.image]
        segment = next(s for s in segments if s.box == [x1, y1, x2, y2])
        if segment.index in fail:
            raise RequestFailed("HTTP 400: bad image", 1)
        assert (page.width, page.height) == (segment.width, segment.height)
        text = read(segment)
        answer = Answer(ChatResult(text, "stop", 600, len(text) // 3, 0.1, 1), 1)
        layout = DEEPSEEK_OCR.parse(text, width=page.width, height=page.height, page=page.page)
        return Reading(layout, [answer], text, page.image, page.width, page.height)

    ref = DocumentRef("strip.pdf", 0, "strip.pdf", "pdf")
    item = PageImage("strip.pdf", 1, b"page", "image/jpeg", WIDTH, height)
    row = asyncio.run(Reader(read=read_segment, crop=crop, model="m").read_page(ref, item, 1, Job(segments)))
    return row, calls


def test_every_line_once_in_order_with_boxes_in_page_pixels() -> None:
    lines = page_lines(120)
    height = lines[-1][1] + 60
    row, calls = run(lines, height)
    assert row.segments == calls == len(plan_segments(WIDTH, height)) > 5
    assert row.status == "ok" and row.error is None
    words = row.markdown.split()
    expected = " ".join(t for _, _, t in lines).split()
    assert words == expected  # nothing lost, nothing twice, in reading order
    paragraphs = sorted({p for p, _, _ in lines})
    assert len(row.blocks) == len(paragraphs)  # a paragraph cut by a segment edge is one block
    for p, block in zip(paragraphs, row.blocks):
        tops = [top for q, top, _ in lines if q == p]
        (box,) = block.boxes
        assert abs(box[1] - tops[0]) <= 30 and abs(box[3] - (tops[-1] + LINE)) <= 30  # page pixels
        assert 0 <= box[0] < box[2] <= WIDTH


def test_a_figure_is_cropped_from_the_page_once() -> None:
    lines = page_lines(40)
    height = lines[-1][1] + 60
    segments = plan_segments(WIDTH, height)
    inside_two = next(s.top + 5 for s in segments[1:] if s.top + 105 <= segments[s.index - 1].bottom)
    row, _ = run(lines, height, fig_at=inside_two)  # in the overlap: both segments see it
    (figure,) = row.figures
    assert figure.id == "p1-f1" and f"![](figure:{figure.id})" in row.markdown
    assert abs(figure.bbox[1] - inside_two) <= 2 and abs(figure.bbox[3] - (inside_two + 100)) <= 2


def test_a_figure_cut_by_segment_edges_is_one_figure_with_its_whole_box() -> None:
    lines = page_lines(60)
    height = lines[-1][1] + 60
    segments = plan_segments(WIDTH, height)
    # From the middle of the second segment to past the start of the fourth: each of three
    # segments sees a part of it, two of them cut at an edge.
    top = (segments[1].top + segments[1].bottom) // 2
    bottom = segments[3].top + 40
    row, _ = run(lines, height, fig_at=top, fig_height=bottom - top)
    (figure,) = row.figures
    assert abs(figure.bbox[1] - top) <= 2 and abs(figure.bbox[3] - bottom) <= 2
    assert row.markdown.count("![](figure:") == 1


def test_a_failed_segment_keeps_the_others_text_and_makes_the_row_an_error() -> None:
    lines = page_lines(60)
    height = lines[-1][1] + 60
    row, _ = run(lines, height, fail={2})
    assert row.status == "error" and "1 of" in row.error and "segment 3/" in row.error
    assert "L000" in row.markdown and lines[-1][2] in row.markdown


def test_the_repeated_start_of_a_continued_block_is_dropped() -> None:
    first = "The survey covered 12 districts in the north. Volunteers walked"
    second = "districts in the north. Volunteers walked each transect twice a year."
    assert drop_repeated_start(first, second) == "each transect twice a year."
    # The line at the first segment's edge read differently: anchored on the next whole words.
    garbled = "The survey covered 12 districts in the north. Volunteers wa1kcd"
    assert drop_repeated_start(garbled, second) == "each transect twice a year."
    assert drop_repeated_start("Nothing shared here.", "A new paragraph.") == "A new paragraph."


def test_the_words_a_join_compares_are_the_whole_texts_first_and_last() -> None:
    """A join reads only the start of a text and a window at its end (a page's text grows piece
    by piece); what it reads must be exactly the first and last words of the whole text, wherever
    the window's edge falls: inside a word, a tag, a run of spaces or stray ``<``/``>``."""
    rng = random.Random(7)
    parts = ["word", "Line.", "<td>", "</tr>", "<", ">", "<a b>", "x" * 50, "<" + "y" * 45 + ">", " ", "  ", "\n"]
    for case in range(400):
        text = "".join(rng.choice(parts) + rng.choice(["", " "]) for _ in range(rng.randrange(0, 300)))
        whole = [t for t, _ in _tokens(text)]
        for n in (0, 1, 4, rng.randrange(1, 400)):
            assert _tail(text, n) == (whole[-n:] if n else []), (case, n, text[-200:])
            assert _head(text, n) == whole[:n], (case, n)


def test_a_line_repeated_atop_every_segment_is_no_overlap() -> None:
    """A running header a model writes atop every piece starts both texts: found by its first
    words, it must not take with it the lines after it (issue 47: 40% of a page was dropped)."""
    first = "THE COASTAL SURVEY REPORT L001 survey district coastal L002 annual report volunteers L003 river"
    second = "THE COASTAL SURVEY REPORT L003 river L004 harbour lantern orchard"
    text, found = repeated_start(first, second)
    assert (text, found) == (second, "dubious")
