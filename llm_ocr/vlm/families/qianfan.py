"""Qianfan-OCR (Baidu, 4.7B: Qianfan-ViT and Qwen3-4B) at page level: the page image, then
``Parse this document to Markdown.``; its answer is Markdown.

Layout-as-Thought, the model's optional thinking phase, is the ``qianfan-ocr-think`` recipe: the
same request with ``chat_template_kwargs: {"enable_thinking": true}`` (what
``apply_chat_template(..., enable_thinking=True)`` does in the authors' example). The model then
writes a layout analysis (boxes, element types, reading order) between ``<think>`` and
``</think>`` before the Markdown. Its format is not published, so llm-ocr keeps it in the row's
``raw`` and parses only the Markdown after ``</think>`` (a server started with a reasoning parser
moves it out of the answer altogether). Neither recipe gives boxes or figure crops.

The authors name other task prompts (table, formula, chart, scene text, key information) but
publish only the document-parsing one with the model; llm-ocr sends that one.

Sources (docs/models.md, "Qianfan-OCR"): huggingface/transformers
``docs/source/en/model_doc/qianfan_ocr.md`` (contributed by the Baidu Qianfan team: the prompt, the
thinking switch, the architecture: 448 x 448 tiles of 256 tokens, at most 4,096 tokens an image, a
32K context); vLLM's ``qianfan_ocr.py`` (the architecture served natively).
"""

from __future__ import annotations

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
from llm_ocr.vlm.families.generic import MarkdownFamily, normalise_markdown
from llm_ocr.vlm.layout import LayoutBuilder, PageLayout
from llm_ocr.vlm.view import View

PARSE_PROMPT = "Parse this document to Markdown."
THINK_END = "</think>"
#: Tiles of 448 x 448 pixels, 256 tokens each, at most 4,096 image tokens: 16 tiles of pixels.
TILE_PIXELS = 448 * 448
MAX_IMAGE_PIXELS = 16 * TILE_PIXELS


