"""MiniCPM-OCR 1.0 (OpenBMB, 1.3B: a SigLIP encoder on a Qwen3.5 language model) at page level:
the page image, then ``Text Recognition:``; its answer is the page's text.

MiniCPM-OCR is a layout-first model: OpenBMB's SDK and Docker pipeline straighten the page, run
the separate PP-DocLayoutV3 layout model, crop each region and send it with the prompt of its
kind (text, table, formula...), then order and join the answers. PP-DocLayoutV3 is not a vLLM
model, so llm-ocr reads the whole page with the text prompt, as it reads GLM-OCR and PaddleOCR-VL:
the row has the text, but no boxes and no figure crops.

Its task prompts are not in a source llm-ocr could read (OpenBMB's SDK, ``minicpm-ocr`` on PyPI,
was not reachable here); ``Text Recognition:`` for text and pages is from a third-party packaging
of the checkpoint that lists them (secondary: docs/models.md says so). Sampling, page image and
context are llm-ocr's choices. vLLM 0.32 has no ``minicpm_ocr`` architecture: OpenBMB's Docker
image (``openbmbofficial/minicpm-ocr``) serves it with the vLLM it bundles.

Sources (docs/models.md, "MiniCPM-OCR 1.0"): OpenBMB/MiniCPM-OCR ``README.md`` and
``docs/minicpm_ocr_1dot0_en.md``; hub.docker.com ``openbmbofficial/minicpm-ocr``;
huggingface.co/infosave/MiniCPM-OCR-1.0-cmf (the prompt table, secondary).
"""

from __future__ import annotations

from dataclasses import dataclass

from llm_ocr.vlm.families.base import Images, Outputs, Prompt, Rendering, Retries, Sampling, Serving, Source
from llm_ocr.vlm.families.generic import MarkdownFamily
from llm_ocr.vlm.view import View

TEXT_PROMPT = "Text Recognition:"


@dataclass(frozen=True)
class MiniCPMOCR(MarkdownFamily):
    """MiniCPM-OCR's answer to ``Text Recognition:``: plain text, parsed as any Markdown answer."""

    def write(self, view: View, kind: str = "page", prompt: str | None = None) -> str:
        """The page's text, a line per block, no markup; figures left out."""
        return "\n".join(e.text for e in view.elements if e.text and e.label != "image")


MINICPM_OCR = MiniCPMOCR(
    dense="bands",  # text without boxes: bands joined by the text their overlap repeats
    name="minicpm-ocr",
    title="MiniCPM-OCR 1.0",
    patterns=(r"minicpm-ocr-1", r"minicpm-ocr$"),
    models=("openbmb/MiniCPM-OCR-1.0",),
    prompt=Prompt(TEXT_PROMPT),
    sampling=Sampling(temperature=0.0, max_tokens=8192),
    retries=Retries((0.0, 0.2, 0.4, 0.6, 0.8, 1.0)),
    rendering=Rendering(dpi=144.0, image_format="png"),
    serving=Serving(
        args=("--no-enable-prefix-caching", "--mm-processor-cache-gb", "0"),
        context=16384,
        weights_gib=3.0,
        kv_bytes_per_token=2 * 6 * 2 * 256 * 2,
        typical_seq_tokens=5000,
        pixels_per_token=28 * 28,
        max_image_pixels=12_845_056,
    ),
    outputs=Outputs(boxes=False, figure_crops=False, html_tables=False, math=False,
                    notes="page-level text; its own pipeline runs PP-DocLayoutV3 first (not in vLLM)"),
    sources=(
        Source("1.3B, a SigLIP encoder on a Qwen3.5 language model; layout (PP-DocLayoutV3) first, then each region",
               "OpenBMB/MiniCPM-OCR README.md, docs/minicpm_ocr_1dot0_en.md; hub.docker.com/r/openbmbofficial/"
               "minicpm-ocr (the pipeline: orientation, PP-DocLayout, region crops, OCR, reading order)"),
        Source("'Text Recognition:' for text, paragraphs, titles and pages (secondary: a third-party packaging)",
               "huggingface.co/infosave/MiniCPM-OCR-1.0-cmf (Prompts)"),
        Source("served by the vLLM its Docker image bundles (CUDA 12.9); no minicpm_ocr architecture in vLLM 0.32",
               "hub.docker.com/r/openbmbofficial/minicpm-ocr; vllm-project/vllm model_executor/models/registry.py"),
    ),
    images=Images(missing=(
        "MiniCPM-OCR is not in upstream vLLM (0.32 has no minicpm_ocr architecture); OpenBMB's Docker image "
        "openbmbofficial/minicpm-ocr (CUDA 12.9 runtime) bundles the vLLM that serves it, but publishes no pinned tag "
        "or vLLM version where llm-ocr could read them: build an image FROM a pinned openbmbofficial/minicpm-ocr tag "
        "with llm-ocr (hf-jobs/Dockerfile shows how)"
    )),
)
