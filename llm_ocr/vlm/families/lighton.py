"""LightOnOCR-2: the page image alone, no text; Markdown back. Its ``-bbox`` variants add boxes.

LightOnOCR-1 and -2 do plain OCR only: one user message holding the image and nothing else
(a prompt gets repeated in the answer). Pages are scaled so their longer side is 1540 px; the
answer is Markdown with HTML tables and LaTeX math, and figures as ``![image](image_N.png)``
references. The ``-bbox`` checkpoints follow such a reference with the figure's box,
``![image](image_N.png) x1,y1,x2,y2``, normalised to 0..1000 of the image: those are cropped.
LightOnOCR-3's grounding mode (a ``grounding`` prompt, every block boxed) is another recipe.

Sources (docs/models.md, "LightOnOCR-2"): lightonai/LightOnOCR ``README.md``, ``lightonocr/client.py``,
``lightonocr/models.py``, ``benchmarks/ocr_bench/config.py``; the model cards
huggingface.co/lightonai/LightOnOCR-2-1B and LightOnOCR-2-1B-bbox-soup.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from llm_ocr.vlm.families.base import Family, Outputs, Prompt, Rendering, Retries, Sampling, Serving, Source
from llm_ocr.vlm.families.generic import normalise_markdown
from llm_ocr.vlm.families.markup import brackets_to_dollars
from llm_ocr.vlm.layout import LayoutBuilder, PageLayout, to_pixels
from llm_ocr.vlm.view import View

#: A figure reference, with the -bbox variants' box after it (0..1000 of the image).
_FIGURE = re.compile(
    r"!\[(?P<alt>[^\]\n]{0,200})\]\((?P<name>[^)\s]{0,200})\)"
    r"(?:[ \t]*(?P<box>\d{1,4}\s*,\s*\d{1,4}\s*,\s*\d{1,4}\s*,\s*\d{1,4}))?"
)


@dataclass(frozen=True)
class LightOnOCR(Family):
    """Markdown, figure references turned into crops where the answer gives a box."""

    def parse(self, text: str, *, width: int, height: int, page: int) -> PageLayout:
        builder = LayoutBuilder(page, width, height)
        pos = 0
        for match in _FIGURE.finditer(text):
            chunk = text[pos : match.start()]
            if chunk.strip():
                builder.text("text", [], normalise_markdown(chunk))
            alt = match.group("alt").strip()
            description = alt if alt and alt.lower() != "image" else None
            if match.group("box"):
                box = [int(v) for v in match.group("box").split(",")]
                builder.figure("image", to_pixels(box, width / 1000, height / 1000, width, height), description)
            elif description:
                builder.text("image", [], f"[Figure: {description}]")
            # A reference without a box points at no file: it is left out.
            pos = match.end()
        if text[pos:].strip():
            builder.text("text", [], normalise_markdown(text[pos:]))
        return builder.build()

    def write(self, view: View, kind: str = "page", prompt: str | None = None) -> str:
        """Markdown with ``$$`` display math; a figure as ``![image](image_N.png)``, followed by
        its box in 0..1000 of the image by the ``-bbox`` variants (those whose outputs have boxes)."""
        parts, figures = [], 0
        for element in view.elements:
            if element.label == "image":
                figures += 1
                ref = f"![image](image_{figures}.png)"
                if self.outputs.boxes:
                    ref += " " + ",".join(str(v) for v in element.box.scaled(1000, 1000).rounded().clamped(1000, 1000))
                parts.append(ref)
            elif element.text:
                parts.append(brackets_to_dollars(element.markdown()))
        return "\n\n".join(parts)


_SAMPLING = Sampling(temperature=0.2, top_p=0.9, max_tokens=4096)
_RETRIES = Retries((0.2, 0.4, 0.6, 0.8, 1.0))
_RENDERING = Rendering(long_side=1540, image_format="png")
_SERVING = Serving(
    args=("--mm-processor-cache-gb", "0", "--no-enable-prefix-caching"),
    context=16384,
    weights_gib=3.0,
    kv_bytes_per_token=2 * 28 * 8 * 128 * 2,  # Qwen3 decoder: 28 layers, 8 KV heads of 128
    typical_seq_tokens=5000,
    pixels_per_token=28 * 28,  # Pixtral's 14-px patches, merged 2 x 2
    max_image_pixels=1540 * 1540,
)
_SOURCES = (
    Source("one user message with the page image and no text (plain mode); no system message",
           "lightonai/LightOnOCR README.md (Modes), lightonocr/client.py (LightOnOCR.ocr)"),
    Source("temperature 0.2, top_p 0.9 for generations 1 and 2; pages scaled to a 1540-px longest edge",
           "lightonai/LightOnOCR lightonocr/models.py (profile), lightonocr/client.py"),
    Source("max_tokens 4096; render PDFs at a 1540-px longest dimension",
           "huggingface.co/lightonai/LightOnOCR-2-1B (model card: usage, rendering tips)"),
    Source("vllm serve with --limit-mm-per-prompt '{\"image\": 1}' --mm-processor-cache-gb 0 "
           "--no-enable-prefix-caching; context 16384 (max_position_embeddings)",
           "lightonai/LightOnOCR README.md (Models); benchmarks/ocr_bench/config.py (LightOnOCR-1B server)"),
)

LIGHTON_OCR_BBOX = LightOnOCR(
    dense="bands",  # text without boxes: bands joined by the text their overlap repeats
    name="lightonocr-bbox",
    title="LightOnOCR-2 (bbox)",
    patterns=(r"lightonocr-2-1b-bbox",),
    models=("lightonai/LightOnOCR-2-1B-bbox", "lightonai/LightOnOCR-2-1B-bbox-soup"),
    prompt=Prompt(None),
    sampling=_SAMPLING,
    retries=_RETRIES,
    rendering=_RENDERING,
    serving=_SERVING,
    outputs=Outputs(boxes=True, figure_crops=True, html_tables=True, math=True,
                    notes="figure boxes after each image reference, 0..1000 of the image"),
    sources=(
        *_SOURCES,
        Source("embedded images as '![image](image_N.png) x1,y1,x2,y2', coordinates normalised to [0, 1000]",
               "huggingface.co/lightonai/LightOnOCR-2-1B-bbox-soup (model card: Image Localization)"),
    ),
)

LIGHTON_OCR = LightOnOCR(
    dense="bands",  # text without boxes: bands joined by the text their overlap repeats
    name="lightonocr",
    title="LightOnOCR-2",
    patterns=(r"lightonocr-2", r"lightonocr-1b"),
    models=("lightonai/LightOnOCR-2-1B", "lightonai/LightOnOCR-2-1B-ocr-soup", "lightonai/LightOnOCR-1B-1025"),
    prompt=Prompt(None),
    sampling=_SAMPLING,
    retries=_RETRIES,
    rendering=_RENDERING,
    serving=_SERVING,
    outputs=Outputs(boxes=False, figure_crops=False, html_tables=True, math=True,
                    notes="figures referenced without coordinates (left out)"),
    sources=_SOURCES,
)
