"""What the CPU engine tells about a figure when asked to describe its crop.

A describe request carries only the crop: no page, no position, no caption. The engine cannot
see a figure's meaning, but it did see the page the figure came from when it answered that
page's Extract request, and there it found the caption beside the figure and the text inside it
(:mod:`.figures`). :class:`FigureMemory` keeps those for the figures of the pages read last,
keyed by the crop the client will make (the same box, :func:`~llm_ocr.vlm.grounding.scale_box`
of the markup's 0..999 box, over the same pixels), so a describe request for that crop gets
them back:

    Caption: Figure 1: Pages processed per minute on five machines.
    Text in the figure: Pages per minute · alpha · beta · gamma

A crop the engine has not seen (another server read the page, the engine restarted between
``llm-ocr extract`` and ``llm-ocr describe``, or the image is not an Extract crop at all) gets
the text read from the image itself ("Text in the image: ...", as the engine cannot tell that it
is a figure) and no caption. What is not known is left out: nothing is invented, and no
placeholder ("none found") stands in for one part while the other is known. A figure with
neither a caption nor any text gets one line that says what the engine saw and that it cannot
describe more (:data:`NOT_DESCRIBED_LABEL`): the layout model's class for the region and its size
in pixels, never an empty answer that leaves the reader guessing why:

    Not described: a figure region (the layout model's class "figure") of 420 x 310 px with no
    caption beside it and no text in it; the CPU engine reads text, not pictures.

Crops are matched by size (within :data:`SIZE_SLACK` pixels) and a 16 x 16 grey thumbnail
(mean difference at most :data:`THUMB_SLACK` of 255), not by exact bytes: the client decodes the
page and encodes the crop with its own image library, and a page read in segments is cropped
from the whole page.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

#: Figures remembered (the oldest are forgotten first); an entry is a few hundred bytes.
CAPACITY = 4096
#: A crop matches a remembered figure whose width and height differ by at most this many pixels ...
SIZE_SLACK = 2
#: ... and whose thumbnail differs by at most this much on average (grey levels of 255).
THUMB_SLACK = 6.0
THUMB_SIZE = 16

#: The labels of a figure description (Describe's answer from the CPU engine).
CAPTION_LABEL = "Caption"
TEXT_LABEL = "Text in the figure"
IMAGE_TEXT_LABEL = "Text in the image"  # an image not known to be a figure of a page read
NOT_DESCRIBED_LABEL = "Not described"  # neither a caption nor text: what was seen, and why no more
SEPARATOR = " · "


@dataclass(frozen=True)
class FigureFacts:
    """What the engine found about one figure on its page."""

    caption: str  # "" when no caption stands beside the figure
    text: str  # the text inside the figure ("" when none)
    label: str = "figure"  # the layout model's class for the region


@dataclass(frozen=True)
class _Entry:
    width: int
    height: int
    thumb: np.ndarray
    facts: FigureFacts


@dataclass(frozen=True)
class Recall:
    """The result of looking a crop up: the figure's facts, or why there are none."""

    facts: FigureFacts | None
    ambiguous: bool = False  # the same picture stands beside different captions


def thumbnail(image: np.ndarray) -> np.ndarray:
    """A 16 x 16 grey thumbnail (float32) of a BGR or grey ``uint8`` image."""
    import cv2
    import numpy as np

    grey = cv2.cvtColor(image, cv2.COLOR_BGR2GRAY) if image.ndim == 3 else image
    return cv2.resize(grey, (THUMB_SIZE, THUMB_SIZE), interpolation=cv2.INTER_AREA).astype(np.float32)


class FigureMemory:
    """Figures of recently read pages, by crop; shared by the worker threads (locked)."""

    def __init__(self, capacity: int = CAPACITY) -> None:
        self.capacity = capacity
        self._entries: OrderedDict[int, _Entry] = OrderedDict()
        self._next = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def remember(self, crop: np.ndarray, facts: FigureFacts) -> None:
        """Keep ``facts`` for the figure whose crop (BGR ``uint8``) is ``crop``."""
        entry = _Entry(crop.shape[1], crop.shape[0], thumbnail(crop), facts)
        with self._lock:
            self._entries[self._next] = entry
            self._next += 1
            while len(self._entries) > self.capacity:
                self._entries.popitem(last=False)

    def recall(self, crop: np.ndarray) -> Recall:
        """The facts of the remembered figure that ``crop`` shows, if exactly one caption fits."""
        import numpy as np

        height, width = crop.shape[:2]
        thumb = thumbnail(crop)
        with self._lock:
            entries = list(self._entries.values())
        matches: list[tuple[float, _Entry]] = []
        for entry in entries:
            if abs(entry.width - width) > SIZE_SLACK or abs(entry.height - height) > SIZE_SLACK:
                continue
            diff = float(np.abs(entry.thumb - thumb).mean())
            if diff <= THUMB_SLACK:
                matches.append((diff, entry))
        if not matches:
            return Recall(None)
        best = min(d for d, _ in matches)
        # The same picture on several pages (a logo, a repeated diagram): only trust a caption
        # they all share.
        close = {e.facts for d, e in matches if d <= best + 1.0}
        if len({f.caption for f in close}) > 1:
            return Recall(None, ambiguous=True)
        return Recall(min(matches, key=lambda m: m[0])[1].facts)


def describe(recall: Recall, text_in_crop: str, size: tuple[int, int]) -> str:
    """The description of a figure: what is known of it, each part labelled, nothing else.

    A remembered figure gets ``Caption: ...`` when a caption stood beside it and ``Text in the
    figure: ...`` when text was read inside it; a crop not remembered (or remembered beside
    different captions) gets ``Text in the image: ...`` from ``text_in_crop``, the text read
    from the crop itself. A part that is not known is left out, not stood in for: the answer
    goes into the Markdown (the figure's alt text and description), where "none found" beside
    a caption would read as the figure's content. When nothing at all is known, one
    ``Not described: ...`` line says what the engine saw (the layout model's class for a
    remembered figure, the crop's ``size`` in pixels, width x height) and why it says no more."""
    if recall.facts is not None:
        parts = [(CAPTION_LABEL, recall.facts.caption), (TEXT_LABEL, recall.facts.text)]
    else:
        parts = [(IMAGE_TEXT_LABEL, text_in_crop)]
    known = "\n".join(f"{label}: {value}" for label, value in parts if value)
    if known:
        return known
    width, height = size
    if recall.facts is not None:
        seen = (f'a figure region (the layout model\'s class "{recall.facts.label}") of {width} x {height} px with no '
                "caption beside it and no text in it")
    else:
        seen = (f"an image of {width} x {height} px with no text in it, not known as a figure of a page this engine "
                "read (so no caption either)")
    return f"{NOT_DESCRIBED_LABEL}: {seen}; the CPU engine reads text, not pictures."
