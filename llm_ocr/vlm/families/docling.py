"""granite-docling (ibm-granite/granite-docling-258M): DocTags, boxes as ``<loc_N>`` on a 500 grid.

Sources (docs/models.md, "granite-docling"): docling-project/docling
``docling/datamodel/vlm_model_specs.py`` (``GRANITEDOCLING_VLLM_API``),
``docling/utils/api_image_request.py``; docling-project/docling-core
``docling_core/types/doc/tokens.py`` (``DocumentToken``, ``TableToken``, ``get_location_token``).

An element is ``<label><loc_x0><loc_y0><loc_x1><loc_y1>content</label>``, locations
``round(500 * fraction)`` clamped to 0..499 of the page image; tables are OTSL (``<otsl>``), a
picture or table may hold its ``<caption>`` (after its content, wherever it is: read before the
element when its box is above it); lists wrap ``<list_item>`` elements.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from llm_ocr.vlm.box import Box
from llm_ocr.vlm.families.base import Family, Outputs, Prompt, Rendering, Retries, Sampling, Serving, Source
from llm_ocr.vlm.families.deepseek import VLLM_STREAM_EXTRA, VLLM_STREAM_OPTIONS
from llm_ocr.vlm.families.markup import display_math, html_to_otsl, otsl_to_html
from llm_ocr.vlm.layout import LayoutBuilder, PageLayout, Warnings, caption_first, to_pixels
from llm_ocr.vlm.view import Element, View

DOCLING_PROMPT = "Convert this page to docling."
#: docling_core get_location_token: rnorm 500.
GRID = 500
_ELEMENT = re.compile(r"<([a-z_0-9]{1,40})>((?:<loc_\d{1,4}>){4})")
_LOC = re.compile(r"<loc_(\d{1,4})>")
_TAG = re.compile(r"</?[a-z_0-9]{1,40}/?>")
_CAPTION = re.compile(r"<caption>((?:<loc_\d{1,4}>){4})(.*?)</caption>", re.DOTALL)
_HEADING = re.compile(r"section_header_level_(\d)")
#: The DocTags element of each element a view shows (the writer's tags).
TAGS = {"title": "title", "sub_title": "section_header_level_1", "text": "text", "image": "picture",
        "image_caption": "caption", "table": "otsl", "equation": "formula"}  # fmt: skip


def _box(locs: str, width: int, height: int) -> Box | None:
    values = [int(v) for v in _LOC.findall(locs)]
    return to_pixels(values, width / GRID, height / GRID, width, height) if len(values) == 4 else None


def _captions(builder: LayoutBuilder, captions: list[tuple[Box | None, str]]) -> None:
    for caption_box, caption in captions:
        builder.text("caption", [caption_box] if caption_box else [], caption)


def _plain(text: str) -> str:
    return " ".join(_TAG.sub(" ", _LOC.sub("", text)).split())


@dataclass(frozen=True)
class GraniteDocling(Family):
    """docling's API recipe for granite-docling (``GRANITEDOCLING_VLLM_API``)."""

    def parse(self, text: str, *, width: int, height: int, page: int) -> PageLayout:
        warn = Warnings()
        builder = LayoutBuilder(page, width, height, warn=warn)
        pos = 0
        for match in _ELEMENT.finditer(text):
            if match.start() < pos:
                continue  # inside an element already taken (a caption of a table or picture)
            label, locs = match.group(1), match.group(2)
            end = text.find(f"</{label}>", match.end())
            stop = len(text) if end == -1 else end
            if end == -1:
                warn(f"unclosed <{label}> at offset {match.start()}")
            body = text[match.end() : stop]
            pos = stop + len(label) + 3
            box = _box(locs, width, height)
            captions = [(_box(m.group(1), width, height), _plain(m.group(2))) for m in _CAPTION.finditer(body)]
            body = _CAPTION.sub("", body)
            # DocTags nests a table's or picture's caption inside it, after its content, wherever
            # it is on the page: its box says whether it is read before the element or after.
            ahead = [box is not None and caption_box is not None and caption_first(caption_box, box)
                     for caption_box, _ in captions]
            _captions(builder, [c for c, first in zip(captions, ahead) if first])
            if label == "picture":
                builder.figure(label, box)
            elif label == "otsl":
                builder.text("table", [box] if box else [], otsl_to_html(_LOC.sub("", body)))
            elif label == "formula":
                builder.text(label, [box] if box else [], display_math(_plain(body)))
            elif label == "code":
                builder.text(label, [box] if box else [], "```\n" + _LOC.sub("", _TAG.sub("", body)).strip() + "\n```")
            else:
                heading = _HEADING.match(label)
                prefix = "# " if label == "title" else "#" * (int(heading.group(1)) + 1) + " " if heading else (
                    "- " if label == "list_item" else ""
                )
                builder.text(label, [box] if box else [], prefix + _plain(body))
            _captions(builder, [c for c, first in zip(captions, ahead) if not first])
        if pos == 0 and text.strip():
            warn("no DocTags elements in the answer: its text kept without boxes")
            builder.text("text", [], _plain(text))
        return builder.build()

    def write(self, view: View, kind: str = "page", prompt: str | None = None) -> str:
        """DocTags: ``<tag><loc_x0><loc_y0><loc_x1><loc_y1>content</tag>``, locations
        ``round(500 x fraction)`` clamped to 0..499; tables as OTSL, formulas as LaTeX; a figure's
        caption inside its ``<picture>``, as the model writes it."""
        parts = []
        for i, element in enumerate(view.elements):
            if view.captioned(i):
                continue
            written = _element(element)
            if view.caption_of(i):
                caption = view.elements[i + 1]
                tag = TAGS["image"]
                inner = f"<caption>{locations(caption.box)}{caption.text}</caption>"
                written = written.replace(f"</{tag}>", inner + f"</{tag}>")
            parts.append(written)
        return "<doctag>" + "".join(parts) + "</doctag>"


