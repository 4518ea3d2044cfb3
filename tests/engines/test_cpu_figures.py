"""The CPU engine's figure rules (no model): which lines are inside a figure, which are its
caption, where the figure sits in the reading order, how its box shrinks to its ink, and how a
describe request finds the figure again by its crop.

The end-to-end figure tests, with the real layout model on a generated PDF through ``llm-ocr
run``, are in tests/e2e/engines/ (test_cpu_engine_commands.py, test_cpu_text_and_figures.py).
"""

from __future__ import annotations

import io

import numpy as np

from llm_ocr.engines.cpu.figure_memory import FigureFacts, FigureMemory, Recall, describe
from llm_ocr.engines.cpu.figures import Region, find_figures
from llm_ocr.engines.cpu.layout import Line, page_blocks, render_grounding
from llm_ocr.vlm.grounding import parse_layout

H = 20.0  # line height of the synthetic pages


def _para(x: float, y: float, width: float, rows: int, tag: str) -> list[Line]:
    return [Line(x, y + i * 24, x + width, y + i * 24 + H, f"{tag} line {i} of body text with several words") for i in range(rows)]


def _figure_page() -> tuple[list[Line], list[Line], Line]:
    """Body text above and below a figure at (200, 300)-(800, 700) whose labels are text lines."""
    above = _para(100, 100, 800, 4, "above")
    labels = [Line(220, 310, 420, 330, "tonnes landed"), Line(300, 660, 360, 680, "north"), Line(600, 660, 660, 680, "south")]
    caption = Line(200, 720, 700, 740, "Figure 2: Fish landed at each quay in May.")
    below = _para(100, 780, 800, 3, "below")
    return above + below, labels, caption


def test_lines_inside_a_figure_leave_the_body_and_its_caption_follows_it() -> None:
    body, labels, caption = _figure_page()
    region = Region("figure", (190, 290, 810, 700), 0.9)
    figures, rest = find_figures(body + labels + [caption], [region])
    (figure,) = figures
    assert sorted(l.text for l in figure.inside) == ["north", "south", "tonnes landed"]
    assert figure.caption_text == "Figure 2: Fish landed at each quay in May."
    assert rest == body  # neither the labels nor the caption stay in the body
    blocks = page_blocks(rest, figures)
    assert [b.label for b in blocks] == ["text", "image", "image_caption", "text"]
    assert blocks[1].figure is figure and blocks[2].figure is figure
    assert not any(word in b.text for b in blocks for word in ("tonnes", "north", "south"))
    # The markup the client parses: one figure with the region's box (no page given: no ink to
    # shrink it to), the caption in the Markdown
    # right after the figure link.
    layout = parse_layout(render_grounding(blocks, 1000, 1400), width=1000, height=1400, page=1)
    ((x1, y1, x2, y2),) = [f.bbox for f in layout.figures]
    assert 188 <= x1 <= 190 and 288 <= y1 <= 290 and 810 <= x2 <= 812 and 700 <= y2 <= 702  # 0..999 rounding
    link = layout.markdown.index("![](figure:p1-f1)")
    assert layout.markdown.index("Figure 2: Fish landed") > link > layout.markdown.index("above line 3")


def test_a_caption_the_region_swallowed_is_taken_back_and_the_box_ends_above_it() -> None:
    body, labels, caption = _figure_page()
    region = Region("figure", (190, 290, 810, 745), 0.9)  # loose: reaches over the caption
    (figure,), rest = find_figures(body + labels + [caption], [region])
    assert figure.caption == [caption] and caption not in figure.inside
    assert figure.box[3] <= caption.y1
    assert rest == body


def test_body_text_and_a_two_row_caption_the_region_swallowed_go_back() -> None:
    body, labels, caption = _figure_page()
    second = Line(200, 744, 640, 764, "Counts are from the harbour office ledger, weighed on landing.")
    lines = body + labels + [caption, second]
    # Loose over the caption's two rows and over the first body row below them.
    region = Region("figure", (90, 290, 910, 805), 0.9)
    (figure,), rest = find_figures(lines, [region])
    assert figure.caption == [caption, second]
    assert sorted(l.text for l in figure.inside) == ["north", "south", "tonnes landed"]
    assert rest == body and figure.box[3] <= caption.y1
    # Loose over the last body row above the figure: it stays body text.
    region = Region("figure", (90, 165, 910, 700), 0.9)
    (figure,), rest = find_figures(lines, [region])
    assert rest == body and figure.box[1] >= body[3].y2
    assert figure.caption_text == f"{caption.text} {second.text}"


