"""Scores of pass/fail tests grouped in categories, and their bootstrap confidence interval.

olmOCR-bench's overall score is the mean of its categories' pass rates (one category per JSONL
file); its interval resamples the tests of each category with replacement, independently,
1,000 times, and takes the 2.5th and 97.5th percentiles of the mean of category means
(allenai/olmocr ``olmocr/bench/utils.py`` ``calculate_bootstrap_ci``, commit f7cfe4c). The
resampling here is seeded, so the same verdicts always give the same interval.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np


def category_mean(groups: Mapping[str, Sequence[float]]) -> float:
    """The mean of each non-empty category's mean (0.0 with no tests at all)."""
    means = [float(np.mean(scores)) for scores in groups.values() if len(scores)]
    return float(np.mean(means)) if means else 0.0


def bootstrap_ci(
    groups: Mapping[str, Sequence[float]], samples: int = 1000, level: float = 0.95, seed: int = 0
) -> tuple[float, float]:
    """The ``level`` confidence interval of :func:`category_mean`, resampling within each category."""
    arrays = [np.asarray(scores, dtype=float) for scores in groups.values() if len(scores)]
    if not arrays:
        return (0.0, 0.0)
    rng = np.random.default_rng(seed)
    means = np.empty(samples)
    for i in range(samples):
        means[i] = np.mean([rng.choice(a, size=len(a), replace=True).mean() for a in arrays])
    alpha = (1 - level) / 2
    return float(np.percentile(means, alpha * 100)), float(np.percentile(means, (1 - alpha) * 100))
