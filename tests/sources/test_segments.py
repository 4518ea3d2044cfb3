"""Where a long page is cut: segments of a readable shape that cover it, overlapping."""

from __future__ import annotations

import itertools

import pytest

from llm_ocr.sources.segments import cut_line, plan_segments


@pytest.mark.parametrize(
    ("width", "height"),
    [(443, 27049), (400, 1250), (1224, 3800), (27049, 443), (3000, 800), (600, 6000)],
)
def test_segments_cover_the_page_overlap_and_are_readable(width: int, height: int) -> None:
    segments = plan_segments(width, height)
    assert len(segments) >= 2
    tall = height > width
    short, long = (width, height) if tall else (height, width)
    spans = [(s.top, s.bottom) if tall else (s.left, s.right) for s in segments]
    assert spans[0][0] == 0 and spans[-1][1] == long  # from end to end
    for (a0, a1), (b0, _) in itertools.pairwise(spans):
        assert b0 > a0 and a1 - b0 >= 64  # in order, overlapping by a few text lines at least
    for s in segments:
        assert (s.width, s.height) == ((width, s.height) if tall else (s.width, height))
        assert max(s.width, s.height) <= 2 * short + 1  # a page-like shape, 1:2 at most
    # Cut lines fall inside the overlaps, so every pixel row belongs to exactly one segment.
    cuts = [cut_line(segments, i) for i in range(len(segments))]
    assert cuts[-1] == long
    for i, cut in enumerate(cuts[:-1]):
        assert spans[i + 1][0] <= cut <= spans[i][1]


def test_the_real_strip_from_the_issue() -> None:
    """234 x 14,295 pt at 144 DPI: 443 x 27,049 px, a 1:61 strip."""
    segments = plan_segments(443, 27049)
    assert 20 <= len(segments) <= 40
    assert all(s.width == 443 and s.height <= 886 for s in segments)


@pytest.mark.parametrize(("width", "height"), [(1224, 1584), (1584, 1224), (443, 1329), (100, 100), (1000, 2999)])
def test_pages_up_to_one_to_three_are_read_whole(width: int, height: int) -> None:
    assert plan_segments(width, height) == []


def test_cutting_can_be_turned_off() -> None:
    assert plan_segments(443, 27049, max_aspect=0) == []