def test_a_caption_above_the_figure_and_one_labelled_by_the_model_without_a_number() -> None:
    body, labels, _ = _figure_page()
    above_caption = Line(200, 262, 560, 282, "Landings by quay")  # no "Figure N": only the model says so
    region = Region("figure", (190, 290, 810, 700), 0.9)
    lines = body + labels + [above_caption]
    (figure,), _ = find_figures(lines, [region])
    assert figure.caption == []  # a plain line above a figure is not a caption by itself
    labelled = Region("figure_caption", (195, 258, 570, 286), 0.7)
    (figure,), rest = find_figures(lines, [region, labelled])
    assert figure.caption_text == "Landings by quay" and above_caption not in rest
    assert [b.label for b in page_blocks(rest, [figure])][1:3] == ["image_caption", "image"]


def test_body_text_below_a_figure_is_not_its_caption_and_low_scores_are_ignored() -> None:
    body, labels, _ = _figure_page()
    region = Region("figure", (190, 290, 810, 700), 0.9)
    (figure,), rest = find_figures(body + labels, [region])
    assert figure.caption == [] and rest == body
    figures, rest = find_figures(body + labels, [Region("figure", region.box, 0.3)], min_score=0.5)
    assert figures == [] and rest == body + labels
    # A caption region with no figure beside it (the model labels stray sentences so) changes nothing.
    figures, rest = find_figures(body, [Region("figure_caption", (100, 780, 900, 800), 0.9)])
    assert figures == [] and rest == body


def test_a_figure_in_the_left_column_stays_in_it() -> None:
    left_top = _para(100, 100, 380, 3, "L1")
    left_bottom = _para(100, 600, 380, 3, "L2")
    right = _para(540, 100, 380, 20, "R")
    caption = Line(100, 560, 380, 580, "Fig. 3. A map of the quays.")
    region = Region("figure", (100, 190, 480, 545), 0.8)
    figures, rest = find_figures(left_top + left_bottom + right + [caption], [region])
    blocks = page_blocks(rest, figures)
    order = [b.text.split()[0] if b.text else b.label for b in blocks]
    assert order == ["L1", "image", "Fig.", "L2", "R"]


def test_a_loose_region_shrinks_to_its_drawing_and_a_blank_region_is_no_figure() -> None:
    page = np.full((400, 600, 3), 250, np.uint8)  # off-white paper
    page[100:200, 150:400] = (200, 120, 40)  # the figure's ink
    region = Region("figure", (100, 60, 500, 260), 0.9)
    blank = Region("figure", (420, 250, 590, 390), 0.9)
    figures, _ = find_figures([Line(20, 20, 300, 40, "A line of text")], [region, blank], page=page)
    assert [f.box for f in figures] == [(146.0, 96.0, 404.0, 204.0)]  # the ink, 4 px of margin


# ---------------------------------------------------------------------------------------------
# The page's pixels decide: what is drawn is a figure, what is text stays text


def _paper(width: int, height: int) -> np.ndarray:
    return np.full((height, width, 3), 252, np.uint8)


def _ink_text(page: np.ndarray, lines: list[Line]) -> None:
    """Glyph-like ink inside each line's box (strokes 2 px wide, one per character), nothing
    outside it: what a born-digital text line looks like to the OCR."""
    for line in lines:
        top, bottom = int(line.y1 + 0.2 * line.height), int(line.y2 - 0.2 * line.height)
        step = max(3.0, (line.x2 - line.x1) / max(1, len(line.text)))
        x = line.x1 + 1
        while x < line.x2 - 2:
            page[top:bottom, int(x) : int(x) + 2] = 20
            x += step


def test_a_region_over_text_or_a_table_is_read_as_text_whatever_the_model_says() -> None:
    # A page of paragraphs and an invoice-like table of short cells, all of it inside one
    # region the model labelled "figure" with a high score.
    paragraphs = _para(100, 100, 800, 8, "body")
    cells = [
        Line(100 + c * 200, 340 + r * 40, 100 + c * 200 + w, 360 + r * 40, text)
        for r in range(5)
        for c, (w, text) in enumerate([(150, "Standing desk"), (20, "6"), (70, "489.00"), (90, "2,934.00")])
    ]
    lines = paragraphs + cells
    page = _paper(1000, 600)
    _ink_text(page, lines)
    region = Region("figure", (80, 80, 920, 560), 0.95)
    figures, body = find_figures(lines, [region], page=page)
    assert figures == [] and body == lines
    # A thin rule under the table is drawn ink too, but no drawing: still text.
    page[545:547, 100:900] = 20
    figures, body = find_figures(lines, [region], page=page)
    assert figures == [] and body == lines


