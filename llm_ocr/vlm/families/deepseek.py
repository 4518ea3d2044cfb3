"""DeepSeek-OCR and DeepSeek-OCR-2: grounding markup with boxes in 0..999 of the sent image.

Sources (docs/models.md, "DeepSeek-OCR"): vllm-project/recipes ``DeepSeek/DeepSeek-OCR.md``,
``DeepSeek/DeepSeek-OCR-2.md`` and ``models/deepseek-ai/DeepSeek-OCR*.yaml``;
deepseek-ai/DeepSeek-OCR ``DeepSeek-OCR-master/DeepSeek-OCR-vllm/config.py`` and
``run_dpsk_ocr_pdf.py``; deepseek-ai/DeepSeek-OCR-2 ``DeepSeek-OCR2-master/DeepSeek-OCR2-vllm/config.py``.
"""

from __future__ import annotations

from dataclasses import dataclass

from llm_ocr.vlm.families.base import Family, Outputs, Prompt, Rendering, Retries, Sampling, Serving, Source
from llm_ocr.vlm.grounding import parse_layout, write_grounding, write_plain
from llm_ocr.vlm.layout import PageLayout
from llm_ocr.vlm.view import View

#: The offline prompt is "<image>\n<|grounding|>Convert the document to markdown." Over the chat
#: API the text part carries no "<image>": vLLM's chat_utils (_get_full_multimodal_text_prompt)
#: prepends the missing placeholder and "\n", which yields exactly the offline prompt.
DOCUMENT_PROMPT = "<|grounding|>Convert the document to markdown."
IMAGE_PROMPT = "<|grounding|>OCR this image."
FREE_OCR_PROMPT = "Free OCR."

#: n-gram repetition blocker of vLLM's DeepSeek-OCR logits processor. Values must be JSON
#: integers (a string or float fails validation; a missing ngram_size silently disables the
#: processor); 128821/128822 are <td> and </td>, which legitimately repeat in tables.
NGRAM_XARGS = {"ngram_size": 30, "window_size": 90, "whitelist_token_ids": [128821, 128822]}

#: Image tokens of a page in vLLM's "Gundam" mode (a 1024 global view, 256 tokens + 16 row
#: separators, plus up to 6 crops of 640, 100 + 10 each) plus the prompt: kept out of max_tokens.
PROMPT_TOKEN_RESERVE = 1024

#: vLLM-only streaming fields: the usage so far in every chunk (a stream closed at a loop still
#: knows its tokens) and 64 tokens per chunk (``stream_interval``, vLLM's per-request field).
VLLM_STREAM_OPTIONS = {"include_usage": True, "continuous_usage_stats": True}
VLLM_STREAM_EXTRA = {"stream_interval": 64}

NGRAM_PROCESSOR = "vllm.model_executor.models.deepseek_ocr:NGramPerReqLogitsProcessor"


def server_args(processor: str) -> tuple[str, ...]:
    """vLLM's flags for a model of DeepSeek-OCR's vision stack, as vLLM's recipes serve it: its
    remote code, its n-gram logits processor ``processor``, no prefix caching, no multimodal
    processor cache (DeepSeek-OCR's, and Unlimited-OCR's with its own processor)."""
    return ("--trust-remote-code", "--logits-processors", processor, "--no-enable-prefix-caching",
            "--mm-processor-cache-gb", "0")


#: How llm-ocr starts vLLM for DeepSeek-OCR: the recipe's flags and context, and the memory
#: figures of its decoder (12 layers of plain attention, 10 KV heads of 128, bf16) that size the
#: GPU presets. A family of the same stack starts from it (``dataclasses.replace``).
SERVING = Serving(
    args=server_args(NGRAM_PROCESSOR),
    context=8192,
    weights_gib=9.0,
    kv_bytes_per_token=2 * 12 * 10 * 128 * 2,
    typical_seq_tokens=3000,
)


