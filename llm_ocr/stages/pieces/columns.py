"""The columns of a page, in reading order, found in its ink: where a dense page is read in bands.

A family whose answers carry no boxes reads a dense page in bands (:mod:`.plan`),
joined by the text their overlap repeats. A band as wide as the page shows the top of every
column of a newspaper, the next band the next part of every column: joined band by band, every
word is there, but the columns are interleaved. So such a page is first cut into its **regions**
in reading order, by a recursive XY-cut on its ink (the darkness of a grey copy, any scale):

- a region with **gutters** (runs of blank ink columns at least ``min_gutter`` of the page
  wide, between inked ones, over a region at least ``min_tall_lines`` text lines tall, and
  not much narrower than its widest: ``channel``) is cut into its columns, left to right,
  each again looked into;
- a region without comes apart **between rows** when a part of it has columns: the first cut
  between two text lines below which the region has gutters (a masthead or headline across the
  columns is above it, read first), else the last above which it has (a footer across them);
- a column narrower than ``min_column_lines`` line pitches (a table's column of figures, not
  a column of text: about 20 characters a line) is joined to its narrower neighbour, and a table
  whose columns are all so narrow stays whole.

Each region is then read as a page of its own, cut into bands along its height only as much as
its share of the page's text needs (:func:`.cuts.plan_bands`). A page without
columns is one region: read in full-width bands as before. Regions are
``(top, bottom, left, right)`` in ink pixels, ``[top, bottom)`` x ``[left, right)``.
"""

from __future__ import annotations

from itertools import pairwise
from typing import Any

from llm_ocr.options import dense

#: A region of the ink: ``(top, bottom, left, right)`` rows and columns, ends excluded.
Rect = tuple[int, int, int, int]


