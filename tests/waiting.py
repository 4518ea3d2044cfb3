"""How tests wait: for an event, never for a stretch of time (docs/testing.md, "Tests on a busy machine").

A test that sleeps and then looks, or that gives an event a second to happen, passes on an
idle machine and fails on a loaded one (CI's 2 cores shared with other jobs). These helpers
wait for the thing itself: a file, a counter of the simulated server, a request it holds.
Their time limits only turn a hang into a failure that names what never happened; they are
minutes, not margins.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from typing import TypeVar

from llm_ocr.testing import SimulatedServer

T = TypeVar("T")

#: Seconds before a wait gives up: a hang guard, far beyond any load (a server start took
#: minutes at load 25; CI's loaded machine ran the suite 3.3 times slower than an idle one, and
#: 300 s was passed by work that takes 64 s idle), never the expected duration of anything. Below
#: pytest-timeout's 900 s, so that a wait that never ends fails naming what it waited for.
HANG_GUARD_S = 600.0


def wait_until(
    condition: Callable[[], T],
    what: str,
    timeout: float = HANG_GUARD_S,
    interval: float = 0.05,
    process: subprocess.Popen[bytes] | subprocess.Popen[str] | None = None,
) -> T:
    """Poll ``condition`` until it returns something true, and return that.

    Raises ``AssertionError`` naming ``what`` when ``timeout`` passes first, or when ``process``
    (the run the test waits on) exits before it happened: it never will then.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if process is not None and process.poll() is not None:
            raise AssertionError(f"the process exited (code {process.returncode}) before {what}")
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout:g} s")
        time.sleep(interval)


def hangs_applied(server: SimulatedServer) -> int:
    """How many ``hang`` faults the server has applied so far."""
    return int(server.stats().get("faults_applied", {}).get("hang", 0))


def hold_request(server: SimulatedServer, after: int, count: int = 1) -> int:
    """Let the next ``after`` chat requests through, then hold the ``count`` after them, each
    until its client disconnects (``hang`` faults of an hour); returns the :func:`hangs_applied`
    count at which the first is held (for :func:`wait_until_held`).

    A run whose request is held cannot finish, so a test can stop or kill it "mid-run" for
    certain, however slow the machine: no race between the run finishing and the kill. Holding
    as many requests as the run keeps in flight stops its progress too: it answers exactly
    ``after`` requests whenever the kill lands. The requests let through are ``hang`` faults of
    0 seconds (answered normally), because the simulator takes its queued faults in order, one
    per request. Faults left queued stay for the next requests: ``server.clear_faults()``.
    """
    base = hangs_applied(server)
    if after:
        server.inject("hang", count=after, seconds=0)
    server.inject("hang", count=count)
    return base + after + 1


def wait_until_held(server: SimulatedServer, held_at: int, process: subprocess.Popen | None = None) -> None:
    """Wait until the first request :func:`hold_request` set up is being held."""
    wait_until(lambda: hangs_applied(server) >= held_at, "the held request reached the server", process=process)
