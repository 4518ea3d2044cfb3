"""The live line's total and time left (issue 45), in process: shown only when known. The live
line in a real terminal, the end of a run and `llm-ocr status` are tested in
tests/e2e/runners/test_console.py."""

from __future__ import annotations

from llm_ocr.runners.progress import RunCounters, Throughput


def test_the_total_and_the_time_left_are_shown_only_when_known() -> None:
    counters = RunCounters("extract", 0, 1, pages_found=0)
    counters.pages["ok"], counters.pages_found = 5, 12  # a streamed input: 12 pages found so far
    assert counters.goal() == (5, None, "pages") and "pages 5 (ok 5," in counters.line()
    counters.docs_total, counters.docs_finished = 4, 1  # the listing counted the shard's documents
    assert counters.goal() == (1, 4, "docs") and "docs 1/4" in counters.line()
    counters.intake_done = True  # every document reached: the pages found are all there are
    assert counters.goal() == (5, 12, "pages") and "pages 5/12 (ok 5," in counters.line(70.0)
    assert "| ETA 0:01:10 |" in counters.line(70.0) and "ETA" not in counters.line()
    # The time left is the work left at the rate of the last window, and none while nothing moves.
    speed = Throughput(window=60)
    speed.add(0, 0)
    assert speed.time_left(7) is None  # one sample: no rate yet
    speed.add(10, 5)
    assert speed.time_left(7) == 14.0  # 0.5 pages/s
    speed.add(50, 5)
    assert speed.time_left(7) == 70.0  # the window still holds the start: 5 pages in 50 s
    speed.add(100, 5)
    assert speed.time_left(7) is None  # nothing done for more than the window: no guess
