"""Pages that crash the model server: suspects, isolation, quarantine.

A page that kills the server (DeepSeek-OCR users see images that crash vLLM with a CUDA
illegal memory access on every attempt) must cost that one page, not the run. Every request a
page sends is tagged with the **incarnation** it went to (:class:`Incarnation`): which server
(of several behind one dispatcher) and which of its lives (a managed server's generation, an
external endpoint's count of "down, then up again").

* When an incarnation dies, every page whose latest request went to it is a **suspect** of that
  death. Its request is retried on the next incarnation without using up an attempt (the
  client's existing rule: a request lost to a crash is not the page's fault).
* A page that is a suspect of ``isolate_after`` (2) deaths is retried **alone** on the server
  it crashed last: new requests of other pages to that server wait, those in flight there finish
  first, then it goes out with nothing beside it. Other servers of a fleet keep working (the
  dispatcher sends them the other pages, see :meth:`CrashTracker.route`).
* Suspects of one death go back out at most ``√n`` at a time (``n``: how many there are), beside
  new pages: if one of them is the culprit, the next death then shares only its group, so at most
  ``√n`` pages need a solo retry instead of every page that was in flight (a GPU server holds
  hundreds, and a solo retry leaves it nearly idle).
* If the server dies while it is alone, the page is **convicted**: its request raises
  :class:`PageQuarantined`, the runner writes an ``error`` row ("the model server crashed on
  this page N times; quarantined") and the run goes on. If the server answers it, it is
  cleared, and the server is given back to the other pages at once (not when the page ends).
* A death is charged to the server's restart budget only while none of its suspects is
  convicted or waiting for its solo retry: the budget is for independent failures, not for one
  poison page (see :meth:`CrashTracker.charged_deaths`).

The tracker sees requests through the client's ``gate`` (called before every attempt and after
a connection error, see :class:`llm_ocr.vlm.client.VlmClient`) and its ``request_ended`` (called
once for each pass through the gate, when that request ends), and pages through
:meth:`CrashTracker.guard`, which the runners wrap around their page handler; which page a
request belongs to travels in a context variable, so neither the client nor the stages change.

The gate only ever waits for requests **on the wire** (they end by themselves: an answer, an
error, a timeout), never for a page to come back to it: between two requests a page may wait
for something a request held at this gate has (a Describe permit: ``llm-ocr run`` describes a
page's figures under a limit its figure requests hold while they wait here), and waiting for
that page would wait forever.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import math
from collections import Counter
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from enum import Enum
from typing import Protocol, TypeVar

log = logging.getLogger("llm_ocr")

#: ``(doc_id, page)``: a page's identity (the same as :attr:`llm_ocr.records.PageResult.key`).
PageKey = tuple[str, int]


@dataclass(frozen=True)
class Incarnation:
    """One life of one server: the incarnation a request went to, as the tracker's gate returns it."""

    #: Which server of several behind one dispatcher (0 for one).
    server: int
    #: Its generation: a managed server's (bumped on each restart), an external endpoint's count
    #: of "down, then up again".
    generation: int


#: A server's own gate: waits until the server is up and returns its generation
#: (:meth:`~llm_ocr.serving.vllm.process.ManagedServer.wait_ready`,
#: :meth:`~llm_ocr.serving.watch.EndpointWatch.wait_up`).
ServerGate = Callable[[], Awaitable[int]]
#: The client's gate (:meth:`CrashTracker.gate`): the incarnation the request goes to.
Gate = Callable[[], Awaitable[Incarnation]]
#: Called by the gate when a page whose latest request to this server ended unanswered asks to
#: send again, with the generation that request went to. External endpoints probe here.
RetryHook = Callable[[int], Awaitable[None]]
#: Told, once for each pass through the gate, that the request ended: the incarnation the gate
#: returned, and whether the server answered it with a completion (not: an error status, since
#: vLLM answers the requests in flight with a 500 when its engine dies; a lost connection, a
#: timeout, a cancellation, a pass that sent nothing). :meth:`CrashTracker.request_ended` is one.
RequestEnded = Callable[[Incarnation, bool], None]


