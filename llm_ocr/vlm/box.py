"""One rectangle type for every box llm-ocr handles: ``Box(x1, y1, x2, y2)``.

The same four numbers are pixels of an image (a parsed block, a figure to crop, a tile of a
page), fractions of it (0..1: a page's layout as a family's writer gets it, :mod:`.view`), or a
family's own coordinate space (0..999 for DeepSeek-OCR, a 500-step grid for DocTags...). A box
says nothing of which: the name of the variable or field holding it does. Pixel boxes hold
ints; the output rows store a box as a list of four numbers (:meth:`Box.row`), the Parquet
contract of :mod:`llm_ocr.records`.

A ``NamedTuple``, so a box unpacks (``x1, y1, x2, y2 = box``), pickles to worker processes,
serialises to JSON as a list, and compares equal to a plain 4-tuple.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import NamedTuple


class Box(NamedTuple):
    """A rectangle: left, top, right, bottom (``x1 <= x2``, ``y1 <= y2`` once :meth:`ordered`)."""

    x1: float
    y1: float
    x2: float
    y2: float

    @classmethod
    def of(cls, values: Sequence[object]) -> Box | None:
        """``values`` as a box: four finite numbers, else None (a model's box is untrusted text)."""
        if len(values) != 4:
            return None
        try:
            vals = [float(v) for v in values]  # type: ignore[arg-type]  # anything float() takes
        except (TypeError, ValueError):
            return None
        return cls(*vals) if all(math.isfinite(v) for v in vals) else None

    @classmethod
    def union(cls, boxes: Iterable[Box]) -> Box:
        """The smallest box around ``boxes`` (at least one)."""
        xs1, ys1, xs2, ys2 = zip(*boxes)
        return cls(min(xs1), min(ys1), max(xs2), max(ys2))

    # -- measures ---------------------------------------------------------------------------------

    @property
    def width(self) -> float:
        """``x2 - x1``."""
        return self.x2 - self.x1

    @property
    def height(self) -> float:
        """``y2 - y1``."""
        return self.y2 - self.y1

    @property
    def area(self) -> float:
        """Width times height; 0 for a box inverted or without extent."""
        return max(0.0, self.width) * max(0.0, self.height)

    @property
    def centre(self) -> tuple[float, float]:
        """``(x, y)`` of the box's middle."""
        return (self.x1 + self.x2) / 2, (self.y1 + self.y2) / 2

    def overlaps(self, other: Box) -> bool:
        """Whether the two boxes share some area."""
        return min(self.x2, other.x2) > max(self.x1, other.x1) and min(self.y2, other.y2) > max(self.y1, other.y1)

    # -- new boxes --------------------------------------------------------------------------------

    def ordered(self) -> Box:
        """The same rectangle with its corners in order (a model may write them swapped)."""
        return Box(min(self.x1, self.x2), min(self.y1, self.y2), max(self.x1, self.x2), max(self.y1, self.y2))

    def scaled(self, sx: float, sy: float) -> Box:
        """x times ``sx``, y times ``sy``: from one coordinate space to another."""
        return Box(self.x1 * sx, self.y1 * sy, self.x2 * sx, self.y2 * sy)

    def clamped(self, width: float, height: float) -> Box:
        """Each x within ``0..width``, each y within ``0..height``."""
        return Box(
            min(max(self.x1, 0), width), min(max(self.y1, 0), height),
            min(max(self.x2, 0), width), min(max(self.y2, 0), height),
        )  # fmt: skip

    def moved(self, dx: float, dy: float) -> Box:
        """Shifted by ``(dx, dy)``: a box in a piece of a page, in pixels of the page."""
        return Box(self.x1 + dx, self.y1 + dy, self.x2 + dx, self.y2 + dy)

    def clipped(self, region: Box) -> Box:
        """The part inside ``region`` (inverted when there is none: its :attr:`area` is 0)."""
        return Box(max(self.x1, region.x1), max(self.y1, region.y1), min(self.x2, region.x2), min(self.y2, region.y2))

    def within(self, region: Box) -> Box:
        """This box in fractions of ``region`` (both in the same space): a page's box as a
        crop of ``region`` of the page shows it."""
        width, height = region.width, region.height
        return Box(
            (self.x1 - region.x1) / width, (self.y1 - region.y1) / height,
            (self.x2 - region.x1) / width, (self.y2 - region.y1) / height,
        )  # fmt: skip

    def truncated(self) -> Box:
        """Each coordinate cut to an int (``int()``: towards zero), as pixel boxes are."""
        return Box(int(self.x1), int(self.y1), int(self.x2), int(self.y2))

    def rounded(self) -> Box:
        """Each coordinate rounded to the nearest int (``round()``)."""
        return Box(round(self.x1), round(self.y1), round(self.x2), round(self.y2))

    def pixels(self, width: int, height: int) -> Box | None:
        """This box (already scaled to pixels) as int pixels of a ``width`` x ``height`` image:
        corners in order, clamped to the image, cut to ints; None when no area is left."""
        box = self.ordered().clamped(width, height).truncated()
        return box if box.x1 < box.x2 and box.y1 < box.y2 else None

    def row(self) -> list[int]:
        """A pixel box as an output row stores it: ``[x1, y1, x2, y2]``, four ints."""
        return [int(v) for v in self]
