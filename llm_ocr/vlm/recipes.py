"""Request shapes per model family: prompts and the sampling fields each one needs.

DeepSeek-OCR facts come from ../shared/FACTS.md (DeepSeek-OCR section) and vLLM's recipe
``vllm-project/recipes: DeepSeek/DeepSeek-OCR.md``.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any

DEFAULT_MODEL = "deepseek-ai/DeepSeek-OCR"

# The offline prompts are "<image>\n<|grounding|>Convert the document to markdown." and so on.
# Over the chat API the text part carries no "<image>": vLLM's chat_utils
# (_get_full_multimodal_text_prompt) counts the placeholders already in the text and prepends
# the missing ones joined by "\n", so vLLM itself turns this into exactly the offline prompt.
# Sending "<image>\n" ourselves would also work with vLLM, but other OpenAI-compatible servers
# would see a literal "<image>" string; the vLLM recipe's online example sends none either.
DOCUMENT_PROMPT = "<|grounding|>Convert the document to markdown."
IMAGE_PROMPT = "<|grounding|>OCR this image."
FREE_OCR_PROMPT = "Free OCR."
DESCRIBE_PROMPT = "Describe this image in detail."

# n-gram repetition blocker of vLLM's DeepSeek-OCR logits processor. Values must be JSON
# integers (a string or float fails validation; a missing ngram_size silently disables the
# processor); 128821/128822 are <td> and </td>, which legitimately repeat in tables.
DEEPSEEK_OCR_XARGS: dict[str, Any] = {
    "ngram_size": 30,
    "window_size": 90,
    "whitelist_token_ids": [128821, 128822],
}

#: Upper bound of the image tokens DeepSeek-OCR spends on one page in vLLM's "Gundam" mode:
#: a 1024 global view (256 tokens + 16 row separators) plus up to 6 crops of 640 (100 + 10
#: each), plus the prompt text. ``max_tokens`` leaves this much of the context for the prompt.
PROMPT_TOKEN_RESERVE = 1024


#: What a streamed request adds, for any OpenAI-compatible server: the usage in a last chunk
#: (``stream_options`` is an error on a request that does not stream, in vLLM as in OpenAI).
STREAM_OPTIONS: dict[str, Any] = {"include_usage": True}

#: What a streamed request to vLLM adds: the usage so far in every chunk, so a stream closed
#: early still knows the tokens it cost, and 64 tokens per chunk instead of one (vLLM's
#: per-request ``stream_interval``, ``vllm/entrypoints/openai/chat_completion/protocol.py``;
#: a vLLM without it ignores the unknown field). Each chunk costs the client ~50 us (HTTP
#: chunk parsing, JSON, the loop watch): 64 tokens a chunk keep a page's stream under ~1 ms,
#: and delay noticing a loop by at most 64 tokens.
VLLM_STREAM_OPTIONS: dict[str, Any] = {"include_usage": True, "continuous_usage_stats": True}
VLLM_STREAM_INTERVAL = 64


@dataclass(frozen=True)
class ModelRecipe:
    """How to ask one model family for OCR: prompt and extra request fields."""

    family: str
    ocr_prompt: str
    extra_body: dict[str, Any] = field(default_factory=dict)
    #: Fields a streamed request adds to the request (``stream_options``) and to ``extra_body``.
    stream_options: dict[str, Any] = field(default_factory=lambda: dict(STREAM_OPTIONS))
    stream_extra_body: dict[str, Any] = field(default_factory=dict)

    def with_prompt(self, prompt: str | None) -> ModelRecipe:
        """The same recipe with another OCR prompt (None keeps it)."""
        if prompt is None:
            return self
        return ModelRecipe(self.family, prompt, self.extra_body, self.stream_options, self.stream_extra_body)

    def streamed(self, body: dict[str, Any]) -> dict[str, Any]:
        """``body`` (keyword arguments of ``chat.completions.create``) as a streamed request."""
        extra = {**body.get("extra_body", {}), **self.stream_extra_body}
        return {**body, "stream_options": dict(self.stream_options), "extra_body": extra}


def recipe_for(model: str) -> ModelRecipe:
    """The request recipe for a served model name.

    DeepSeek-OCR (and DeepSeek-OCR-2, served the same way) get the grounding prompt, special
    tokens kept (the grounding tags are special tokens) and the n-gram processor's arguments.
    Any other model gets a plain OCR instruction and no vLLM-specific fields: its server may
    not have the DeepSeek logits processor loaded.
    """
    if "deepseek-ocr" in model.lower():
        return ModelRecipe(
            family="deepseek-ocr",
            ocr_prompt=DOCUMENT_PROMPT,
            extra_body={
                "skip_special_tokens": False,
                "vllm_xargs": dict(DEEPSEEK_OCR_XARGS),
            },
            stream_options=dict(VLLM_STREAM_OPTIONS),
            stream_extra_body={"stream_interval": VLLM_STREAM_INTERVAL},
        )
    return ModelRecipe(
        family="generic",
        ocr_prompt="Convert this page to markdown. Output only the markdown.",
    )


def data_uri(image: bytes, mime: str) -> str:
    """An image as a ``data:`` URI, the form vLLM accepts in an ``image_url`` part."""
    return f"data:{mime};base64,{base64.b64encode(image).decode('ascii')}"


def image_messages(image: bytes, mime: str, prompt: str) -> list[dict[str, Any]]:
    """One user message: the image part first, then the text part (the recipe's order)."""
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
