"""A recipe per OCR model family, chosen from the served model name (or ``--recipe NAME``).

One module per family holds its request, its server's flags, its parser, its writer (the
answer its model gives, which the simulated server sends) and its loop policy (see
:mod:`.base`); docs/models.md cites where each fact comes from. :func:`family_for` picks the
family of a served model name; a model no family matches gets :data:`~.generic.GENERIC`.

To add a family: write its module (a :class:`~.base.Family` instance with ``parse`` and
``write`` and, if one page takes several requests, ``read``), list it in :data:`FAMILIES` and
add its section to docs/models.md. The round-trip tests (tests/vlm/test_family_round_trip.py)
run on every family listed here.
"""

from __future__ import annotations

from llm_ocr.vlm.families.base import Family
from llm_ocr.vlm.families.chandra import CHANDRA_1, CHANDRA_2
from llm_ocr.vlm.families.deepseek import DEEPSEEK_OCR
from llm_ocr.vlm.families.docling import GRANITE_DOCLING
from llm_ocr.vlm.families.dots import DOTS_OCR
from llm_ocr.vlm.families.firered import FIRERED_OCR
from llm_ocr.vlm.families.generic import GENERIC
from llm_ocr.vlm.families.glm_ocr import GLM_OCR
from llm_ocr.vlm.families.hunyuan import HUNYUAN_OCR
from llm_ocr.vlm.families.infinity import INFINITY_PARSER2
from llm_ocr.vlm.families.lighton import LIGHTON_OCR, LIGHTON_OCR_BBOX
from llm_ocr.vlm.families.lighton3 import LIGHTON_OCR_3, LIGHTON_OCR_3_1B
from llm_ocr.vlm.families.mineru import MINERU
from llm_ocr.vlm.families.minicpm_ocr import MINICPM_OCR
from llm_ocr.vlm.families.nanonets import NANONETS_OCR
from llm_ocr.vlm.families.olmocr import OLMOCR
from llm_ocr.vlm.families.paddleocr import PADDLEOCR_VL
from llm_ocr.vlm.families.qianfan import QIANFAN_OCR, QIANFAN_OCR_THINK
from llm_ocr.vlm.families.qwen_vl import QWEN3_VL, QWEN25_VL
from llm_ocr.vlm.families.surya import SURYA_OCR
from llm_ocr.vlm.families.unlimited import UNLIMITED_OCR

#: Every family, in the order names are matched (a more specific pattern first).
FAMILIES: tuple[Family, ...] = (
    DEEPSEEK_OCR,
    UNLIMITED_OCR,
    OLMOCR,
    DOTS_OCR,
    CHANDRA_2,  # before Chandra 1: "chandra" matches both names
    CHANDRA_1,
    MINERU,
    GRANITE_DOCLING,
    PADDLEOCR_VL,
    GLM_OCR,
    NANONETS_OCR,
    INFINITY_PARSER2,
    LIGHTON_OCR_3_1B,  # before LightOnOCR-3: its names contain the family's
    LIGHTON_OCR_3,
    LIGHTON_OCR_BBOX,  # before LightOnOCR: its names contain the plain model's
    LIGHTON_OCR,
    SURYA_OCR,
    QIANFAN_OCR,
    QIANFAN_OCR_THINK,  # --recipe only: the same served name as Qianfan-OCR
    MINICPM_OCR,
    HUNYUAN_OCR,
    FIRERED_OCR,  # a Qwen3-VL fine-tune: before the generic Qwen3-VL recipe
    # The generic VLMs last: their fine-tunes (olmOCR-2, Nanonets, Chandra) have their own recipes.
    QWEN25_VL,
    QWEN3_VL,
    GENERIC,
)


class UnknownRecipe(ValueError):
    """``--recipe`` names no family."""


def names() -> list[str]:
    """The family names ``--recipe`` accepts."""
    return [f.name for f in FAMILIES]


def family_named(name: str) -> Family:
    """The family called ``name`` (``--recipe``); raises :class:`UnknownRecipe` with the choices."""
    for family in FAMILIES:
        if family.name == name:
            return family
    raise UnknownRecipe(f"unknown recipe {name!r}; choose one of {', '.join(names())}")


def family_for(model: str, recipe: str | None = None) -> Family:
    """The family of served model ``model``, or the one ``recipe`` names (a fine-tune served
    under another name); the generic family when no pattern matches."""
    if recipe:
        return family_named(recipe)
    for family in FAMILIES:
        if family.matches(model):
            return family
    return GENERIC


__all__ = ["FAMILIES", "Family", "UnknownRecipe", "family_for", "family_named", "names"]
