"""Request helpers shared by every stage: the default model, prompts, images as data URIs.

The recipe of each model family (prompt, sampling, server flags, parser, loop policy) lives in
:mod:`llm_ocr.vlm.families`; :func:`recipe_for` is its entry point by model name.
"""

from __future__ import annotations

from typing import Any

from llm_ocr.vlm.defaults import DEFAULT_MODEL, DESCRIBE_PROMPT
from llm_ocr.vlm.families import Family, family_for
from llm_ocr.vlm.families.base import data_uri
from llm_ocr.vlm.families.deepseek import (
    DOCUMENT_PROMPT,
    FREE_OCR_PROMPT,
    IMAGE_PROMPT,
    NGRAM_XARGS,
    PROMPT_TOKEN_RESERVE,
)

__all__ = [
    "DEEPSEEK_OCR_XARGS", "DEFAULT_MODEL", "DESCRIBE_PROMPT", "DOCUMENT_PROMPT", "FREE_OCR_PROMPT", "IMAGE_PROMPT",
    "PROMPT_TOKEN_RESERVE", "clamp_max_tokens", "data_uri", "image_messages", "recipe_for",
]  # fmt: skip

DEEPSEEK_OCR_XARGS = NGRAM_XARGS


def recipe_for(model: str, recipe: str | None = None) -> Family:
    """The recipe of the family serving ``model`` (``recipe``: a family named explicitly)."""
    return family_for(model, recipe)


def image_messages(image: bytes, mime: str, prompt: str) -> list[dict[str, Any]]:
    """One user message: the image part first, then the text part (DeepSeek-OCR's order)."""
    return [
        {
            "role": "user",
            "content": [
                {"type": "image_url", "image_url": {"url": data_uri(image, mime)}},
                {"type": "text", "text": prompt},
            ],
        }
    ]


def clamp_max_tokens(requested: int | None, max_model_len: int | None) -> int:
    """``max_tokens`` for a request: the requested value, never above what the context allows.

    vLLM rejects a request whose prompt plus ``max_tokens`` exceeds ``--max-model-len``.
    """
    context = max_model_len or 8192
    ceiling = max(256, context - PROMPT_TOKEN_RESERVE)
    if requested is None:
        return ceiling
    return max(1, min(requested, ceiling))