def test_a_ruled_form_in_small_type_is_text_not_a_figure() -> None:
    # A well log's header block: label | value rows in 5.5 pt type (11 px at 144 DPI) inside a
    # grid of 1 px rules, more rule than glyph by ink, and a region the model called a figure.
    labels = [Line(24, 22 + 22 * r, 150, 34 + 22 * r, f"FIELD NAME {r}") for r in range(12)]
    values = [Line(170, 22 + 22 * r, 330, 34 + 22 * r, f"Giddings {r}") for r in range(12)]
    page = _paper(620, 320)
    _ink_text(page, labels + values)
    for r in range(13):
        page[18 + 22 * r, 20:600] = 40
    page[18:283, 20] = page[18:283, 160] = page[18:283, 599] = 40
    region = Region("figure", (15, 10, 605, 290), 0.8)
    figures, body = find_figures(labels + values, [region], page=page)
    assert figures == [] and body == labels + values


def test_a_region_over_a_text_column_and_a_plot_keeps_the_plot_and_gives_the_text_back() -> None:
    # A strip like a well log: depths and notes on the left, a framed curve track on the right
    # with its scale above; the model's region covers both.
    column = [Line(20, 40 + i * 60, 90, 60 + i * 60, f"{1500 + 5 * i:.1f}") for i in range(12)]
    column += [Line(110, 40 + i * 120, 330, 60 + i * 120, "Shale, grey; few fossils") for i in range(6)]
    scale = [Line(372, 182, 384, 198, "0"), Line(540, 182, 570, 198, "150")]
    page = _paper(600, 760)
    _ink_text(page, column + scale)
    page[200:202, 370:580] = page[598:600, 370:580] = 30  # the track's frame
    page[200:600, 370:372] = page[200:600, 578:580] = 30
    for y in range(202, 598):  # a wandering curve
        x = 470 + int(60 * np.sin(y / 23))
        page[y, x : x + 2] = (40, 130, 40)
    region = Region("figure", (5, 10, 595, 750), 0.88)
    (figure,), body = find_figures(column + scale, [region], page=page)
    x1, y1, x2, y2 = figure.box
    assert 360 <= x1 <= 372 and 176 <= y1 <= 184 and 578 <= x2 <= 590 and 598 <= y2 <= 610  # the track, its scale
    assert sorted(l.text for l in figure.inside) == ["0", "150"]
    assert body == column  # every depth and note stays body text


def test_a_chart_keeps_its_bars_and_labels_as_one_figure() -> None:
    text = _para(100, 40, 800, 3, "above")
    labels = [Line(230 + i * 150, 612, 300 + i * 150, 632, name) for i, name in enumerate(["north", "south", "east"])]
    page = _paper(1000, 700)
    _ink_text(page, text + labels)
    page[600:603, 200:700] = 0  # the axis
    for i, top in enumerate((300, 420, 360)):
        page[top:600, 235 + i * 150 : 295 + i * 150] = (180, 110, 60)  # bars
    region = Region("figure", (180, 260, 720, 650), 0.9)
    (figure,), body = find_figures(text + labels, [region], page=page)
    assert sorted(l.text for l in figure.inside) == ["east", "north", "south"]
    assert body == text
    x1, y1, x2, y2 = figure.box
    assert x1 <= 200 and y1 <= 300 and x2 >= 700 and y2 >= 632


