"""Qwen2.5-VL and Qwen3-VL, the generic VLMs, asked for the vendor's document-parsing HTML.

Qwen publishes no OCR recipe; its document-parsing cookbooks ask for "QwenVL HTML": the page
as HTML whose elements carry ``data-bbox="x1 y1 x2 y2"``, figures as ``<div class="image">``.
That gives llm-ocr boxes and figure crops from a general model. The two generations differ:

- Qwen2.5-VL: a system message naming the format, then the text ``QwenVL HTML`` *before* the
  image; boxes in pixels of the image the processor resized (``smart_resize``: sides rounded to
  multiples of 28, between 56 x 56 and 12,845,056 pixels).
- Qwen3-VL: the image then ``qwenvl html``, no system message; boxes normalised to 0..1000.

Sources (docs/models.md, "Qwen2.5-VL and Qwen3-VL"): QwenLM/Qwen2.5-VL
``cookbooks/document_parsing.ipynb``; QwenLM/Qwen3-VL ``cookbooks/document_parsing.ipynb`` and
``README.md``; vllm-project/recipes ``Qwen/Qwen2.5-VL.md``, ``Qwen/Qwen3-VL.md``.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from html.parser import HTMLParser

from llm_ocr.resizing import smart_resize
from llm_ocr.vlm.box import Box
from llm_ocr.vlm.families.base import Family, Outputs, Prompt, Rendering, Retries, Sampling, Serving, Source
from llm_ocr.vlm.families.markup import display_math, html_to_markdown
from llm_ocr.vlm.layout import LayoutBuilder, PageLayout, to_pixels
from llm_ocr.vlm.view import View

QWEN25_SYSTEM = (
    "You are an AI specialized in recognizing and extracting text from images. Your mission is to analyze the image "
    "document and generate the result in QwenVL Document Parser HTML format using specified tags while maintaining "
    "user privacy and data integrity."
)
QWEN25_PROMPT = "QwenVL HTML"
QWEN3_PROMPT = "qwenvl html"

#: Qwen2-VL's image processor defaults (transformers ``image_processing_qwen2_vl.py``,
#: Qwen/Qwen2.5-VL-*-Instruct ``preprocessor_config.json``).
PATCH_FACTOR = 28
MIN_PIXELS = 56 * 56
MAX_PIXELS = 12_845_056

_VOID = {"area", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "wbr"}
_BBOX = re.compile(r"^\s*(-?\d{1,6}(?:\.\d+)?)[\s,]+(-?\d{1,6}(?:\.\d+)?)[\s,]+(-?\d{1,6}(?:\.\d+)?)[\s,]+(-?\d{1,6}(?:\.\d+)?)\s*$")  # noqa: E501 - one regular expression
_FENCE = re.compile(r"^\s*```[a-zA-Z]*\s*\n?|\n?\s*```\s*$")


@dataclass
class HtmlBlock:
    """One top-level element that carries a ``data-bbox``."""

    tag: str
    classes: list[str]
    bbox: list[float] | None
    fragment: str  # the element's HTML


class _BlockSplitter(HTMLParser):
    """The outermost elements with a ``data-bbox`` attribute, each with its HTML (rebuilt)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.blocks: list[HtmlBlock] = []
        self._parts: list[str] = []
        self._depth = 0  # open elements inside the block being captured (0: none)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if self._depth:
            self._parts.append(self.get_starttag_text() or "")
            if tag not in _VOID:
                self._depth += 1
            return
        a = dict(attrs)
        if "data-bbox" not in a:
            return
        m = _BBOX.match(a.get("data-bbox") or "")
        self.blocks.append(HtmlBlock(tag, (a.get("class") or "").split(),
                                     [float(v) for v in m.groups()] if m else None, ""))
        self._parts = [self.get_starttag_text() or ""]
        if tag in _VOID:
            self.blocks[-1].fragment = self._parts[0]
        else:
            self._depth = 1

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if self._depth:
            self._parts.append(self.get_starttag_text() or "")
        else:
            self.handle_starttag(tag, attrs)
            if tag not in _VOID and self._depth:  # <div .../>: an empty element
                self._depth = 0
                self.blocks[-1].fragment = self._parts[0]

    def handle_endtag(self, tag: str) -> None:
        if not self._depth:
            return
        self._parts.append(f"</{tag}>")
        self._depth -= 1
        if not self._depth:
            self.blocks[-1].fragment = "".join(self._parts)

    def handle_data(self, data: str) -> None:
        if self._depth:
            self._parts.append(html.escape(data, quote=False))

    def close(self) -> None:
        super().close()
        if self._depth and self.blocks:  # an answer cut inside a block: keep what came
            self.blocks[-1].fragment = "".join(self._parts)
            self._depth = 0


