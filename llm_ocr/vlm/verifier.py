"""A verifier: a model that scores how likely a reading of an image is right.

The interface is deliberately small, so that any scorer can sit behind it (docs/routes.md, "A
verifier"): ``POST URL`` with the JSON ``{"image": "data:image/...;base64,...", "text": "...",
"category": "text"}`` answers ``{"probability": 0.93}``, the probability that ``text`` is a
correct reading of ``image``.

MiniCPM-OCR Jev (``openbmb/MiniCPM-OCR-Jev``) is such a scorer, and its model card fixes the unit
it scores: one text, formula or table **region** of a page (its crop from the document), one
candidate reading of it, and the region's category; its services render the candidate
themselves. So a reading is scored region by region (:func:`regions_of`: the reading's own
blocks with boxes, figures left out, each with its category), and the page gets the lowest
region's probability: one bad region is enough to read the page again. A reading without boxes
(a page-level family) is one region, the whole page, category ``text``. The names of the fields
OpenBMB's Jev services take are not in a source llm-ocr could read (docs/models.md, "MiniCPM-OCR
Jev"): a service that names them otherwise needs an adapter to this request.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp

from llm_ocr.vlm.families.base import data_uri

#: The region categories Jev scores (its model card: text, formula, table).
CATEGORIES = ("text", "formula", "table")
_FIGURE_REF = re.compile(r"!\[[^\]]{0,2000}\]\(figure:[^)]{0,200}\)")
_FIGURE_LABELS = re.compile(r"image|picture|figure|chart|diagram|complex-block", re.IGNORECASE)
#: Pixels of page around a region's box in its crop (Surya pads its block crops with 4).
PAD = 4


class VerifierError(Exception):
    """The verifier could not score a reading (the message says why)."""


@dataclass(frozen=True)
class Region:
    """One region of a reading to score: its box in pixels of the image to crop, its text, its category."""

    box: tuple[int, int, int, int]
    text: str
    category: str


def category_of(label: str) -> str:
    """The verifier category of a block label: ``table``, ``formula`` or ``text``."""
    name = label.lower()
    if "table" in name:
        return "table"
    if any(k in name for k in ("equation", "formula", "math")):
        return "formula"
    return "text"


def regions_of(
    blocks: Sequence[Any], width: int, height: int, image_size: tuple[int, int]
) -> list[Region]:
    """The regions of a reading whose ``blocks`` (each with ``label``, ``boxes`` in pixels of a
    ``width`` x ``height`` page, ``text``) have boxes, mapped to an image of ``image_size`` (the
    page rendered again, perhaps at another scale) and padded by :data:`PAD`; figures and blocks
    without text are left out. Empty: the reading has no boxes (score the whole page)."""
    iw, ih = image_size
    sx, sy = iw / max(1, width), ih / max(1, height)
    out = []
    for block in blocks:
        text = _FIGURE_REF.sub("", block.text).strip()
        if not text or not block.boxes or _FIGURE_LABELS.search(block.label):
            continue
        x1 = min(b[0] for b in block.boxes) * sx - PAD
        y1 = min(b[1] for b in block.boxes) * sy - PAD
        x2 = max(b[2] for b in block.boxes) * sx + PAD
        y2 = max(b[3] for b in block.boxes) * sy + PAD
        box = (max(0, int(x1)), max(0, int(y1)), min(iw, int(x2 + 0.999)), min(ih, int(y2 + 0.999)))
        if box[2] - box[0] >= 2 and box[3] - box[1] >= 2:
            out.append(Region(box, text, category_of(block.label)))
    return out


async def verify(url: str, image: bytes, mime: str, text: str, *, category: str = "text",
                 timeout: float = 120.0) -> float:
    """The verifier's probability (0..1) that ``text`` is a correct reading of ``image`` (a
    region of ``category``, or a whole page as ``text``)."""
    if category not in CATEGORIES:
        raise ValueError(f"category must be one of {', '.join(CATEGORIES)}, not {category!r}")
    body = {"image": data_uri(image, mime), "text": text, "category": category}
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as session, \
                session.post(url, json=body) as response:
            if response.status != 200:
                said = (await response.text())[:200]
                raise VerifierError(f"the verifier answered HTTP {response.status}: {said}")
            answer = await response.json(content_type=None)
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
        raise VerifierError(f"the verifier could not be asked: {type(exc).__name__}: {exc}") from exc
    probability = answer.get("probability") if isinstance(answer, dict) else None
    if not isinstance(probability, (int, float)) or isinstance(probability, bool) or not 0 <= probability <= 1:
        raise VerifierError(f"the verifier's answer has no probability between 0 and 1: {str(answer)[:200]}")
    return float(probability)


#: Crops ``[x1, y1, x2, y2]`` pixel boxes from an encoded image, as PNG bytes (off the event loop).
Crop = Callable[[bytes, list[list[int]]], Awaitable[list[bytes]]]


async def verify_reading(url: str, image: bytes, mime: str, markdown: str, regions: Sequence[Region],
                         crop: Crop, *, timeout: float = 120.0) -> float:
    """A reading's probability: the lowest of its ``regions``' (each crop of ``image`` scored
    with its text and category), or the whole page's with ``markdown`` when it has none."""
    if not regions:
        return await verify(url, image, mime, markdown, timeout=timeout)
    crops = await crop(image, [list(r.box) for r in regions])
    scores = await asyncio.gather(*(
        verify(url, piece, "image/png", region.text, category=region.category, timeout=timeout)
        for piece, region in zip(crops, regions)
    ))
    return min(scores)
