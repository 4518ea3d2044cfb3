"""How a test checks that code runs in linear time, on a machine shared with other jobs
(docs/testing.md, "Tests on a busy machine").

Timing one input against one eight times larger compares two measurements taken at different
moments, with different amounts of garbage to collect: on CI's loaded 2 cores a linear parser
measured 26x for 8x the input. :func:`scaling` compares equal work instead: ``FACTOR`` runs on
the small input against one run on the input ``FACTOR`` times larger, the same total if the
code is linear, ``FACTOR`` times more if it is quadratic. It counts the process's CPU time with
the garbage collector off (a collection's cost depends on everything else alive in the test
process), and repeats interleaved rounds keeping the least time of each side: load only ever
adds time, so the least is the closest to the code's own cost.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from dataclasses import dataclass

#: How much larger the big input is than the small one.
FACTOR = 8
#: Above this ratio of the big run to the ``FACTOR`` small runs, the code is not linear: linear
#: code measures about 1 (cache effects of the larger input: up to ~1.5), quadratic ``FACTOR``.
LINEAR_AT_MOST = 3.0


@dataclass(frozen=True)
class Scaling:
    """Least CPU seconds of ``FACTOR`` runs on the small input and of one on the big input."""

    small: float
    big: float
    rounds: int

    @property
    def ratio(self) -> float:
        """The big run's time over the small runs' (equal work if linear)."""
        return self.big / max(self.small, 1e-6)

    @property
    def linear(self) -> bool:
        """Whether ``FACTOR`` times the work took at most ``LINEAR_AT_MOST`` times the time."""
        return self.ratio <= LINEAR_AT_MOST


def _cpu_seconds(run: Callable[[], object], times: int) -> float:
    t0 = time.process_time()
    for _ in range(times):
        run()
    return time.process_time() - t0


def scaling(small: Callable[[], object], big: Callable[[], object], rounds: int = 5, at_least: int = 2) -> Scaling:
    """Measure ``small`` (run ``FACTOR`` times) against ``big`` (run once), in ``at_least`` to
    ``rounds`` interleaved rounds, keeping each side's least CPU time.

    It stops once the least times say linear, after ``at_least`` rounds: a round where load
    slowed the big run is outvoted by a later one. Code that is not linear measures about
    ``FACTOR`` in every round; for it to pass, load would have to slow the small runs almost
    threefold in each of the first ``at_least`` rounds and never the big one.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        least_small = least_big = float("inf")
        for done in range(1, rounds + 1):
            least_small = min(least_small, _cpu_seconds(small, FACTOR))
            least_big = min(least_big, _cpu_seconds(big, 1))
            result = Scaling(least_small, least_big, done)
            if done >= at_least and result.linear:
                break
        return result
    finally:
        if enabled:
            gc.enable()
