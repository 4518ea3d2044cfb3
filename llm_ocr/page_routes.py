"""How an output's pages were read (whole, or in segments, tiles or bands) and what the pages
read in pieces cost against reading them whole: the tally ``llm-ocr status`` and the report show.

A row read in pieces says how in its ``segments`` (the pieces finally read) and ``cut_reason``
(``... read in 12 tiles ...``), and ends its ``cut_reason`` with the page's cost against its
whole-page reading (:func:`cost_clause`, written by ``stages/pieces/cost.py``): the tally reads
them back (:func:`parse_cost`), so the clause's words are defined here, once. This module
imports nothing of the package: storage, the report and the stages all use it.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from typing import Any

_COST = re.compile(r"cost ([\d,]+) tokens in (\d+) requests: ([\d.]+)x the tokens and ([\d.]+)x the requests "
                   r"of reading it whole")
_KIND = re.compile(r"\b(tile|band|segment)s?\b")
#: The words of a page that stopped at its cost bound (``Budget.why``).
AT_BOUND = "reached its cost bound"


def cost_clause(tokens: int, requests: int, whole_tokens: int, whole_requests: int, bound: float) -> str:
    """What a page read in pieces cost against its whole-page reading, for its ``cut_reason``."""
    return (f"cost {tokens:,} tokens in {requests} requests: {tokens / max(1, whole_tokens):.2f}x the "
            f"tokens and {requests / max(1, whole_requests):.2f}x the requests of reading it whole "
            f"(bound {bound:g}x)")


def parse_cost(cut_reason: str | None) -> tuple[int, int, float, float] | None:
    """``(tokens, requests, times the tokens, times the requests)`` of a row's cost clause (None: none)."""
    match = _COST.search(cut_reason or "")
    if match is None:
        return None
    return int(match[1].replace(",", "")), int(match[2]), float(match[3]), float(match[4])


def route_of(segments: int | None, cut_reason: str | None) -> str:
    """How a row's page was read: ``whole``, or ``segments``, ``tiles`` or ``bands`` (the first
    kind of piece its ``cut_reason`` names; a long page's segments none cut again name none)."""
    if not segments:
        return "whole"
    match = _KIND.search(cut_reason or "")
    return f"{match[1]}s" if match else "segments"


class RouteTally:
    """Pages per route, and the pieces' cost against reading the same pages whole."""

    def __init__(self) -> None:
        self.pages: Counter[str] = Counter()
        self.at_bound: Counter[str] = Counter()
        #: route -> [tokens, requests, whole tokens, whole requests] of its pages with a cost clause.
        self.cost: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0, 0.0])

    def add(self, segments: int | None, cut_reason: str | None) -> None:
        """Count one row."""
        route = route_of(segments, cut_reason)
        self.pages[route] += 1
        if AT_BOUND in (cut_reason or ""):
            self.at_bound[route] += 1
        cost = parse_cost(cut_reason)
        if cost is not None and cost[2] > 0 and cost[3] > 0:
            tokens, requests, times_tokens, times_requests = cost
            sums = self.cost[route]
            for i, value in enumerate((tokens, requests, tokens / times_tokens, requests / times_requests)):
                sums[i] += value

    def as_dict(self) -> dict[str, dict[str, Any]]:
        """route -> pages, pages at the cost bound, and (where rows said it) tokens and requests
        as multiples of reading the same pages whole."""
        out: dict[str, dict[str, Any]] = {}
        for route, pages in sorted(self.pages.items()):
            entry: dict[str, Any] = {"pages": pages, "at_cost_bound": self.at_bound[route]}
            if route in self.cost:
                tokens, requests, whole_tokens, whole_requests = self.cost[route]
                entry.update(tokens=int(tokens), requests=int(requests),
                             tokens_x=round(tokens / max(1.0, whole_tokens), 2),
                             requests_x=round(requests / max(1.0, whole_requests), 2))
            out[route] = entry
        return out


def describe(routes: dict[str, dict[str, Any]]) -> list[str]:
    """One line per route of :meth:`RouteTally.as_dict`: ``tiles: 5 pages, 3.58x the tokens and
    4.50x the requests of reading them whole (1 at the cost bound)``."""
    lines = []
    for route, entry in routes.items():
        line = f"{route}: {entry['pages']} page{'s' if entry['pages'] != 1 else ''}"
        if "tokens_x" in entry:
            line += (f", {entry['tokens']:,} tokens in {entry['requests']} requests: {entry['tokens_x']:.2f}x the "
                     f"tokens and {entry['requests_x']:.2f}x the requests of reading them whole")
        if entry.get("at_cost_bound"):
            line += f" ({entry['at_cost_bound']} at the cost bound)"
        lines.append(line)
    return lines
