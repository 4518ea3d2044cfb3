"""Incarnations of an endpoint we do not manage: notice it go down, then come back.

A vLLM behind a Kubernetes Service is restarted by its controller when it crashes; from here
that looks like connections refused (or 5xx) for a while, then answers again. To tell "this
page's request was lost because the server died" from "this page's request failed", each
down-then-up counts as one death, and the endpoint's **generation** goes up when it is back:
:mod:`llm_ocr.serving.quarantine` blames the pages whose latest request went to the dead generation.

Nothing polls in the background. When a page's request fails, :meth:`EndpointWatch.check`
probes the endpoint (``GET /health``, else ``GET /v1/models``): up, and the failure was the
page's own; down, and it records the death, then waits (probing every ``interval`` seconds)
until the endpoint answers again or ``dead_after`` seconds have passed, when it gives up.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Literal

import aiohttp

log = logging.getLogger("llm_ocr")

Probe = Literal["up", "down", "unsure"]

#: A probe that times out may be a busy server: only this many in a row mean down.
UNSURE_PROBES_FOR_DOWN = 2


class EndpointGone(Exception):
    """The endpoint went down and did not come back within ``dead_after`` seconds."""


async def probe_endpoint(base_url: str, api_key: str | None, timeout: float = 5.0) -> Probe:
    """Whether an OpenAI-compatible endpoint answers: ``up``, ``down`` or ``unsure`` (timed out).

    vLLM's ``/health`` answers 503 once its engine died while the API process lives on, so it
    is asked first; an endpoint without it (a proxy) is asked for ``/v1/models``. A refused
    connection or a 5xx is down; any other answer (even 401) means something is serving.
    """
    root = base_url.rstrip("/").removesuffix("/v1")
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as session:
            async with session.get(f"{root}/health") as response:
                if response.status == 200:
                    return "up"
                if response.status >= 500:
                    return "down"
            async with session.get(f"{base_url.rstrip('/')}/models", headers=headers) as response:
                return "down" if response.status >= 500 else "up"
    except asyncio.TimeoutError:
        return "unsure"
    except (aiohttp.ClientError, OSError):
        return "down"


class EndpointWatch:
    """The generation of an external endpoint, bumped each time it comes back from down.

    Args:
        probe: asks the endpoint once (see :func:`probe_endpoint`).
        display_url: the endpoint's URL without credentials, for messages.
        dead_after: seconds it may stay down before :class:`EndpointGone`.
        on_down: told the generation that just died (the crash tracker's ``record_death``).
        interval: seconds between probes while it is down.
    """

    def __init__(
        self,
        probe: Callable[[], Awaitable[Probe]],
        *,
        display_url: str,
        dead_after: float,
        on_down: Callable[[int], object] | None = None,
        interval: float = 1.0,
    ) -> None:
        self.probe = probe
        self.display_url = display_url
        self.dead_after = dead_after
        self.on_down = on_down
        self.interval = interval
        self.generation = 1
        self._up_probe_started = 0.0  # when the latest probe that found it up was sent
        self._lock: asyncio.Lock | None = None
        self._gone: EndpointGone | None = None

    async def wait_up(self) -> int:
        """The client's gate: the current generation, waiting while the endpoint is down."""
        if self._lock is not None and self._lock.locked():
            async with self._lock:  # a check is under way (maybe waiting for the endpoint)
                pass
        if self._gone is not None:
            raise self._gone
        return self.generation

    async def check(self, generation: int) -> None:
        """A request sent to ``generation`` failed: find out whether the endpoint died, and if
        so record the death and wait until it is back (a new generation)."""
        failed_by = time.monotonic()
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._gone is not None:
                raise self._gone
            if generation != self.generation or self._up_probe_started >= failed_by:
                # Already handled: that generation's death is recorded, or a probe sent after
                # this failure found the endpoint up (many requests fail at once: one probe).
                return
            started = time.monotonic()
            if not await self._confirmed_down():
                self._up_probe_started = started
                return
            dead = self.generation
            log.warning("endpoint %s is down (requests were in flight); waiting up to %gs for it to come back "
                        "(--dead-after)", self.display_url, self.dead_after)
            if self.on_down is not None:
                self.on_down(dead)
            self._up_probe_started = await self._wait_back()
            self.generation = dead + 1
            log.warning("endpoint %s is back (generation %d); requests lost to it are retried", self.display_url,
                        self.generation)

    async def _confirmed_down(self) -> bool:
        unsure = 0
        while True:
            answer = await self.probe()
            if answer == "up":
                return False
            if answer == "down":
                return True
            unsure += 1
            if unsure >= UNSURE_PROBES_FOR_DOWN:
                return True
            await asyncio.sleep(self.interval)

    async def _wait_back(self) -> float:
        """Probe until the endpoint is up; returns when the probe that found it up was sent."""
        down_since = time.monotonic()
        while True:
            await asyncio.sleep(self.interval)
            started = time.monotonic()
            if await self.probe() == "up":
                return started
            silent = time.monotonic() - down_since
            if silent >= self.dead_after:
                self._gone = EndpointGone(
                    f"endpoint {self.display_url} has answered nothing successfully for {silent:.0f}s "
                    f"(--dead-after {self.dead_after:g}): it went down while requests were in flight "
                    "and did not come back"
                )
                raise self._gone
