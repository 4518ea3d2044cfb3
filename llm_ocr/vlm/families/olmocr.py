"""olmOCR-2 (allenai/olmOCR-2-7B-1025 and its FP8 variant): front matter, then Markdown.

Sources (docs/models.md, "olmOCR-2"): allenai/olmocr ``olmocr/prompts/prompts.py``
(``build_no_anchoring_v4_yaml_prompt``, ``PageResponse``), ``olmocr/pipeline.py``
(``build_page_query``, ``TEMPERATURE_BY_ATTEMPT``, ``process_page``, ``vllm_server_task``,
``--target_longest_image_dim``, ``--max_page_retries``), ``olmocr/train/front_matter.py``,
``olmocr/data/renderpdf.py``; issues #408 and #437 on the figure boxes.

The answer is a YAML front matter (``primary_language``, ``is_rotation_valid``,
``rotation_correction``, ``is_table``, ``is_diagram``) and the page as Markdown with LaTeX and
HTML tables; a figure is ``![alt text](page_startx_starty_width_height.png)``, the box in
pixels of the image sent. A page the model says is not upright is turned by its
``rotation_correction`` and read again, as olmOCR's own pipeline does.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from llm_ocr.vlm.families.base import (
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
from llm_ocr.vlm.families.generic import normalise_markdown
from llm_ocr.vlm.layout import LayoutBuilder, PageLayout, Warnings, to_pixels
from llm_ocr.vlm.view import View

#: build_no_anchoring_v4_yaml_prompt(), olmocr/prompts/prompts.py.
OLMOCR_PROMPT = (
    "Attached is one page of a document that you must process. "
    "Just return the plain text representation of this document as if you were reading it naturally. "
    "Convert equations to LateX and tables to HTML.\n"
    "If there are any figures or charts, label them with the following markdown syntax "
    "![Alt text describing the contents of the figure](page_startx_starty_width_height.png)\n"
    "Return your output as markdown, with a front matter section on top specifying values for the "
    "primary_language, is_rotation_valid, rotation_correction, is_table, and is_diagram parameters."
)

#: The figure reference olmOCR writes: alt text, then page_x_y_w_h.png (pixels of the sent image).
_FIGURE = re.compile(r"!\[([^\]\n]{0,2000})\]\(page_(\d{1,6})_(\d{1,6})_(\d{1,6})_(\d{1,6})\.png\)")
_FIELD = re.compile(r"^\s*([A-Za-z_]{1,40})\s*:\s*(.{0,200}?)\s*$")
FRONT_MATTER_FIELDS = ("primary_language", "is_rotation_valid", "rotation_correction", "is_table", "is_diagram")
#: Turns olmOCR's pipeline applies to a page reported rotated, before it gives up on turning.
MAX_TURNS = 3


def front_matter(text: str) -> tuple[dict[str, object], str, str | None]:
    """``(fields, body, problem)`` of an answer: the front matter's fields (typed as olmOCR's
    ``PageResponse``), the text after it, and what was wrong with it (None: nothing).

    Read by hand, not with a YAML loader: the fields are five flat scalars
    (``olmocr/train/front_matter.py`` reads ``---\\n`` ... ``\\n---``).
    """
    if not text.startswith("---\n"):
        return {}, text.strip(), "no front matter"
    end = text.find("\n---", 4)
    if end == -1:
        return {}, text[4:].strip(), "unclosed front matter"
    fields: dict[str, object] = {}
    for line in text[4:end].splitlines():
        match = _FIELD.match(line)
        if not match:
            continue
        key, value = match.group(1), match.group(2).strip().strip("'\"")
        if key in ("is_rotation_valid", "is_table", "is_diagram"):
            fields[key] = value.lower() == "true"
        elif key == "rotation_correction":
            fields[key] = int(value) if value.isdigit() and int(value) in (0, 90, 180, 270) else 0
        elif key == "primary_language":
            fields[key] = None if value.lower() in ("", "null", "none") else value
    missing = [k for k in FRONT_MATTER_FIELDS if k not in fields]
    return fields, text[end + 4 :].strip(), f"front matter lacks {', '.join(missing)}" if missing else None


@dataclass(frozen=True)
class OlmOCR(Family):
    """olmOCR-2's recipe: text before the image, temperatures 0.1 up to 1.0, turn and retry."""

    def prompt_reserve(self, context: int) -> int:
        # olmOCR asks for 8000 tokens in a 16384 context: the rest is the page's ~1.3k image
        # tokens (1288 px longest side, 28 px per token) and the prompt.
        return min(context // 2, 8384)

    def parse(self, text: str, *, width: int, height: int, page: int) -> PageLayout:
        warn = Warnings()
        fields, body, problem = front_matter(text)
        if problem:
            warn(problem)
        builder = LayoutBuilder(page, width, height, warn=warn)
        pos = 0
        for match in _FIGURE.finditer(body):
            builder.text("text", [], normalise_markdown(body[pos : match.start()]))
            x, y, w, h = (int(match.group(i)) for i in range(2, 6))
            box = to_pixels([x, y, x + w, y + h], 1.0, 1.0, width, height)
            if box is None:
                warn(f"figure page_{x}_{y}_{w}_{h} is outside the {width}x{height} image")
            builder.figure("image", box, description=match.group(1))
            pos = match.end()
        builder.text("text", [], normalise_markdown(body[pos:]))
        # Blocks without text (around figures) carry nothing: dropped, figures re-pointed.
        layout = builder.build(metadata=fields)
        return _drop_empty_text(layout)

    def write(self, view: View, kind: str = "page", prompt: str | None = None) -> str:
        """Front matter, then Markdown; a figure as ``![alt](page_x_y_w_h.png)`` in pixels of the
        image. An image not upright says so (``is_rotation_valid: False`` and the
        counter-clockwise turn that makes it upright), as olmOCR-2 was trained to."""
        parts = []
        for element in view.elements:
            if element.label == "image":
                x1, y1, x2, y2 = element.box
                x, y = round(x1 * view.width), round(y1 * view.height)
                w, h = round((x2 - x1) * view.width), round((y2 - y1) * view.height)
                parts.append(f"![{element.description}](page_{x}_{y}_{w}_{h}.png)")
            elif element.text:
                parts.append(element.markdown())
        correction = view.rotation % 360
        labels = {e.label for e in view.elements}
        head = (
            "---\nprimary_language: en\n"
            f"is_rotation_valid: {correction == 0}\nrotation_correction: {correction}\n"
            f"is_table: {'table' in labels}\nis_diagram: {'image' in labels}\n---\n"
        )
        return head + "\n\n".join(parts)

    def reports_rotation(self, kind: str) -> bool:
        return True

    async def read(self, page: PageInput, tools: PageTools, max_tokens: int) -> Reading:
        """Read the page; while the model says it is not upright, turn it as it says (rotating
        counter-clockwise by ``rotation_correction``, PIL's ``ROTATE_*``, as
        ``build_page_query`` does) and read it again, up to :data:`MAX_TURNS` turns."""
        reading = await super().read(page, tools, max_tokens)
        answers = list(reading.answers)
        turned, notes = 0, list[str]()
        current = page
        while not reading.layout.metadata.get("is_rotation_valid", True) and len(notes) < MAX_TURNS:
            value = reading.layout.metadata.get("rotation_correction")
            correction = value if isinstance(value, int) else 0  # the parser reads it as 0, 90, 180 or 270
            if correction == 0:
                break
            turned = (turned + correction) % 360
            image, width, height = await tools.transform(page.image, rotate=turned)
            current = PageInput(image, "image/png", width, height, page.page)
            notes.append(f"turned {turned}° as the model said (olmOCR-2 rotation_correction {correction}) and read "
                         "again")
            reading = await super().read(current, tools, max_tokens)
            answers += reading.answers
        if notes and not reading.layout.metadata.get("is_rotation_valid", True):
            notes.append(f"still not upright after {len(notes)} turn(s): the last reading kept")
        return replace(
            reading,
            answers=answers,
            raw="\n".join(a.result.text for a in answers) if len(answers) > 1 else reading.raw,
            notes=notes,
            turned=turned,
        )


def _drop_empty_text(layout: PageLayout) -> PageLayout:
    keep = [i for i, b in enumerate(layout.blocks) if b.label != "text" or b.text]
    index = {old: new for new, old in enumerate(keep)}
    for figure in layout.figures:
        figure.block = index.get(figure.block, -1)
    layout.blocks = [layout.blocks[i] for i in keep]
    return layout


OLMOCR = OlmOCR(
    dense="bands",  # text without boxes: bands joined by the text their overlap repeats
    name="olmocr",
    title="olmOCR-2",
    patterns=("olmocr",),
    models=("allenai/olmOCR-2-7B-1025-FP8", "allenai/olmOCR-2-7B-1025"),
    prompt=Prompt(OLMOCR_PROMPT, image_first=False),
    sampling=Sampling(temperature=0.1, max_tokens=8000),
    retries=Retries((0.1, 0.1, 0.2, 0.3, 0.5, 0.8, 0.9, 1.0), count=7),
    rendering=Rendering(long_side=1288, image_format="png"),
    serving=Serving(
        args=(),
        context=16384,
        limit_mm_per_prompt={"image": 1, "video": 0},
        # Qwen2.5-VL-7B: 28 layers, 4 KV heads of 128 in bf16 = 56 KiB per token; ~16.6 GB of
        # bf16 weights (the FP8 variant about half) plus activations.
        weights_gib=20.0,
        kv_bytes_per_token=2 * 28 * 4 * 128 * 2,
        typical_seq_tokens=4000,
    ),
    outputs=Outputs(boxes=True, figure_crops=True, html_tables=True, math=True, figure_descriptions=True,
                    notes="front matter (language, rotation, is_table, is_diagram); figure boxes only, "
                    "in pixels of the sent image (unreliable: allenai/olmocr#437)"),
    sources=(
        Source("prompt: build_no_anchoring_v4_yaml_prompt()", "allenai/olmocr olmocr/prompts/prompts.py"),
        Source("one user message, text then image; max_tokens 8000; PNG rendered so its longest side is "
               "1288 px (--target_longest_image_dim)",
               "allenai/olmocr olmocr/pipeline.py (build_page_query, argument parser)"),
        Source("attempt temperatures 0.1, 0.1, 0.2, 0.3, 0.5, 0.8, 0.9, 1.0; 8 attempts (--max_page_retries); "
               "a page reported rotated is turned by rotation_correction and read again",
               "allenai/olmocr olmocr/pipeline.py (TEMPERATURE_BY_ATTEMPT, process_page)"),
        Source("server: vllm serve with --max-model-len 16384 and --limit-mm-per-prompt '{\"video\": 0}'",
               "allenai/olmocr olmocr/pipeline.py (vllm_server_task, --max_model_len); README.md (vllm serve "
               "allenai/olmOCR-2-7B-1025-FP8 --max-model-len 16384)"),
        Source("front matter fields and types; parsed from '---\\n' to '\\n---'",
               "allenai/olmocr olmocr/prompts/prompts.py (PageResponse); olmocr/train/front_matter.py"),
        Source("figure boxes page_x_y_w_h in pixels of the image sent (and unreliable)",
               "allenai/olmocr issues #408 and #437"),
        Source("rendering: pdftoppm at target_longest_image_dim * 72 / longest side DPI, PNG",
               "allenai/olmocr olmocr/data/renderpdf.py (render_pdf_to_base64png)"),
    ),
    stream_options=VLLM_STREAM_OPTIONS,
    stream_extra=VLLM_STREAM_EXTRA,
)
