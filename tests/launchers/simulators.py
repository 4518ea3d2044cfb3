"""The simulated model server a launched job started, found and driven from the test.

A job on a platform starts its own model server: the fake ``vllm`` in a fake platform's container
(tests/fakes/fake_vllm.py), ``--engine sim`` in a Slurm task. Started with ``--startup-delay 3600``
it listens at once but is not ready, so the job's ``llm-ocr`` waits for it, and the test decides
when it may go on and how far: :meth:`JobSimulator.ready` lets it run, after
:meth:`JobSimulator.hold` it answers a number of requests and holds every later one until its
client goes away or :meth:`JobSimulator.release` lets the held ones through. A job held so is running, for certain, whatever the machine's load, when the
test cancels, kills or requeues it (docs/testing.md, "Tests on a busy machine").
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

#: The simulator's options that hold a job's server until the test calls :meth:`JobSimulator.ready`.
HELD_START = "--startup-delay 3600"


class JobSimulator:
    """A job's simulated server, by its URL (``/sim/...`` routes: llm_ocr/engines/sim/server.py)."""

    def __init__(self, url: str) -> None:
        self.url = url

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(f"{self.url}{path}", data=data, method=method,
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as response:  # a local server
            return json.loads(response.read() or b"null")

    def hold(self, after: int = 0) -> int:
        """Answer the next ``after`` chat requests, then hold every later one until its client goes
        away; the :meth:`hangs_applied` count at which the first is held."""
        base = self.hangs_applied()
        if after:
            self._call("POST", "/sim/faults", {"kind": "hang", "count": after, "seconds": 0})
        self._call("POST", "/sim/faults", {"kind": "hang", "count": 1000})
        return base + after + 1

    def release(self) -> None:
        """Answer the requests held now (``POST /sim/release``); later ones are held again."""
        self._call("POST", "/sim/release")

    def ready(self) -> None:
        """End the start-up delay: the server answers ``/health``, the job goes on."""
        self._call("POST", "/sim/ready")

    def hangs_applied(self) -> int:
        """How many ``hang`` faults (held or let through) the server has applied."""
        return int(self._call("GET", "/sim/stats").get("faults_applied", {}).get("hang", 0))


def find_simulator(started_by: Callable[[dict[str, str]], bool]) -> JobSimulator | None:
    """The simulator whose process environment ``started_by`` accepts, once it listens (None
    before). The environment is the job's: its server inherits it through ``llm-ocr``."""
    for proc in psutil.process_iter(["cmdline"]):
        try:
            cmdline = proc.info["cmdline"] or []
            if "llm_ocr.engines.sim" not in cmdline or "--port" not in cmdline:
                continue
            if not started_by(proc.environ()):
                continue
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
        found = JobSimulator(f"http://127.0.0.1:{cmdline[cmdline.index('--port') + 1]}")
        try:
            found.hangs_applied()
        except OSError:
            return None  # not listening yet
        return found
    return None


def simulator_in(folder: Path) -> JobSimulator | None:
    """The simulator of the fake container whose folder is ``folder`` (its ``HOME`` is in it:
    tests/fakes/container.py), once it listens."""
    home = str(folder / "home")
    return find_simulator(lambda env: env.get("HOME") == home)
