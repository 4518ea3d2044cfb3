"""FireRed-OCR (FireRedTeam, a Qwen3-VL-2B fine-tune) at page level: the page image, then its
long conversion prompt; its answer is Markdown with HTML tables and LaTeX math, figures ignored.

The request is the repository's own (``conv_for_infer.py``: one user message, the image then the
prompt; ``qwen3_vllm_infer.py``: temperature 0, ``max_tokens`` 8192, ``max_model_len`` 32768).
The prompt tells the model to ignore figures, so the answer has no figure and no box: the row has
no crops. The prompt asks for math as ``\\( \\)`` inline and ``\\[ \\]`` display (its text lost the
backslashes: ",(,)", ",\\[,\\]"), the page Markdown's own form; ``$`` math is rewritten too.

Sources (docs/models.md, "FireRed-OCR"): FireRedTeam/FireRed-OCR ``README.md``, ``conv_for_infer.py``,
``qwen3_vllm_infer.py``.
"""

from __future__ import annotations

from dataclasses import dataclass

from llm_ocr.vlm.families.base import STOCK_IMAGES, Outputs, Prompt, Rendering, Retries, Sampling, Serving, Source
from llm_ocr.vlm.families.generic import MarkdownFamily
from llm_ocr.vlm.view import View

#: conv_for_infer.py's PROMPT, verbatim: its indentation, and the commas where backslashes were lost
#: (",(,)", ",\\[,\\]"), are part of what the model was trained with.
FIRERED_PROMPT = (
    "You are an AI assistant specialized in converting PDF images to Markdown format. Please follow"
    " these instructions for the conversion:\n"
    "\n"
    "            1. Text Processing:\n"
    "            - Accurately recognize all text content in the PDF image without guessing or"
    " inferring.\n"
    "            - Convert the recognized text into Markdown format.\n"
    "            - Maintain the original document structure, including headings, paragraphs, lists,"
    " etc.\n"
    "\n"
    "            2. Mathematical Formula Processing:\n"
    "            - Convert all mathematical formulas to LaTeX format.\n"
    "            - Enclose inline formulas with,(,). For example: This is an inline formula,( E ="
    " mc^2,)\n"
    "            - Enclose block formulas with,\\[,\\]. For example:,[,frac{-b,pm,sqrt{b^2 -"
    " 4ac}}{2a},]\n"
    "\n"
    "            3. Table Processing:\n"
    "            - Convert tables to HTML format.\n"
    "            - Wrap the entire table with <table> and </table>.\n"
    "\n"
    "            4. Figure Handling:\n"
    "            - Ignore figures content in the PDF image. Do not attempt to describe or convert"
    " images.\n"
    "\n"
    "            5. Output Format:\n"
    "            - Ensure the output Markdown document has a clear structure with appropriate line"
    " breaks between elements.\n"
    "            - For complex layouts, try to maintain the original document's structure and format"
    " as closely as possible.\n"
    "\n"
    "            Please strictly follow these guidelines to ensure accuracy and consistency in the"
    " conversion. Your task is to accurately convert the content of the PDF image into Markdown"
    " format without adding any extra explanations or comments.\n"
    "            "
)


@dataclass(frozen=True)
class FireRedOCR(MarkdownFamily):
    """FireRed-OCR's Markdown answer, parsed as any Markdown answer."""

    def write(self, view: View, kind: str = "page", prompt: str | None = None) -> str:
        """Markdown in reading order: ``#`` headings, ``\\[ \\]`` display math (as the prompt asks),
        HTML tables; figures ignored, as the prompt says."""
        return "\n\n".join(e.markdown() for e in view.elements if e.text and e.label != "image")


FIRERED_OCR = FireRedOCR(
    dense="bands",  # text without boxes: bands joined by the text their overlap repeats
    name="firered-ocr",
    title="FireRed-OCR",
    patterns=(r"firered-ocr",),
    models=("FireRedTeam/FireRed-OCR",),
    prompt=Prompt(FIRERED_PROMPT),
    sampling=Sampling(temperature=0.0, max_tokens=8192),
    retries=Retries((0.0, 0.2, 0.4, 0.6, 0.8, 1.0)),
    # The sources send image files as they are; 144 DPI and Qwen3-VL's processor cap are llm-ocr's.
    rendering=Rendering(dpi=144.0, max_pixels=16_777_216, image_format="png"),
    serving=Serving(
        args=("--no-enable-prefix-caching", "--mm-processor-cache-gb", "0"),
        context=32768,
        weights_gib=5.0,
        kv_bytes_per_token=2 * 28 * 8 * 128 * 2,  # Qwen3-VL-2B: 28 layers, 8 KV heads of 128
        typical_seq_tokens=6000,
        pixels_per_token=32 * 32,
        max_image_pixels=16_777_216,
    ),
    outputs=Outputs(boxes=False, figure_crops=False, html_tables=True, math=True,
                    notes="page-level Markdown; figures ignored by the prompt"),
    sources=(
        Source("one user message: the image, then the conversion prompt (verbatim)",
               "FireRedTeam/FireRed-OCR conv_for_infer.py (generate_conv)"),
        Source("temperature 0, max_tokens 8192; max_model_len 32768",
               "FireRedTeam/FireRed-OCR qwen3_vllm_infer.py (SamplingParams, EngineArgs)"),
        Source("a fine-tune of Qwen3-VL-2B-Instruct (Qwen3VLForConditionalGeneration)",
               "FireRedTeam/FireRed-OCR README.md (Model Zoo, Quick Start)"),
        Source("--no-enable-prefix-caching --mm-processor-cache-gb 0: llm-ocr's flags for unique page images",
               "vllm-project/recipes Qwen/Qwen3-VL.md (Configuration Tips)"),
    ),
    # A Qwen3-VL fine-tune: any vLLM with Qwen3-VL (since 0.11.0) serves it, so the stock images
    # (vLLM 0.29.0) and the SageMaker DLC (vLLM 0.14.0); the repository pins no vLLM.
    images=STOCK_IMAGES,
)
