"""Chandra (datalab-to): HTML layout blocks, ``<div data-bbox=... data-label=...>``, boxes
normalised to 0..1024 (Chandra 1) or 0..1000 (Chandra 2).

Sources (docs/models.md, "Chandra"): datalab-to/chandra (Chandra 1: ``chandra/prompts.py``,
``chandra/model/vllm.py``, ``chandra/model/util.py``, ``chandra/settings.py``,
``chandra/output.py``, ``chandra/input.py``, ``chandra/scripts/vllm.py``) and the chandra-ocr 0.2.0
package on PyPI (Chandra 2: the same files, with the 0..1000 boxes, the longer label list and
the retry temperatures).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from html import escape
from html.parser import HTMLParser

from llm_ocr.vlm.families.base import Family, Outputs, Prompt, Rendering, Retries, Sampling, Serving, Source
from llm_ocr.vlm.families.deepseek import VLLM_STREAM_EXTRA, VLLM_STREAM_OPTIONS
from llm_ocr.vlm.families.markup import html_to_markdown
from llm_ocr.vlm.layout import LayoutBuilder, PageLayout, Warnings, to_pixels
from llm_ocr.vlm.view import View

_TAGS_1 = ["math", "br", "i", "b", "u", "del", "sup", "sub", "table", "tr", "td", "p", "th", "div", "pre", "h1",
           "h2", "h3", "h4", "h5", "ul", "ol", "li", "input", "a", "span", "img", "hr", "tbody", "small", "caption",
           "strong", "thead", "big", "code"]  # fmt: skip
_ATTRIBUTES_1 = ["class", "colspan", "rowspan", "display", "checked", "type", "border", "value", "style", "href",
                 "alt", "align"]  # fmt: skip
_LABELS_1 = ["Caption", "Footnote", "Equation-Block", "List-Group", "Page-Header", "Page-Footer", "Image",
             "Section-Header", "Table", "Text", "Complex-Block", "Code-Block", "Form", "Table-Of-Contents",
             "Figure"]  # fmt: skip


def _ending(tags: list[str], attributes: list[str], images: str, extra: str) -> str:
    return (
        f"Only use these tags {tags}, and these attributes {attributes}.\n\n"
        "Guidelines:\n"
        "* Inline math: Surround math with <math>...</math> tags. Math expressions should be rendered in "
        "KaTeX-compatible LaTeX. Use display for block math.\n"
        "* Tables: Use colspan and rowspan attributes to match table structure.\n"
        "* Formatting: Maintain consistent formatting with the image, including spacing, indentation, "
        "subscripts/superscripts, and special characters.\n"
        f"* Images: {images}\n"
        "* Forms: Mark checkboxes and radio buttons properly.\n"
        "* Text: join lines together properly into paragraphs using <p>...</p> tags.  Use <br> tags for line breaks "
        "within paragraphs, but only when absolutely necessary to maintain meaning.\n"
        f"{extra}"
        "* Use the simplest possible HTML structure that accurately represents the content of the block.\n"
        "* Make sure the text is accurate and easy for a human to read and interpret.  Reading order should be "
        "correct and natural."
    )


def _layout_prompt(box_format: str, scale: int, labels: list[str], ending: str) -> str:
    return (
        "OCR this image to HTML, arranged as layout blocks.  Each layout block should be a div with the data-bbox "
        f"attribute representing the bounding box of the block in {box_format} format.  Bboxes are normalized "
        f"0-{scale}. The data-label attribute is the label for the block.\n\n"
        "Use the following labels:\n" + "".join(f"- {label}\n" for label in labels) + "\n" + ending
    )


#: OCR_LAYOUT_PROMPT of chandra 0.1 (datalab-to/chandra chandra/prompts.py), bbox_scale 1024.
CHANDRA_1_PROMPT = _layout_prompt(
    "[x0, y0, x1, y1]", 1024, _LABELS_1,
    _ending(_TAGS_1, _ATTRIBUTES_1,
            "Include a description of any images in the alt attribute of an <img> tag. Do not fill out the src "
            "property.", ""),
)
#: OCR_LAYOUT_PROMPT of chandra-ocr 0.2.0 (Chandra 2): boxes "x0 y0 x1 y1" in 0..1000.
CHANDRA_2_PROMPT = _layout_prompt(
    "x0 y0 x1 y1", 1000, _LABELS_1 + ["Chemical-Block", "Diagram", "Bibliography", "Blank-Page"],
    _ending(_TAGS_1 + ["chem"], _ATTRIBUTES_1 + ["data-bbox", "data-label"],
            "Include a description of any images in the alt attribute of an <img> tag. Do not fill out the src "
            "property. Describe in detail inside the div tag. Also convert charts to high fidelity data, and "
            "convert diagrams to mermaid.",
            "* Chemistry: Use <chem>...</chem> tags for chemical formulas with reactive SMILES.\n"
            "* Lists: Preserve indents and proper list markers.\n"),
)

FIGURE_LABELS = ("Image", "Figure", "Diagram")
#: The prompt's block label of each element a view shows (the writer's labels).
LABELS = {"title": "Section-Header", "sub_title": "Section-Header", "text": "Text", "image": "Image",
          "image_caption": "Caption", "table": "Table", "equation": "Equation-Block"}  # fmt: skip
_NUMBERS = re.compile(r"-?\d+(?:\.\d+)?")


class _Blocks(HTMLParser):
    """The top-level ``<div>`` blocks of an answer: (attributes, inner HTML) each."""

    def __init__(self, source: str) -> None:
        super().__init__(convert_charrefs=False)
        self.source = source
        self.depth = 0
        self.blocks: list[tuple[dict[str, str | None], int, int]] = []
        self._lines = [0]
        for line in source.splitlines(keepends=True):
            self._lines.append(self._lines[-1] + len(line))
        self._open: tuple[dict[str, str | None], int] | None = None

    def _offset(self) -> int:
        line, col = self.getpos()
        return self._lines[line - 1] + col

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "div":
            if self.depth == 0:
                start = self.source.find(">", self._offset()) + 1
                self._open = (dict(attrs), start)
            self.depth += 1

    def handle_endtag(self, tag: str) -> None:
        if tag == "div" and self.depth:
            self.depth -= 1
            if self.depth == 0 and self._open is not None:
                attrs, start = self._open
                self.blocks.append((attrs, start, self._offset()))
                self._open = None

    def close(self) -> None:
        super().close()
        if self._open is not None:  # a block cut off by the end of the answer
            attrs, start = self._open
            self.blocks.append((attrs, start, len(self.source)))


@dataclass(frozen=True)
class Chandra(Family):
    """Chandra's ocr_layout recipe; ``scale`` is the bbox normalisation of the version."""

    scale: int = 1024
    #: Boxes written as a JSON list ``[x0, y0, x1, y1]`` (Chandra 1's prompt), else ``x0 y0 x1 y1``.
    json_boxes: bool = False
    #: The block labels that are figures: cropped, their ``<img alt>`` the description.
    figure_labels: tuple[str, ...] = FIGURE_LABELS

    def prompt_reserve(self, context: int) -> int:
        # Up to 6,291,456 px at 32 px per token (6,144 image tokens) besides the 12,384-token answer.
        return min(context // 2, context - 12_384) if context > 12_384 else context // 2

    def parse(self, text: str, *, width: int, height: int, page: int) -> PageLayout:
        warn = Warnings()
        builder = LayoutBuilder(page, width, height, warn=warn)
        parser = _Blocks(text)
        try:
            parser.feed(text)
            parser.close()
        except Exception as exc:  # noqa: BLE001 - HTMLParser is lenient; a broken answer keeps its text
            warn(f"answer is not HTML: {exc}")
        if not parser.blocks and text.strip():
            warn("no layout blocks in the answer: its text kept without boxes")
            builder.text("Text", [], html_to_markdown(text)[0])
        s = width / self.scale, height / self.scale
        for attrs, start, end in parser.blocks:
            label = attrs.get("data-label") or "block"
            if label == "Blank-Page":
                continue
            raw_box = attrs.get("data-bbox") or ""
            numbers = [float(n) for n in _NUMBERS.findall(raw_box)[:5]]
            box = to_pixels(numbers, s[0], s[1], width, height) if len(numbers) == 4 else None
            if box is None:
                warn(f"{label} block with an unusable data-bbox {raw_box[:40]!r}")
            markdown, alts = html_to_markdown(text[start:end])
            if label in self.figure_labels:
                builder.figure(label, box, description=" ".join(a for a in alts if a) or None, markdown=markdown)
            else:
                builder.text(label, [box] if box else [], markdown)
        return builder.build()

    def write(self, view: View, kind: str = "page", prompt: str | None = None) -> str:
        """Top-level ``<div data-bbox data-label>`` blocks, boxes normalised to :attr:`scale`;
        headings as ``<h1>``/``<h2>``, math in ``<math display="block">``, a figure as an
        ``<img>`` whose alt describes it."""
        divs = []
        for element in view.elements:
            label = LABELS.get(element.label, "Text")
            box = list(element.box.scaled(self.scale, self.scale).rounded())
            bbox = str(box) if self.json_boxes else " ".join(map(str, box))
            if label == "Image":
                inner = self.figure_html(element.description)
            elif label == "Section-Header":
                level = 1 if element.label == "title" else 2
                inner = f"<h{level}>{escape(element.text)}</h{level}>"
            elif label == "Table":
                inner = element.text
            elif label == "Equation-Block":
                latex = escape(element.latex().replace("\\coloneqq", ":="))
                inner = f'<p><math display="block">{latex}</math></p>'
            else:
                inner = f"<p>{escape(element.text)}</p>"
            divs.append(f'<div data-bbox="{bbox}" data-label="{label}">{inner}</div>')
        return "\n".join(divs)

    def figure_html(self, description: str) -> str:
        """What the model writes inside a figure's block: an ``<img>`` whose alt describes it."""
        return f'<img alt="{escape(description)}"/>'


def _sources(version: str) -> tuple[Source, ...]:
    where = "datalab-to/chandra" if version == "1" else "chandra-ocr 0.2.0 (PyPI)"
    return (
        Source(f"Chandra {version}: OCR_LAYOUT_PROMPT (bbox_scale {'1024' if version == '1' else '1000'})",
               f"{where} chandra/prompts.py, chandra/settings.py"),
        Source("one user message, the image (PNG) then the prompt; temperature 0, top_p 0.1; max_tokens 12384",
               f"{where} chandra/model/vllm.py (generate_vllm), chandra/settings.py (MAX_OUTPUT_TOKENS)"),
        Source("retries on repetition: " + ("temperature 0.3, top_p 0.95" if version == "1" else
               "temperature min(0.2 x attempt, 0.8), top_p 0.95") + ", up to 6 (MAX_VLLM_RETRIES)",
               f"{where} chandra/model/vllm.py (process_item), chandra/settings.py"),
        Source("page image: PDFs at 192 DPI (shorter side at least 1024 px), scaled to at most 3072 x 2048 px",
               f"{where} chandra/input.py (load_pdf_images), chandra/model/util.py (scale_to_fit)"),
        Source("server: --max-model-len " + ("32768" if version == "1" else "18000, --mm-processor-kwargs "
               "'{\"min_pixels\": 3136, \"max_pixels\": 6291456}'"), f"{where} chandra/scripts/vllm.py"),
        Source("blocks: top-level divs; data-bbox normalised by bbox_scale; Image/Figure blocks cropped, their img alt "
               "the description; Blank-Page skipped", f"{where} chandra/output.py (parse_layout, extract_images)"),
    )


_COMMON = dict(
    patterns=(),
    prompt=Prompt(CHANDRA_2_PROMPT),
    sampling=Sampling(temperature=0.0, top_p=0.1, max_tokens=12_384),
    rendering=Rendering(dpi=192.0, max_pixels=3072 * 2048, image_format="png"),
    outputs=Outputs(boxes=True, figure_crops=True, html_tables=True, math=True, figure_descriptions=True,
                    notes="HTML blocks with normalised boxes; image alt text kept as the figure's description"),
    stream_options=VLLM_STREAM_OPTIONS,
    stream_extra=VLLM_STREAM_EXTRA,
)

CHANDRA_2 = Chandra(
    dense="tiles",  # every block comes with its box: tiles joined by boxes
    name="chandra",
    title="Chandra 2",
    models=("datalab-to/chandra-ocr-2",),
    retries=Retries((0.0, 0.2, 0.4, 0.6, 0.8, 0.8, 0.8), retry_top_p=0.95, count=6),
    serving=Serving(
        args=("--mm-processor-kwargs", json.dumps({"min_pixels": 3136, "max_pixels": 6291456})),
        context=18_000,
        # A 5B Qwen3.5 model (model card): ~10 GB of bf16 weights; llm-ocr's estimate of its KV cache.
        weights_gib=14.0,
        kv_bytes_per_token=2 * 36 * 8 * 128 * 2,
        typical_seq_tokens=8000,
        pixels_per_token=32 * 32,
        max_image_pixels=6_291_456,
    ),
    sources=_sources("2"),
    scale=1000,
    **{**_COMMON, "patterns": (r"chandra-ocr-2", r"chandra-?2")},  # type: ignore[arg-type]
)

CHANDRA_1 = Chandra(
    dense="tiles",  # every block comes with its box: tiles joined by boxes
    name="chandra-1",
    title="Chandra 1",
    models=("datalab-to/chandra",),
    retries=Retries((0.0, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3), retry_top_p=0.95, count=6),
    serving=Serving(
        args=(),
        context=32_768,
        # Qwen3-VL-8B: 36 layers, 8 KV heads of 128 in bf16 = 144 KiB per token; ~17 GB of weights.
        weights_gib=20.0,
        kv_bytes_per_token=2 * 36 * 8 * 128 * 2,
        typical_seq_tokens=8000,
        pixels_per_token=32 * 32,
        max_image_pixels=6_291_456,
    ),
    sources=_sources("1"),
    scale=1024,
    json_boxes=True,
    **{**_COMMON, "patterns": (r"chandra",), "prompt": Prompt(CHANDRA_1_PROMPT)},  # type: ignore[arg-type]
)
