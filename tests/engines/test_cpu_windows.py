"""The CPU engine reads a tall image in windows at its own resolution (no model: a stand-in
reader that "sees" the text lines lying in the rows it is given, cut where the window cuts them)."""

from __future__ import annotations

from collections.abc import Callable
from itertools import pairwise

import numpy as np

from llm_ocr.engines.cpu.layout import Line
from llm_ocr.engines.cpu.windows import OVERLAP, WINDOW, plan_windows, read_in_windows


def _rows_image(height: int, width: int = 400) -> np.ndarray:
    """An image whose first column says which row each pixel row is (blue: row % 256, green:
    row // 256), so a reader given a slice knows where in the image it lies."""
    image = np.full((height, width, 3), 255, np.uint8)
    rows = np.arange(height)
    image[:, 0, 0] = rows % 256
    image[:, 0, 1] = rows // 256
    return image


def _reader(truth: list[Line], seen: list[tuple[int, int]]) -> Callable[[np.ndarray], list[Line]]:
    """Reads the lines of ``truth`` in a slice of :func:`_rows_image`: a line cut by the slice's
    edge comes back cut (its box clipped, its text marked), as a detector sees half a line."""

    def read(window: np.ndarray) -> list[Line]:
        top = int(window[0, 0, 0]) + 256 * int(window[0, 0, 1])
        height, width = window.shape[:2]
        seen.append((width, height))
        out = []
        for line in truth:
            y1, y2 = max(line.y1, top), min(line.y2, top + height)
            if y2 <= y1:
                continue
            text = line.text if (y1, y2) == (line.y1, line.y2) else line.text + " (cut)"
            out.append(Line(line.x1, y1 - top, line.x2, y2 - top, text))
        return out

    return read


def test_a_tall_image_is_read_in_windows_and_every_line_comes_back_once_whole() -> None:
    height = 9000  # a 1:22 strip at 144 DPI
    # A line every 37 px (so lines fall across every window edge), 20 px tall, and a 120 px title.
    truth = [Line(10, y, 300, y + 20, f"depth {y}") for y in range(30, height - 30, 37)]
    truth.append(Line(10, 4400, 380, 4520, "SECTION TITLE"))
    truth.sort(key=lambda l: l.y1)
    seen: list[tuple[int, int]] = []
    lines = read_in_windows(_reader(truth, seen), _rows_image(height))
    assert sorted(lines, key=lambda l: l.y1) == truth
    assert len(seen) > 1 and all(w <= WINDOW and h <= WINDOW for w, h in seen)  # never shrunk by RapidOCR


def test_an_image_that_fits_is_read_once_as_it_is() -> None:
    truth = [Line(10, 1960, 300, 1990, "last line")]
    seen: list[tuple[int, int]] = []
    assert read_in_windows(_reader(truth, seen), _rows_image(WINDOW)) == truth
    assert seen == [(400, WINDOW)]


def test_windows_overlap_cover_the_image_and_hand_each_row_to_one_window() -> None:
    for height in (WINDOW + 1, 2448, 28548, 74664):
        windows = plan_windows(height)
        assert windows[0].top == 0 and windows[-1].bottom == height
        assert all(w.bottom - w.top <= WINDOW for w in windows)
        for a, b in pairwise(windows):
            assert a.bottom - b.top >= OVERLAP  # shared rows
            assert a.keep_to == b.keep_from and b.top + OVERLAP / 2 <= a.keep_to <= a.bottom - OVERLAP / 2


def test_an_image_wider_than_the_window_is_scaled_to_it_and_the_boxes_back() -> None:
    seen: list[tuple[int, int]] = []

    def read(window: np.ndarray) -> list[Line]:
        seen.append((window.shape[1], window.shape[0]))
        return [Line(100, 50, 400, 70, "a line")]

    lines = read_in_windows(read, np.full((1500, 3000, 3), 255, np.uint8))
    assert seen == [(WINDOW, 1000)]
    assert lines == [Line(150, 75, 600, 105, "a line")]
