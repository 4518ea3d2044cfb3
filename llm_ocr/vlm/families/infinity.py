"""Infinity-Parser2 (INF, Pro and Flash): a JSON list of layout elements, boxes on 0..1000.

The request is the authors' ``doc2json`` task as their vLLM-server backend sends it: one user
message, the page image then ``PROMPT_DOC2JSON``; temperature 0, top_p 1, 32,768 tokens at most,
``chat_template_kwargs: {"enable_thinking": false}``. The answer is a JSON list (often in a
```` ```json ```` fence) of ``{"bbox": [x1, y1, x2, y2], "category", "text"}`` in reading order,
boxes normalised to 0..1000 of the image; a ``figure`` has no text, a ``formula`` is LaTeX, a
``table`` HTML, the rest Markdown. An answer cut short keeps its complete elements (the authors'
``truncate_last_incomplete_element`` does the same).

Pro (a 35B mixture of experts) and Flash share the recipe; the memory figures below are Pro's.

Sources (docs/models.md, "Infinity-Parser2"): infly-ai/INF-MLLM ``Infinity-Parser2/README.md``,
``infinity_parser2/prompts.py``, ``backends/vllm_server.py``, ``utils/image.py``, ``utils/pdf.py``,
``utils/utils.py``, ``evaluation/olmocr-bench/README.md``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from llm_ocr.vlm.families.base import Family, Images, Outputs, Prompt, Rendering, Retries, Sampling, Serving, Source
from llm_ocr.vlm.families.deepseek import VLLM_STREAM_EXTRA, VLLM_STREAM_OPTIONS
from llm_ocr.vlm.families.dots import cells_of
from llm_ocr.vlm.families.generic import normalise_markdown
from llm_ocr.vlm.families.markup import display_math
from llm_ocr.vlm.layout import LayoutBuilder, PageLayout, Warnings, to_pixels
from llm_ocr.vlm.view import Element, View

#: PROMPT_DOC2JSON, infinity_parser2/prompts.py (verbatim: it starts and ends with a newline).
DOC2JSON_PROMPT = """
- Extract layout information from the provided PDF image.
- For each layout element, output its bbox, category, and the text content within the bbox.
- Bbox format: [x1, y1, x2, y2].
- Allowed layout categories: ['header', 'title', 'text', 'figure', 'table', 'formula', 'figure_caption', 'table_caption', 'formula_caption', 'figure_footnote', 'table_footnote', 'page_footnote', 'footer'].
- Text extraction and formatting:
  1) For 'figure', the text field must be an empty string.
  2) For 'formula', format text as LaTeX.
  3) For 'table', format text as HTML.
  4) For all other categories (e.g., text, title), format text as Markdown.
