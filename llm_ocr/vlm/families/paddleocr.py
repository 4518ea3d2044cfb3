"""PaddleOCR-VL 0.9B at page level: the page image, then ``OCR:``; its answer is the page's text.

PaddleOCR's own pipeline first runs PP-DocLayoutV2 (a separate layout model) and sends each
block with its task prompt; llm-ocr sends the whole page with ``OCR:``, the element prompt the
pipeline uses when layout detection is off (``prompt_label``). What the layout model would add
is in docs/models.md ("PaddleOCR-VL").

Sources (docs/models.md): vllm-project/recipes ``PaddlePaddle/PaddleOCR-VL.md`` and
``models/PaddlePaddle/PaddleOCR-VL.yaml``; PaddlePaddle/PaddleOCR
``docs/version3.x/pipeline_usage/PaddleOCR-VL.en.md``; the checkpoint's ``preprocessor_config.json``.
"""

from __future__ import annotations

from dataclasses import dataclass

from llm_ocr.vlm.families.base import Outputs, Prompt, Rendering, Retries, Sampling, Serving, Source
from llm_ocr.vlm.families.generic import MarkdownFamily
from llm_ocr.vlm.view import View

#: The task prompts of the recipe's client example; page-level OCR is "OCR:".
OCR_PROMPT = "OCR:"
TASK_PROMPTS = {"ocr": OCR_PROMPT, "table": "Table Recognition:", "formula": "Formula Recognition:",
                "chart": "Chart Recognition:"}  # fmt: skip

#: The processor's pixel cap (preprocessor_config.json: max_pixels 2822400, 14-px patches merged 2 x 2).
MAX_PIXELS = 2_822_400


@dataclass(frozen=True)
class PaddleOCRVL(MarkdownFamily):
    """PaddleOCR-VL's page-level answer to ``OCR:``, parsed as any Markdown answer."""

    def write(self, view: View, kind: str = "page", prompt: str | None = None) -> str:
        """The page's text, a line per block, no markup added; figures left out."""
        return "\n".join(e.text for e in view.elements if e.text and e.label != "image")


PADDLEOCR_VL = PaddleOCRVL(
    name="paddleocr-vl",
    title="PaddleOCR-VL",
    patterns=("paddleocr-vl",),
    models=("PaddlePaddle/PaddleOCR-VL", "PaddlePaddle/PaddleOCR-VL-1.5"),
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
        Source("min_pixels 147384, max_pixels 2822400, patch_size 14, merge_size 2",
               "huggingface.co/PaddlePaddle/PaddleOCR-VL preprocessor_config.json"),
        Source("max_new_tokens 8192 (secondary: read from a copy of the predictor)",
               "PaddlePaddle/PaddleX paddlex/inference/models/doc_vlm/predictor.py"),
    ),
)
