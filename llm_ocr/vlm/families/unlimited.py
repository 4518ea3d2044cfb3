"""Unlimited-OCR (Baidu): DeepSeek-OCR's vision stack, a mixture-of-experts decoder whose
generated tokens see only a sliding window of their own (R-SWA), so one answer can run long
without its KV cache growing.

The request is the vLLM recipe's: one user message, the text ``<image>document parsing.``
*before* the image (the model has no chat template; the literal ``<image>`` is where the image
goes), temperature 0, ``skip_special_tokens`` false, and the n-gram blocker's arguments
(``ngram_size`` 35, ``window_size`` 128) for the server's logits processor. The answer opens
every block with ``<|det|>LABEL [x1, y1, x2, y2]<|/det|>`` (the DeepSeek form
``<|ref|>LABEL<|/ref|><|det|>[[x1, y1, x2, y2]]<|/det|>`` is read too), coordinates 0..999 of
the image, and a multi-page answer puts ``<PAGE>`` before each page. llm-ocr sends one page per
request (the recipe's single-image "gundam" mode, with its crops).

Sources (docs/models.md, "Unlimited-OCR"): vllm-project/recipes ``models/baidu/Unlimited-OCR.yaml``;
baidu/Unlimited-OCR ``README.md`` and ``infer.py``; the checkpoint's ``modeling_unlimitedocr.py``
(``re_match``, ``draw_bounding_boxes``); vLLM ``vllm/model_executor/models/unlimited_ocr.py``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from llm_ocr.vlm.families.base import (
    Family,
    Images,
    Outputs,
    Prompt,
    Rendering,
    Retries,
    Sampling,
    ServingImage,
    Source,
)
from llm_ocr.vlm.families.deepseek import SERVING as DEEPSEEK_SERVING
from llm_ocr.vlm.families.deepseek import VLLM_STREAM_EXTRA, VLLM_STREAM_OPTIONS, server_args
from llm_ocr.vlm.families.generic import normalise_markdown
from llm_ocr.vlm.families.markup import display_math
from llm_ocr.vlm.grounding import EOS, det_box, scale_box
from llm_ocr.vlm.layout import LayoutBuilder, PageLayout, Warnings
from llm_ocr.vlm.view import Element, View

#: The recipe's prompt: text first, beginning with the literal image placeholder.
DOCUMENT_PARSING_PROMPT = "<image>document parsing."
#: The n-gram blocker's per-request arguments (single-page input; 1024 is the window for several pages).
NGRAM_XARGS = {"ngram_size": 35, "window_size": 128}
NGRAM_PROCESSOR = "vllm.model_executor.models.unlimited_ocr:NGramPerReqLogitsProcessor"
#: Image tokens of one page in gundam mode with up to 32 local crops (vLLM's unlimited_ocr.py:
#: a 1024-px global view of 256 + 16 tokens, and 100 + 10 per 640-px crop), plus the prompt.
PROMPT_TOKEN_RESERVE = 4096

DET_OPEN, DET_CLOSE, REF_OPEN, REF_CLOSE, PAGE = "<|det|>", "<|/det|>", "<|ref|>", "<|/ref|>", "<PAGE>"
#: The header of a block: ``LABEL [x1, y1, x2, y2]`` (this model's form) or ``[[x1, ...]]``
#: after a ``<|ref|>LABEL<|/ref|>`` (DeepSeek-OCR's), bounded.
_NEW_HEADER = re.compile(r"\s*([A-Za-z_][\w-]{0,63})\s*\[\s*([-\d.,\s]{0,80})\]\s*")
_OLD_HEADER = re.compile(r"\s*\[\[\s*([-\d.,\s]{0,80})\]\]\s*")
_OLD_LABEL = re.compile(r"<\|ref\|>([^<]{0,64})<\|/ref\|>\s*$")
_HEADING = re.compile(r"^[ \t]*#{1,6}[ \t]+")
_NUMBER = re.compile(r"-?\d{1,6}(?:\.\d{1,6})?")
_MAX_BLOCKS = 4000


@dataclass(frozen=True)
class UnlimitedOCR(Family):
    """Unlimited-OCR's answer: blocks opened by ``<|det|>`` headers, boxes on 0..999."""

    def prompt_reserve(self, context: int) -> int:
        return PROMPT_TOKEN_RESERVE

    def parse(self, text: str, *, width: int, height: int, page: int) -> PageLayout:
        warn = Warnings()
        builder = LayoutBuilder(page, width, height, warn=warn)
        text = text.replace(EOS, "").replace(PAGE, "")
        pos = text.find(DET_OPEN)
        head = text if pos == -1 else text[:pos]
        head = _OLD_LABEL.sub("", head)
        if head.strip():
            if pos == -1:
                warn("no <|det|> block headers: the answer is kept as one block without a box")
            builder.text("text", [], _markdown("text", _clean(head)))
        blocks = 0
        while pos != -1:
            if blocks >= _MAX_BLOCKS:
                warn(f"more than {_MAX_BLOCKS} blocks: the rest dropped")
                break
            blocks += 1
            close = text.find(DET_CLOSE, pos)
            following = text.find(DET_OPEN, pos + len(DET_OPEN))
            if close == -1 or (following != -1 and close > following):
                warn(f"block {blocks}: an unclosed <|det|> header, skipped")
                pos = following
                continue
            header = text[pos + len(DET_OPEN) : close]
            end = len(text) if following == -1 else following
            body = text[close + len(DET_CLOSE) : end]
            # The DeepSeek form names the label before the <|det|>: it ends the previous block's text.
            label_of_next = _OLD_LABEL.search(body)
            if label_of_next:
                body = body[: label_of_next.start()]
            label, numbers = _header(header, text[:pos])
            box = scale_box(numbers, width, height) if len(numbers) == 4 else None
            if box is None:
                warn(f"{label} block {blocks}: no usable box")
            content = _clean(body)
            if label == "image":
                builder.figure(label, box, markdown=normalise_markdown(content))
            else:
                builder.text(label, [box] if box else [], _markdown(label, content))
            pos = following
        return builder.build()

    def write(self, view: View, kind: str = "page", prompt: str | None = None) -> str:
        """``<|det|>LABEL [x1, y1, x2, y2]<|/det|>`` (0..999 of the image) then the block's text:
        headings without ``#``, display math in ``\\[ \\]``, tables as HTML, figures empty."""
        return "".join(f"{DET_OPEN}{e.label} [{', '.join(str(v) for v in det_box(e.box))}]{DET_CLOSE}{_text(e)}\n"
                       for e in view.elements)


