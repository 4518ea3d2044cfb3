"""LightOnOCR-3 in grounding mode: the page image and the word ``grounding``; every layout block
comes back boxed.

LightOnOCR-3 (0.8B, 1B, 4B) answers the image alone with Markdown, and the image plus the text
``grounding`` with the same Markdown where a marker ``![label](x1,y1,x2,y2)`` opens every layout
block, coordinates on 0..1000 of the image whatever its size. A block's text runs to the next
marker (a table or a list spans lines); ``text+`` continues the block before it (a paragraph
running on into the next column). Labels: ``title`` (its text carries its own ``#``), ``section``,
``text``, ``list``, ``caption``, ``footnote``, ``aside_text``, ``header``, ``footer``,
``page_number``, ``table`` (HTML), ``chart`` (its data as an HTML table), ``formula`` (LaTeX),
``code``, ``image`` (a short description). llm-ocr reads it in grounding mode: the mode of the
authors' olmOCR-bench runs, and the one that gives every block a box and every figure a crop.

The 0.8B and 4B models (Qwen3.5-based) take pages at 2048 px on the longer side and a
18,000-token context; the 1B (Pixtral encoder) 1540 px and 16,384 tokens: two families.

Sources (docs/models.md, "LightOnOCR-3"): lightonai/LightOnOCR ``README.md`` (Models, Modes,
Grounding output, Tips), ``lightonocr/client.py``, ``lightonocr/models.py``,
``lightonocr/grounding.py``, ``lightonocr/render.py``, ``benchmarks/ocr_bench/config.py`` and
``benchmarks/ocr_bench/providers/__init__.py``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from llm_ocr.vlm.families.base import (
    Family,
    Images,
    Outputs,
    Prompt,
    Rendering,
    Retries,
    Sampling,
    Serving,
    ServingImage,
    Source,
)
from llm_ocr.vlm.families.deepseek import VLLM_STREAM_EXTRA, VLLM_STREAM_OPTIONS
from llm_ocr.vlm.families.generic import normalise_markdown
from llm_ocr.vlm.families.markup import brackets_to_dollars, display_math
from llm_ocr.vlm.layout import LayoutBuilder, PageLayout, Warnings, to_pixels
from llm_ocr.vlm.view import Element, View

#: The grounding prompt (lightonocr/grounding.py, GROUNDING_PROMPT).
GROUNDING_PROMPT = "grounding"
#: Sent with every request: the 0.8B and 4B were trained without thinking, and other chat
#: templates ignore the flag (lightonocr/client.py).
NO_THINKING = {"chat_template_kwargs": {"enable_thinking": False}}

#: A block marker: ``![label](x1,y1,x2,y2)``, ``+`` after the label for a continued block
#: (the marker of lightonocr/grounding.py; bounded so a broken answer cannot backtrack far).
_MARKER = re.compile(
    r"!\[([A-Za-z_][\w-]{0,63}?)(\+?)\]\(\s*(\d{1,5})\s*,\s*(\d{1,5})\s*,\s*(\d{1,5})\s*,\s*(\d{1,5})\s*\)[ \t]*"
)
_HEADING = re.compile(r"^[ \t]*#{1,6}[ \t]+")
#: The label the model gives each element a view shows (the writer's labels).
LABELS = {"title": "title", "sub_title": "title", "text": "text", "image_caption": "caption", "table": "table",
          "equation": "formula", "image": "image"}  # fmt: skip


@dataclass(frozen=True)
class LightOnOCR3(Family):
    """LightOnOCR-3's grounding answer: one block per marker, boxes on 0..1000 of the image."""

    def prompt_reserve(self, context: int) -> int:
        # The image's tokens: at most (longest edge / pixels per token side) squared, plus the
        # prompt; the model takes the image as sent (no further resize: lightonocr/render.py).
        side = self.rendering.long_side or 2048
        per_token = int(self.serving.pixels_per_token**0.5)
        return min(context // 2, (side // per_token + 1) ** 2 + 64)

    def parse(self, text: str, *, width: int, height: int, page: int) -> PageLayout:
        warn = Warnings()
        builder = LayoutBuilder(page, width, height, warn=warn)
        marks = list(_MARKER.finditer(text))
        head = text[: marks[0].start()] if marks else text
        if head.strip():
            if marks:
                warn("text before the first block marker kept as a block without a box")
            else:
                warn("no grounding block markers: the answer is kept as one block without a box")
            builder.text("text", [], normalise_markdown(head))
        for i, mark in enumerate(marks):
            end = marks[i + 1].start() if i + 1 < len(marks) else len(text)
            label, plus = mark.group(1), mark.group(2) == "+"
            content = text[mark.end() : end].strip()
            box = to_pixels([int(mark.group(k)) for k in range(3, 7)], width / 1000, height / 1000, width, height)
            boxes = [box] if box else []
            if label in ("image", "chart"):
                # An image's text is a short description; a chart's is its data as an HTML table.
                described = label == "image"
                builder.figure(label, box, description=content if described else None,
                               markdown="" if described else normalise_markdown(content))
            elif plus:
                builder.continued(label + "+", boxes, _block_markdown(label, content))
            else:
                builder.text(label, boxes, _block_markdown(label, content))
        return builder.build()

    def write(self, view: View, kind: str = "page", prompt: str | None = None) -> str:
        """A marker ``![label](x1,y1,x2,y2)`` (0..1000 of the image) before each block's text:
        headings with their ``#``, a table's HTML on the lines after its marker, a formula's
        LaTeX between ``$$``, a figure's description."""
        lines = []
        for element in view.elements:
            label = LABELS.get(element.label, "text")
            box = ",".join(str(v) for v in element.box.scaled(1000, 1000).rounded().clamped(1000, 1000))
            lines.append(f"![{label}]({box}) {_element_text(element)}".rstrip())
        return "\n".join(lines)


def _block_markdown(label: str, content: str) -> str:
    """A block's Markdown in the common forms: a title or section without a ``#`` gets one (the
    model writes its headings' own ``#`` most of the time), a formula becomes display math, code
    is fenced, tables stay HTML."""
    if label == "formula":
        return display_math(content)
    if label == "code":
        return content if content.lstrip().startswith("```") else f"```\n{content}\n```"
    if label in ("title", "section") and content and not _HEADING.match(content):
        content = ("# " if label == "title" else "## ") + content
    return normalise_markdown(content)


def _element_text(element: Element) -> str:
    if element.label == "image":
        return element.description
    if element.label == "equation":
        return f"$$\n{element.latex()}\n$$"
    if element.label == "table":
        return "\n" + element.text
    return brackets_to_dollars(element.markdown())


_SAMPLING = Sampling(temperature=0.1, top_p=1.0, max_tokens=12_288, extra=NO_THINKING)
_RETRIES = Retries((0.1, 0.3, 0.5, 0.7, 0.9, 1.0))
_OUTPUTS = Outputs(boxes=True, figure_crops=True, html_tables=True, math=True, figure_descriptions=True,
                   notes="grounding mode: a box on 0..1000 before every block; images described, charts as "
                         "data tables")  # fmt: skip
_SERVER_FLAGS = ("--mm-processor-cache-gb", "0", "--no-enable-prefix-caching")
#: vLLM 0.30.0 with the transformers its image ships (5.17): the 0.8B and 4B run on it as it is.
VLLM_0_30 = ServingImage(
    "vllm/vllm-openai:v0.30.0", "0.30.0", (13, 0),
    "lightonai/LightOnOCR benchmarks/ocr_bench/config.py (the LightOnOCR server image); CUDA 13.0: vLLM's default "
    "Docker build since v0.20 (vllm-project/vllm#42738)",
)  # fmt: skip
_PIN = ("the vllm extra pins vLLM 0.30.0 with transformers 5.16.1; 'vLLM 0.27.1 makes every model loop'",
        "lightonai/LightOnOCR README.md (vLLM version); benchmarks/ocr_bench/config.py")
_SOURCES = (
    Source("grounding: one user message, the page image then the text 'grounding'; plain mode is the image alone",
           "lightonai/LightOnOCR README.md (Modes), lightonocr/client.py (LightOnOCR.ocr), lightonocr/grounding.py"),
    Source("temperature 0.1 ('Use temperature 0.1, not greedy decoding'; the client's own default is 0.2), top_p "
           "1.0 for generation 3, chat_template_kwargs enable_thinking false",
           "lightonai/LightOnOCR README.md (Tips, Python), lightonocr/client.py, lightonocr/models.py (profile)"),
    Source("max_tokens 12288 and temperature 0.1: the authors' olmOCR-bench and ParseBench pipeline",
           "lightonai/LightOnOCR benchmarks/ocr_bench/providers/__init__.py (loocr_grounding_parse_with_layout)"),
    Source("answer: '![label](x1,y1,x2,y2) text' per block, 0..1000 whatever the image size, text up to the next "
           "marker, 'label+' continues the previous block; labels title, section, text, list, caption, footnote, "
           "aside_text, header, footer, page_number, table, chart (an HTML data table), formula, code, image",
           "lightonai/LightOnOCR README.md (Grounding output), lightonocr/grounding.py"),
    Source("pages rendered with their longest edge at the model's size (never upscaled for images); the model "
           "applies no further resizing", "lightonai/LightOnOCR lightonocr/render.py, lightonocr/models.py"),
    Source(*_PIN),
)

LIGHTON_OCR_3_1B = LightOnOCR3(
    dense="tiles",  # every block comes with its box: tiles joined by boxes
    name="lightonocr-3-1b",
    title="LightOnOCR-3 1B",
    patterns=(r"lightonocr-3-1b",),
    models=("lightonai/LightOnOCR-3-1B",),
    prompt=Prompt(GROUNDING_PROMPT),
    sampling=_SAMPLING,
    retries=_RETRIES,
    rendering=Rendering(long_side=1540, image_format="png"),
    serving=Serving(
        args=_SERVER_FLAGS,
        context=16_384,
        weights_gib=3.0,
        kv_bytes_per_token=2 * 28 * 8 * 128 * 2,  # Qwen3 decoder, as LightOnOCR-2's: 28 layers, 8 KV heads of 128
        typical_seq_tokens=6000,
        pixels_per_token=28 * 28,  # Pixtral's 14-px patches merged 2 x 2
        max_image_pixels=1540 * 1540,
    ),
    outputs=_OUTPUTS,
    sources=(
        *_SOURCES,
        Source("LightOnOCR-3-1B: 1540 px pages (Pixtral encoder), --max-model-len 16384 --mm-processor-cache-gb 0 "
               "--no-enable-prefix-caching, --limit-mm-per-prompt '{\"image\": 1}'",
               "lightonai/LightOnOCR README.md (Models, Quick start), lightonocr/models.py"),
        Source("the 1B needs transformers 5.16.1 on vLLM 0.30.0 (5.17, the image's, renamed PixtralRotaryEmbedding)",
               "lightonai/LightOnOCR README.md (vLLM version), benchmarks/docker/lightonocr-1b.Dockerfile"),
    ),
    stream_options=VLLM_STREAM_OPTIONS,
    stream_extra=VLLM_STREAM_EXTRA,
    images=Images(missing=(
        "LightOnOCR-3-1B needs vLLM 0.30.0 with transformers 5.16.1, which no stock image has: build one "
        "FROM vllm/vllm-openai:v0.30.0 with RUN pip install transformers==5.16.1 (lightonai/LightOnOCR "
        "benchmarks/docker/lightonocr-1b.Dockerfile) plus llm-ocr (hf-jobs/Dockerfile shows how)"
    )),
)

LIGHTON_OCR_3 = LightOnOCR3(
    dense="tiles",  # every block comes with its box: tiles joined by boxes
    name="lightonocr-3",
    title="LightOnOCR-3",
    # The 0.8B and 4B; the client treats a name it does not know as LightOnOCR-3 at 2048 px too.
    patterns=(r"lightonocr-3",),
    models=("lightonai/LightOnOCR-3-4B", "lightonai/LightOnOCR-3-0.8B"),
    prompt=Prompt(GROUNDING_PROMPT),
    sampling=_SAMPLING,
    retries=_RETRIES,
    rendering=Rendering(long_side=2048, image_format="png"),
    serving=Serving(
        args=(*_SERVER_FLAGS, "--default-chat-template-kwargs", json.dumps({"enable_thinking": False})),
        context=18_000,
        # Sized for the 4B (Qwen3.5-based): about 9 GiB of bf16 weights with its vision encoder
        # and activations; KV as a 36-layer decoder with 8 KV heads of 128 (an upper bound: the
        # Qwen3.5 decoders keep a KV cache in only some of their layers). llm-ocr's estimates.
        weights_gib=12.0,
        kv_bytes_per_token=2 * 36 * 8 * 128 * 2,
        typical_seq_tokens=7000,
        pixels_per_token=32 * 32,  # Qwen3.5's 16-px patches merged 2 x 2
        max_image_pixels=2048 * 2048,
    ),
    outputs=_OUTPUTS,
    sources=(
        *_SOURCES,
        Source("LightOnOCR-3-0.8B and -4B: 2048 px pages, --max-model-len 18000 --default-chat-template-kwargs "
               "'{\"enable_thinking\": false}' --mm-processor-cache-gb 0 --no-enable-prefix-caching, "
               "--limit-mm-per-prompt '{\"image\": 1}'", "lightonai/LightOnOCR README.md (Models)"),
    ),
    stream_options=VLLM_STREAM_OPTIONS,
    stream_extra=VLLM_STREAM_EXTRA,
    images=Images(
        docker=(VLLM_0_30,),
        sagemaker_missing="no AWS Deep Learning Container ships vLLM 0.30.0 (LightOnOCR-3's pin): build an image "
                          "FROM vllm/vllm-openai:v0.30.0 with llm-ocr (sagemaker/Dockerfile shows how) and push it to "
                          "ECR",
    ),
)