def locations(box: Box) -> str:
    """A box in fractions of the image as DocTags locations (docling-core ``get_location_token``)."""
    return "".join(f"<loc_{v}>" for v in box.scaled(GRID, GRID).rounded().clamped(GRID - 1, GRID - 1))


def _element(element: Element) -> str:
    tag = TAGS.get(element.label, "text")
    if tag == "otsl":
        content = html_to_otsl(element.text)
    elif tag == "formula":
        content = element.latex().replace("\\coloneqq", ":=")
    elif tag == "picture":
        content = ""
    else:
        content = element.text
    return f"<{tag}>{locations(element.box)}{content}</{tag}>"


GRANITE_DOCLING = GraniteDocling(
    dense="tiles",  # every block comes with its box: tiles joined by boxes
    name="granite-docling",
    title="granite-docling",
    patterns=(r"granite-docling", r"smoldocling"),
    models=("ibm-granite/granite-docling-258M",),
    prompt=Prompt(DOCLING_PROMPT),
    sampling=Sampling(temperature=0.0, max_tokens=4096, extra={"skip_special_tokens": True}),
    retries=Retries((0.0, 0.2, 0.4, 0.6, 0.8, 1.0)),
    rendering=Rendering(dpi=144.0, image_format="png"),
    serving=Serving(
        args=(),
        context=8192,
        # 258M parameters (Idefics3 architecture): weights are small, the KV cache dominates.
        weights_gib=3.0,
        kv_bytes_per_token=2 * 30 * 3 * 64 * 2,
        typical_seq_tokens=3000,
        pixels_per_token=512 * 512 // 64,
        max_image_pixels=2048 * 2048,
    ),
    outputs=Outputs(boxes=True, figure_crops=True, html_tables=True, math=True,
                    notes="DocTags with <loc_N> on a 500 grid; tables as OTSL"),
    sources=(
        Source("prompt 'Convert this page to docling.'; temperature 0, max_tokens 4096, skip_special_tokens true; page "
               "scale 2.0 (144 DPI)", "docling-project/docling docling/datamodel/vlm_model_specs.py "
                                      "(GRANITEDOCLING_VLLM_API)"),
        Source("one user message, the image (PNG) then the prompt",
               "docling-project/docling docling/utils/api_image_request.py (api_image_request)"),
        Source("DocTags element names, OTSL table tokens, <loc_N> = round(500 x fraction) clamped to 0..499",
               "docling-project/docling-core docling_core/types/doc/tokens.py"),
    ),
    stream_options=VLLM_STREAM_OPTIONS,
    stream_extra=VLLM_STREAM_EXTRA,
)
