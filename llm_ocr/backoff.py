"""Retry delays: exponential backoff with jitter, shared by every retry loop of the package."""

from __future__ import annotations

import random


def backoff_delay(attempt: int, base: float, cap: float) -> float:
    """Seconds to wait before retry number ``attempt`` (1-based): ``base`` doubled per attempt,
    at most ``cap``, drawn uniformly from its upper half.

    The jitter spreads the retries of many clients that failed together (a store throttling
    every shard at once, a server restarting under all pages in flight); keeping the lower half
    out keeps the backoff real, so a persistent failure is not hammered.
    """
    delay = min(cap, base * 2 ** (attempt - 1))
    return random.uniform(delay / 2, delay)
