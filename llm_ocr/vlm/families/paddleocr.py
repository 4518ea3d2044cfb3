"""PaddleOCR-VL 0.9B (1.0, 1.5 and 1.6) at page level: the page image, then ``OCR:``; its answer
is the page's text.

PaddleOCR's own pipeline first runs PP-DocLayoutV2 (a separate layout model) and sends each
block with its task prompt; llm-ocr sends the whole page with ``OCR:``, the element prompt the
pipeline uses when layout detection is off (``prompt_label``). What the layout model would add
is in docs/models.md ("PaddleOCR-VL").

Its other task prompts are modes a run picks with ``--prompt``: ``Table Recognition:`` answers
the table as OTSL tokens (converted to an HTML table), ``Formula Recognition:`` as LaTeX (kept as
display math). ``Chart Recognition:``, ``Spotting:`` and ``Seal Recognition:`` are the recipe's
too, but their answer formats are not in the sources read: such a run keeps the answer as text.

Sources (docs/models.md): vllm-project/recipes ``PaddlePaddle/PaddleOCR-VL.md`` and
``models/PaddlePaddle/PaddleOCR-VL.yaml``, ``PaddleOCR-VL-1.5.yaml``, ``PaddleOCR-VL-1.6.yaml``; PaddlePaddle/PaddleOCR
``docs/version3.x/pipeline_usage/PaddleOCR-VL.en.md``; the checkpoint's ``preprocessor_config.json``.
"""

from __future__ import annotations

from dataclasses import dataclass

from llm_ocr.vlm.families.base import Outputs, Prompt, Rendering, Retries, Sampling, Serving, Source
from llm_ocr.vlm.families.generic import MarkdownFamily
from llm_ocr.vlm.families.markup import display_math, html_to_otsl, otsl_to_html
from llm_ocr.vlm.layout import LayoutBuilder, PageLayout
from llm_ocr.vlm.view import View

#: The task prompts of the recipe's client example; page-level OCR is "OCR:".
OCR_PROMPT = "OCR:"
TABLE_PROMPT, FORMULA_PROMPT = "Table Recognition:", "Formula Recognition:"
#: The task prompts of the recipe (1.5 and 1.6 add spotting and seal recognition).
TASK_PROMPTS = {"ocr": OCR_PROMPT, "table": TABLE_PROMPT, "formula": FORMULA_PROMPT, "chart": "Chart Recognition:",
                "spotting": "Spotting:", "seal": "Seal Recognition:"}  # fmt: skip
#: The modes llm-ocr reads at page level: those whose answer format is known.
PAGE_MODES = (OCR_PROMPT, TABLE_PROMPT, FORMULA_PROMPT)
_OTSL = ("<fcel>", "<ecel>", "<ched>", "<nl>")

#: The processor's pixel cap (preprocessor_config.json: max_pixels 2822400, 14-px patches merged 2 x 2).
MAX_PIXELS = 2_822_400


@dataclass(frozen=True)
class PaddleOCRVL(MarkdownFamily):
    """PaddleOCR-VL's page-level answer to ``OCR:`` parsed as any Markdown answer; to the table
    mode's prompt, OTSL made HTML; to the formula mode's, LaTeX made display math."""

    def page_texts(self) -> tuple[str | None, ...]:
        return tuple(dict.fromkeys((self.prompt.text, *PAGE_MODES)))

    def parse(self, text: str, *, width: int, height: int, page: int) -> PageLayout:
        if self.prompt.text == FORMULA_PROMPT:
            builder = LayoutBuilder(page, width, height)
            builder.text("formula", [], display_math(text))
            return builder.build()
        if any(token in text for token in _OTSL):
            builder = LayoutBuilder(page, width, height)
            builder.text("table", [], otsl_to_html(text))
            return builder.build()
        return super().parse(text, width=width, height=height, page=page)

    def write(self, view: View, kind: str = "page", prompt: str | None = None) -> str:
        """The page's text, a line per block, no markup added, figures left out; the tables as
        OTSL to the table prompt, the equations' LaTeX to the formula prompt."""
        if prompt == TABLE_PROMPT:
            return "\n".join(html_to_otsl(e.text) for e in view.elements if e.label == "table")
        if prompt == FORMULA_PROMPT:
            return "\n".join(e.latex() for e in view.elements if e.label == "equation")
        return "\n".join(e.text for e in view.elements if e.text and e.label != "image")


