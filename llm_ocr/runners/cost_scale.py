"""One scale for a run's two kinds of page estimate: a text layer's and a scan's.

A PDF page's expected answer is read from its text layer (its characters: the text itself) or,
for a scan, from its image's size: bytes over what a character costs at the image's codec and
resolution (:mod:`llm_ocr.sources.page_cost`). That rate also depends on the type size, which the
file does not say: a character of 5-point type costs about a quarter of the ink of a 10-point one.
On the ordering benchmark's mix of born-digital pages and scans, a scan was estimated at about a
third of a born-digital page with the same answer, so the longest scans ranked with born-digital
pages a third their length, just behind the first round of 64 slots, and ended the run late
(docs/gpu-time.md). The answers that would calibrate one scale on the other come back only after
the first round has gone.

So while a run has estimates of both kinds, a scan's is also read as a rank among the scans: the
scan at quantile ``q`` of the run's scans is expected to cost at least what the page at quantile
``q`` of its text-layer estimates holds (or its own estimate, if larger). Within each kind the
order is unchanged; across kinds it no longer rests on the conversion's rate. The error this can
make is one-sided on purpose: if a collection's scans are in fact shorter than its born-digital
pages, some scans are sent early and, being short, end early (a slot each for a short while);
the error it removes is a long scan sent late, which can end the run on its own.

The kinds are the pages' own, not the estimates': a scan under an OCR layer is a scan, whichever
of its two estimates is larger. Split by the larger one, the scans whose old OCR layer had lost
most of its lines were mapped onto the scale of those whose layer had kept them, two groups that
differ in length as well as in estimate (on the benchmark's scans under a lossy OCR layer, the
rank correlation with the answers fell from 0.893 to 0.804).

Bounds: the first :data:`MAX_SAMPLE` estimates of each kind make the scale (a sorted list each),
so a run of any length keeps a few dozen kilobytes and the scale settles once both are full.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable

from llm_ocr.sources.page_cost import SCAN, TEXT, PageEstimate

#: Estimates of each kind kept to make the scale (the run's first ones).
MAX_SAMPLE = 4096


class CostScale:
    """The estimates of a run seen so far, by kind, and each estimate's value on one scale."""

    def __init__(self) -> None:
        self._seen: dict[str, list[float]] = {TEXT: [], SCAN: []}

    def add(self, estimates: Iterable[PageEstimate]) -> None:
        """Take ``estimates`` into the scale (beyond :data:`MAX_SAMPLE` of a kind, they change nothing)."""
        for estimate in estimates:
            seen = self._seen.get(estimate.source)
            if seen is not None and len(seen) < MAX_SAMPLE:
                bisect.insort(seen, float(estimate.chars))

    @property
    def sizes(self) -> tuple[int, int]:
        """How many text-layer and scan estimates make the scale."""
        return len(self._seen[TEXT]), len(self._seen[SCAN])

    def value(self, estimate: PageEstimate) -> float:
        """``estimate`` on the text layer's scale: a text-layer estimate as it is; a scan's, the
        larger of itself and the text-layer estimate at its quantile among the scans (itself while
        the run has seen no estimate of the other kind)."""
        chars = float(estimate.chars)
        scans, texts = self._seen[SCAN], self._seen[TEXT]
        if estimate.source != SCAN or not scans or not texts:
            return chars
        # Its place among the scans as a share (equal ones share their mean place): the longest
        # scan is at 1 and takes the longest text-layer page's value, the shortest at 0; a lone scan, 0.5.
        below, upto = bisect.bisect_left(scans, chars), bisect.bisect_right(scans, chars)
        share = (below + upto - 1) / (2 * (len(scans) - 1)) if len(scans) > 1 else 0.5
        return max(chars, quantile(texts, share))


def quantile(ordered: list[float], share: float) -> float:
    """The value at ``share`` (0 to 1) of the sorted, non-empty ``ordered``, interpolated."""
    position = min(max(share, 0.0), 1.0) * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)
