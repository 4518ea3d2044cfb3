"""What the simulated server learns from a received image: size, digest, known page, colour."""

from __future__ import annotations

import hashlib
import io
from dataclasses import dataclass
from typing import Any

from llm_ocr.vlm.box import Box
from llm_ocr.vlm.families.base import Rendering

from ..frame.protocol import ApiError
from . import content
from .corpus import FOUND_KEPT, CorpusIndex, KnownPage, fingerprint_image
from .crops import locate, locate_reshaped


@dataclass
class ImageFacts:
    """What the server learned from a received image."""

    width: int
    height: int
    sha256: bytes
    known: KnownPage | None = None
    colour: str = "white"
    #: Degrees the image had to be turned clockwise to match its known page (0: as displayed).
    turned: int = 0
    #: The part of ``known`` the image shows, as page fractions ``(x0, y0, x1, y1)``, when it
    #: is a crop of it (a tile of a dense page); None for the whole page.
    region: Box | None = None


def analyse_image(
    data: bytes,
    corpus: CorpusIndex | None,
    need_colour: bool,
    any_aspect: bool = False,
    turns: bool = False,
    crops_at: float | None = None,
    rendering: Rendering | None = None,
) -> ImageFacts:
    """Decode an image (cheaply, in draft mode for JPEG), look it up in the corpus: a whole
    known page, else (with ``crops_at``, the DPI the client rendered pages at) a crop of one
    (see :mod:`.crops`; also at the scale of a family's own ``rendering``).

    Runs in a worker thread: decoding a full page PNG takes tens of milliseconds.
    """
    from PIL import Image

    digest = hashlib.sha256(data).digest()
    try:
        img = Image.open(io.BytesIO(data))  # reads the header: the size, not the pixels
        width, height = img.size
        if img.format == "JPEG":
            img.draft("RGB", (256, 256))  # decode at 1/2..1/8 scale: we only need a thumbnail
    except Exception as exc:  # noqa: BLE001 - PIL raises many types for bad input; all mean "bad image"
        raise ApiError(400, f"Failed to load image: {exc}") from None
    facts = ImageFacts(width, height, digest)
    key = (digest, any_aspect, turns, crops_at, rendering)
    index = corpus if corpus is not None and len(corpus) else None
    found = None
    if index is not None:
        with index.found_lock:
            found = index.found.get(key)
            if found is not None:
                index.found.move_to_end(key)
    if found is None or need_colour:
        # Pixels only when they are looked at. An image found before by its digest is the same
        # bytes, which decoded then (a family's pieces repeat: half the images of the every-family
        # strip sweep had been sent before).
        try:
            img.load()
        except Exception as exc:  # noqa: BLE001 - as above
            raise ApiError(400, f"Failed to load image: {exc}") from None
    if found is not None:
        facts.known, facts.turned, facts.region = found
    elif index is not None:
        _find(facts, img, index, any_aspect, turns, crops_at, rendering)
        with index.found_lock:
            index.found[key] = (facts.known, facts.turned, facts.region)
            while len(index.found) > FOUND_KEPT:
                index.found.popitem(last=False)
    if need_colour:
        facts.colour = content.dominant_colour(img)
    return facts


def _find(
    facts: ImageFacts, img: Any, corpus: CorpusIndex, any_aspect: bool, turns: bool, crops_at: float | None,
    rendering: Rendering | None,
) -> None:
    """Look the image up in the corpus (see :func:`analyse_image`); sets ``facts``' known page,
    turn and region."""
    width, height = facts.width, facts.height
    # A page resized to a square (MinerU's layout pass) keeps its fingerprint, not its aspect.
    facts.known = corpus.match(fingerprint_image(img), None if any_aspect else width / height)
    # A page sent turned (a model that reads rotation, olmOCR-2) is found turned back.
    for clockwise in (90, 180, 270) if turns and facts.known is None else ():
        turned = img.convert("L").rotate(-clockwise, expand=True)
        facts.known = corpus.match(fingerprint_image(turned), turned.width / turned.height)
        if facts.known is not None:
            facts.turned = clockwise
            break
    if facts.known is None and any_aspect and crops_at is not None:
        # A piece of a long page resized to another shape (a segment in MinerU's square).
        crop = locate_reshaped(img, width, height, corpus.pages)
        if crop is not None:
            facts.known, facts.region = crop.page, crop.region
    elif facts.known is None and crops_at is not None:
        crop = locate(img, width, height, corpus.pages, crops_at, rendering)
        if crop is not None:
            facts.known, facts.region = crop.page, crop.region