PADDLEOCR_VL = PaddleOCRVL(
    dense="bands",  # text without boxes: bands joined by the text their overlap repeats
    name="paddleocr-vl",
    title="PaddleOCR-VL",
    patterns=("paddleocr-vl",),
    models=("PaddlePaddle/PaddleOCR-VL-1.6", "PaddlePaddle/PaddleOCR-VL-1.5", "PaddlePaddle/PaddleOCR-VL"),
    prompt=Prompt(OCR_PROMPT),
    # The recipe's request sets temperature 0 and nothing else; max_tokens: PaddleX's VLM
    # predictor's default max_new_tokens (8192).
    sampling=Sampling(temperature=0.0, max_tokens=8192),
    retries=Retries((0.0, 0.2, 0.4, 0.6, 0.8, 1.0)),
    # 200 DPI then the processor's cap: a Letter page (1700 x 2200) is sent at <= 2.82 MP.
    rendering=Rendering(dpi=200.0, max_pixels=MAX_PIXELS, image_format="png"),
    serving=Serving(
        args=(
            "--trust-remote-code",
            "--max-num-batched-tokens", "16384",
            "--no-enable-prefix-caching",
            "--mm-processor-cache-gb", "0",
        ),
        context=16384,
        weights_gib=2.5,
        kv_bytes_per_token=2 * 18 * 2 * 128 * 2,  # 18 layers, 2 KV heads of 128 (ERNIE-4.5-0.3B)
        typical_seq_tokens=6000,
        pixels_per_token=28 * 28,
        max_image_pixels=MAX_PIXELS,
    ),
    outputs=Outputs(boxes=False, figure_crops=False, html_tables=False, math=True,
                    notes="page-level text; layout boxes, figures and table structure need PP-DocLayoutV2"),
    sources=(
        Source("image part, then the text 'OCR:' (task prompts 'Table Recognition:', 'Formula Recognition:', "
               "'Chart Recognition:'); temperature 0.0",
               "vllm-project/recipes PaddlePaddle/PaddleOCR-VL.md (Querying with OpenAI API Client)"),
        Source("serve with --trust-remote-code --max-num-batched-tokens 16384 --no-enable-prefix-caching "
               "--mm-processor-cache-gb 0; context 131072",
               "vllm-project/recipes models/PaddlePaddle/PaddleOCR-VL.yaml (base_args, context_length)"),
        Source("without layout detection the pipeline sends the page with one prompt (prompt_label); "
               "PP-DocLayoutV2 gives labelled boxes (doc_title, text, image, table, formula...) and the reading order",
               "PaddlePaddle/PaddleOCR docs/version3.x/pipeline_usage/PaddleOCR-VL.en.md"),
        Source("PaddleOCR-VL-1.5 and -1.6: the same architecture and the same vllm serve flags; task prompts add "
               "'Spotting:' and 'Seal Recognition:'",
               "vllm-project/recipes models/PaddlePaddle/PaddleOCR-VL-1.5.yaml, PaddleOCR-VL-1.6.yaml (guide: "
               "'drop-in replacement for 1.5', Client Usage)"),
        Source("the table task answers OTSL tokens, not HTML (secondary: a third party's Space for 1.6)",
               "huggingface.co/spaces PaddleOCR-VL-1.6 ZeroGPU app (otsl_to_html)"),
        Source("min_pixels 147384, max_pixels 2822400, patch_size 14, merge_size 2",
               "huggingface.co/PaddlePaddle/PaddleOCR-VL preprocessor_config.json"),
        Source("max_new_tokens 8192 (secondary: read from a copy of the predictor)",
               "PaddlePaddle/PaddleX paddlex/inference/models/doc_vlm/predictor.py"),
    ),
)
