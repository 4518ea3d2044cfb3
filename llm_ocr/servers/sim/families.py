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