- The output text must be exactly the original text from the image, with no translation or rewriting.
- Sort all layout elements in human reading order.
- Final output must be a single JSON object.
"""  # noqa: E501 - the model's prompt, verbatim

#: The image bounds of the authors' client (utils/image.py: smart_resize with factor 32 between these).
MIN_PIXELS, MAX_PIXELS = 2048, 16_777_216
_HEADING = re.compile(r"^[ \t]*#{1,6}[ \t]+")
#: The prompt's category of each element a view shows (the writer's labels).
CATEGORIES = {"title": "title", "sub_title": "title", "text": "text", "image": "figure",
              "image_caption": "figure_caption", "table": "table", "equation": "formula"}  # fmt: skip


@dataclass(frozen=True)
class InfinityParser2(Family):
    """Infinity-Parser2's doc2json answer: elements with 0..1000 boxes, in reading order."""

    def prompt_reserve(self, context: int) -> int:
        # Up to 16,384 image tokens (16,777,216 px / 32²) besides the prompt.
        return min(context // 2, MAX_PIXELS // (32 * 32) + 512)

    def parse(self, text: str, *, width: int, height: int, page: int) -> PageLayout:
        warn = Warnings()
        builder = LayoutBuilder(page, width, height, warn=warn)
        for cell in cells_of(text, warn):
            category = str(cell.get("category") or "text")
            bbox = cell.get("bbox")
            box = to_pixels(bbox, width / 1000, height / 1000, width, height) if isinstance(bbox, list) else None
            content = cell.get("text")
            content = content if isinstance(content, str) else ""
            if category == "figure":
                builder.figure(category, box, markdown=normalise_markdown(content))
            elif category == "formula":
                builder.text(category, [box] if box else [], display_math(content))
            elif category == "table":
                builder.text(category, [box] if box else [], content.strip())
            else:
                if category == "title" and content.strip() and not _HEADING.match(content):
                    content = "# " + content.strip()
                builder.text(category, [box] if box else [], normalise_markdown(content))
        return builder.build()

    def write(self, view: View, kind: str = "page", prompt: str | None = None) -> str:
        """A ```` ```json ```` fenced list of elements, boxes on 0..1000 of the image; a figure's
        text empty, a formula's bare LaTeX, headings with their ``#``."""
        cells = [{"bbox": list(e.box.scaled(1000, 1000).rounded().clamped(1000, 1000)),
                  "category": CATEGORIES.get(e.label, "text"), "text": _text(e)} for e in view.elements]
        return "```json\n" + json.dumps(cells, ensure_ascii=False) + "\n```"


def _text(element: Element) -> str:
    if element.label == "image":
        return ""
    if element.label == "equation":
        return element.latex()
    return element.markdown()


_SOURCES = (
    Source("doc2json: one user message, the image then PROMPT_DOC2JSON; temperature 0.0, top_p 1.0, max_tokens "
           "32768, chat_template_kwargs enable_thinking false",
           "infly-ai/INF-MLLM Infinity-Parser2/infinity_parser2/prompts.py, backends/vllm_server.py (parse_batch)"),
    Source("images resized (smart_resize, factor 32) to 2,048 .. 16,777,216 pixels and sent as PNG; PDFs rendered "
           "at 300 DPI", "infly-ai/INF-MLLM Infinity-Parser2/infinity_parser2/utils/image.py, utils/pdf.py"),
    Source("answer: a JSON list (in a ```json fence or not) of bbox/category/text; boxes normalised to 0..1000 and "
           "restored as x / 1000 * width; a cut answer is truncated to its last complete element; header, footer "
           "and page_footnote left out of the authors' Markdown",
           "infly-ai/INF-MLLM Infinity-Parser2/infinity_parser2/utils/utils.py (extract_json_content, "
           "truncate_last_incomplete_element, restore_abs_bbox_coordinates, convert_json_to_markdown)"),
    Source("vllm serve --trust-remote-code --reasoning-parser qwen3 --max-model-len 65536 --mm-encoder-tp-mode data "
           "--mm-processor-cache-type shm --enable-prefix-caching (--tensor-parallel-size 2 for Pro); vLLM 0.17.1",
           "infly-ai/INF-MLLM Infinity-Parser2/README.md (To start a vLLM server, Pre-requisites), "
           "evaluation/olmocr-bench/README.md"),
    Source("the checkpoint's tokenizer needs transformers 5: vLLM 0.17.1 with transformers 5.3.0",
           "lightonai/LightOnOCR benchmarks/docker/infinity-parser2.Dockerfile (a third party's run)"),
)

INFINITY_PARSER2 = InfinityParser2(
    dense="tiles",  # every block comes with its box: tiles joined by boxes
    name="infinity-parser2",
    title="Infinity-Parser2",
    patterns=(r"infinity-parser2",),
    models=("infly/Infinity-Parser2-Pro", "infly/Infinity-Parser2-Flash"),
    prompt=Prompt(DOC2JSON_PROMPT),
    sampling=Sampling(temperature=0.0, top_p=1.0, max_tokens=32_768,
                      extra={"chat_template_kwargs": {"enable_thinking": False}}),
    retries=Retries((0.0, 0.2, 0.4, 0.6, 0.8, 1.0)),
    # The client's encode_image_to_base64: every image resized (smart_resize, factor 32) then sent.
    rendering=Rendering(dpi=300.0, max_pixels=MAX_PIXELS, multiple=32, min_pixels=MIN_PIXELS, image_format="png"),
    serving=Serving(
        args=(
            "--trust-remote-code",
            "--reasoning-parser", "qwen3",
            "--mm-encoder-tp-mode", "data",
            "--mm-processor-cache-type", "shm",
            "--enable-prefix-caching",
        ),
        context=65_536,
        # Pro: 35B parameters in bf16 (the authors serve it on two GPUs); KV as if all 40 layers
        # kept 2 KV heads of 256 (an upper bound: Qwen3.5's linear-attention layers keep none).
        # llm-ocr's estimates; Flash is smaller.
        weights_gib=72.0,
        kv_bytes_per_token=2 * 40 * 2 * 256 * 2,
        typical_seq_tokens=12_000,
        pixels_per_token=32 * 32,  # Qwen3.5's 16-px patches merged 2 x 2
        max_image_pixels=MAX_PIXELS,
    ),
    outputs=Outputs(boxes=True, figure_crops=True, html_tables=True, math=True,
                    notes="JSON elements; boxes 0..1000 of the image"),
    sources=_SOURCES,
    stream_options=VLLM_STREAM_OPTIONS,
    stream_extra=VLLM_STREAM_EXTRA,
    images=Images(missing=(
        "Infinity-Parser2 runs on vLLM 0.17.1 with transformers 5.3.0, which no stock image has: build one FROM "
        "vllm/vllm-openai:v0.17.1 with RUN pip install transformers==5.3.0 (lightonai/LightOnOCR "
        "benchmarks/docker/infinity-parser2.Dockerfile) plus llm-ocr (hf-jobs/Dockerfile shows how)"
    )),
)
