"""How the simulated server answers a model family's page request: with the family's own writer.

What is the simulator's stays here: what the image shows (a known page's layout from a
``--corpus`` PDF's text layer, the part of it a crop shows, or a synthetic page), turned into a
:class:`~llm_ocr.vlm.view.View` (boxes in fractions of the image as received, how it is turned,
the page number), and what a two-pass family's blocks were between its passes (:class:`Memory`).
What is the family's is its module's: the answer's format and coordinate space
(:meth:`~llm_ocr.vlm.families.base.Family.write`, beside its parser). Requests are checked
against the recipe before this runs (:mod:`.checks`), so an answer here is always for a
request the real server would serve the same way.
"""

from __future__ import annotations

import math
from typing import Any

from llm_ocr.vlm.box import Box
from llm_ocr.vlm.families import Family
from llm_ocr.vlm.view import Element, View

from .checks import BLOCK_PASS, LAYOUT_PASS, prompt_text
from .corpus import LayoutBlock
from .images import ImageFacts

#: The family whose page requests the server answers on its own path (``SimServer._answer``:
#: answers sized to ``--output-tokens-mean``, the grounding faults, tiles of dense pages), with
#: the frame's estimate of its image tokens: DeepSeek-OCR, the model the simulator stands in for.
NATIVE = "deepseek-ocr"
#: What the simulated model says a figure shows (the families that describe figures write it).
FIGURE_DESCRIPTION = "A chart of coloured bars"
#: The whole image, in its own fractions (a block cropped from a page fills its crop).
WHOLE = Box(0.0, 0.0, 1.0, 1.0)


class Memory:
    """What the server remembers between requests: the blocks of recent pages a two-pass family
    (MinerU) will ask about one by one."""

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


def answers(family: Family) -> bool:
    """Whether this module answers ``family``'s page requests (else the native path does)."""
    return family.name != NATIVE


def answer(
    family: Family, kind: str, body: dict[str, Any], facts: ImageFacts, blocks: list[LayoutBlock], memory: Memory
) -> str:
    """The family's answer to a page request of ``kind`` for an image (``facts``) showing
    ``blocks`` (in fractions of the page, or of the crop the image is)."""
    prompt = prompt_text(body)
    if kind == LAYOUT_PASS and facts.known is not None:
        # The blocks' boxes are fractions of the image's region: of the page, or of the piece.
        region = facts.region
        memory.remember(blocks, facts.known.aspect * (region.width / region.height if region is not None else 1.0))
    if kind == BLOCK_PASS:
        block = memory.find(facts.width / facts.height, prompt or "")
        if block is None:  # a crop of no page it knows: some of the page's text
            text = " ".join(b.text for b in blocks if b.text)[:200]
            return family.write(View(facts.width, facts.height, (Element("text", WHOLE, text),)), kind, prompt)
        shown = (Element(block.label, WHOLE, block.text),)  # the block fills the crop
        return family.write(View(facts.width, facts.height, shown), kind, prompt)
    return family.write(view_of(blocks, facts), kind, prompt)


def view_of(blocks: list[LayoutBlock], facts: ImageFacts) -> View:
    """What an image shows, as a family's writer gets it: ``blocks`` (page fractions) in
    fractions of the image as received (turned back as the server had to turn it to
    recognise it), the turn that would make it upright, the page's number."""
    known = facts.known
    elements = tuple(
        Element(b.label, Box(*turned_box(b.box, facts.turned)) if facts.turned else Box(*b.box), b.text,
                FIGURE_DESCRIPTION if b.label == "image" else "")
        for b in blocks
    )
    rotation = ((known.rotation if known is not None else 0) - facts.turned) % 360
    number = known.index + 1 if known is not None and facts.region is None else None
    return View(facts.width, facts.height, elements, rotation=rotation, page_number=number)


def matches_any_aspect(family: Family, kind: str | None) -> bool:
    """Whether the image of this request may be a page resized to another shape."""
    return kind is not None and family.page_reshaped(kind)


def reads_rotation(family: Family, kind: str | None) -> bool:
    """Whether this family says how a page is turned (so the server must recognise it turned)."""
    return kind is not None and family.reports_rotation(kind)


def prompt_tokens(family: Family, width: int, height: int, prompt: str, tokens_per_char: float) -> int | None:
    """Prompt tokens of a request to ``family`` (None: the native family's own estimate applies)."""
    if family.name == NATIVE:
        return None
    pixels = min(width * height, family.serving.max_image_pixels)
    return math.ceil(pixels / family.serving.pixels_per_token) + math.ceil(len(prompt) * tokens_per_char) + 8


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