def column_regions(ink: Any, pitch: float | None) -> list[Rect]:
    """The regions of a page whose ink (darkness, rows x columns) is ``ink``, in reading order
    (see the module docstring): the whole page alone when it has no columns, or when its line
    ``pitch`` (in ink rows) is unknown."""
    rows, cols = ink.shape
    whole = (0, rows, 0, cols)
    if pitch is None or rows == 0 or cols == 0:
        return [whole]
    import numpy as np

    # The ink of every column above each row, and of every row left of each column: the
    # profile of any region across or down in O(its side).
    above = np.zeros((rows + 1, cols), dtype=np.float64)
    np.cumsum(ink, axis=0, out=above[1:])
    beside = np.zeros((rows, cols + 1), dtype=np.float64)
    np.cumsum(ink, axis=1, out=beside[:, 1:])
    finder = _Finder(above, beside, pitch, max(1, round(dense().min_gutter * cols)))
    # The page's gutter width: the median of the widest gutter of each of ``gutter_samples``
    # parts of its height that has one (a headline's channel is in one part at most, a figure's
    # margin too).
    n = dense().gutter_samples
    parts = sorted(w for k in range(n) if (w := finder.widest((k * rows // n, (k + 1) * rows // n, 0, cols))))
    finder.gutter = parts[(len(parts) - 1) // 2] if parts else 0
    return finder.regions(whole, 0)


def _blank(profile: Any) -> Any:
    """Which entries of an ink profile are blank (under ``blank`` of its largest)."""
    return profile <= dense().blank * max(float(profile.max()) if profile.size else 0.0, 1e-9)


class _Finder:
    """The XY-cut over one page's ink (its prefix sums down and across)."""

    def __init__(self, above: Any, beside: Any, pitch: float, min_gutter: int) -> None:
        self.above, self.beside, self.pitch, self.min_gutter = above, beside, pitch, min_gutter
        #: The page's gutter width (ink columns), against which a narrower blank run is a channel.
        self.gutter = 0

    def widest(self, rect: Rect) -> int:
        """The width of ``rect``'s widest gutter (0: none)."""
        return max((b - a for a, b in self.gutters(rect)), default=0)

    def rows_profile(self, rect: Rect) -> Any:
        top, bottom, left, right = rect
        return self.beside[top:bottom, right] - self.beside[top:bottom, left]

    def regions(self, rect: Rect, depth: int) -> list[Rect]:
        if depth > dense().columns_depth:
            return [rect]
        columns = self.columns(rect)
        if len(columns) > 1:
            return [r for column in columns for r in self.regions(column, depth + 1)]
        for part in self.rows_apart(rect):
            if len(part) > 1:
                return [r for piece in part for r in self.regions(piece, depth + 1)]
        return [rect]

    def columns(self, rect: Rect) -> list[Rect]:
        """``rect`` cut at its gutters' middles (left to right), narrow columns joined to a
        neighbour; ``[rect]`` when it has no gutter, is too short, or its columns are too narrow."""
        import numpy as np

        top, bottom, left, right = rect
        inked_rows = np.flatnonzero(~_blank(self.rows_profile(rect)))
        if inked_rows.size == 0 or inked_rows[-1] - inked_rows[0] < dense().min_tall_lines * self.pitch:
            return [rect]
        gutters = self.gutters(rect)
        if not gutters:
            return [rect]
        # A word space of a headline across the columns that lines up with a gutter below it
        # leaves a channel narrower than the page's gutters: not a gutter.
        widest = max(self.gutter, *(b - a for a, b in gutters))
        gutters = [(a, b) for a, b in gutters if b - a >= dense().channel * widest]
        cuts = [left] + [(a + b) // 2 for a, b in gutters] + [right]
        # Each span: [left, right, the width of its widest column of ink].
        spans = [[a, b, self.text_width(top, bottom, a, b)] for a, b in pairwise(cuts)]
        narrow = dense().min_column_lines * self.pitch
        while len(spans) > 1:
            k = min(range(len(spans)), key=lambda i: spans[i][2])
            if spans[k][2] >= narrow:
                break
            # Joined to its narrower neighbour: a table's columns come together (and stay
            # narrow columns, however many), a narrow list beside a column of text joins it.
            j = k + 1 if k == 0 or (k < len(spans) - 1 and spans[k + 1][2] < spans[k - 1][2]) else k - 1
            a, b = min(j, k), max(j, k)
            spans[a:b + 1] = [[spans[a][0], spans[b][1], max(spans[a][2], spans[b][2])]]
        return [(top, bottom, a, b) for a, b, _ in spans]

    def gutters(self, rect: Rect) -> list[tuple[int, int]]:
        """``[start, end)`` of each run of blank ink columns in ``rect`` at least the least gutter
        wide, between its first and last inked column (a page's margins are none)."""
        import numpy as np

        top, bottom, left, right = rect
        profile = self.above[bottom, left:right] - self.above[top, left:right]
        blank = _blank(profile)
        inked = np.flatnonzero(~blank)
        if inked.size == 0:
            return []
        first, last = int(inked[0]), int(inked[-1])
        inner = blank[first:last + 1].astype(np.int8)
        edges = np.flatnonzero(np.diff(np.concatenate(([0], inner, [0]))))
        return [(left + first + int(s), left + first + int(e)) for s, e in zip(edges[0::2], edges[1::2])
                if e - s >= self.min_gutter]  # fmt: skip

    def text_width(self, top: int, bottom: int, left: int, right: int) -> int:
        """How wide the ink of ``[left, right)`` over ``[top, bottom)`` is (its gutters' halves left out)."""
        import numpy as np

        profile = self.above[bottom, left:right] - self.above[top, left:right]
        inked = np.flatnonzero(~_blank(profile))
        return int(inked[-1] - inked[0] + 1) if inked.size else 0

    def rows_apart(self, rect: Rect) -> list[list[Rect]]:
        """``rect`` cut between two text lines so that a part has columns: the highest cut below
        which it has (a header above), then the lowest above which it has (a footer below);
        each as ``[upper, lower]`` (none: ``[]``)."""
        import numpy as np

        top, bottom, left, right = rect
        blank = _blank(self.rows_profile(rect))
        edges = np.flatnonzero(np.diff(np.concatenate(([0], blank.astype(np.int8), [0]))))
        gaps = [top + (int(s) + int(e)) // 2 for s, e in zip(edges[0::2], edges[1::2]) if s > 0 and e < len(blank)]
        out: list[list[Rect]] = []
        for cut in gaps:
            if len(self.columns((cut, bottom, left, right))) > 1:
                out.append([(top, cut, left, right), (cut, bottom, left, right)])
                break
        for cut in reversed(gaps):
            if len(self.columns((top, cut, left, right))) > 1:
                out.append([(top, cut, left, right), (cut, bottom, left, right)])
                break
        return out