@dataclass(frozen=True)
class DeepSeekOCR(Family):
    """The grounding recipe of vLLM's DeepSeek-OCR guide (DeepSeek-OCR-2 is served the same way)."""

    def prompt_reserve(self, context: int) -> int:
        return PROMPT_TOKEN_RESERVE

    def image_tokens(self, width: int, height: int) -> int | None:
        # A 1024-px global view plus at most a few 640-px tiles, whatever the image's size: within
        # PROMPT_TOKEN_RESERVE for any piece (docs/facts.md#deepseek-ocr).
        return None

    def page_texts(self) -> tuple[str | None, ...]:
        # The document prompt, and DeepSeek's other OCR prompts (config.py); an "<image>\n"
        # placeholder of the offline form gives vLLM the same prompt (it adds only missing ones).
        texts = (self.prompt.text, IMAGE_PROMPT, FREE_OCR_PROMPT)
        return texts + tuple(f"<image>\n{t}" for t in texts if t)

    def parse(self, text: str, *, width: int, height: int, page: int) -> PageLayout:
        return parse_layout(text, width=width, height=height, page=page)

    def write(self, view: View, kind: str = "page", prompt: str | None = None) -> str:
        """Grounding markup, headings as Markdown for the document prompt; no ``#`` for "OCR this
        image."; the bare text for "Free OCR." (deepseek-ai/DeepSeek-OCR config.py's prompts)."""
        asked = (prompt or self.prompt.text or "").removeprefix("<image>\n")
        if asked == FREE_OCR_PROMPT:
            return write_plain(view.elements)
        return write_grounding(view.elements, markdown=asked != IMAGE_PROMPT)


DEEPSEEK_OCR = DeepSeekOCR(
    name="deepseek-ocr",
    title="DeepSeek-OCR",
    patterns=("deepseek-ocr",),
    models=("deepseek-ai/DeepSeek-OCR", "deepseek-ai/DeepSeek-OCR-2"),
    prompt=Prompt(DOCUMENT_PROMPT),
    sampling=Sampling(temperature=0.0, extra={"skip_special_tokens": False, "vllm_xargs": NGRAM_XARGS}),
    retries=Retries((0.0, 0.2, 0.4, 0.6, 0.8, 1.0)),
    # Smallest side: one image token. DeepSeek-OCR's Gundam mode makes a 640-px crop 100 tokens
    # (10 x 10: the DeepEncoder's 16-px patches compressed 16 times, deepseek-ai/DeepSeek-OCR
    # deepencoder), so a token is 64 px a side.
    rendering=Rendering(dpi=144.0, image_format="jpeg", min_side=64),
    serving=SERVING,
    outputs=Outputs(boxes=True, figure_crops=True, html_tables=True, math=True,
                    notes="grounding tags; boxes 0..999 of the sent image"),
    sources=(
        Source("prompt, image before text, temperature 0, skip_special_tokens false, vllm_xargs "
               "(ngram_size 30, window_size 90, whitelist <td> </td>)",
               "vllm-project/recipes DeepSeek/DeepSeek-OCR.md (Online OCR serving); DeepSeek/DeepSeek-OCR-2.md"),
        Source("server flags: --trust-remote-code, the n-gram logits processor, --no-enable-prefix-caching, "
               "--mm-processor-cache-gb 0; context 8192",
               "vllm-project/recipes models/deepseek-ai/DeepSeek-OCR.yaml and DeepSeek-OCR-2.yaml (base_args, "
               "context_length)"),
        Source("the grounding prompt '<image>\\n<|grounding|>Convert the document to markdown.'",
               "deepseek-ai/DeepSeek-OCR DeepSeek-OCR-master/DeepSeek-OCR-vllm/config.py; "
               "deepseek-ai/DeepSeek-OCR-2 DeepSeek-OCR2-master/DeepSeek-OCR2-vllm/config.py"),
        Source("boxes 0..999 of the image: x_px = int(x / 999 * width); figures are 'image' blocks; "
               "\\coloneqq -> :=, \\eqqcolon -> =:",
               "deepseek-ai/DeepSeek-OCR DeepSeek-OCR-master/DeepSeek-OCR-vllm/run_dpsk_ocr_pdf.py"),
        Source("pages rendered at 144 DPI",
               "deepseek-ai/DeepSeek-OCR run_dpsk_ocr_pdf.py (pdf_to_images_high_quality)"),
    ),
    stream_options=VLLM_STREAM_OPTIONS,
    stream_extra=VLLM_STREAM_EXTRA,
    dense="tiles",  # every block comes with its box: tiles joined by boxes
)