class OfDocument(Protocol):
    """What a guarded handler's first argument has (a :class:`llm_ocr.sources.base.DocumentRef`)."""

    @property
    def doc_id(self) -> str: ...


class OfPage(Protocol):
    """What a guarded handler's second argument has (a rendered page, or one that failed to render)."""

    @property
    def page(self) -> int: ...


R = TypeVar("R")
RefT = TypeVar("RefT", bound=OfDocument)
ItemT = TypeVar("ItemT", bound=OfPage)

#: Deaths a page must have been in flight at before it is retried alone.
ISOLATE_AFTER = 2

_current_page: ContextVar[PageKey | None] = ContextVar("llm_ocr_current_page", default=None)


class PageQuarantined(BaseException):
    """The server died while this page was the only one in flight: it is the culprit.

    A ``BaseException`` like :class:`asyncio.CancelledError`, and for a like reason: it is
    raised inside the client's retry loop (from the gate), whose ``except Exception`` handlers
    would retry the request or declare the whole endpoint down. The page guard catches it.
    """

    def __init__(self, page: PageKey, crashes: int) -> None:
        super().__init__(f"the model server crashed on this page {crashes} times; quarantined")
        self.page = page
        self.crashes = crashes

    @property
    def message(self) -> str:
        """The error text of the page's row."""
        return str(self.args[0])


@dataclass
class _Page:
    """What the tracker knows of one page in the handler."""

    sent: Incarnation | None = None  # where its latest request went
    #: Its latest request that ended unanswered (an error status, a lost connection, a timeout),
    #: until the page next passes a gate: a request after it may be its retry, and the server it
    #: went to is asked whether it is gone. An answered request leaves nothing to ask: a page's
    #: next piece, tile or figure is no retry (it cost a probe a page before).
    failed: Incarnation | None = None
    at_gate: bool = False
    gate_server: int | None = None  # the server whose gate it waits at (while at_gate)
    #: Its requests on the wire, by server: passed the gate, not ended yet (a page can have
    #: several at once: tiles, figures). What the gate waits for; not the page's being in the
    #: handler, since a page does other things there (and may wait for one held at this gate).
    wire: Counter[int] = field(default_factory=Counter)


class _Turn(Enum):
    """What the gate does with a page's request to one server now (see :meth:`CrashTracker._turn`)."""

    #: It goes out.
    SEND = "send"
    #: It waits at the gate until something changes.
    WAIT = "wait"
    #: The page is due its solo retry and no other page runs alone on this server: the server is
    #: kept for it from now on, and it waits for the other pages' requests on the wire to end.
    HOLD = "hold"
    #: As :attr:`HOLD`, with nothing else on the wire: it claims the server and goes out alone.
    ALONE = "alone"


@dataclass(frozen=True)
class _Death:
    incarnation: Incarnation
    suspects: frozenset[PageKey]


