"""How many requests to keep in flight against an endpoint whose size nobody told us.

:class:`InFlightLimit` is a semaphore whose size can change while it is in use (the page flow
takes one permit per page). :class:`AdaptiveInFlight` sizes it from the server's own
``/metrics`` (vLLM's ``vllm:num_requests_running`` and ``vllm:num_requests_waiting``):

- it grows the limit (doubling) while nothing waits at the server, every running request is
  one of ours and we use the whole limit: the server has slots we do not feed. The limit counts
  pages, the server requests: a page read in segments or tiles has several requests running on
  its one permit, so "ours" at the server is the requests the client has on the wire;
- once requests wait (in two readings, with no more running: vLLM admits a burst over a few
  steps), the server is full: the limit becomes what runs plus a small queue (a quarter, at
  least 8), so a finished sequence is replaced at the next step rather than after a client
  round trip, without piling work up at the server; a queue that grows past that brings the
  limit down to it again;
- it backs off (x0.7) when the server answers 429 or 503;
- without ``/metrics`` (a non-vLLM endpoint) it stays at the starting limit, today's 64.

:meth:`AdaptiveInFlight.decide` is the whole policy as a pure function, so it is tested alone.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import math
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

log = logging.getLogger("llm_ocr")


class InFlightLimit:
    """A semaphore whose limit can be raised or lowered while permits are held.

    Lowering it never takes a permit back: new acquisitions wait until enough are released.
    It has the part of :class:`asyncio.Semaphore`'s interface the page flow uses
    (``acquire``, ``release``, ``locked``, ``async with``).
    """

    def __init__(self, limit: int) -> None:
        self._limit = max(1, limit)
        self._held = 0
        self._waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        self._followers: list[tuple[InFlightLimit, int]] = []

    @property
    def limit(self) -> int:
        """Permits that may be held at once."""
        return self._limit

    @property
    def held(self) -> int:
        """Permits held now."""
        return self._held

    @property
    def waiting(self) -> int:
        """Acquisitions waiting for a permit now."""
        return sum(1 for waiter in self._waiters if not waiter.done())

    @property
    def followers(self) -> int:
        """Limits made with :meth:`scaled` that follow this one (each stays registered here)."""
        return len(self._followers)

    def set_limit(self, limit: int) -> None:
        """Change the limit; waiters are let in at once if it grew."""
        self._limit = max(1, limit)
        self._wake()
        for follower, factor in self._followers:
            follower.set_limit(self._limit * factor)

    def scaled(self, factor: int) -> InFlightLimit:
        """A limit that stays ``factor`` times this one as this one changes (e.g. the pages a
        Describe run holds, twice the figure requests it may have in flight)."""
        follower = InFlightLimit(self._limit * factor)
        self._followers.append((follower, factor))
        return follower

    def locked(self) -> bool:
        """Whether :meth:`acquire` would wait."""
        return self._held >= self._limit or bool(self._waiters)

    async def acquire(self) -> bool:
        """Take a permit, waiting for one if needed (first come, first served)."""
        if not self.locked():
            self._held += 1
            return True
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release()  # granted just as we were cancelled: hand it on
            else:
                with contextlib.suppress(ValueError):
                    self._waiters.remove(waiter)
            raise
        return True

    def release(self) -> None:
        """Give a permit back."""
        self._held -= 1
        self._wake()

    def _wake(self) -> None:
        while self._waiters and self._held < self._limit:
            waiter = self._waiters.popleft()
            if not waiter.done():
                self._held += 1
                waiter.set_result(None)

    async def __aenter__(self) -> None:
        await self.acquire()

    async def __aexit__(self, *exc: object) -> None:
        self.release()


@dataclass(frozen=True)
class RunLimits:
    """The limits a run's requests are taken within: its pages, and three that follow the pages'
    limit as it changes (each made once, here, with :meth:`InFlightLimit.scaled`).

    A run makes its own from its page limit (:meth:`following`). A long-lived caller that reads
    many documents as runs of their own (the service's worker) makes one for its lifetime and
    hands it to every run: their pages and requests then take slots from the same limits, and a
    run that ends leaves nothing registered on them (a run that called ``scaled`` on a shared
    limit would add a follower per document read, for ever).
    """

    #: Pages in flight (a page holds its slot while it is read, figures included).
    pages: InFlightLimit
    #: Requests for the pieces of pages read in segments or tiles: as many as the pages.
    pieces: InFlightLimit
    #: Figure requests: their own limit, as large as the pages' (a page holds its slot while its
    #: figures wait for theirs, so one limit for both could deadlock).
    figures: InFlightLimit
    #: Pages of a Describe flow over rows read earlier: twice the figure requests.
    describe_pages: InFlightLimit

    @classmethod
    def following(cls, pages: InFlightLimit) -> RunLimits:
        """The limits of a run whose pages are bounded by ``pages``."""
        return cls(pages, pages.scaled(1), pages.scaled(1), pages.scaled(2))


@dataclass(frozen=True)
class AdaptivePolicy:
    """The knobs of :class:`AdaptiveInFlight`."""

    start: int = 64  # today's default with --endpoint
    floor: int = 8
    ceiling: int = 4096
    interval: float = 0.5  # seconds between two looks at /metrics
    queue_share: float = 0.25  # requests kept waiting at the server, as a share of those running
    min_queue: int = 8
    backoff: float = 0.7


@dataclass(frozen=True)
class Reading:
    """One look at the server and at ourselves."""

    running: float  # vllm:num_requests_running (all clients)
    waiting: float  # vllm:num_requests_waiting (all clients)
    ours: int  # permits we hold: our pages in flight
    overloaded: int  # 429/503 answers since the last look
    #: Our requests on the wire (None: not counted; taken to be ``ours``). More than ``ours``
    #: when pages are read in several requests at once (segments, tiles).
    sent: int | None = None


class AdaptiveInFlight:
    """Sizes an :class:`InFlightLimit` from the server's ``/metrics`` while a run goes on."""

    def __init__(
        self,
        limit: InFlightLimit,
        metrics: Callable[[], Awaitable[dict[str, float]]],
        overloads: Callable[[], int] = lambda: 0,
        policy: AdaptivePolicy | None = None,
        sent: Callable[[], int | None] = lambda: None,
    ) -> None:
        self.limit = limit
        self.metrics = metrics
        self.overloads = overloads
        self.sent = sent  # our requests on the wire now (None: not counted)
        self.policy = policy or AdaptivePolicy()
        self.history: list[tuple[float, int]] = []  # (seconds since start, limit) at each change
        self._seen_overloads = 0

    def decide(self, limit: int, now: Reading, before: Reading | None = None) -> int:
        """The next limit, from the current one and the last two readings (the whole policy)."""
        p = self.policy
        if now.overloaded:
            return max(p.floor, math.floor(limit * p.backoff))
        if now.waiting > 0:
            # Requests wait. vLLM admits a burst of new requests over a few steps (its token
            # budget per step), so one reading with a queue may be admission, not a full server:
            # the server is full when requests waited last time too and no more run now.
            full = before is not None and before.waiting > 0 and now.running <= before.running
            if not full:
                return limit
            queue = max(p.min_queue, math.ceil(p.queue_share * now.running))
            return max(p.floor, min(limit, int(now.running) + queue))
        # The two counts are read at slightly different moments (a request the server just
        # finished may still be ours): a few more running than ours is still "all ours".
        sent = now.ours if now.sent is None else max(now.sent, 0)
        all_ours = now.running <= sent + max(2, 0.05 * sent)
        busy = now.ours >= 0.9 * limit  # we use the whole limit: it, not the client, binds
        fed = now.running >= 0.8 * min(sent, now.ours)  # our requests run (not stuck client-side)
        if all_ours and busy and fed:
            return min(p.ceiling, limit * 2)
        return limit

    async def run(self) -> None:
        """Poll and adjust until cancelled; stop adjusting when ``/metrics`` is not there."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        self.history.append((0.0, self.limit.limit))
        before: Reading | None = None
        while True:
            await asyncio.sleep(self.policy.interval)
            try:
                values = await self.metrics()
            except Exception as exc:  # noqa: BLE001 - no /metrics: keep the starting limit
                values = {}
                reason = f"{type(exc).__name__}: {exc}"
            else:
                reason = "it has no vllm:num_requests_running / num_requests_waiting"
            if "running" not in values or "waiting" not in values:
                log.info("the endpoint's /metrics cannot size the requests in flight (%s): keeping %d",
                         reason, self.limit.limit)
                return
            total = self.overloads()
            reading = Reading(
                values["running"], values["waiting"], self.limit.held, total - self._seen_overloads, self.sent()
            )
            self._seen_overloads = total
            new = self.decide(self.limit.limit, reading, before)
            before = reading
            if new != self.limit.limit:
                log.debug("in flight %d -> %d (server running %g, waiting %g; ours %d)",
                          self.limit.limit, new, reading.running, reading.waiting, reading.ours)
                self.limit.set_limit(new)
                self.history.append((round(loop.time() - started, 2), new))


@contextlib.asynccontextmanager
async def adapting(controller: AdaptiveInFlight | None) -> AsyncIterator[None]:
    """Run ``controller`` (if any) in the background for the duration of the block."""
    if controller is None:
        yield
        return
    task = asyncio.create_task(controller.run(), name="adaptive-in-flight")
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        if len(controller.history) > 1:
            log.info("requests in flight adapted to the server: %s",
                     ", ".join(f"{limit} at {t:g}s" for t, limit in controller.history[-8:]))


def in_flight_control(
    fixed: int | None,
    suggested: int | None,
    metrics: Callable[[], Awaitable[dict[str, float]]] | None,
    overloads: Callable[[], int] = lambda: 0,
    policy: AdaptivePolicy | None = None,
    sent: Callable[[], int | None] = lambda: None,
) -> tuple[InFlightLimit, AdaptiveInFlight | None]:
    """The in-flight limit of a run, and the controller that sizes it (None: fixed).

    ``fixed`` (``--max-in-flight``) wins; then ``suggested`` (the GPU preset of a server we
    launched); else, with the endpoint's ``metrics``, the limit adapts from ``policy.start``
    (``sent``: the client's requests on the wire, see :class:`Reading`).
    """
    policy = policy or AdaptivePolicy()
    if fixed:
        return InFlightLimit(fixed), None
    if suggested:
        return InFlightLimit(suggested), None
    limit = InFlightLimit(policy.start)
    if metrics is None:
        return limit, None
    return limit, AdaptiveInFlight(limit, metrics, overloads, policy, sent)
