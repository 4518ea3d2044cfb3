"""Pages ready to send, waiting for a slot: the longest expected answer goes first.

A shard's run ends when its last long page ends. Sent in input order, a page whose answer takes
as long as half the run can start near the end and hold the GPU, mostly idle, until it is done;
a client that knew every answer's length would send the longest first and finish with a batch
of short pages. The run knows roughly, as it renders each page: its text layer's character count,
or its ink (:mod:`llm_ocr.sources.density`). So rendered pages wait in :class:`Waiting`, and when
a slot frees, the page expected to be longest is sent.

How far ahead the run looks is bounded, because every waiting page is held in memory (its
encoded image): pages are taken in while fewer than :attr:`LookAhead.pages` pages and fewer than
:attr:`LookAhead.bytes` bytes wait, a whole render chunk at a time, so at most one chunk more.
A page is never held back when a slot is free: the first pages of a run go out as they are
rendered, and pages wait only while every slot is busy. Short pages may wait until the end of
the shard; they are then the batch the run drains on, which is what a longest-first schedule
wants (and the flow writes rows as pages finish: in input order, the rows behind a waiting page
would wait too).
"""

from __future__ import annotations

import asyncio
import heapq
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

RefT = TypeVar("RefT")
ItemT = TypeVar("ItemT")
#: A look-ahead only takes pages in (it ranks and weighs them): one for any page fits them all.
PageT = TypeVar("PageT", contravariant=True)

MB = 1024 * 1024

#: What a page is expected to cost, the higher the sooner it goes: ``math.inf`` for a page that
#: sends nothing (a failure row), None when nothing is known (then the mean of the known ones).
Expected = float | None


@dataclass(frozen=True)
class LookAhead(Generic[PageT]):
    """How many rendered pages may wait to be sent, and which goes first.

    ``pages`` 0 keeps input order with one render chunk at a time (no look-ahead). ``expected``
    says how long a page's answer is expected to be (characters of text, say), ``size`` how many
    bytes it holds in memory while it waits.
    """

    pages: int
    bytes: int
    expected: Callable[[PageT], Expected] = field(default=lambda item: None)
    size: Callable[[PageT], int] = field(default=lambda item: 0)


#: No look-ahead: input order, one chunk at a time (a flow over an earlier stage's rows).
IN_ORDER: LookAhead[object] = LookAhead(0, 0)


@dataclass(order=True)
class Entry(Generic[RefT, ItemT]):
    """A page waiting to be sent: its place (longest expected first, then input order), the
    handler's arguments, and its sequence number in the input (rows are written in that order)."""

    key: tuple[float, int]
    seq: int = field(compare=False)
    ref: RefT = field(compare=False)
    item: ItemT = field(compare=False)
    num_pages: int | None = field(compare=False)
    nbytes: int = field(compare=False, default=0)