def _header(header: str, before: str) -> tuple[str, list[float]]:
    """The label and the box numbers of a ``<|det|>`` header (either form)."""
    new = _NEW_HEADER.fullmatch(header)
    if new:
        return new.group(1), [float(v) for v in _NUMBER.findall(new.group(2))]
    old = _OLD_HEADER.fullmatch(header)
    label = _OLD_LABEL.search(before[-80:])
    numbers = [float(v) for v in _NUMBER.findall(old.group(1))] if old else []
    return (label.group(1).strip() if label else "text") or "text", numbers[:4]


def _clean(text: str) -> str:
    """A block's text without tag fragments, with the authors' substitutions (``\\coloneqq``)."""
    for tag in (DET_OPEN, DET_CLOSE, REF_OPEN, REF_CLOSE):
        text = text.replace(tag, "")
    return text.replace("\\coloneqq", ":=").replace("\\eqqcolon", "=:").strip()


def _markdown(label: str, content: str) -> str:
    """A block's Markdown in the common forms; a heading the model wrote without ``#`` gets one."""
    if label in ("equation", "formula"):
        return display_math(content)
    if label in ("title", "sub_title") and content and not _HEADING.match(content):
        content = ("# " if label == "title" else "## ") + content
    return normalise_markdown(content)


def _text(element: Element) -> str:
    if element.label == "equation":
        return f"\\[{element.latex()}\\]"
    return element.text


