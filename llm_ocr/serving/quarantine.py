"""Pages that crash the model server: suspects, isolation, quarantine.

A page that kills the server (DeepSeek-OCR users see images that crash vLLM with a CUDA
illegal memory access on every attempt) must cost that one page, not the run. The server's
incarnations are numbered (a managed server's generation, an external endpoint's count of
"down, then up again"); every request a page sends is tagged with the incarnation it went to.

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
  this page N times; quarantined") and the run goes on. If it succeeds, it is cleared.
* A death is charged to the server's restart budget only while none of its suspects is
  convicted or waiting for its solo retry: the budget is for independent failures, not for one
  poison page (see :meth:`CrashTracker.charged_deaths`).

The tracker sees requests through the client's ``gate`` (called before every attempt and after
a connection error, see :class:`llm_ocr.vlm.client.VlmClient`), and pages through
:meth:`CrashTracker.guard`, which the runners wrap around their page handler; which page a
request belongs to travels in a context variable, so neither the client nor the stages change.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections import Counter
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, TypeVar

log = logging.getLogger("llm_ocr")

#: ``(doc_id, page)``: a page's identity (the same as :attr:`llm_ocr.records.PageResult.key`).
PageKey = tuple[str, int]
#: The server's incarnation a request went to, as the gate returns it.
Generation = int
Gate = Callable[[], Awaitable[Generation]]
#: Called by the gate when a page that already sent a request asks to send again (its request
#: failed), with the incarnation it went to. External endpoints probe here.
RetryHook = Callable[[Generation], Awaitable[None]]

R = TypeVar("R")

#: Deaths a page must have been in flight at before it is retried alone.
ISOLATE_AFTER = 2
#: With several servers, server i's incarnations are ``i * SERVER_STRIDE + generation``.
SERVER_STRIDE = 1_000_000

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

    sent: Generation | None = None  # incarnation of its latest request
    busy: bool = False  # passed the gate and not back at it yet (its request may be on the wire)
    at_gate: bool = False
    gate_server: int | None = None  # the server whose gate it waits at (while at_gate)


def server_of(generation: Generation) -> int:
    """The server (of several behind one dispatcher; 0 for one) an incarnation belongs to."""
    return generation // SERVER_STRIDE


@dataclass(frozen=True)
class _Death:
    generation: Generation
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
        that server of several (see :meth:`server_gate`)."""
        explaining = set(self.convicted) | self._pending
        return sum(
            1 for death in self._deaths
            if not death.suspects & explaining and (server is None or server_of(death.generation) == server)
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

    def server_gate(self, server: int, inner: Gate, on_retry: RetryHook | None = None) -> Gate:
        """:meth:`gate` for server ``server`` of several: its incarnations are numbered
        ``server * SERVER_STRIDE + generation``, so a death of one blames only the pages whose
        latest request went to it. A page due its solo retry runs alone on its server; the
        others keep serving the other pages."""
        base = server * SERVER_STRIDE

        async def shifted() -> Generation:
            return base + await inner()

        async def retry(generation: Generation) -> None:
            assert on_retry is not None
            await on_retry(generation - base)

        return self.gate(shifted, on_retry=retry if on_retry is not None else None)

    def server_death(self, server: int) -> Callable[[Generation], int]:
        """The ``count_death`` (or ``on_down``) hook of server ``server`` of several: records the
        death of its incarnation and returns the deaths charged to that server alone."""
        base = server * SERVER_STRIDE

        def record(generation: Generation) -> int:
            self.record_death(base + generation)
            return self.charged_deaths(server)

        return record

    def record_death(self, generation: Generation) -> int:
        """Incarnation ``generation`` died: blame the pages whose latest request went to it.

        Returns :meth:`charged_deaths` afterwards (a managed server's restart budget asks).
        """
        suspects = frozenset(key for key, page in self._pages.items() if page.sent == generation)
        server = server_of(generation)
        solo = self._solo.get(server)
        if solo is not None and solo in suspects:
            # Alone on the server, and it died: this page is the culprit, the others (a page
            # cropping after its answer still carries the tag) are not suspects of this death.
            self._death_count[solo] += 1
            self.convicted[solo] = self._death_count[solo]
            self._pending.discard(solo)
            self._home.pop(solo, None)
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
        self._deaths.append(_Death(generation, suspects))
        self._notify()
        return self.charged_deaths()

    def gate(self, inner: Gate, on_retry: RetryHook | None = None) -> Gate:
        """Wrap the client's ``inner`` gate: tag each request with its page and incarnation,
        hold requests back while a page runs alone, and stop a convicted page's request."""

        async def gated() -> Generation:
            key = _current_page.get()
            page = self._pages.get(key) if key is not None else None
            if key is None or page is None:  # not a page's request (e.g. a describe-only run)
                return await inner()
            if page.busy and on_retry is not None and page.sent is not None:
                await on_retry(page.sent)  # its request failed: is the server gone?
            page.busy = False
            page.at_gate = True
            self._notify()
            try:
                while True:
                    self._stop_if_convicted(key)
                    generation = await inner()
                    self._stop_if_convicted(key)
                    page.gate_server = server_of(generation)
                    if self._may_send(key, page.gate_server):
                        break
                    await self._wait_for_change()
            finally:
                page.at_gate = False
                page.gate_server = None
            page.busy, page.sent = True, generation
            return generation

        return gated

    def guard(
        self,
        handler: Callable[..., Awaitable[R]],
        on_quarantine: Callable[[Any, Any, int | None, PageQuarantined], Awaitable[R]],
    ) -> Callable[..., Awaitable[R]]:
        """Wrap a page handler ``(ref, item, num_pages)``: its requests are tracked as this
        page's, and a conviction turns into ``on_quarantine(ref, item, num_pages, exc)``."""

        async def guarded(ref: Any, item: Any, num_pages: int | None) -> R:
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

    def _may_send(self, key: PageKey, server: int) -> bool:
        """Whether ``key`` may send to ``server`` now; claims that server's solo slot for a page
        due a solo retry. Only that server waits for it: the others keep serving."""
        solo = self._solo.get(server)
        if solo is not None:
            return solo == key
        if key in self._pending:
            if self._home.get(key) != server:
                # Not the server it crashed (that one is gone for good, or busy with another
                # page alone): this one it is, and the dispatcher keeps it for this page now.
                self._home[key] = server
                self._notify()
            busy_here = (
                page.busy and page.sent is not None and server_of(page.sent) == server
                for other, page in self._pages.items() if other != key
            )
            if any(busy_here):
                return False  # wait for the requests in flight on this server to finish
            self._solo[server] = key
            self.solo_runs += 1
            self._notify()  # pages waiting at the gate re-check: they wait for this one now
            log.warning("retrying page %s of %s alone (in flight at %d server deaths)",
                        key[1], key[0], self._death_count[key])
            return True
        # Pages due a solo retry go first: nothing new starts on a server while one waits at its gate.
        if self._pending and any(
            other in self._pending and page.at_gate and page.gate_server == server for other,
            page in self._pages.items()
        ):
            return False
        if self._death_count[key] == 0:  # the hot path: a page no death has touched
            return True
        # A suspect of one death: only √n of the n such pages on the server at once.
        suspects = [page for other, page in self._pages.items() if self._death_count[other] == 1 and other != key]
        return sum(page.busy for page in suspects) < max(1, math.isqrt(len(suspects) + 1))

    def _page_done(self, key: PageKey) -> None:
        self._pages.pop(key, None)
        if key in self._pending:
            self._pending.discard(key)
            if key not in self.convicted:
                log.info("page %s of %s finished alone without a crash; cleared", key[1], key[0])
        self._home.pop(key, None)
        for server in [s for s, solo in self._solo.items() if solo == key]:
            del self._solo[server]
        self._notify()

    def _notify(self) -> None:
        if self._changed is not None:
            self._changed.set()
            self._changed = None

    async def _wait_for_change(self) -> None:
        if self._changed is None:
            self._changed = asyncio.Event()
        await self._changed.wait()
