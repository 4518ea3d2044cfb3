"""GLM-OCR at page level: the page image, then ``Text Recognition:``; its answer is Markdown.

The GLM-OCR SDK runs PP-DocLayoutV3 first and sends each region with its task prompt
(``Text Recognition:``, ``Table Recognition:``, ``Formula Recognition:``); llm-ocr sends the
page with the text prompt, as vLLM's GLM-OCR recipe does, with the SDK's sampling. Its answer
writes inline math ``$ ... $``, display math ``$$`` blocks and tables as HTML.

Sources (docs/models.md, "GLM-OCR"): zai-org/GLM-OCR ``glmocr/config.yaml``,
``glmocr/dataloader/page_loader.py``, ``README.md``, ``examples/result/``; vllm-project/recipes
``GLM/GLM-OCR.md`` and ``models/zai-org/GLM-OCR.yaml``.
"""

from __future__ import annotations

from dataclasses import dataclass

from llm_ocr.vlm.families.base import Outputs, Prompt, Rendering, Retries, Sampling, Serving, Source
from llm_ocr.vlm.families.generic import MarkdownFamily
from llm_ocr.vlm.families.markup import brackets_to_dollars
from llm_ocr.vlm.view import View

TEXT_PROMPT = "Text Recognition:"


@dataclass(frozen=True)
class GlmOCR(MarkdownFamily):
    """GLM-OCR's page-level answer: Markdown, parsed as any Markdown answer."""

    def write(self, view: View, kind: str = "page", prompt: str | None = None) -> str:
        """Markdown paragraphs and ``#`` headings, ``$$`` display math, HTML tables; no figures."""
        return "\n\n".join(brackets_to_dollars(e.markdown()) for e in view.elements if e.text and e.label != "image")


GLM_OCR = GlmOCR(
    dense="bands",  # text without boxes: bands joined by the text their overlap repeats
    name="glm-ocr",
    title="GLM-OCR",
    patterns=(r"glm-ocr",),
    models=("zai-org/GLM-OCR",),
    prompt=Prompt(TEXT_PROMPT),
    sampling=Sampling(temperature=0.0, top_p=0.00001, top_k=1, repetition_penalty=1.1, max_tokens=8192),
    retries=Retries((0.0, 0.2, 0.4, 0.6, 0.8, 1.0)),
    # The SDK resizes every image before sending it (load_image_to_base64): its smart_resize with
    # factor 28 over two frames (t_patch_size 2) of 12,544 .. 71,372,800 pixels, that is 6,272 ..
    # 35,686,400 pixels an image.
    rendering=Rendering(dpi=200.0, max_long_side=3500, max_pixels=71_372_800 // 2, multiple=28,
                        min_pixels=12_544 // 2, image_format="jpeg"),
    serving=Serving(
        args=(),
        context=16384,
        weights_gib=3.0,
        kv_bytes_per_token=2 * 16 * 8 * 128 * 2,
        typical_seq_tokens=6000,
        pixels_per_token=28 * 28,
        max_image_pixels=71_372_800,
    ),
    outputs=Outputs(boxes=False, figure_crops=False, html_tables=True, math=True,
                    notes="page-level Markdown; region boxes need the SDK's PP-DocLayoutV3"),
    sources=(
        Source("image part, then 'Text Recognition:' (also 'Table Recognition:', 'Formula Recognition:')",
               "zai-org/GLM-OCR glmocr/config.yaml (task_prompt_mapping), glmocr/dataloader/page_loader.py "
               "(build_request_from_image); vllm-project/recipes GLM/GLM-OCR.md"),
        Source("max_tokens 8192, temperature 0.0, top_p 0.00001, top_k 1, repetition_penalty 1.1",
               "zai-org/GLM-OCR glmocr/config.yaml (page_loader)"),
        Source("PDF pages at 200 DPI, at most 3500 px a side, sent as JPEG",
               "zai-org/GLM-OCR glmocr/config.yaml (pdf_dpi, image_format), glmocr/dataloader/page_loader.py"),
        Source("every image resized before it is sent: sides rounded to multiples of 28 (14-px patches merged 2 x 2), "
               "12,544 .. 71,372,800 pixels over two frames (t_patch_size 2)",
               "zai-org/GLM-OCR glmocr/utils/image_utils.py (load_image_to_base64, smart_resize), glmocr/config.yaml "
               "(page_loader: t_patch_size, patch_expand_factor, min_pixels, max_pixels)"),
        Source("vllm serve zai-org/GLM-OCR (MTP speculative decoding optional), transformers >= 5",
               "zai-org/GLM-OCR README.md; vllm-project/recipes models/zai-org/GLM-OCR.yaml"),
        Source("answers: $ inline $, $$ display $$ on their own lines, HTML tables",
               "zai-org/GLM-OCR examples/result/paper/paper.md, examples/result/table/table.md"),
    ),
)
