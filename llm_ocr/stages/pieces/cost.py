"""What a page read in pieces may cost: at most ``cost_bound`` times its whole-page reading.

Serves every case (:mod:`.plan`), built for a model the path has never met: one that answers
every piece of a page with text that looks like the page's own and runs to ``max_tokens`` (a
model that continues past a crop's edge, a weak model whose answers run long). Each such piece
is cut again (:mod:`.read`), and its halves run out too: without a bound the page is read in
up to ``max_pieces`` requests, each a full answer.

A page's **whole-page reading** is what reading it whole could cost: as many requests as its
first attempt and the family's truncation retries, each its image and prompt plus
``max_tokens``. A page is planned in no more pieces than the bound leaves room for, and a piece is cut again
only while what the page has spent (the whole page's answer
that ran out, if it was read first; every piece answered), the pieces still being read (at one
full request each) and the new pieces (the same) stay within ``cost_bound`` times that, in
tokens and in requests. A piece that would pass it keeps the text it has; the row is then
``truncated`` and its ``cut_reason`` names the bound; a page the bound leaves no room to cut
keeps its whole reading.
"""

from __future__ import annotations

from dataclasses import dataclass

from llm_ocr.options import dense
from llm_ocr.page_routes import AT_BOUND, cost_clause
from llm_ocr.vlm.families.base import AnswerLike, Family


@dataclass(frozen=True)
class WholeCost:
    """What reading a page whole could cost: ``requests`` requests, ``tokens`` tokens in all
    (each request its prompt and ``max_tokens``)."""

    tokens: int
    requests: int

    @property
    def per_request(self) -> int:
        """The tokens one full request costs."""
        return self.tokens // max(1, self.requests)


def whole_cost(family: Family | None, width: int, height: int, max_tokens: int, attempts: int) -> WholeCost:
    """The whole-page reading of a ``width`` x ``height`` page by ``family``: ``attempts``
    requests (its first and its truncation retries), each its image's tokens as the family's
    processor counts them (0 when unknown), the prompt's text and ``max_tokens``."""
    image = family.image_tokens(width, height) if family is not None else None
    one = (image or 0) + dense().prompt_text_tokens + max_tokens
    return WholeCost(attempts * one, attempts)


def paid(answers: list[AnswerLike]) -> tuple[int, int]:
    """``(tokens, requests)`` the answers cost: prompt and completion tokens, attempts."""
    tokens = sum((a.result.prompt_tokens or 0) + (a.result.completion_tokens or 0) for a in answers)
    return tokens, sum(a.attempts for a in answers)


class Budget:
    """One page's spending against ``bound`` times its whole-page reading ``whole``."""

    def __init__(self, whole: WholeCost | None, bound: float, spent: tuple[int, int] = (0, 0)) -> None:
        self.whole, self.bound = whole, bound
        self.tokens, self.requests = spent
        #: Requests under way, each counted at one full request until it is answered ...
        self.in_flight = 0
        #: ... and requests a cut has been allowed and not sent yet (pieces are read at once:
        #: a cut is counted as it is allowed, not when its requests go out).
        self.reserved = 0

    def start(self) -> None:
        """A request is sent (one a cut reserved, if any)."""
        self.reserved = max(0, self.reserved - 1)
        self.in_flight += 1

    def done(self, answers: list[AnswerLike], failed_attempts: int = 0) -> None:
        """A request came back with ``answers`` (or failed after ``failed_attempts``)."""
        self.in_flight -= 1
        tokens, requests = paid(answers)
        self.tokens += tokens
        self.requests += requests + failed_attempts

    def reserve(self, more: int) -> bool:
        """Whether ``more`` new requests fit in the bound, with those under way and reserved at
        their most; if they do, they are reserved."""
        if self.whole is None:
            return True
        pending = self.in_flight + self.reserved + more
        requests = self.requests + pending
        tokens = self.tokens + pending * self.whole.per_request
        if requests > self.bound * self.whole.requests or tokens > self.bound * self.whole.tokens:
            return False
        self.reserved += more
        return True

    def room(self) -> int:
        """How many new requests fit in the bound (a large number when there is none)."""
        if self.whole is None:
            return 1 << 30
        pending = self.in_flight + self.reserved
        by_requests = self.bound * self.whole.requests - self.requests - pending
        by_tokens = (self.bound * self.whole.tokens - self.tokens) // max(1, self.whole.per_request) - pending
        return max(0, int(min(by_requests, by_tokens)))

    def why(self) -> str:
        """The bound, as a note of a piece kept as it ran out says it."""
        assert self.whole is not None
        return (f"the page {AT_BOUND} ({self.bound:g}x the {self.whole.tokens:,} tokens and "
                f"{self.whole.requests} requests of reading it whole, cost_bound)")

    def summary(self, tokens: int, requests: int) -> str | None:
        """What the page cost against its whole-page reading, for its ``cut_reason``."""
        if self.whole is None:
            return None
        return cost_clause(tokens, requests, self.whole.tokens, self.whole.requests, self.bound)
