"""dots.ocr and dots.mocr (rednote-hilab): a JSON list of layout cells, boxes in the pixels of
the image as the model's processor resized it.

Sources (docs/models.md, "dots.ocr and dots.mocr"): rednote-hilab/dots.ocr ``README.md`` (vLLM
serving), ``dots_ocr/utils/prompts.py`` (``prompt_layout_all_en``), ``dots_ocr/model/inference.py``,
``dots_ocr/parser.py``, ``dots_ocr/utils/consts.py``, ``dots_ocr/utils/image_utils.py``
(``smart_resize``), ``dots_ocr/utils/layout_utils.py`` (``post_process_cells``),
``dots_ocr/utils/format_transformer.py`` (``layoutjson2md``).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from llm_ocr.resizing import smart_resize
from llm_ocr.vlm.families.base import Family, Outputs, Prompt, Rendering, Retries, Sampling, Serving, Source
from llm_ocr.vlm.families.deepseek import VLLM_STREAM_EXTRA, VLLM_STREAM_OPTIONS
from llm_ocr.vlm.families.generic import normalise_markdown
from llm_ocr.vlm.families.markup import display_math
from llm_ocr.vlm.layout import LayoutBuilder, PageLayout, Warnings, to_pixels
from llm_ocr.vlm.view import View

#: prompt_layout_all_en, dots_ocr/utils/prompts.py.
LAYOUT_ALL_PROMPT = """Please output the layout information from the PDF image, including each layout element's bbox, its category, and the corresponding text content within the bbox.

1. Bbox format: [x1, y1, x2, y2]

2. Layout Categories: The possible categories are ['Caption', 'Footnote', 'Formula', 'List-item', 'Page-footer', 'Page-header', 'Picture', 'Section-header', 'Table', 'Text', 'Title'].

3. Text Extraction & Formatting Rules:
    - Picture: For the 'Picture' category, the text field should be omitted.
    - Formula: Format its text as LaTeX.
    - Table: Format its text as HTML.
    - All Others (Text, Title, etc.): Format their text as Markdown.

4. Constraints:
    - The output text must be the original text from the image, with no translation.
    - All layout elements must be sorted according to human reading order.

5. Final Output: The entire output must be a single JSON object.
"""  # noqa: E501 - the model's prompt, verbatim

#: inference.py puts these before the prompt: without them vLLM v1 inserts "\n" there.
IMAGE_TOKENS = "<|img|><|imgpad|><|endofimg|>"

#: dots_ocr/utils/consts.py: the processor's resize (Qwen2-VL's smart_resize).
IMAGE_FACTOR, MIN_PIXELS, MAX_PIXELS = 28, 3136, 11_289_600
_CELL = re.compile(r"\{[^{}]{0,200000}\}")
#: The prompt's layout category of each element a view shows (the writer's labels).
CATEGORIES = {"title": "Title", "sub_title": "Section-header", "text": "Text", "image": "Picture",
              "image_caption": "Caption", "table": "Table", "equation": "Formula"}  # fmt: skip


def resized(height: int, width: int) -> tuple[int, int]:
    """``(height, width)`` the model's processor resizes an image to (dots_ocr/utils/image_utils.py
    ``smart_resize`` with consts.py's bounds, capping again after raising a small image)."""
    return smart_resize(height, width, IMAGE_FACTOR, MIN_PIXELS, MAX_PIXELS, recap=True)


def cells_of(text: str, warn: Warnings) -> list[dict[str, object]]:
    """The layout cells of an answer: the JSON list, or, when it does not parse (cut short, a
    loop), every complete ``{...}`` cell found in it (dots' own fallback keeps the text too)."""
    body = text.strip()
    if body.startswith("```"):
        body = body.strip("`").removeprefix("json").strip()
    try:
        cells = json.loads(body)
        if isinstance(cells, dict):
            cells = [cells]
        if isinstance(cells, list):
            return [c for c in cells if isinstance(c, dict)]
    except json.JSONDecodeError:
        pass
    warn("answer is not a JSON list of cells: complete cells recovered")
    out = []
    for match in _CELL.finditer(body):
        try:
            cell = json.loads(match.group())
        except json.JSONDecodeError:
            continue
        if isinstance(cell, dict):
            out.append(cell)
    return out