class CrashTracker:
    """Suspects, isolation and convictions of one endpoint's pages (see the module docstring)."""

    def __init__(self, isolate_after: int = ISOLATE_AFTER) -> None:
        if isolate_after < 1:
            raise ValueError("isolate_after must be at least 1")
        self.isolate_after = isolate_after
        #: Pages convicted this run, with the number of crashes each was in flight at.
        self.convicted: dict[PageKey, int] = {}
        self._pages: dict[PageKey, _Page] = {}
        self._deaths: list[_Death] = []
        self._death_count: Counter[PageKey] = Counter()
        self._pending: set[PageKey] = set()  # due a solo retry
        #: The server each page due a solo retry runs it on: the one it crashed last, or the one
        #: it reached (when that one is gone for good).
        self._home: dict[PageKey, int] = {}
        self._solo: dict[int, PageKey] = {}  # server -> the page running alone on it
        #: Solo retries so far (each page that went out alone).
        self.solo_runs = 0
        #: Requests of suspects of one death waiting for a place among the √n on the wire, by
        #: ticket, in the order they began to wait: places go in that order.
        self._queue: dict[int, PageKey] = {}
        self._tickets = itertools.count()
        self._changed: asyncio.Event | None = None

    # -- what the runners and the server see ----------------------------------------------------

    @property
    def deaths(self) -> int:
        """Deaths of the server seen so far (each incarnation that ended)."""
        return len(self._deaths)

    def charged_deaths(self, server: int | None = None) -> int:
        """Deaths that count against a restart budget: those none of whose suspects is convicted
        or still due its solo retry. A suspect cleared by its solo retry explains nothing, so
        the deaths it was blamed for count again from then on. ``server``: only the deaths of
        that server of several (see :meth:`gate`)."""
        explaining = set(self.convicted) | self._pending
        return sum(
            1 for death in self._deaths
            if not death.suspects & explaining and (server is None or death.incarnation.server == server)
        )

    def route(self) -> tuple[int | None, frozenset[int]]:
        """For the dispatcher, about the page whose request is being sent (the current context):
        ``(server it must go to, servers to keep other requests away from)``. A page due its
        solo retry goes to its server; that server is kept for it (and for a page running alone
        on it), so the other pages go to the other servers instead of waiting at its gate."""
        held = frozenset(self._home[key] for key in self._pending) | frozenset(self._solo)
        key = _current_page.get()
        if key is not None and key in self._pending:
            return self._home.get(key), held
        return None, held

    # -- several servers (one per GPU, or several endpoints) behind one dispatcher ---------------

    def server_death(self, server: int) -> Callable[[int], int]:
        """The ``count_death`` (or ``on_down``) hook of server ``server`` of several: records the
        death of its generation and returns the deaths charged to that server alone."""

        def record(generation: int) -> int:
            self.record_death(generation, server)
            return self.charged_deaths(server)

        return record

    def record_death(self, generation: int, server: int = 0) -> int:
        """Generation ``generation`` of server ``server`` died: blame the pages whose latest
        request went to it (a death of one server of several blames none of the others' pages).

        Returns :meth:`charged_deaths` afterwards (a managed server's restart budget asks).
        """
        incarnation = Incarnation(server, generation)
        suspects = frozenset(key for key, page in self._pages.items() if page.sent == incarnation)
        solo = self._solo.get(server)
        if solo is not None and solo in suspects:
            # Alone on the server, and it died: this page is the culprit, the others (a page
            # cropping after its answer still carries the tag) are not suspects of this death.
            self._death_count[solo] += 1
            self.convicted[solo] = self._death_count[solo]
            # It never sends again (the gate stops it): the server is the others' at once, not
            # when its client is back at the gate (after a 5xx, a backoff of up to --backoff-max).
            self._clear(solo)
            suspects = frozenset({solo})
            log.error("the model server died while page %s of %s ran alone: quarantining it (%d crashes)",
                      solo[1], solo[0], self.convicted[solo])
        else:
            for key in suspects:
                self._death_count[key] += 1
                if self._death_count[key] >= self.isolate_after and key not in self.convicted:
                    self._pending.add(key)
                    self._home[key] = server  # alone on the server it crashed last
            if suspects:
                due = suspects & self._pending
                log.warning(
                    "the model server died with %d page(s) in flight; they are retried without using up "
                    "attempts%s", len(suspects),
                    f"; {len(due)} of them were in flight at an earlier death too and will be retried alone"
                    if due else "",
                )
        self._deaths.append(_Death(incarnation, suspects))
        self._notify()
        return self.charged_deaths()

    def gate(self, inner: ServerGate, on_retry: RetryHook | None = None, *, server: int = 0) -> Gate:
        """The client's gate of server ``server`` (of several behind one dispatcher; 0 for one)
        whose own gate is ``inner``: tag each request with its page and incarnation, hold
        requests back while a page runs alone, and stop a convicted page's request. A page due
        its solo retry runs alone on its server; the other servers keep serving the other pages."""

        async def gated() -> Incarnation:
            key = _current_page.get()
            page = self._pages.get(key) if key is not None else None
            if key is None or page is None:  # not a page's request (e.g. a describe-only run)
                return Incarnation(server, await inner())
            failed, page.failed = page.failed, None
            if failed is not None and on_retry is not None and failed.server == server:
                await on_retry(failed.generation)  # its request failed: is the server gone?
            page.at_gate = True
            self._notify()
            ticket: int | None = None  # its place in the queue of suspects, once it waits for one
            try:
                while True:
                    self._stop_if_convicted(key)
                    incarnation = Incarnation(server, await inner())
                    self._stop_if_convicted(key)
                    page.gate_server = server
                    turn = self._turn(key, server, ticket)
                    if turn in (_Turn.HOLD, _Turn.ALONE):
                        self._keep_server(key, server)
                    if turn is _Turn.ALONE:
                        self._run_alone(key, server)
                    if turn in (_Turn.SEND, _Turn.ALONE):
                        break
                    if ticket is None and self._death_count[key] == 1 and key not in self._pending:
                        ticket = next(self._tickets)
                        self._queue[ticket] = key
                    await self._wait_for_change()
            finally:
                page.at_gate = False
                page.gate_server = None
                if ticket is not None:
                    del self._queue[ticket]
                    self._notify()  # the next in the queue may be first now
            page.sent = incarnation
            page.wire[server] += 1  # until request_ended
            return incarnation

        return gated

    def request_ended(self, incarnation: Incarnation, answered: bool) -> None:
        """The client's ``request_ended``: the current page's request that passed the gate to
        ``incarnation`` ended; ``answered``: the server answered it (see :data:`RequestEnded`).

        A page running alone whose request the server answered did not crash it: it is cleared
        and the server is given back now, not when its page ends, for this interleaving: pages X
        and P were both in flight at two deaths of server 0, so both are due a solo retry there;
        X is back at the gate first and claims server 0; the server answers X; X's page sends its
        next request, which goes to server 0 (X is still due its solo retry) and passes (X holds
        the server), again and again, while P waits at the gate for the server X holds. If X's
        page waits for something only P or the pages held behind it can give (a Describe permit;
        in the tests, P's conviction), X's page never ends and nothing moves again.

        Unanswered (an error status, a dropped connection), the page keeps the server alone: the
        death that convicts it may be recorded after its request failed (vLLM answers a 500 when
        its engine dies, then exits; a managed server's watcher sees the exit later), and the
        client comes back to the gate to retry it alone (or gives up, and the page ends).
        """
        key = _current_page.get()
        page = self._pages.get(key) if key is not None else None
        if key is None or page is None:  # not a page's request, or its page is over
            return
        server = incarnation.server
        if not answered:
            page.failed = incarnation
        if page.wire[server] > 0:
            page.wire[server] -= 1
        if answered and self._solo.get(server) == key and not page.wire[server] and key not in self.convicted:
            self._clear(key)
        self._notify()  # a solo retry waiting for this request, or a suspect over the √n limit, may go now

    def guard(
        self,
        handler: Callable[[RefT, ItemT, int | None], Awaitable[R]],
        on_quarantine: Callable[[RefT, ItemT, int | None, PageQuarantined], Awaitable[R]],
    ) -> Callable[[RefT, ItemT, int | None], Awaitable[R]]:
        """Wrap a page handler ``(ref, item, num_pages)``: its requests are tracked as this
        page's (``(ref.doc_id, item.page)``), and a conviction turns into
        ``on_quarantine(ref, item, num_pages, exc)``."""

        async def guarded(ref: RefT, item: ItemT, num_pages: int | None) -> R:
            key: PageKey = (ref.doc_id, item.page)
            if key in self.convicted:  # convicted earlier in this run; never sent again
                return await on_quarantine(ref, item, num_pages, PageQuarantined(key, self.convicted[key]))
            try:
                self._pages[key] = _Page()
                token = _current_page.set(key)
                try:
                    return await handler(ref, item, num_pages)
                finally:
                    _current_page.reset(token)
                    self._page_done(key)
            except PageQuarantined as exc:
                return await on_quarantine(ref, item, num_pages, exc)

        return guarded

    # -- internals --------------------------------------------------------------------------------

    def _stop_if_convicted(self, key: PageKey) -> None:
        if key in self.convicted:
            raise PageQuarantined(key, self.convicted[key])

    def _turn(self, key: PageKey, server: int, ticket: int | None = None) -> _Turn:
        """What ``key``'s request to ``server`` does now; changes nothing (the gate acts on the
        answer). A page due its solo retry holds only that server: the others keep serving.
        ``ticket``: the request's place in the queue of suspects (None: not queued yet)."""
        solo = self._solo.get(server)
        if solo is not None:
            return _Turn.SEND if solo == key else _Turn.WAIT
        if key in self._pending:
            # Only requests on the wire, which end by themselves: not "busy" pages, which may be
            # waiting for something held by a request waiting here (see the module docstring).
            if any(page.wire[server] for other, page in self._pages.items() if other != key):
                return _Turn.HOLD  # wait for the requests in flight on this server to finish
            return _Turn.ALONE
        # Pages due a solo retry go first: nothing new starts on a server while one waits at its gate.
        if self._pending and any(
            other in self._pending and page.at_gate and page.gate_server == server for other,
            page in self._pages.items()
        ):
            return _Turn.WAIT
        if self._death_count[key] == 0:  # the hot path: a page no death has touched
            return _Turn.SEND
        # A suspect of one death: only √n of the n such pages on the wire at once (on the wire,
        # not busy: a busy suspect may be waiting for a permit held by a suspect waiting here).
        suspects = [page for other, page in self._pages.items() if self._death_count[other] == 1 and other != key]
        places = max(1, math.isqrt(len(suspects) + 1)) - sum(1 for page in suspects if any(page.wire.values()))
        # First come, first served: a suspect whose request was just answered asks again before
        # the waiters its answer woke up do (the inner gate returns at once when the server is
        # up), so it would take the free place every time, and the culprit waiting among them
        # would not go back out while the other suspects have requests to send.
        ahead = sum(
            1 for t, other in self._queue.items() if (ticket is None or t < ticket) and self._death_count[other] == 1
        )
        return _Turn.SEND if ahead < places else _Turn.WAIT

    def _keep_server(self, key: PageKey, server: int) -> None:
        """``server`` is kept for ``key``'s solo retry (the dispatcher sends the other pages
        elsewhere): the server it crashed last, or another when that one is gone for good or
        busy with another page alone."""
        if self._home.get(key) != server:
            self._home[key] = server
            self._notify()

    def _run_alone(self, key: PageKey, server: int) -> None:
        """``key`` claims ``server`` for its solo retry: other pages' requests to it wait."""
        self._solo[server] = key
        self.solo_runs += 1
        self._notify()  # pages waiting at the gate re-check: they wait for this one now
        log.warning("retrying page %s of %s alone (in flight at %d server deaths)",
                    key[1], key[0], self._death_count[key])

    def _page_done(self, key: PageKey) -> None:
        self._pages.pop(key, None)
        self._clear(key)
        self._notify()

    def _clear(self, key: PageKey) -> None:
        """``key`` is no longer due a solo retry: it ran alone without a crash, or its page ended."""
        if key in self._pending:
            self._pending.discard(key)
            if key not in self.convicted:
                log.info("page %s of %s finished alone without a crash; cleared", key[1], key[0])
        self._home.pop(key, None)
        for server in [s for s, solo in self._solo.items() if solo == key]:
            del self._solo[server]

    def _notify(self) -> None:
        if self._changed is not None:
            self._changed.set()
            self._changed = None

    async def _wait_for_change(self) -> None:
        if self._changed is None:
            self._changed = asyncio.Event()
        await self._changed.wait()