class Waiting(Generic[RefT, ItemT]):
    """The pages waiting for a slot (see the module docstring): :meth:`add` a chunk of them in
    input order when :meth:`wait_for_room` returns, :meth:`take` the one to send next."""

    def __init__(self, look_ahead: LookAhead[ItemT]) -> None:
        self.look_ahead = look_ahead
        self._heap: list[Entry[RefT, ItemT]] = []
        #: Whose pages are not ranked but kept in the order they come (set by the page flow).
        self.in_render_order: Callable[[RefT], bool] | None = None
        self._seq = 0
        self._bytes = 0
        self._known_sum = 0.0
        self._known_count = 0
        self._closed = False
        self._arrived = asyncio.Event()  # a chunk came in, or the intake ended
        self._left = asyncio.Event()  # a page went out
        #: The most pages and bytes that waited at once.
        self.peak_pages = 0
        self.peak_bytes = 0

    @property
    def pages(self) -> int:
        """Pages waiting now."""
        return len(self._heap)

    @property
    def bytes(self) -> int:
        """Bytes the waiting pages hold."""
        return self._bytes

    def has_room(self) -> bool:
        """Whether another chunk may be taken in: nothing waits, or fewer pages and bytes than
        the look-ahead's bounds."""
        bound = self.look_ahead
        return not self._heap or (len(self._heap) < bound.pages and self._bytes < bound.bytes)

    async def wait_for_room(self) -> None:
        """Return once :meth:`has_room` (a page was taken out, or at once)."""
        while not self.has_room():
            self._left.clear()
            await self._left.wait()

    def add(self, ref: RefT, items: list[ItemT], num_pages: int | None) -> None:
        """Take in one chunk's pages (in input order): each gets the next sequence number."""
        for item in items:
            expected = self.look_ahead.expected(item)
            if expected is not None and math.isfinite(expected):
                self._known_sum += expected
                self._known_count += 1
            nbytes = self.look_ahead.size(item)
            # Pages of a document read in its intake's order go after every ranked page, in that
            # order (a work group's second reader: from the group's end, toward its holder).
            rank = 0.0 if self.in_render_order is not None and self.in_render_order(ref) else -self._rank(expected)
            entry = Entry((rank, self._seq), self._seq, ref, item, num_pages, nbytes)
            self._seq += 1
            heapq.heappush(self._heap, entry)
            self._bytes += nbytes
        self.peak_pages = max(self.peak_pages, len(self._heap))
        self.peak_bytes = max(self.peak_bytes, self._bytes)
        self._arrived.set()

    def _rank(self, expected: Expected) -> float:
        # A page nothing is known about ranks with the average page seen so far: neither ahead
        # of pages known to be long nor behind those known to be short. Without look-ahead
        # every page ranks the same, so input order decides.
        if self.look_ahead.pages <= 0:
            return 0.0
        if expected is None:
            return self._known_sum / self._known_count if self._known_count else 0.0
        return expected

    def close(self) -> None:
        """No more pages will come: :meth:`take` returns None once the waiting ones are sent."""
        self._closed = True
        self._arrived.set()

    async def ready(self, stop: asyncio.Event) -> bool:
        """Wait until a page waits (True), or until closed and empty or ``stop`` is set (False)."""
        while not self._heap:
            if self._closed or stop.is_set():
                return False
            self._arrived.clear()
            arrived = asyncio.ensure_future(self._arrived.wait())
            stopped = asyncio.ensure_future(stop.wait())
            try:
                await asyncio.wait({arrived, stopped}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                arrived.cancel()
                stopped.cancel()
        return not stop.is_set()

    async def take(self, stop: asyncio.Event,
                   preferred: Callable[[RefT], bool] | None = None) -> Entry[RefT, ItemT] | None:
        """The page to send next (longest expected first, ties in input order), waiting for one
        if none waits; None once closed and empty, or when ``stop`` is set first.

        With ``preferred``, the pages whose ref it accepts go before all others, longest first
        among them; another page goes only when none of those waits. Work groups pass whether a
        page's group has started: a claimed group's pages are rendered while the slots read the
        started one, and a longer page of it must not start it while the started group's own
        pages wait (the process would then hold both; a slow one held three groups in issue
        46's held-out run, 1.75 times the even-split bound on an idle machine)."""
        if not await self.ready(stop):
            return None
        entry = self._pop(preferred)
        self._bytes -= entry.nbytes
        self._left.set()  # room for the next chunk
        return entry

    def _pop(self, preferred: Callable[[RefT], bool] | None) -> Entry[RefT, ItemT]:
        """The heap's first entry, or, with ``preferred``, its first one ``preferred`` accepts if
        any. A scan of the waiting pages (at most the look-ahead's bound) when the first is not."""
        if preferred is None or preferred(self._heap[0].ref):
            return heapq.heappop(self._heap)
        ready_ones = [i for i, entry in enumerate(self._heap) if preferred(entry.ref)]
        if not ready_ones:
            return heapq.heappop(self._heap)
        at = min(ready_ones, key=lambda i: self._heap[i].key)
        entry = self._heap[at]
        last = self._heap.pop()
        if at < len(self._heap):
            self._heap[at] = last
            heapq.heapify(self._heap)
        return entry


def in_megabytes(nbytes: int) -> float:
    """``nbytes`` in MiB, rounded for stats."""
    return round(nbytes / MB, 2)