@dataclass(frozen=True)
class QianfanOCR(MarkdownFamily):
    """Qianfan-OCR's Markdown answer; with Layout-as-Thought, the Markdown after ``</think>``."""

    #: Whether the request turns the thinking phase on (``chat_template_kwargs``).
    thinking: bool = False

    def prompt_reserve(self, context: int) -> int:
        # Up to 4,096 image tokens (16 tiles) and a thumbnail tile, besides the prompt text.
        return min(context // 2, 4096 + 256 + 512)

    def parse(self, text: str, *, width: int, height: int, page: int) -> PageLayout:
        builder = LayoutBuilder(page, width, height)
        _, ended, answer = text.rpartition(THINK_END)
        if not ended:
            answer = text
            if self.thinking and "<think>" in text:
                # Cut off while thinking: the layout analysis is not the page's text.
                builder.warn("the answer ended inside its layout analysis (<think> without </think>): no text")
                return builder.build()
        builder.text("text", [], normalise_markdown(answer))
        return builder.build()

    def write(self, view: View, kind: str = "page", prompt: str | None = None) -> str:
        """Markdown in reading order (``#`` headings, ``\\[ \\]`` math, HTML tables), figures left
        out; with thinking, a layout analysis in ``<think>`` first. Its lines (an element type and
        a box in thousandths) stand in for the unpublished format, which the parser never reads."""
        markdown = "\n\n".join(e.markdown() for e in view.elements if e.text and e.label != "image")
        if not self.thinking:
            return markdown
        rows = [f"{e.label} {list(e.box.scaled(1000, 1000).rounded().clamped(1000, 1000))}" for e in view.elements]
        return "<think>\n" + "\n".join(rows) + "\n" + THINK_END + "\n\n" + markdown


_SOURCES = (
    Source("one user message: the image, then 'Parse this document to Markdown.'",
           "huggingface/transformers docs/source/en/model_doc/qianfan_ocr.md (Document parsing)"),
    Source("Layout-as-Thought: enable_thinking=True in apply_chat_template; the layout analysis comes first",
           "huggingface/transformers docs/source/en/model_doc/qianfan_ocr.md (Layout-as-Thought)"),
    Source("Qianfan-ViT, 256 tokens per 448 x 448 tile, at most 4,096 tokens an image; Qwen3-4B with a 32K context",
           "huggingface/transformers docs/source/en/model_doc/qianfan_ocr.md (Overview)"),
    Source("served natively by vLLM (QianfanOCRForConditionalGeneration)",
           "vllm-project/vllm vllm/model_executor/models/qianfan_ocr.py, registry.py"),
)
_COMMON = dict(
    models=("baidu/Qianfan-OCR",),
    prompt=Prompt(PARSE_PROMPT),
    retries=Retries((0.0, 0.2, 0.4, 0.6, 0.8, 1.0)),
    # The sources render no PDFs: 144 DPI is llm-ocr's choice, capped at the 16 tiles the encoder reads.
    rendering=Rendering(dpi=144.0, max_pixels=MAX_IMAGE_PIXELS, image_format="png"),
    serving=Serving(
        args=("--no-enable-prefix-caching", "--mm-processor-cache-gb", "0"),
        context=32768,
        weights_gib=10.0,
        kv_bytes_per_token=2 * 36 * 8 * 128 * 2,  # Qwen3-4B: 36 layers, 8 KV heads of 128
        typical_seq_tokens=6000,
        pixels_per_token=TILE_PIXELS // 256,
        max_image_pixels=MAX_IMAGE_PIXELS,
    ),
    # vLLM 0.32.0 serves the architecture (the real-vLLM tier runs it); which earlier release first
    # had it was not checked, so the launches pin 0.32.0 rather than the stock 0.29.0.
    images=Images(
        docker=(
            ServingImage("vllm/vllm-openai:v0.32.0-cu129", "0.32.0", (12, 9),
                         "vllm-project/vllm registry.py (QianfanOCRForConditionalGeneration in 0.32.0); the -cu129 "
                         "tag as the v0.29.0 release notes' Docker Images name them"),
            ServingImage("vllm/vllm-openai:v0.32.0", "0.32.0", (13, 0),
                         "vllm-project/vllm registry.py (QianfanOCRForConditionalGeneration in 0.32.0); the default "
                         "tag is CUDA 13.0 since v0.20 (vllm-project/vllm#42738)"),
        ),
        sagemaker_missing="the AWS vLLM Deep Learning Container (vLLM 0.14.0) predates Qianfan-OCR (released 2026-03): "
                          "build an image FROM vllm/vllm-openai:v0.32.0-cu129 with llm-ocr (sagemaker/Dockerfile shows "
                          "how) and push it to ECR",
    ),
)

QIANFAN_OCR_THINK = QianfanOCR(
    dense="bands",  # text without boxes: bands joined by the text their overlap repeats
    name="qianfan-ocr-think",
    title="Qianfan-OCR (Layout-as-Thought)",
    patterns=(),  # chosen with --recipe: the served name is the same model's
    sampling=Sampling(temperature=0.0, extra={"chat_template_kwargs": {"enable_thinking": True}}),
    outputs=Outputs(boxes=False, figure_crops=False, html_tables=True, math=True,
                    notes="a layout analysis in <think> (kept in raw), then page-level Markdown"),
    sources=_SOURCES,
    thinking=True,
    **_COMMON,  # type: ignore[arg-type]
)

QIANFAN_OCR = QianfanOCR(
    dense="bands",  # text without boxes: bands joined by the text their overlap repeats
    name="qianfan-ocr",
    title="Qianfan-OCR",
    patterns=(r"qianfan-ocr",),
    sampling=Sampling(temperature=0.0),
    outputs=Outputs(boxes=False, figure_crops=False, html_tables=True, math=True, notes="page-level Markdown"),
    sources=_SOURCES,
    **_COMMON,  # type: ignore[arg-type]
)
