"""How the simulated server answers each model family, in that family's own format.

The page's layout (from a ``--corpus`` PDF's text layer, or synthetic) is written the way the
family writes it: DeepSeek-OCR's grounding tags (:mod:`.content`), olmOCR-2's front matter and
Markdown, dots.ocr's JSON cells, Chandra's HTML blocks, MinerU's layout lines and block texts,
granite-docling's DocTags; boxes in each family's own coordinate space, so that the parsers are
proven on answers of the real shape. Requests are checked against the recipe before this runs
(``Family.check``), so an answer here is always for a request the real server would serve the
same way.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from llm_ocr.vlm.families import Family

from . import family_answers
from .corpus import LayoutBlock
from .images import ImageFacts

#: Families the legacy DeepSeek-OCR path of the server answers (by prompt kind).
_LEGACY = ("deepseek-ocr",)


class Memory:
    """What the server remembers between requests: the blocks of recent pages a multi-request
    family (MinerU) will ask about one by one."""

    def __init__(self, capacity: int = 4096) -> None:
        self.capacity = capacity
        self.blocks: list[tuple[LayoutBlock, float]] = []  # (block, page aspect), newest last

    def remember(self, blocks: list[LayoutBlock], aspect: float) -> None:
        """Note the blocks of a page just laid out (the oldest are forgotten past capacity)."""
        self.blocks.extend((b, aspect) for b in blocks)
        del self.blocks[: max(0, len(self.blocks) - self.capacity)]

    def find(self, crop_aspect: float, prompt: str) -> LayoutBlock | None:
        """The remembered block a crop of aspect ``crop_aspect`` is, asked with ``prompt``: of
        the blocks of that kind, the one whose shape on its page (its box as the layout pass
        wrote it, in 0..1000) is nearest; each block is answered once."""
        wanted = "table" if "Table" in prompt else "equation" if "Formula" in prompt else None
        best, best_error = None, 0.25  # past a quarter off, it is no block of ours
        for i, (block, page_aspect) in enumerate(self.blocks):
            if (block.label if block.label in ("table", "equation") else None) != wanted:
                continue
            x1, y1, x2, y2 = (round(v * 1000) for v in block.box)
            if y2 <= y1 or x2 <= x1:
                continue
            error = abs((x2 - x1) / (y2 - y1) * page_aspect - crop_aspect) / crop_aspect
            if error < best_error:
                best, best_error = i, error
        if best is None:
            return None
        return self.blocks.pop(best)[0]


Answerer = Callable[[str, dict[str, Any], ImageFacts, list[LayoutBlock], Memory], str]
_ANSWERS: dict[str, Answerer] = {}


def register(name: str) -> Callable[[Answerer], Answerer]:
    """Register the answer function of family ``name``."""

    def wrap(fn: Answerer) -> Answerer:
        _ANSWERS[name] = fn
        return fn

    return wrap


def answers(family: Family) -> bool:
    """Whether this module answers ``family``'s page requests (else the DeepSeek-OCR path does)."""
    return family.name not in _LEGACY and family.name in _ANSWERS


def answer(family: Family, kind: str, body: dict[str, Any], facts: ImageFacts, blocks: list[LayoutBlock], memory: Memory) -> str:
    """The family's answer to a page request of ``kind`` about a page with ``blocks``."""
    return _ANSWERS[family.name](kind, body, facts, blocks, memory)


def matches_any_aspect(family: Family, kind: str | None) -> bool:
    """Whether the image of this request may be a page resized to another shape."""
    return family.name == "mineru" and kind == "layout"


def prompt_tokens(family: Family, width: int, height: int, prompt: str, tokens_per_char: float) -> int | None:
    """Prompt tokens of a request to ``family`` (None: DeepSeek-OCR's own estimate applies)."""
    if family.name in _LEGACY:
        return None
    pixels = min(width * height, family.serving.max_image_pixels)
    return math.ceil(pixels / family.serving.pixels_per_token) + math.ceil(len(prompt) * tokens_per_char) + 8


def markdown_of(block: LayoutBlock) -> str:
    """A layout block as Markdown in the common forms (headings with ``#``)."""
    if block.label == "title":
        return f"# {block.text}"
    if block.label == "sub_title":
        return f"## {block.text}"
    return block.text


@register("generic")
def _generic(kind: str, body: dict[str, Any], facts: ImageFacts, blocks: list[LayoutBlock], memory: Memory) -> str:
    """Plain Markdown of the page's text, figures left out (it has no boxes to give)."""
    return "\n\n".join(markdown_of(b) for b in blocks if b.text)


