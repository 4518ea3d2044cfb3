"""Surya OCR 2 (Datalab, 0.65B, a Qwen3.5 model): full-page OCR to HTML layout blocks, each a
``<div data-bbox="x0 y0 x1 y1" data-label="...">`` with its box in 0..1000 of the image.

Surya's default OCR path is one request per page (``RecognitionPredictor`` with ``full_page``):
the page image, then ``HIGH_ACCURACY_BBOX_PROMPT``; temperature 0, top_p 0.1, ``max_tokens``
12288. Its answer is Chandra 2's block format (the same parser), with Surya's labels; blocks
labelled ``Image``, ``Figure``, ``Diagram`` or ``Complex-Block`` (Surya canonicalises the last to
``Figure``) are pictures it does not read: llm-ocr crops them. ``Blank-Page`` blocks are skipped.
Surya's client asks again when an answer ends in a repeat, up to 3 times, at temperature
``min(0.2 x retry, 0.8)`` and top_p 0.95; a page that still loops falls back there to layout plus
one request per block, which llm-ocr does not do (the loop is cut and the row says so).

Sources (docs/models.md, "Surya OCR 2"): the surya-ocr 0.22.1 package on PyPI (datalab-to/surya):
``surya/inference/prompts.py``, ``surya/inference/backends/openai_client.py``,
``surya/inference/backends/vllm.py``, ``surya/inference/util.py`` (``scale_to_fit``),
``surya/inference/parsers.py`` (``parse_full_page_html``), ``surya/recognition/__init__.py``,
``surya/layout/label.py``, ``surya/settings.py``, ``README.md``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from llm_ocr.vlm.families.base import (
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
from llm_ocr.vlm.families.chandra import Chandra
from llm_ocr.vlm.families.deepseek import VLLM_STREAM_EXTRA, VLLM_STREAM_OPTIONS

#: HIGH_ACCURACY_BBOX_PROMPT (surya/inference/prompts.py): "the model's training-time contract".
SURYA_PROMPT = (
    "OCR this image to HTML. Each block is a div with data-label and data-bbox "
    "(x0 y0 x1 y1, normalized 0-1000)."
)
#: The labels Surya does not OCR (SKIP_OCR_LABELS, with Complex-Block, which it relabels Figure).
FIGURE_LABELS = ("Image", "Figure", "Diagram", "Complex-Block")
#: scale_to_fit's default max_size (3072, 2048), and the server's --mm-processor-kwargs max_pixels.
MAX_PIXELS = 3072 * 2048
#: scale_to_fit's grid (28 px) and default min_size (1792, 28).
GRID, MIN_PIXELS = 28, 1792 * 28


@dataclass(frozen=True)
class Surya(Chandra):
    """Surya OCR 2's full-page answer: Chandra 2's block format, pictures left unread."""

    def prompt_reserve(self, context: int) -> int:
        # Up to 6,144 image tokens (6,291,456 px at 32 x 32 px a token) besides the 12,288-token answer.
        return min(context // 2, context - 12_288) if context > 12_288 else context // 2

    def figure_html(self, description: str) -> str:
        """Nothing: Surya writes no content for the pictures it does not OCR."""
        return ""


SURYA_OCR = Surya(
    dense="tiles",  # every block comes with its box: tiles joined by boxes
    name="surya",
    title="Surya OCR 2",
    patterns=(r"surya-ocr-2", r"surya-?2"),
    models=("datalab-to/surya-ocr-2",),
    prompt=Prompt(SURYA_PROMPT),
    sampling=Sampling(temperature=0.0, top_p=0.1, max_tokens=12_288),
    retries=Retries((0.0, 0.2, 0.4, 0.6), retry_top_p=0.95, count=3),
    # scale_to_fit puts every image it sends on a 28-px grid, each side rounded to the nearest
    # (Qwen2-VL's smart_resize within its bounds; past them it drops a row or column of the grid
    # where smart_resize floors both sides: llm-ocr renders within them).
    rendering=Rendering(dpi=192.0, max_pixels=MAX_PIXELS, multiple=GRID, min_pixels=MIN_PIXELS, image_format="png"),
    serving=Serving(
        args=("--mm-processor-kwargs", json.dumps({"min_pixels": 3136, "max_pixels": MAX_PIXELS})),
        context=18_000,
        # 650M parameters in bf16; llm-ocr's estimate of its KV cache (Qwen3.5 keeps one only in its
        # full-attention layers).
        weights_gib=2.0,
        kv_bytes_per_token=2 * 8 * 2 * 256 * 2,
        typical_seq_tokens=8000,
        pixels_per_token=32 * 32,
        max_image_pixels=MAX_PIXELS,
    ),
    outputs=Outputs(boxes=True, figure_crops=True, html_tables=True, math=True,
                    notes="HTML blocks with boxes in 0..1000; pictures cropped, not read"),
    sources=(
        Source("one user message: the image (PNG) then HIGH_ACCURACY_BBOX_PROMPT (full-page OCR, one request "
               "a page)", "surya-ocr 0.22.1 surya/inference/prompts.py, surya/inference/backends/openai_client.py "
               "(_build_messages), surya/recognition/__init__.py (_full_page_ocr)"),
        Source("temperature 0, top_p 0.1, max_tokens 12288 (SURYA_MAX_TOKENS_FULL_PAGE); logprobs requested "
               "(llm-ocr does not: they only feed Surya's confidence)",
               "surya-ocr 0.22.1 surya/inference/backends/openai_client.py (chat_completions_batch), "
               "surya/settings.py"),
        Source("on a repeat: up to 3 retries at min(0.2 x retry, 0.8), top_p 0.95",
               "surya-ocr 0.22.1 surya/inference/backends/openai_client.py (_should_retry), surya/inference/util.py "
               "(detect_repeat_token)"),
        Source("pages at 192 DPI for recognition (IMAGE_DPI_HIGHRES), scaled to at most 3072 x 2048 px on a 28-px grid",
               "surya-ocr 0.22.1 surya/settings.py, surya/scripts/config.py, surya/inference/util.py (scale_to_fit)"),
        Source("server: vllm/vllm-openai:v0.20.1, --max-model-len 18000, --mm-processor-kwargs "
               "'{\"min_pixels\": 3136, \"max_pixels\": 6291456}' (also MTP speculative decoding, 2 tokens, and "
               "prefix caching: Datalab's launcher)",
               "surya-ocr 0.22.1 surya/inference/backends/vllm.py (spawn_fn), surya/settings.py (VLLM_DOCKER_IMAGE, "
               "VLLM_MAX_MODEL_LEN, VLLM_ENABLE_MTP)"),
        Source("answer: top-level divs with data-label and data-bbox (0..1000); Image/Figure/Diagram/Complex-Block "
               "not OCR'd; labels canonicalised", "surya-ocr 0.22.1 surya/inference/parsers.py "
               "(parse_full_page_html), surya/layout/label.py, surya/recognition/__init__.py (SKIP_CANON_LABELS)"),
    ),
    scale=1000,
    figure_labels=FIGURE_LABELS,
    stream_options=VLLM_STREAM_OPTIONS,
    stream_extra=VLLM_STREAM_EXTRA,
    # Datalab's launcher runs vLLM 0.20.1's default build (CUDA 13.0: vLLM's default since v0.20).
    images=Images(
        docker=(ServingImage("vllm/vllm-openai:v0.20.1", "0.20.1", (13, 0),
                             "surya-ocr 0.22.1 surya/settings.py (VLLM_DOCKER_IMAGE); CUDA 13.0: vLLM's default "
                             "Docker build since v0.20 (vllm-project/vllm#42738)"),),
        sagemaker_missing="no AWS Deep Learning Container ships vLLM 0.20.1 (Surya OCR 2's, a Qwen3.5 model; the DLC's "
                          "vLLM 0.14.0 predates Qwen3.5): build an image FROM vllm/vllm-openai:v0.20.1 with llm-ocr "
                          "(sagemaker/Dockerfile shows how) and push it to ECR",
    ),
)
