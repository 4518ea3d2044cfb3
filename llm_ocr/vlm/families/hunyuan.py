"""HunyuanOCR (Tencent, 1B) at page level: an empty system message, then the page image and the
README's document-parsing prompt; its answer is Markdown with HTML tables and LaTeX formulas.

The request is run_hy_ocr.py's, the script the README recommends for measuring the model over
vLLM: a system message whose content is the empty string (part of the chat shape the model was
trained on, and checked as such), the image, then the prompt; temperature 0, top_p 0.95,
``top_k`` 1 and ``repetition_penalty`` 1.0 in ``extra_body``. The prompt asks for the main body
only: page headers and footers are left out by the model itself.

HunyuanOCR's spotting prompt gives line boxes (``text(x1,y1),(x2,y2)`` in 0..1000) but no
tables, formulas or figures; its parsing prompt gives no boxes at all. llm-ocr reads pages with
the parsing prompt, so the row has no boxes and no figure crops.

Sources (docs/models.md, "HunyuanOCR"): Tencent-Hunyuan/HunyuanOCR ``README.md`` (the prompt
table, ``vllm serve`` flags, the offline ``max_tokens``), ``Hunyuan-OCR-master/Hunyuan-OCR-vllm/
run_hy_ocr.py`` (the request); vllm-project/recipes ``Tencent-Hunyuan/HunyuanOCR.md`` and
``models/tencent/HunyuanOCR.yaml`` (flags, context 32768).
"""

from __future__ import annotations

from dataclasses import dataclass

from llm_ocr.vlm.families.base import STOCK_IMAGES, Outputs, Prompt, Rendering, Retries, Sampling, Serving, Source
from llm_ocr.vlm.families.generic import MarkdownFamily
from llm_ocr.vlm.families.markup import brackets_to_dollars
from llm_ocr.vlm.view import View

#: The README's English document-parsing prompt (its "Application-oriented Prompts" table).
PARSING_PROMPT = (
    "Extract all information from the main body of the document image and represent it in markdown format, "
    "ignoring headers and footers. Tables should be expressed in HTML format, formulas in the document should be "
    "represented using LaTeX format, and the parsing should be organized according to the reading order."
)


@dataclass(frozen=True)
class HunyuanOCR(MarkdownFamily):
    """HunyuanOCR's page-level Markdown answer, parsed as any Markdown answer."""

    def write(self, view: View, kind: str = "page", prompt: str | None = None) -> str:
        """Markdown paragraphs and ``#`` headings in reading order, ``$$`` display formulas,
        HTML tables; figures left out (the parsing prompt gives no boxes)."""
        return "\n\n".join(brackets_to_dollars(e.markdown()) for e in view.elements if e.text and e.label != "image")


HUNYUAN_OCR = HunyuanOCR(
    dense="bands",  # text without boxes: bands joined by the text their overlap repeats
    name="hunyuan-ocr",
    title="HunyuanOCR",
    patterns=(r"hunyuanocr", r"hunyuan-ocr"),
    models=("tencent/HunyuanOCR",),
    prompt=Prompt(PARSING_PROMPT, system=""),
    sampling=Sampling(temperature=0.0, top_p=0.95, top_k=1, repetition_penalty=1.0, max_tokens=16384),
    retries=Retries((0.0, 0.2, 0.4, 0.6, 0.8, 1.0)),
    # The processor's cap (2048 x 2048 pixels, 16-px patches merged 2 x 2): a larger page is
    # shrunk by the server anyway. 144 DPI is llm-ocr's choice (the sources render no PDFs).
    rendering=Rendering(dpi=144.0, max_pixels=2048 * 2048, image_format="jpeg"),
    serving=Serving(
        args=("--no-enable-prefix-caching", "--mm-processor-cache-gb", "0"),
        context=32768,
        weights_gib=3.0,
        kv_bytes_per_token=2 * 24 * 8 * 128 * 2,
        typical_seq_tokens=6000,
        pixels_per_token=32 * 32,
        max_image_pixels=2048 * 2048,
    ),
    outputs=Outputs(boxes=False, figure_crops=False, html_tables=True, math=True,
                    notes="page-level Markdown of the main body (headers and footers left out by the prompt)"),
    sources=(
        Source("an empty system message, then the image and the prompt; temperature 0, top_p 0.95, "
               "top_k 1, repetition_penalty 1.0",
               "Tencent-Hunyuan/HunyuanOCR Hunyuan-OCR-master/Hunyuan-OCR-vllm/run_hy_ocr.py (create_chat_messages, "
               "process_single_item); vllm-project/recipes Tencent-Hunyuan/HunyuanOCR.md"),
        Source("document parsing prompt: the main body as Markdown, headers and footers ignored, tables as HTML, "
               "formulas as LaTeX, in reading order",
               "Tencent-Hunyuan/HunyuanOCR README.md (Application-oriented Prompts)"),
        Source("max_tokens 16384", "Tencent-Hunyuan/HunyuanOCR README.md (Model Inference: SamplingParams)"),
        Source("vllm serve tencent/HunyuanOCR --no-enable-prefix-caching --mm-processor-cache-gb 0; context 32768; "
               "vLLM >= 0.11.0", "Tencent-Hunyuan/HunyuanOCR README.md (Model Deploy); vllm-project/recipes "
               "models/tencent/HunyuanOCR.yaml (base_args, context_length, min_vllm_version)"),
        Source("image processor: 16-px patches merged 2 x 2, 512 x 512 to 2048 x 2048 pixels",
               "huggingface/transformers models/hunyuan_vl/image_processing_hunyuan_vl.py"),
    ),
    # vLLM >= 0.11.0 (the recipe's min_vllm_version): the stock images (vLLM 0.29.0, CUDA 12.9 and
    # 13.0) and the SageMaker DLC (vLLM 0.14.0) all have it.
    images=STOCK_IMAGES,
)