def reads_rotation(family: Family, kind: str | None) -> bool:
    """Whether this family says how a page is turned (so the server must recognise it turned)."""
    return family.name == "olmocr" and kind is not None


def turned_box(box: tuple[float, float, float, float], ccw: int) -> tuple[float, float, float, float]:
    """A box in page fractions, in the fractions of the page turned ``ccw`` degrees
    counter-clockwise (the image the server received, when it had to turn it back)."""
    def point(fx: float, fy: float) -> tuple[float, float]:
        if ccw == 90:
            return fy, 1.0 - fx
        if ccw == 180:
            return 1.0 - fx, 1.0 - fy
        if ccw == 270:
            return 1.0 - fy, fx
        return fx, fy

    (ax, ay), (bx, by) = point(box[0], box[1]), point(box[2], box[3])
    return min(ax, bx), min(ay, by), max(ax, bx), max(ay, by)


def html_table_rows(table: str) -> list[list[str]]:
    """The cells of a simple ``<table><tr><td>..`` (the synthetic pages' tables), row by row."""
    rows = []
    for row in table.split("<tr>")[1:]:
        cells = [c.split("</td>")[0].split("</th>")[0] for c in row.replace("<th>", "<td>").split("<td>")[1:]]
        rows.append(cells)
    return rows


@register("olmocr")
def _olmocr(kind: str, body: dict[str, Any], facts: ImageFacts, blocks: list[LayoutBlock], memory: Memory) -> str:
    """Front matter, then Markdown; a figure as ``![alt](page_x_y_w_h.png)`` in pixels of the
    image received. A page received turned says so (``is_rotation_valid: False`` and the
    counter-clockwise turn that makes it upright), as olmOCR-2 was trained to."""
    page_rotation = facts.known.rotation if facts.known is not None else 0
    correction = (page_rotation - facts.turned) % 360
    has_table = any(b.label == "table" for b in blocks)
    has_figure = any(b.label == "image" for b in blocks)
    parts = []
    for block in blocks:
        if block.label == "image":
            x1, y1, x2, y2 = turned_box(block.box, facts.turned)
            x, y = round(x1 * facts.width), round(y1 * facts.height)
            w, h = round((x2 - x1) * facts.width), round((y2 - y1) * facts.height)
            parts.append(f"![A chart of coloured bars]({f'page_{x}_{y}_{w}_{h}.png'})")
        elif block.text:
            parts.append(markdown_of(block))
    head = (
        "---\nprimary_language: en\n"
        f"is_rotation_valid: {correction == 0}\nrotation_correction: {correction}\n"
        f"is_table: {has_table}\nis_diagram: {has_figure}\n---\n"
    )
    return head + "\n\n".join(parts)


_DOTS_LABELS = {"title": "Title", "sub_title": "Section-header", "text": "Text", "image": "Picture",
                "image_caption": "Caption", "table": "Table", "equation": "Formula"}  # fmt: skip


@register("dots-ocr")
def _dots(kind: str, body: dict[str, Any], facts: ImageFacts, blocks: list[LayoutBlock], memory: Memory) -> str:
    """A JSON list of cells, boxes in pixels of the image as the processor resizes it."""
    import json

    from llm_ocr.vlm.families.dots import smart_resize

    rh, rw = smart_resize(facts.height, facts.width)
    cells = []
    for block in blocks:
        category = _DOTS_LABELS.get(block.label, "Text")
        x1, y1, x2, y2 = block.box
        cell: dict[str, Any] = {"bbox": [round(x1 * rw), round(y1 * rh), round(x2 * rw), round(y2 * rh)],
                                "category": category}  # fmt: skip
        if category == "Formula":
            cell["text"] = block.text.replace("\\[", "$$").replace("\\]", "$$").replace("\\coloneqq", ":=")
        elif category != "Picture":
            cell["text"] = markdown_of(block)
        cells.append(cell)
    return json.dumps(cells, ensure_ascii=False)


_CHANDRA_LABELS = {"title": "Section-Header", "sub_title": "Section-Header", "text": "Text", "image": "Image",
                   "image_caption": "Caption", "table": "Table", "equation": "Equation-Block"}  # fmt: skip


