"""Nanonets-OCR2: Markdown with semantic tags, figures described inline in ``<img>`` tags.

The answer has no boxes, so no figure is cropped; what the model says a figure shows (its
caption, or its own short description) is kept where the figure was, as
``[Figure: description]``, in an ``image`` block (and the layout's ``figure_descriptions``
metadata). Describe has no
crop to caption, so it asks nothing more for these pages. ``<watermark>``, ``<page_number>`` and
``<signature>`` keep their text; tables are HTML and math LaTeX already.

Sources (docs/models.md, "Nanonets-OCR2"): the model card huggingface.co/nanonets/Nanonets-OCR2-3B;
allenai/olmocr ``olmocr/bench/runners/run_nanonetsocr_2.py``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from llm_ocr.vlm.families.base import Family, Outputs, Prompt, Rendering, Retries, Sampling, Serving, Source
from llm_ocr.vlm.families.generic import normalise_markdown
from llm_ocr.vlm.families.markup import brackets_to_dollars
from llm_ocr.vlm.layout import LayoutBuilder, PageLayout
from llm_ocr.vlm.view import View

#: The model card's prompt, verbatim.
NANONETS_PROMPT = (
    "Extract the text from the above document as if you were reading it naturally. Return the tables in html format. "
    "Return the equations in LaTeX representation. If there is an image in the document and image caption is not "
    "present, add a small description of the image inside the <img></img> tag; otherwise, add the image caption "
    "inside <img></img>. Watermarks should be wrapped in brackets. Ex: <watermark>OFFICIAL COPY</watermark>. Page "
    "numbers should be wrapped in brackets. Ex: <page_number>14</page_number> or <page_number>9/22</page_number>. "
    "Prefer using ☐ and ☑ for check boxes."
)
SYSTEM = "You are a helpful assistant."

_IMG = re.compile(r"<img\b[^>]{0,200}>(.{0,4000}?)</img>", re.DOTALL | re.IGNORECASE)
_TAGS = re.compile(r"</?(?:watermark|page_number|signature)>", re.IGNORECASE)
_PAGE_NUMBER = re.compile(r"<page_number>(.{0,200}?)</page_number>", re.DOTALL | re.IGNORECASE)


@dataclass(frozen=True)
class Nanonets(Family):
    """Markdown in parts: text between ``<img>`` tags, and each figure's description."""

    def parse(self, text: str, *, width: int, height: int, page: int) -> PageLayout:
        builder = LayoutBuilder(page, width, height)
        descriptions: list[str] = []
        pos = 0
        for match in _IMG.finditer(text):
            self._text(builder, text[pos : match.start()])
            description = " ".join(match.group(1).split())
            if description:
                descriptions.append(description)
                # No box: a block for the figure, its description where it stood.
                builder.text("image", [], f"[Figure: {description}]")
            pos = match.end()
        self._text(builder, text[pos:])
        return builder.build({"figure_descriptions": descriptions} if descriptions else None)

    def write(self, view: View, kind: str = "page", prompt: str | None = None) -> str:
        """Tagged Markdown: a figure as ``<img>`` holding its caption (the caption is not written
        again), or its description when it has none, as the prompt asks; ``$$`` display math;
        the page number last in ``<page_number>``."""
        parts = []
        for i, element in enumerate(view.elements):
            if element.label == "image":
                parts.append(f"<img>{view.caption_of(i) or element.description}</img>")
            elif view.captioned(i):
                continue
            elif element.text:
                parts.append(brackets_to_dollars(element.markdown()))
        if view.page_number is not None:
            parts.append(f"<page_number>{view.page_number}</page_number>")
        return "\n\n".join(parts)

    @staticmethod
    def _text(builder: LayoutBuilder, chunk: str) -> None:
        # A <page_number> the model tagged is a block of its own, labelled so: page furniture
        # (llm_ocr.stages.furniture); the number stays in the Markdown as its own paragraph.
        for i, part in enumerate(_PAGE_NUMBER.split(chunk)):
            part = _TAGS.sub("", part)
            if part.strip():
                builder.text("page_number" if i % 2 else "text", [], normalise_markdown(part))


NANONETS_OCR = Nanonets(
    dense="bands",  # text without boxes: bands joined by the text their overlap repeats
    name="nanonets",
    title="Nanonets-OCR2",
    patterns=("nanonets-ocr",),
    models=("nanonets/Nanonets-OCR2-3B", "nanonets/Nanonets-OCR2-1.5B-exp", "nanonets/Nanonets-OCR-s"),
    prompt=Prompt(NANONETS_PROMPT, system=SYSTEM, image_first=True),
    sampling=Sampling(temperature=0.0, max_tokens=15000),
    retries=Retries((0.0, 0.2, 0.4, 0.6, 0.8, 1.0)),
    rendering=Rendering(dpi=200.0, image_format="png"),
    serving=Serving(
        args=("--no-enable-prefix-caching", "--mm-processor-cache-gb", "0"),
        context=32768,
        weights_gib=8.0,
        kv_bytes_per_token=2 * 36 * 2 * 128 * 2,  # Qwen2.5-VL-3B: 36 layers, 2 KV heads of 128
        typical_seq_tokens=6000,
        pixels_per_token=28 * 28,
        max_image_pixels=12_845_056,
    ),
    outputs=Outputs(boxes=False, figure_crops=False, html_tables=True, math=True, figure_descriptions=True,
                    notes="figures described inline (<img>), no boxes; watermarks, page numbers tagged"),
    sources=(
        Source("system 'You are a helpful assistant.', then the image and the prompt (verbatim); "
               "greedy decoding, max_new_tokens 15000",
               "huggingface.co/nanonets/Nanonets-OCR2-3B (model card: transformers and vLLM usage)"),
        Source("the same prompt and message shape over vLLM's chat API, temperature 0; pages rendered "
               "with a 1280-px short side there (Nanonets-OCR2 cookbook)",
               "allenai/olmocr olmocr/bench/runners/run_nanonetsocr_2.py"),
        Source("<img> descriptions, <watermark>, <page_number>, <signature>, ☐/☑, HTML tables, $ / $$ LaTeX",
               "huggingface.co/nanonets/Nanonets-OCR2-3B (model card: features)"),
    ),
)