def split_blocks(answer: str) -> list[HtmlBlock]:
    """The boxed blocks of a QwenVL HTML answer (code fences around it removed)."""
    parser = _BlockSplitter()
    try:
        parser.feed(_FENCE.sub("", answer))
        parser.close()
    except Exception:  # noqa: BLE001, S110 - HTMLParser is lenient; a broken answer keeps its blocks so far
        pass
    return parser.blocks


def _text_of(fragment: str) -> str:
    return " ".join(re.sub(r"<[^>]{0,500}>", " ", html.unescape(fragment)).split())


@dataclass(frozen=True)
class QwenVL(Family):
    """QwenVL HTML: each boxed element a block; image and chart elements are figures."""

    #: Boxes are 0..1000 of the image (Qwen3-VL); else pixels of the processor's resized image.
    normalised: bool = False

    def prompt_reserve(self, context: int) -> int:
        # The image (at most the rendering's pixel cap, one token per merged patch) and the prompt.
        pixels = self.rendering.max_pixels or self.serving.max_image_pixels
        return pixels // self.serving.pixels_per_token + 512

    def box_space(self, width: int, height: int) -> tuple[int, int]:
        """``(width, height)`` of the space the answer's boxes are in for a ``width`` x ``height``
        image: 1000 x 1000 (Qwen3-VL), else the image as the processor resized it."""
        if self.normalised:
            return 1000, 1000
        rh, rw = smart_resize(height, width, PATCH_FACTOR, MIN_PIXELS, MAX_PIXELS)
        return rw, rh

    def scale(self, width: int, height: int) -> tuple[float, float]:
        """Factors from the answer's box space to pixels of the ``width`` x ``height`` image."""
        bw, bh = self.box_space(width, height)
        return width / bw, height / bh

    def parse(self, text: str, *, width: int, height: int, page: int) -> PageLayout:
        builder = LayoutBuilder(page, width, height)
        sx, sy = self.scale(width, height)
        blocks = split_blocks(text)
        if not blocks and text.strip():
            # No QwenVL HTML at all (a model that answered in prose or Markdown): keep the text.
            markdown, _ = html_to_markdown(_FENCE.sub("", text))
            builder.text("text", [], markdown)
            builder.warn("no data-bbox element in the answer: text kept without boxes")
            return builder.build()
        for block in blocks:
            box = to_pixels(block.bbox, sx, sy, width, height) if block.bbox else None
            boxes = [box] if box else []
            if block.tag == "img" or "image" in block.classes or "chart" in block.classes:
                caption = _text_of(block.fragment) if "caption" in block.classes else ""
                builder.figure("chart" if "chart" in block.classes else "image", box, caption or None)
            elif "formula" in block.classes or block.tag == "math":
                builder.text("equation", boxes, display_math(_text_of(block.fragment)))
            else:
                markdown, _ = html_to_markdown(block.fragment)
                label = "title" if block.tag in ("h1", "h2") else "table" if block.tag == "table" else "text"
                builder.text(label, boxes, markdown)
        return builder.build()

    def write(self, view: View, kind: str = "page", prompt: str | None = None) -> str:
        """QwenVL HTML in a code fence: each element with its ``data-bbox`` (in the answer's box
        space, :meth:`scale`), headings ``<h1>``/``<h2>``, a figure as ``<div class="image">``
        with its caption after it, a formula as ``<div class="formula">``."""
        bw, bh = self.box_space(view.width, view.height)

        def bbox(box: Box) -> str:
            scaled = box.scaled(bw, bh).rounded()
            return " ".join(str(v) for v in (scaled.clamped(bw, bh) if self.normalised else scaled))

        rows = []
        for i, element in enumerate(view.elements):
            where = bbox(element.box)
            if element.label == "image":
                rows.append(f'<div class="image" data-bbox="{where}"><img data-bbox="{where}"/></div>')
                if view.caption_of(i):
                    after = view.elements[i + 1]
                    rows.append(f'<p data-bbox="{bbox(after.box)}">{html.escape(after.text)}</p>')
            elif view.captioned(i):
                continue
            elif element.label in ("title", "sub_title"):
                tag = "h1" if element.label == "title" else "h2"
                rows.append(f'<{tag} data-bbox="{where}">{html.escape(element.text)}</{tag}>')
            elif element.label == "table":
                rows.append(element.text.replace("<table>", f'<table data-bbox="{where}">', 1))
            elif element.label == "equation":
                rows.append(f'<div class="formula" data-bbox="{where}">{html.escape(element.latex())}</div>')
            elif element.text:
                rows.append(f'<p data-bbox="{where}">{html.escape(element.text)}</p>')
        return "```html\n<html><body>\n" + " \n ".join(rows) + "\n</body></html>\n```"