def _chandra(scale: int, json_box: bool) -> Answerer:
    def answer(kind: str, body: dict[str, Any], facts: ImageFacts, blocks: list[LayoutBlock], memory: Memory) -> str:
        """HTML blocks, ``data-bbox`` normalised to ``scale``; an image's description in its alt."""
        from html import escape

        divs = []
        for block in blocks:
            label = _CHANDRA_LABELS.get(block.label, "Text")
            box = [round(v * scale) for v in block.box]
            bbox = str(box) if json_box else " ".join(map(str, box))
            if label == "Image":
                inner = '<img alt="A bar chart with five coloured bars."/>'
            elif label == "Section-Header":
                inner = f"<h{1 if block.label == 'title' else 2}>{escape(block.text)}</h{1 if block.label == 'title' else 2}>"
            elif label == "Table":
                inner = block.text
            elif label == "Equation-Block":
                latex = block.text.replace("\\[", "").replace("\\]", "").replace("\\coloneqq", ":=").strip()
                inner = f'<p><math display="block">{escape(latex)}</math></p>'
            else:
                inner = f"<p>{escape(block.text)}</p>"
            divs.append(f'<div data-bbox="{bbox}" data-label="{label}">{inner}</div>')
        return "\n".join(divs)

    return answer


register("chandra")(_chandra(1000, json_box=False))
register("chandra-1")(_chandra(1024, json_box=True))


def otsl_of(table: str) -> str:
    """A simple HTML table as OTSL (docling-core's table tokens): header row ``<ched>``."""
    rows = html_table_rows(table)
    return "".join(("<ched>" if i == 0 else "<fcel>").join([""] + row) + "<nl>" for i, row in enumerate(rows))


_MINERU_TYPES = {"title": "title", "sub_title": "title", "text": "text", "image": "image",
                 "image_caption": "image_caption", "table": "table", "equation": "equation"}  # fmt: skip


@register("mineru")
def _mineru(kind: str, body: dict[str, Any], facts: ImageFacts, blocks: list[LayoutBlock], memory: Memory) -> str:
    """The layout pass: one line per block, boxes 0..1000 and ``<|rotate_up|>``; the blocks are
    remembered. A block pass: the text of the remembered block whose crop this is (found by its
    shape, then its look), as text, OTSL or LaTeX."""
    if kind == "layout":
        if facts.known is not None:
            memory.remember(blocks, facts.known.aspect)
        lines = []
        for block in blocks:
            x1, y1, x2, y2 = (round(v * 1000) for v in block.box)
            lines.append(f"<|box_start|>{x1} {y1} {x2} {y2}<|box_end|><|ref_start|>"
                         f"{_MINERU_TYPES.get(block.label, 'text')}<|ref_end|><|rotate_up|>")
        return "\n".join(lines)
    block = memory.find(facts.width / facts.height, prompt_of(body))
    if block is None:
        return " ".join(b.text for b in blocks if b.text)[:200]  # a crop of no page it knows
    if block.label == "table":
        return otsl_of(block.text)
    if block.label == "equation":
        return block.text.replace("\\[", "").replace("\\]", "").replace("\\coloneqq", ":=").strip()
    return block.text


def prompt_of(body: dict[str, Any]) -> str:
    """The text part of a request."""
    from llm_ocr.vlm.families.base import prompt_text

    return prompt_text(body) or ""


_DOCTAGS = {"title": "title", "sub_title": "section_header_level_1", "text": "text", "image": "picture",
            "image_caption": "caption", "table": "otsl", "equation": "formula"}  # fmt: skip


@register("granite-docling")
def _docling(kind: str, body: dict[str, Any], facts: ImageFacts, blocks: list[LayoutBlock], memory: Memory) -> str:
    """DocTags: ``<label><loc_x0><loc_y0><loc_x1><loc_y1>text</label>``, locations on a 500 grid."""
    parts = []
    for block in blocks:
        tag = _DOCTAGS.get(block.label, "text")
        locs = "".join(f"<loc_{min(499, max(0, round(500 * v)))}>" for v in block.box)
        if tag == "otsl":
            text = otsl_of(block.text)
        elif tag == "formula":
            text = block.text.replace("\\[", "").replace("\\]", "").replace("\\coloneqq", ":=").strip()
        elif tag == "picture":
            text = ""
        else:
            text = block.text
        parts.append(f"<{tag}>{locs}{text}</{tag}>")
    return "<doctag>" + "".join(parts) + "</doctag>"


# The answers of PaddleOCR-VL, GLM-OCR, Nanonets-OCR2, LightOnOCR-2 and Qwen-VL.
_ANSWERS.update(family_answers.ANSWERS)