UNLIMITED_OCR = UnlimitedOCR(
    dense="tiles",  # every block comes with its box: tiles joined by boxes
    name="unlimited-ocr",
    title="Unlimited-OCR",
    patterns=(r"unlimited-ocr",),
    models=("baidu/Unlimited-OCR",),
    prompt=Prompt(DOCUMENT_PARSING_PROMPT, image_first=False),
    # No max_tokens: the context's rest, as infer.py asks for (R-SWA keeps a long answer's
    # attention window constant; the recipe's 8192 is its example's).
    sampling=Sampling(temperature=0.0, extra={"skip_special_tokens": False, "vllm_xargs": NGRAM_XARGS}),
    retries=Retries((0.0, 0.2, 0.4, 0.6, 0.8, 1.0)),
    # Smallest side: one image token, 64 px as DeepSeek-OCR's (the same 640-px crops of 100 tokens).
    rendering=Rendering(dpi=300.0, image_format="png", min_side=64),
    # DeepSeek-OCR's serving (the same flags with this model's logits processor), and its memory
    # figures: 3.3B parameters in bf16 (a 6.6 GB checkpoint), DeepSeek-OCR's encoder; the
    # decoder's 12 layers of plain attention keep 10 KV heads of 128 (the checkpoint's config.json).
    serving=replace(
        DEEPSEEK_SERVING,
        args=server_args(NGRAM_PROCESSOR),
        context=32_768,
        typical_seq_tokens=5000,
        # Gundam mode: each 640-px crop is 100 image tokens and 10 row separators, 32 crops at most.
        pixels_per_token=640 * 640 // 110,
        max_image_pixels=32 * 640 * 640,
    ),
    outputs=Outputs(boxes=True, figure_crops=True, html_tables=True, math=True,
                    notes="<|det|> block headers; boxes 0..999 of the sent image"),
    sources=(
        Source("one user message: the text '<image>document parsing.' then the image (no chat template; the prompt "
               "must begin with a literal <image>); temperature 0; skip_special_tokens false; vllm_xargs "
               "ngram_size 35, window_size 128 (1024 for several pages)",
               "vllm-project/recipes models/baidu/Unlimited-OCR.yaml (guide: Serving recipe, Client Usage)"),
        Source("serve with --trust-remote-code --logits_processors "
               "vllm.model_executor.models.unlimited_ocr:NGramPerReqLogitsProcessor --no-enable-prefix-caching "
               "--mm-processor-cache-gb 0; context 32768; image vllm/vllm-openai:unlimited-ocr",
               "vllm-project/recipes models/baidu/Unlimited-OCR.yaml (base_args, context_length, docker_image)"),
        Source("PDF pages at 300 DPI as PNG, the text before the image, temperature 0, no max_tokens (context 32768)",
               "baidu/Unlimited-OCR infer.py (PDF_DPI, build_content, infer_one), README.md"),
        Source("blocks '<|det|>label [x1, y1, x2, y2]<|/det|>text' (or '<|ref|>label<|/ref|><|det|>[[...]]<|/det|>'), "
               "coordinates x / 999 * width; 'image' blocks are cropped; \\coloneqq -> :=; '<PAGE>' before each page",
               "the checkpoint's modeling_unlimitedocr.py (re_match, draw_bounding_boxes, infer_multi), as published "
               "with baidu/Unlimited-OCR on Hugging Face"),
        Source("Docker images: vllm/vllm-openai:unlimited-ocr (CUDA 13.0), vllm/vllm-openai:unlimited-ocr-cu129 "
               "(CUDA 12.9, 'for Hopper GPUs')", "baidu/Unlimited-OCR README.md (vLLM, Docker Images)"),
    ),
    stream_options=VLLM_STREAM_OPTIONS,
    stream_extra=VLLM_STREAM_EXTRA,
    images=Images(
        docker=(
            ServingImage("vllm/vllm-openai:unlimited-ocr-cu129", "unlimited-ocr build (>= 0.25.0)", (12, 9),
                         "baidu/Unlimited-OCR README.md (Docker Images: 'For Hopper GPUs (CUDA 12.9)')"),
            ServingImage("vllm/vllm-openai:unlimited-ocr", "unlimited-ocr build (>= 0.25.0)", (13, 0),
                         "baidu/Unlimited-OCR README.md (Docker Images: 'Default (CUDA 13.0)'); vllm-project/recipes "
                         "models/baidu/Unlimited-OCR.yaml (docker_image)"),
        ),
        sagemaker_missing="no AWS Deep Learning Container has Unlimited-OCR's vLLM: build an image FROM "
                          "vllm/vllm-openai:unlimited-ocr-cu129 with llm-ocr (sagemaker/Dockerfile shows how) and push "
                          "it to ECR",
    ),
)
