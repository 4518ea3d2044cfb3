"""MinerU2.5 (opendatalab): two passes. The page resized to 1036 x 1036 gets its layout (boxes in
0..1000, a type and a rotation per block); then each block, cropped from the page, gets its own
request (text, table as OTSL, formula as LaTeX). Figures are cropped from their layout boxes.

Sources (docs/models.md, "MinerU2.5"): opendatalab/mineru-vl-utils ``mineru_vl_utils/mineru_client.py``
(prompts, sampling per block type, ``_layout_re``, ``_convert_bbox``, ``prepare_for_layout``,
``prepare_for_extract``, ``resize_by_need``), ``mineru_vl_utils/vlm_client/http_client.py``
(``build_request_body``), ``mineru_vl_utils/vlm_client/base_client.py`` (system prompt),
``mineru_vl_utils/structs.py`` (block types), ``mineru_vl_utils/post_process/__init__.py``;
opendatalab/MinerU ``mineru/model/vlm/vllm_server.py`` (the logits processor),
``mineru/utils/pdf_image_tools.py`` and ``mineru/utils/pdf_reader.py`` (200 DPI, 3500 px).
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass, field
from typing import Any

from llm_ocr.vlm.box import Box
from llm_ocr.vlm.families.base import (
    AnswerLike,
    Family,
    Outputs,
    PageInput,
    PageTools,
    Prompt,
    Reading,
    Rendering,
    Retries,
    Sampling,
    Serving,
    Source,
)
from llm_ocr.vlm.families.deepseek import VLLM_STREAM_EXTRA, VLLM_STREAM_OPTIONS
from llm_ocr.vlm.families.markup import display_math, html_to_otsl, otsl_to_html
from llm_ocr.vlm.layout import LayoutBuilder, PageLayout, Warnings, to_pixels
from llm_ocr.vlm.view import Element, View

SYSTEM_PROMPT = "You are a helpful assistant."
LAYOUT_PROMPT = "\nLayout Detection:"
PROMPTS = {"table": "\nTable Recognition:", "equation": "\nFormula Recognition:", "[default]": "\nText Recognition:"}
LAYOUT_SIZE = (1036, 1036)
MIN_IMAGE_EDGE = 28
#: vllm_xargs of every request: MinerU's logits processor blocks repeated 100-grams.
XARGS = {"no_repeat_ngram_size": 100, "debug": False}


def _sampling(presence: float, frequency: float) -> Sampling:
    return Sampling(
        temperature=0.0, top_p=0.01, top_k=1, presence_penalty=presence, frequency_penalty=frequency,
        repetition_penalty=1.0, extra={"vllm_xargs": XARGS, "skip_special_tokens": False},
    )  # fmt: skip


#: DEFAULT_SAMPLING_PARAMS of mineru_client.py, per pass and block type.
SAMPLING = {
    "layout": _sampling(0.0, 0.0),
    "table": _sampling(1.0, 0.005),
    "equation": _sampling(1.0, 0.05),
    "[default]": _sampling(1.0, 0.05),
}

_LAYOUT_LINE = re.compile(
    r"<\|box_start\|>(\d{1,5})\s+(\d{1,5})\s+(\d{1,5})\s+(\d{1,5})<\|box_end\|>"
    r"<\|ref_start\|>(\w{1,40}?)<\|ref_end\|>(<\|rotate_(?:up|right|down|left)\|>)?"
)
ANGLES = {"<|rotate_up|>": 0, "<|rotate_right|>": 90, "<|rotate_down|>": 180, "<|rotate_left|>": 270}
#: Blocks that get no second request: containers (their members do), and pictures, which are
#: cropped (image analysis is off by default in mineru-vl-utils).
NOT_READ = {"list", "equation_block", "image_block", "image", "chart"}
FIGURES = {"image", "chart"}
TITLES = {"title": "#", "doc_title": "#", "paragraph_title": "##"}
#: The layout pass's block type of each element a view shows (the writer's types).
TYPES = {"title": "title", "sub_title": "title", "text": "text", "image": "image",
         "image_caption": "image_caption", "table": "table", "equation": "equation"}  # fmt: skip


@dataclass
class LayoutBox:
    """One block of the layout pass: type, box in 0..1 of the page, rotation."""

    type: str
    box: Box
    angle: int | None = None
    text: str = ""
    read: bool = False
    notes: list[str] = field(default_factory=list)


def parse_layout_pass(text: str, warn: Warnings) -> list[LayoutBox]:
    """The blocks of a layout answer (``_layout_re`` and ``_convert_bbox``): boxes outside
    0..1000 or without area are skipped, corners put in order, ``unknown`` read as ``image``,
    inline formulas dropped."""
    out = []
    for match in _LAYOUT_LINE.finditer(text):
        coords = [int(match.group(i)) for i in range(1, 5)]
        if any(c < 0 or c > 1000 for c in coords):
            warn(f"layout box {coords} outside 0..1000: skipped")
            continue
        x1, x2 = sorted((coords[0], coords[2]))
        y1, y2 = sorted((coords[1], coords[3]))
        if x1 == x2 or y1 == y2:
            warn(f"layout box {coords} has no area: skipped")
            continue
        kind = match.group(5).lower()
        kind = "image" if kind == "unknown" else kind
        if kind == "inline_formula":
            continue
        out.append(LayoutBox(kind, Box(x1 / 1000, y1 / 1000, x2 / 1000, y2 / 1000), ANGLES.get(match.group(6) or "")))
    if not out and text.strip():
        warn("layout answer has no blocks")
    return out


#: Tokens of the layout request besides its answer: 1036 x 1036 px at 28 x 28 px per token
#: (1,369) plus the system message and the prompt.
LAYOUT_RESERVE = 1500


@dataclass(frozen=True)
class MinerU(Family):
    """MinerU2.5's two-pass recipe (mineru-vl-utils' ``MinerUClient``, http-client backend).

    mineru-vl-utils sends no ``max_tokens`` (vLLM grants the rest of the context); llm-ocr
    sends that rest itself, for each request from its image's size, so that a cut answer is
    known as one.
    """

    def prompt_reserve(self, context: int) -> int:
        return min(context // 2, LAYOUT_RESERVE)

    def budget(self, max_tokens: int, width: int, height: int) -> int:
        """The answer budget of a block request: what the layout request's leaves, less the
        block image's extra tokens (a crop can be larger than the 1036 px square)."""
        pixels = min(width * height, self.serving.max_image_pixels)
        extra = -(-pixels // self.serving.pixels_per_token) + 100 - LAYOUT_RESERVE
        return max(1, max_tokens - max(0, extra))

    def page_texts(self) -> tuple[str | None, ...]:
        return (LAYOUT_PROMPT, *PROMPTS.values())

    async def read(self, page: PageInput, tools: PageTools, max_tokens: int) -> Reading:
        warn = Warnings()
        square, _, _ = await tools.transform(page.image, size=LAYOUT_SIZE)
        layout_answer = await self._ask(tools, square, "image/png", LAYOUT_PROMPT, SAMPLING["layout"], max_tokens)
        boxes = parse_layout_pass(layout_answer.text, warn)
        pixels = [to_pixels(b.box, page.width, page.height, page.width, page.height) for b in boxes]
        # The blocks read one by one (index -> box in pixels): text, tables, formulas with a box.
        to_read = {i: px for i, (b, px) in enumerate(zip(boxes, pixels)) if b.type not in NOT_READ and px is not None}
        todo = list(to_read)
        crops = await tools.crop(page.image, list(to_read.values())) if todo else []

        async def one(index: int, crop: bytes) -> AnswerLike:
            block = boxes[index]
            angle = block.angle if block.angle in (90, 180, 270) else 0
            image, mime = crop, "image/png"
            width, height = int(to_read[index].width), int(to_read[index].height)
            if angle or min(width, height) < MIN_IMAGE_EDGE:
                # resize_by_need: a block turned upright as the layout said, small ones scaled up.
                image, width, height = await tools.transform(crop, rotate=angle, min_side=MIN_IMAGE_EDGE)
            kind = block.type if block.type in PROMPTS else "[default]"
            budget = self.budget(max_tokens, width, height)
            return await self._ask(tools, image, mime, PROMPTS[kind], SAMPLING[kind], budget)

        answers = await asyncio.gather(*(one(i, c) for i, c in zip(todo, crops)))
        for index, answer in zip(todo, answers):
            boxes[index].text, boxes[index].read = answer.text, True
        layout = self.assemble(boxes, pixels, page, warn)
        raw = layout_answer.result.text + "".join(
            f"\n<--- block {i + 1} ({boxes[i].type}) --->\n{a.result.text}" for i, a in zip(todo, answers)
        )
        return Reading(layout, [layout_answer, *answers], raw, page.image, page.width, page.height)

    async def _ask(
        self, tools: PageTools, image: bytes, mime: str, text: str, sampling: Sampling, max_tokens: int
    ) -> AnswerLike:
        return await tools.ask(
            lambda temperature, attempt: self.body(
                image, mime, temperature=temperature, max_tokens=max_tokens, attempt=attempt, text=text,
                sampling=sampling,
            ),
            self.retries,
        )

    def messages(self, image: bytes, mime: str, text: str | None = None,
                 system: str | None = None) -> list[dict[str, Any]]:
        return super().messages(image, mime, text, SYSTEM_PROMPT)

    def assemble(self, boxes: list[LayoutBox], pixels: list[Box | None], page: PageInput, warn: Warnings) -> PageLayout:
        """The page from its blocks in the layout's (reading) order, each block's text in the
        common forms: tables from OTSL to HTML, formulas as display math, titles as headings."""
        builder = LayoutBuilder(page.page, page.width, page.height, warn=warn)
        for block, px in zip(boxes, pixels):
            if block.type in FIGURES:
                builder.figure(block.type, px)
                continue
            text = block.text.strip()
            if block.type == "table":
                text = otsl_to_html(text) if "<" in text and "<table" not in text else text
            elif block.type == "equation":
                text = display_math(text)
            elif block.type in TITLES and text:
                text = f"{TITLES[block.type]} {text}"
            builder.text(block.type, [px] if px else [], text)
        return builder.build()

    def parse(self, text: str, *, width: int, height: int, page: int) -> PageLayout:
        """A layout answer alone (its blocks' boxes and types, no text): what one request shows."""
        warn = Warnings()
        boxes = parse_layout_pass(text, warn)
        pixels = [to_pixels(b.box, width, height, width, height) for b in boxes]
        return self.assemble(boxes, pixels, PageInput(b"", "", width, height, page), warn)

    def write(self, view: View, kind: str = "page", prompt: str | None = None) -> str:
        """The layout pass (``kind`` ``"layout"``): a line per element, its box in 0..1000 and
        its type, upright. A block pass: what the crop shows, as text, a table as OTSL, an
        equation as LaTeX."""
        if kind == "layout":
            lines = []
            for element in view.elements:
                x1, y1, x2, y2 = element.box.scaled(1000, 1000).rounded()
                lines.append(f"<|box_start|>{x1} {y1} {x2} {y2}<|box_end|><|ref_start|>"
                             f"{TYPES.get(element.label, 'text')}<|ref_end|><|rotate_up|>")
            return "\n".join(lines)
        return "\n".join(_block_answer(element) for element in view.elements)

    def page_reshaped(self, kind: str) -> bool:
        return kind == "layout"


def _block_answer(element: Element) -> str:
    """One block's answer to its recognition prompt."""
    if element.label == "table":
        return html_to_otsl(element.text)
    if element.label == "equation":
        return element.latex().replace("\\coloneqq", ":=")
    return element.text


MINERU = MinerU(
    # A dense page is read whole, as mineru-vl-utils' two_step_extract reads every page: its
    # layout pass answers a line per block (no text), then each block is read in a request of
    # its own, so no answer holds the page's text. Tiles would each be squashed into the
    # layout pass's 1036 px square for nothing (docs/models.md, "MinerU2.5").
    dense="blocks",
    name="mineru",
    title="MinerU2.5",
    patterns=(r"mineru",),
    models=("opendatalab/MinerU2.5-2509-1.2B", "opendatalab/MinerU2.5-Pro-2605-1.2B"),
    prompt=Prompt(LAYOUT_PROMPT, system=SYSTEM_PROMPT),
    sampling=SAMPLING["layout"],
    retries=Retries((0.0, 0.2, 0.4, 0.6, 0.8, 1.0)),
    rendering=Rendering(dpi=200.0, max_long_side=3500, image_format="png"),
    serving=Serving(
        args=("--logits-processors", "mineru_vl_utils:MinerULogitsProcessor"),
        context=16_384,
        # A 1.2B Qwen2-VL-style model: ~2.5 GB of weights; llm-ocr's estimate of its KV cache.
        weights_gib=5.0,
        kv_bytes_per_token=2 * 28 * 2 * 128 * 2,
        typical_seq_tokens=2500,
        needs="pip install mineru-vl-utils in vLLM's environment (its logits processor)",
    ),
    outputs=Outputs(boxes=True, figure_crops=True, html_tables=True, math=True,
                    notes="layout pass then one request per block; tables as OTSL"),
    sources=(
        Source("system 'You are a helpful assistant.'; image then text; layout prompt '\\nLayout Detection:' on the "
               "page resized to 1036 x 1036; blocks '\\nText Recognition:' / '\\nTable Recognition:' / "
               "'\\nFormula Recognition:' on crops from the page (turned upright, shorter side at least 28 px)",
               "opendatalab/mineru-vl-utils mineru_vl_utils/mineru_client.py (DEFAULT_PROMPTS, prepare_for_layout, "
               "prepare_for_extract, resize_by_need); vlm_client/base_client.py (DEFAULT_SYSTEM_PROMPT)"),
        Source("sampling: temperature 0, top_p 0.01, top_k 1, repetition_penalty 1.0; presence/frequency penalties "
               "1.0/0.05 (tables 1.0/0.005, layout 0/0); vllm_xargs no_repeat_ngram_size 100; skip_special_tokens "
               "false",
               "opendatalab/mineru-vl-utils mineru_client.py (DEFAULT_SAMPLING_PARAMS); vlm_client/http_client.py "
               "(build_request_body)"),
        Source("layout lines <|box_start|>x1 y1 x2 y2<|box_end|><|ref_start|>type<|ref_end|><|rotate_*|>, boxes "
               "0..1000; images and charts not read (image_analysis off)",
               "opendatalab/mineru-vl-utils mineru_client.py (_layout_re, _convert_bbox, ANGLE_MAPPING); structs.py"),
        Source("tables answer OTSL, converted to HTML; equations LaTeX",
               "opendatalab/mineru-vl-utils mineru_vl_utils/post_process/__init__.py, otsl2html.py"),
        Source("server: --logits-processors mineru_vl_utils:MinerULogitsProcessor",
               "opendatalab/MinerU mineru/model/vlm/vllm_server.py"),
        Source("PDFs at 200 DPI, longest side at most 3500 px",
               "opendatalab/MinerU mineru/utils/pdf_image_tools.py (DEFAULT_PDF_IMAGE_DPI), "
               "mineru/utils/pdf_reader.py"),
        Source("--max-model-len 16384", "opendatalab/MinerU docs/zh/usage/acceleration_cards/VastAI.md"),
    ),
    stream_options=VLLM_STREAM_OPTIONS,
    stream_extra=VLLM_STREAM_EXTRA,
)
