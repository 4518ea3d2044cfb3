"""Several endpoints serving the same model, used as one client: the client-side dispatcher.

Each request goes to the member with the fewest requests in flight among those that are
ready (on a tie, the one sent the fewest so far); a member that is restarting gets nothing new until it is back (its
requests in flight
wait for it, as with one server); a member that is gone for good (its server could not be
restarted, or it stopped answering for ``--dead-after``) is dropped, and the request it failed
is sent to another member without using up the page's attempts. Only when every member is gone
does the run stop.

With a ``route`` (the crash tracker's :meth:`~llm_ocr.serving.quarantine.CrashTracker.route`),
a page due its solo retry goes to the member it crashed, and the members kept for such pages get
no other requests meanwhile: one suspect page idles one GPU, not the fleet.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import Any

from llm_ocr.vlm.client import ChatResult, EndpointDown, VlmClient

log = logging.getLogger(__name__)


class Dispatcher:
    """A :class:`~llm_ocr.vlm.client.VlmClient` look-alike over several of them."""

    def __init__(
        self,
        members: Sequence[VlmClient],
        ready: Sequence[Callable[[], bool]] | None = None,
        route: Callable[[], tuple[int | None, frozenset[int]]] | None = None,
    ) -> None:
        if not members:
            raise ValueError("a dispatcher needs at least one member")
        self.members = list(members)
        self._ready = list(ready) if ready is not None else [lambda: True] * len(self.members)
        self._route = route
        self._busy = [0] * len(self.members)
        self._sent = [0] * len(self.members)  # tie-breaker: an idle fleet takes turns
        self._gone: set[int] = set()
        first = self.members[0]
        self.model = first.model
        self.options = first.options
        self.display_url = ", ".join(m.display_url for m in self.members)

    @property
    def base_url(self) -> str:
        """The first member's URL, where it listens now (a managed member may have moved)."""
        return self.members[0].base_url

    @property
    def overloaded(self) -> int:
        """429/503 answers of all members."""
        return sum(m.overloaded for m in self.members)

    @property
    def sending(self) -> int:
        """Requests of all members on the wire now."""
        return sum(m.sending for m in self.members)

    @property
    def busy_seconds(self) -> float:
        """Seconds each member's server worked for this run, summed (one GPU each)."""
        return sum(m.busy_seconds for m in self.members)

    @property
    def live(self) -> int:
        """Members not gone for good."""
        return len(self.members) - len(self._gone)

    def is_live(self, index: int) -> bool:
        """Whether member ``index`` is not gone for good."""
        return index not in self._gone

    def requests_in_flight(self) -> list[int]:
        """Requests in flight per member (for tests and progress)."""
        return list(self._busy)

    def _pick(self) -> int | None:
        live = [i for i in range(len(self.members)) if i not in self._gone]
        if not live:
            return None
        if self._route is not None:
            pinned, held = self._route()
            if pinned in live:
                return pinned  # a page due its solo retry: to the member it crashed (ready or not)
            live = [i for i in live if i not in held] or live
        ready = [i for i in live if self._ready[i]()] or live
        return min(ready, key=lambda i: (self._busy[i], self._sent[i]))

    async def chat(self, body: dict[str, Any], **kwargs: Any) -> ChatResult:
        """Send one request to the least busy ready member (see the module docstring)."""
        while True:
            index = self._pick()
            if index is None:
                raise EndpointDown(f"all {len(self.members)} servers are gone")
            self._busy[index] += 1
            self._sent[index] += 1
            try:
                return await self.members[index].chat(body, **kwargs)
            except EndpointDown as exc:
                if index not in self._gone:
                    self._gone.add(index)
                    log.error("%s is gone for good (%s); %d of %d servers left", self.members[index].display_url, exc,
                              self.live, len(self.members))
                if self.live == 0:
                    raise
            finally:
                self._busy[index] -= 1

    async def max_model_len(self) -> int | None:
        """The served model's context length, from the first member that tells."""
        for member in self.members:
            value = await member.max_model_len()
            if value:
                return value
        return None

    async def served_models(self) -> list[str]:
        """The models every member serves (raises EndpointDown if one cannot be reached)."""
        served = [set(await m.served_models()) for m in self.members]
        return sorted(set.intersection(*served))

    async def close(self) -> None:
        """Close every member's connections."""
        await asyncio.gather(*(m.close() for m in self.members))
