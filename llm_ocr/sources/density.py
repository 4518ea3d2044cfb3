"""How much text a page holds, estimated before the model reads it (in the render worker).

A page whose text is longer than one answer may hold (a newspaper page: 25,000 characters and
more) is better read in tiles at once than read whole, cut off at ``max_tokens`` and read again
(:mod:`llm_ocr.stages.pieces.plan`). Two cheap estimates, taken while the page is rendered:

- **the text layer** of a PDF page: its character count, when the layer is usable for counting
  (at least ``min_layer_chars`` characters, mostly letters and digits: a scan's invisible
  OCR layer counts too; glyph-id garbage does not);
- **the ink** of any other page (scans, images): text is edges. The page is reduced to at most
  ``analysis_side`` pixels, its horizontal grey-level steps summed (flat figures and tints
  add almost none), and the line pitch found as the period of the rows' profile. A character
  of a font whose lines are ``p`` pixels apart adds about ``EDGE_PER_CHAR * p**2`` of edge: the
  estimate is the edge sum over that. Measured on the benchmark's pages against their text
  layers (Helvetica 10 pt with figures and tables, a 7-column page of 6 pt): 0.75 to 1.35 times
  the layer's count at 72 and 144 DPI, 0.65 to 0.8 at 36 DPI (a normal page 2,000-5,000
  characters, the dense one 25,000).
  Pages whose lines are under ``min_pitch`` pixels apart after the reduction (6 pt text at
  36 DPI) get no estimate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

from llm_ocr.options import dense


@dataclass(frozen=True)
class TextEstimate:
    """The characters of text a page is estimated to hold, and what the estimate is from."""

    chars: int
    source: Literal["text layer", "ink"]
    #: The text layer itself (None for an ink estimate): what an answer that ran out of tokens
    #: is compared with, to tell a page longer than one answer from a loop
    #: (:func:`llm_ocr.stages.pieces.rate.coverage`).
    text: str | None = field(default=None, repr=False, compare=False)

    def describe(self) -> str:
        """For rows and logs: ``its text layer holds 24,883 characters``."""
        if self.source == "text layer":
            return f"its text layer holds {self.chars:,} characters"
        return f"its ink looks like ~{self.chars:,} characters"


def text_layer_estimate(page: Any) -> TextEstimate | None:
    """The character count of a pypdfium2 page's text layer, if it is usable for counting."""
    textpage = page.get_textpage()
    try:
        count = textpage.count_chars()
        if count < dense().min_layer_chars:
            return None
        text = textpage.get_text_range()
    finally:
        textpage.close()
    visible = [c for c in text if not c.isspace()]
    if not visible or sum(c.isalnum() for c in visible) < dense().min_alnum_share * len(visible):
        return None
    return TextEstimate(len(text), "text layer", text)


def ink_estimate(image: Any) -> TextEstimate | None:
    """The characters a page image (PIL) seems to hold, from its edges and line pitch (see the
    module docstring); None when no regular text lines are found."""
    import numpy as np

    grey = image.convert("L")
    factor = math.ceil(max(grey.size) / dense().analysis_side)
    if factor > 1:
        grey = grey.reduce(factor)
    pixels = np.asarray(grey, dtype=np.float32)
    if pixels.shape[0] < dense().min_estimate_pitches * dense().min_pitch or pixels.shape[1] < 2:
        return None
    edges = np.abs(np.diff(pixels, axis=1)) / 255.0
    pitch = line_pitch(edges.mean(axis=1))
    if pitch is None:
        return None
    return TextEstimate(round(float(edges.sum()) / (dense().edge_per_char * pitch * pitch)), "ink")


def line_pitch(profile: Any) -> int | None:
    """The period of a page's rows' profile in pixels (the distance between text lines): the
    first strong peak of its autocorrelation; None without one, or when it is under
    ``min_pitch`` (a later peak would be a multiple of the period, not the period)."""
    import numpy as np

    values = profile - profile.mean()
    n = len(values)
    spectrum = np.fft.rfft(values, 2 * n)
    correlation = np.fft.irfft(spectrum * np.conj(spectrum))[:n]
    if correlation[0] <= 0:
        return None
    correlation = correlation / correlation[0]
    for lag in range(2, int(n * dense().pitch_search_share)):
        here = correlation[lag]
        if here >= dense().min_periodicity and here >= correlation[lag - 1] and here >= correlation[lag + 1]:
            return lag if lag >= dense().min_pitch else None
    return None