def test_a_drawing_that_fills_the_page_keeps_its_words_as_the_page_s_text() -> None:
    # A stretch of a well log read as one segment: curve tracks on a grid over the whole image,
    # depths in a track between them, a formation top written across a track. The chart above
    # (a figure set in the page's text) loses its labels to the figure; this drawing is the page.
    page = _paper(600, 1200)
    depths = [Line(255, 40 + i * 120, 300, 60 + i * 120, str(7600 + 50 * i)) for i in range(10)]
    top = Line(330, 560, 560, 580, "Austin Chalk top 7812 ft")
    _ink_text(page, depths + [top])
    for x1, x2 in ((20, 240), (320, 580)):  # two framed tracks with a grid and a curve each
        page[10:12, x1:x2] = page[1188:1190, x1:x2] = 30
        page[10:1190, x1 : x1 + 2] = page[10:1190, x2 - 2 : x2] = 30
        for y in range(70, 1190, 60):
            if not 555 <= y <= 585:
                page[y, x1:x2] = 200
        for y in range(12, 1188):
            x = (x1 + x2) // 2 + int(50 * np.sin(y / 31))
            if not 555 <= y <= 585:
                page[y, x : x + 2] = (40, 130, 40)
    region = Region("figure", (5, 5, 595, 1195), 0.9)
    (figure,), body = find_figures(depths + [top], [region], page=page)
    assert figure.fills_page and figure.label == "figure"
    assert sorted(l.text for l in figure.inside) == sorted(l.text for l in depths + [top])  # its description
    assert body == depths + [top]  # and the page's text
    blocks = page_blocks(body, [figure])
    assert blocks[0].label == "image"
    assert [b.text for b in blocks[1:]] == ["7600", "7650", "7700", "7750", "7800", "Austin Chalk top 7812 ft", "7850",
                                            "7900", "7950", "8000", "8050"]


# ---------------------------------------------------------------------------------------------
# Describe: the figure found again by its crop


def _chart(seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    image = np.full((180, 300, 3), 255, np.uint8)
    for i in range(5):
        top = int(rng.integers(20, 150))
        image[top:170, 20 + i * 55 : 60 + i * 55] = rng.integers(0, 200, 3)
    return image


def _jpeg_round_trip(image: np.ndarray) -> np.ndarray:
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, format="JPEG", quality=90)
    return np.asarray(Image.open(buffer).convert("RGB"))


def test_memory_finds_a_figure_by_its_crop_despite_re_encoding_and_not_another() -> None:
    memory = FigureMemory()
    facts = FigureFacts("Figure 1: Five bars.", "alpha · beta")
    memory.remember(_chart(1), facts)
    memory.remember(_chart(2), FigureFacts("Figure 2: Other bars.", ""))
    assert memory.recall(_jpeg_round_trip(_chart(1))).facts == facts
    assert memory.recall(_chart(1)[1:, 1:]).facts == facts  # a pixel off at an edge
    assert memory.recall(_chart(3)).facts is None
    assert memory.recall(_chart(1)[:, :200]).facts is None  # another size is another picture


def test_memory_trusts_no_caption_for_a_picture_seen_beside_different_ones() -> None:
    memory = FigureMemory()
    memory.remember(_chart(1), FigureFacts("Figure 1: Logo.", ""))
    memory.remember(_chart(1), FigureFacts("Figure 1: Logo.", ""))
    assert memory.recall(_chart(1)).facts == FigureFacts("Figure 1: Logo.", "")
    memory.remember(_chart(1), FigureFacts("Figure 9: The same logo.", ""))
    assert memory.recall(_chart(1)) == Recall(None, ambiguous=True)


def test_memory_forgets_the_oldest_figures_first() -> None:
    memory = FigureMemory(capacity=2)
    for seed in (1, 2, 3):
        memory.remember(_chart(seed), FigureFacts(f"Figure {seed}.", ""))
    assert len(memory) == 2
    assert memory.recall(_chart(1)).facts is None and memory.recall(_chart(3)).facts is not None


def test_a_figure_with_no_caption_and_no_text_says_what_was_seen_and_why_no_more() -> None:
    known = Recall(FigureFacts("", "", "figure"))
    assert describe(known, "", (420, 310)) == (
        'Not described: a figure region (the layout model\'s class "figure") of 420 x 310 px with no caption beside '
        "it and no text in it; the CPU engine reads text, not pictures.")
    unknown = describe(Recall(None), "", (64, 48))
    assert unknown.startswith("Not described: an image of 64 x 48 px with no text in it")
    assert describe(Recall(None, ambiguous=True), "", (64, 48)) == unknown
    # What is known is said, and nothing stands in for the part that is not.
    assert describe(Recall(FigureFacts("Figure 2: Bars.", "", "figure")), "", (9, 9)) == "Caption: Figure 2: Bars."
    assert describe(Recall(None), "Invoice 4821", (9, 9)) == "Text in the image: Invoice 4821"