_SERVING_ARGS = ("--no-enable-prefix-caching", "--mm-processor-cache-gb", "0")
_OUTPUTS = dict(boxes=True, figure_crops=True, html_tables=True, math=True)

QWEN25_VL = QwenVL(
    dense="tiles",  # every block comes with its box: tiles joined by boxes
    name="qwen2.5-vl",
    title="Qwen2.5-VL",
    patterns=(r"qwen2\.5-vl",),
    models=("Qwen/Qwen2.5-VL-3B-Instruct", "Qwen/Qwen2.5-VL-7B-Instruct", "Qwen/Qwen2.5-VL-72B-Instruct"),
    prompt=Prompt(QWEN25_PROMPT, system=QWEN25_SYSTEM, image_first=False),
    sampling=Sampling(temperature=0.0),
    retries=Retries((0.0, 0.2, 0.4, 0.6, 0.8, 1.0)),
    # The cookbook's API call bounds the image to 2048 x 28 x 28 pixels.
    rendering=Rendering(dpi=144.0, max_pixels=2048 * 28 * 28, image_format="png"),
    serving=Serving(args=_SERVING_ARGS, context=32768, weights_gib=17.0, kv_bytes_per_token=2 * 28 * 4 * 128 * 2,
                    typical_seq_tokens=5000, pixels_per_token=28 * 28, max_image_pixels=MAX_PIXELS),
    outputs=Outputs(**_OUTPUTS, notes="QwenVL HTML; boxes in pixels of the processor's resized image"),
    sources=(
        Source("system message naming the QwenVL Document Parser HTML format, then the text 'QwenVL HTML' "
               "before the image; up to 32000 new tokens",
               "QwenLM/Qwen2.5-VL cookbooks/document_parsing.ipynb (inference, section 1)"),
        Source("data-bbox in pixels of the resized image (image_grid_thw x 14); min/max pixels 512/2048 x 28 x 28 "
               "in the API example", "QwenLM/Qwen2.5-VL cookbooks/document_parsing.ipynb (draw_bbox, "
                                     "inference_with_api)"),
        Source("smart_resize: sides multiples of 28, 56 x 56 to 12,845,056 pixels",
               "huggingface/transformers models/qwen2_vl/image_processing_qwen2_vl.py"),
        Source("serving: --limit-mm-per-prompt, --max-model-len to bound memory (128K context)",
               "vllm-project/recipes Qwen/Qwen2.5-VL.md"),
    ),
)

QWEN3_VL = QwenVL(
    dense="tiles",  # every block comes with its box: tiles joined by boxes
    name="qwen3-vl",
    title="Qwen3-VL",
    patterns=(r"qwen3-vl",),
    models=("Qwen/Qwen3-VL-2B-Instruct", "Qwen/Qwen3-VL-8B-Instruct", "Qwen/Qwen3-VL-235B-A22B-Instruct"),
    prompt=Prompt(QWEN3_PROMPT),
    sampling=Sampling(temperature=0.0),
    retries=Retries((0.0, 0.2, 0.4, 0.6, 0.8, 1.0)),
    rendering=Rendering(dpi=144.0, max_pixels=2048 * 32 * 32, image_format="png"),
    serving=Serving(args=_SERVING_ARGS, context=32768, weights_gib=18.0, kv_bytes_per_token=2 * 36 * 8 * 128 * 2,
                    typical_seq_tokens=5000, pixels_per_token=32 * 32, max_image_pixels=16_777_216),
    normalised=True,
    outputs=Outputs(**_OUTPUTS, notes="QwenVL HTML; boxes 0..1000 of the image"),
    sources=(
        Source("the image, then the text 'qwenvl html'; min/max pixels 512/2048 x 32 x 32",
               "QwenLM/Qwen3-VL cookbooks/document_parsing.ipynb (example 1, inference_with_api)"),
        Source("data-bbox relative 0..1000 (x / 1000 * width)",
               "QwenLM/Qwen3-VL cookbooks/document_parsing.ipynb (draw_bbox)"),
        Source("greedy decoding in the vLLM example (temperature 0)", "QwenLM/Qwen3-VL README.md (Offline Inference)"),
        Source("serving: --mm-processor-cache-gb 0 for unique images, --limit-mm-per-prompt.video 0",
               "vllm-project/recipes Qwen/Qwen3-VL.md (Configuration Tips)"),
    ),
)
