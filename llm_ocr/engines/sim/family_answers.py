"""The simulated answers of PaddleOCR-VL, GLM-OCR, Nanonets-OCR2, LightOnOCR-2 and Qwen-VL.

Each writes a page's layout blocks the way the family does (see the family modules in
``llm_ocr/vlm/families/`` and docs/models.md): plain text (PaddleOCR-VL's ``OCR:``), Markdown
with ``$`` math and HTML tables (GLM-OCR), Nanonets' tagged Markdown with ``<img>``
descriptions, LightOnOCR's Markdown with figure references (boxed 0..1000 by its ``-bbox``
variants), and QwenVL HTML with ``data-bbox`` in the resized image's pixels (Qwen2.5-VL) or
0..1000 (Qwen3-VL). :mod:`.families` adds :data:`ANSWERS` to its registry.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable
from typing import Any

from llm_ocr.vlm.families.qwen_vl import smart_resize

from .corpus import LayoutBlock
from .images import ImageFacts

#: Family name -> answer function (``families.Answerer``: kind, body, facts, blocks, memory).
ANSWERS: dict[str, Callable[..., str]] = {}


def register(name: str) -> Callable[[Callable[..., str]], Callable[..., str]]:
    """Add an answer function to :data:`ANSWERS`."""

    def wrap(fn: Callable[..., str]) -> Callable[..., str]:
        ANSWERS[name] = fn
        return fn

    return wrap


def markdown_of(block: LayoutBlock) -> str:
    """A layout block as Markdown (headings with ``#``), as ``families.markdown_of``."""
    prefix = {"title": "# ", "sub_title": "## "}.get(block.label, "")
    return prefix + block.text

_BRACKETS = re.compile(r"\\\[\s*(.*?)\s*\\\]", re.DOTALL)


def _dollar_math(text: str) -> str:
    """``\\[ x \\]`` (the corpus's form) as ``$$ x $$``, as GLM-OCR, Nanonets and LightOnOCR write it."""
    return _BRACKETS.sub(lambda m: f"$$\n{m.group(1)}\n$$", text)


def _caption_of(blocks: list[LayoutBlock], index: int) -> str:
    nxt = blocks[index + 1] if index + 1 < len(blocks) else None
    return nxt.text if nxt is not None and nxt.label == "image_caption" else ""


def _thousandths(box: tuple[float, float, float, float]) -> list[int]:
    return [min(1000, max(0, round(v * 1000))) for v in box]


@register("paddleocr-vl")
def _paddleocr(kind: str, body: dict[str, Any], facts: ImageFacts, blocks: list[LayoutBlock], memory: Any) -> str:
    """``OCR:`` on a whole page: its text, one block a paragraph, no markup, figures left out."""
    return "\n".join(b.text for b in blocks if b.text and b.label != "image")


@register("glm-ocr")
def _glm_ocr(kind: str, body: dict[str, Any], facts: ImageFacts, blocks: list[LayoutBlock], memory: Any) -> str:
    """``Text Recognition:``: Markdown paragraphs, ``$$`` display math, HTML tables; no figures."""
    return "\n\n".join(_dollar_math(markdown_of(b)) for b in blocks if b.text and b.label != "image")


@register("nanonets")
def _nanonets(kind: str, body: dict[str, Any], facts: ImageFacts, blocks: list[LayoutBlock], memory: Any) -> str:
    """Tagged Markdown: a figure as ``<img>`` holding its caption (or a short description),
    the page number last in ``<page_number>``."""
    parts = []
    for i, b in enumerate(blocks):
        if b.label == "image":
            parts.append(f"<img>{_caption_of(blocks, i) or 'A chart with coloured bars.'}</img>")
        elif b.label == "image_caption" and i > 0 and blocks[i - 1].label == "image":
            continue  # the caption went into the <img> tag
        elif b.text:
            parts.append(_dollar_math(markdown_of(b)))
    if facts.known is not None:
        parts.append(f"<page_number>{facts.known.index + 1}</page_number>")
    return "\n\n".join(parts)


def _lighton(blocks: list[LayoutBlock], boxes: bool) -> str:
    parts, figures = [], 0
    for b in blocks:
        if b.label == "image":
            figures += 1
            ref = f"![image](image_{figures}.png)"
            parts.append(f"{ref} {','.join(str(v) for v in _thousandths(b.box))}" if boxes else ref)
        elif b.text:
            parts.append(_dollar_math(markdown_of(b)))
    return "\n\n".join(parts)


@register("lightonocr")
def _lighton_plain(kind: str, body: dict[str, Any], facts: ImageFacts, blocks: list[LayoutBlock], memory: Any) -> str:
    """Markdown; figures as ``![image](image_N.png)`` without coordinates."""
    return _lighton(blocks, boxes=False)


@register("lightonocr-bbox")
def _lighton_bbox(kind: str, body: dict[str, Any], facts: ImageFacts, blocks: list[LayoutBlock], memory: Any) -> str:
    """Markdown; each figure reference followed by its box, 0..1000 of the image."""
    return _lighton(blocks, boxes=True)


def _qwen_html(blocks: list[LayoutBlock], box_of) -> str:  # noqa: ANN001 - box -> "x1 y1 x2 y2"
    rows = []
    for i, b in enumerate(blocks):
        bbox = box_of(b.box)
        if b.label == "image":
            caption = _caption_of(blocks, i)
            rows.append(f'<div class="image" data-bbox="{bbox}"><img data-bbox="{bbox}"/></div>')
            if caption:
                rows.append(f'<p data-bbox="{box_of(blocks[i + 1].box)}">{html.escape(caption)}</p>')
        elif b.label == "image_caption" and i > 0 and blocks[i - 1].label == "image":
            continue
        elif b.label in ("title", "sub_title"):
            tag = "h1" if b.label == "title" else "h2"
            rows.append(f'<{tag} data-bbox="{bbox}">{html.escape(b.text)}</{tag}>')
        elif b.label == "table":
            rows.append(b.text.replace("<table>", f'<table data-bbox="{bbox}">', 1))
        elif b.label == "equation":
            latex = _BRACKETS.sub(lambda m: m.group(1), b.text)
            rows.append(f'<div class="formula" data-bbox="{bbox}">{html.escape(latex)}</div>')
        elif b.text:
            rows.append(f'<p data-bbox="{bbox}">{html.escape(b.text)}</p>')
    return "```html\n<html><body>\n" + " \n ".join(rows) + "\n</body></html>\n```"


@register("qwen2.5-vl")
def _qwen25(kind: str, body: dict[str, Any], facts: ImageFacts, blocks: list[LayoutBlock], memory: Any) -> str:
    """QwenVL HTML, boxes in pixels of the image as the processor resizes it (smart_resize)."""
    rh, rw = smart_resize(facts.height, facts.width)
    return _qwen_html(blocks, lambda f: f"{round(f[0] * rw)} {round(f[1] * rh)} {round(f[2] * rw)} {round(f[3] * rh)}")


@register("qwen3-vl")
def _qwen3(kind: str, body: dict[str, Any], facts: ImageFacts, blocks: list[LayoutBlock], memory: Any) -> str:
    """QwenVL HTML, boxes 0..1000 of the image."""
    return _qwen_html(blocks, lambda f: " ".join(str(v) for v in _thousandths(f)))