@dataclass(frozen=True)
class DotsOCR(Family):
    """dots.ocr's layout-all recipe: every cell's bbox, category and text, in reading order."""

    def prompt_reserve(self, context: int) -> int:
        # Up to 14,400 image tokens (11,289,600 px / 28²) besides the 16,384-token answer.
        return min(context // 2, 16_384)

    def page_texts(self) -> tuple[str | None, ...]:
        return (self.prompt.text,)

    def parse(self, text: str, *, width: int, height: int, page: int) -> PageLayout:
        warn = Warnings()
        builder = LayoutBuilder(page, width, height, warn=warn)
        # Boxes are in pixels of the image after the processor's smart_resize: scale them back
        # (post_process_cells).
        rh, rw = resized(height, width)
        sx, sy = width / rw, height / rh
        for cell in cells_of(text, warn):
            category = str(cell.get("category") or "Text")
            bbox = cell.get("bbox")
            box = to_pixels(bbox, sx, sy, width, height) if isinstance(bbox, list) else None
            content = cell.get("text")
            content = content if isinstance(content, str) else ""
            if category == "Picture":
                builder.figure(category, box)
            elif category == "Formula":
                builder.text(category, [box] if box else [], display_math(content))
            elif category == "Table":
                builder.text(category, [box] if box else [], content.strip())
            else:
                builder.text(category, [box] if box else [], normalise_markdown(content))
        return builder.build()

    def write(self, view: View, kind: str = "page", prompt: str | None = None) -> str:
        """A JSON list of cells, boxes in pixels of the image as the processor resizes it; a
        Picture without text, a Formula as ``$$`` LaTeX, the rest Markdown."""
        rh, rw = resized(view.height, view.width)
        cells = []
        for element in view.elements:
            category = CATEGORIES.get(element.label, "Text")
            cell: dict[str, object] = {"bbox": list(element.box.scaled(rw, rh).rounded()), "category": category}
            if category == "Formula":
                cell["text"] = element.text.replace("\\[", "$$").replace("\\]", "$$").replace("\\coloneqq", ":=")
            elif category != "Picture":
                cell["text"] = element.markdown()
            cells.append(cell)
        return json.dumps(cells, ensure_ascii=False)


_SOURCES = (
    Source("prompt: prompt_layout_all_en", "rednote-hilab/dots.ocr dots_ocr/utils/prompts.py"),
    Source("one user message, the image then '<|img|><|imgpad|><|endofimg|>' + the prompt (else vLLM v1 adds a "
           "newline); PNG data URI", "rednote-hilab/dots.ocr dots_ocr/model/inference.py, "
                                     "dots_ocr/utils/image_utils.py "
           "(PILimage_to_base64)"),
    Source("temperature 0.1, top_p 1.0, max_completion_tokens 16384; PDFs at 200 DPI",
           "rednote-hilab/dots.ocr dots_ocr/parser.py (DotsOCRParser defaults and argument parser)"),
    Source("server: vllm serve ... --chat-template-content-format string --trust-remote-code (vLLM >= 0.11 has the "
           "model)", "rednote-hilab/dots.ocr README.md (vLLM inference)"),
    Source("boxes in pixels of the smart_resize'd image (factor 28, 3136..11,289,600 px), scaled back to the page",
           "rednote-hilab/dots.ocr dots_ocr/utils/consts.py, image_utils.py (smart_resize), layout_utils.py "
           "(post_process_cells)"),
    Source("Picture has no text, Formula is LaTeX, Table is HTML, the rest Markdown",
           "rednote-hilab/dots.ocr dots_ocr/utils/prompts.py, format_transformer.py (layoutjson2md)"),
)

DOTS_OCR = DotsOCR(
    dense="tiles",  # every block comes with its box: tiles joined by boxes
    name="dots-ocr",
    title="dots.ocr / dots.mocr",
    patterns=(r"dots[.\-_]?m?ocr",),
    models=("rednote-hilab/dots.mocr", "rednote-hilab/dots.ocr"),
    prompt=Prompt(IMAGE_TOKENS + LAYOUT_ALL_PROMPT),
    sampling=Sampling(temperature=0.1, top_p=1.0, max_tokens=16_384, token_fields=("max_completion_tokens",)),
    retries=Retries((0.1, 0.3, 0.5, 0.7, 0.9, 1.0)),
    rendering=Rendering(dpi=200.0, max_pixels=MAX_PIXELS, image_format="png"),
    serving=Serving(
        args=("--trust-remote-code", "--chat-template-content-format", "string"),
        context=32_768,
        # dots.mocr: a 3B Qwen2-style language model (dots.ocr: 1.7B) with a 1.2B vision encoder;
        # 28 layers, 2 KV heads of 128 in bf16 at most.
        weights_gib=12.0,
        kv_bytes_per_token=2 * 28 * 2 * 128 * 2,
        typical_seq_tokens=8000,
        max_image_pixels=MAX_PIXELS,
    ),
    outputs=Outputs(boxes=True, figure_crops=True, html_tables=True, math=True,
                    notes="JSON cells; boxes in pixels of its own resized image"),
    sources=_SOURCES,
    stream_options=VLLM_STREAM_OPTIONS,
    stream_extra=VLLM_STREAM_EXTRA,
)
