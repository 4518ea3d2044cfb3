"""Qwen2-VL's ``smart_resize``: the image size a model family's processor or client computes,
one copy for every family that resizes this way, and for the renderer that sizes page images so.

It keeps an image's aspect while making both sides multiples of ``factor`` (the vision encoder's
patch times its merge) and its pixel count fit ``min_pixels`` .. ``max_pixels``. Who applies it
differs: Qwen2.5-VL's and dots.ocr's processors resize on the server, so their answers' boxes
are in pixels of the resized image (``llm_ocr/vlm/families/qwen_vl.py``, ``dots.py``);
Infinity-Parser2's, GLM-OCR's and Surya's clients resize before they send, and so does llm-ocr
for them (``Rendering.multiple`` in ``llm_ocr/vlm/families/base.py``).

Pure arithmetic, importing nothing of the package: every layer may use it.

Sources: huggingface/transformers ``models/qwen2_vl/image_processing_qwen2_vl.py``
(``smart_resize``); QwenLM/Qwen3-VL ``qwen-vl-utils/src/qwen_vl_utils/vision_process.py``
(``smart_resize``, the one Infinity-Parser2's ``utils/image.py`` imports); rednote-hilab/dots.ocr
``dots_ocr/utils/image_utils.py`` (``smart_resize``, which caps again after raising a small image).
"""

from __future__ import annotations

import math


def smart_resize(height: int, width: int, factor: int, min_pixels: int, max_pixels: int, *,
                 recap: bool = False) -> tuple[int, int]:
    """``(height, width)`` of an image of ``height`` x ``width`` pixels resized so that both
    sides are multiples of ``factor`` (at least ``factor``), its pixel count within
    ``min_pixels`` .. ``max_pixels``, its aspect kept as closely as those allow.

    The sides are rounded to the nearest multiple; past ``max_pixels`` the image is scaled down
    and the sides floored, under ``min_pixels`` scaled up and ceiled. ``recap`` (dots.ocr's copy)
    caps again when raising a small image took it past ``max_pixels``; the others do not.
    """
    h_bar = max(factor, round(height / factor) * factor)
    w_bar = max(factor, round(width / factor) * factor)
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
        if recap and h_bar * w_bar > max_pixels:
            beta = math.sqrt((h_bar * w_bar) / max_pixels)
            h_bar = max(factor, math.floor(h_bar / beta / factor) * factor)
            w_bar = max(factor, math.floor(w_bar / beta / factor) * factor)
    return h_bar, w_bar
