"""The linear-time check of tests/scaling.py can fail: it flags code that is quadratic."""

from __future__ import annotations

from tests.scaling import FACTOR, scaling


def line_numbers(text: str) -> int:
    """Quadratic, as a parser that counts the lines up to each block it meets: every 64th
    character's line number, counted from the start each time."""
    return sum(text.count("\n", 0, i) for i in range(0, len(text), 64))


def test_quadratic_code_is_not_linear() -> None:
    small, big = "line\n" * 5_000, "line\n" * (5_000 * FACTOR)
    measured = scaling(lambda: line_numbers(small), lambda: line_numbers(big))
    assert not measured.linear, measured
    assert measured.rounds == 5  # a failing check uses every round before it gives up
