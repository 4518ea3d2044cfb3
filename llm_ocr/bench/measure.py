"""What the benchmark measures while a run goes on: the server's slot use, client CPU and memory.

- :class:`Sampler` polls the server's ``/metrics`` (vLLM's ``vllm:num_requests_running`` and
  ``vllm:num_requests_waiting``) and the RSS of this process and its worker processes, every
  ~100 ms, with one HTTP session (so that sampling itself costs well under 1% of a core).
- :class:`CpuClock` takes ``getrusage`` of this process and of its reaped children: the
  worker pool is shut down (its processes reaped) before the run returns, while the server,
  also a child, is still alive and so not yet counted. The delta is the client's CPU only.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import resource
import time
from dataclasses import dataclass, field

import aiohttp
import psutil

from llm_ocr.vlm.server import parse_metrics


@dataclass
class Sample:
    """One poll: seconds since the sampler started, server gauges, client memory."""

    t: float
    running: float | None
    waiting: float | None
    rss_main: int
    rss_workers: dict[int, int]


@dataclass
class Utilisation:
    """The server's slot use over a time window (time-weighted over the samples)."""

    samples: int
    mean_running: float
    utilisation: float  # mean running / slots
    waiting_fraction: float  # share of the time with at least one request waiting
    mean_waiting: float
    max_running: float


@dataclass
class Sampler:
    """Polls ``metrics_url`` and process memory every ``interval`` seconds in the background.

    ``exclude`` are pids (with their children) not to count as client workers: the server.
    """

    metrics_url: str | None
    interval: float = 0.1
    exclude: set[int] = field(default_factory=set)
    samples: list[Sample] = field(default_factory=list)
    errors: int = 0
    _task: asyncio.Task[None] | None = None
    _t0: float = 0.0
    _helpers: set[int] = field(default_factory=set)  # multiprocessing's resource tracker
    _checked: set[int] = field(default_factory=set)

    def start(self) -> None:
        """Begin sampling (on the running event loop)."""
        self._t0 = time.monotonic()
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        """Stop sampling."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def now(self) -> float:
        """Seconds on the samples' clock."""
        return time.monotonic() - self._t0

    async def _run(self) -> None:
        me = psutil.Process()
        timeout = aiohttp.ClientTimeout(total=2)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            while True:
                started = time.monotonic()
                running = waiting = None
                if self.metrics_url:
                    try:
                        async with session.get(self.metrics_url) as response:
                            values = parse_metrics(await response.text())
                        running, waiting = values.get("running"), values.get("waiting")
                    except (aiohttp.ClientError, asyncio.TimeoutError, OSError):
                        self.errors += 1  # a missed sample; the time weights absorb it
                self.samples.append(Sample(started - self._t0, running, waiting, *self._memory(me)))
                await asyncio.sleep(max(0.0, self.interval - (time.monotonic() - started)))

    def _memory(self, me: psutil.Process) -> tuple[int, dict[int, int]]:
        workers: dict[int, int] = {}
        excluded = set(self.exclude)
        children = []
        with contextlib.suppress(psutil.Error):
            children = me.children(recursive=True)
        for child in children:
            try:
                if child.pid in excluded or child.ppid() in excluded:
                    excluded.add(child.pid)
                    continue
                if child.pid not in self._checked:  # look at each command line once
                    self._checked.add(child.pid)
                    if any("resource_tracker" in arg for arg in child.cmdline()):
                        self._helpers.add(child.pid)
                if child.pid in self._helpers:
                    continue
                workers[child.pid] = child.memory_info().rss
            except psutil.Error:
                continue  # exited between listing and reading
        try:
            main = me.memory_info().rss
        except psutil.Error:  # pragma: no cover
            main = 0
        return main, workers

    def utilisation(self, slots: int, start: float, end: float) -> Utilisation | None:
        """Slot use between ``start`` and ``end`` (seconds on :meth:`now`'s clock)."""
        points = [s for s in self.samples if start <= s.t <= end and s.running is not None]
        if not points:
            return None
        total = running = waiting_any = waiting = 0.0
        for i, s in enumerate(points):
            # Each sample stands for the time until the next one (the last: one interval).
            nxt = points[i + 1].t if i + 1 < len(points) else min(end, s.t + self.interval)
            weight = max(0.0, nxt - s.t)
            total += weight
            running += weight * (s.running or 0.0)
            waiting += weight * (s.waiting or 0.0)
            waiting_any += weight * (1.0 if (s.waiting or 0.0) > 0 else 0.0)
        if total <= 0:
            return None
        mean_running = running / total
        return Utilisation(
            samples=len(points),
            mean_running=mean_running,
            utilisation=mean_running / max(1, slots),
            waiting_fraction=waiting_any / total,
            mean_waiting=waiting / total,
            max_running=max(s.running or 0.0 for s in points),
        )

    def peak_rss(self) -> dict[str, int]:
        """Peak RSS seen in the samples: main, the largest worker, all workers together (bytes)."""
        return {
            "main": max((s.rss_main for s in self.samples), default=0),
            "worker": max((max(s.rss_workers.values(), default=0) for s in self.samples), default=0),
            "workers_total": max((sum(s.rss_workers.values()) for s in self.samples), default=0),
            "workers_seen": len({pid for s in self.samples for pid in s.rss_workers}),
        }


@dataclass
class CpuTimes:
    """CPU seconds (user + system) of this process and of its reaped children."""

    main: float
    children: float

    @classmethod
    def now(cls) -> CpuTimes:
        """Read ``getrusage`` now."""
        me = resource.getrusage(resource.RUSAGE_SELF)
        kids = resource.getrusage(resource.RUSAGE_CHILDREN)
        return cls(me.ru_utime + me.ru_stime, kids.ru_utime + kids.ru_stime)

    def __sub__(self, other: CpuTimes) -> CpuTimes:
        return CpuTimes(self.main - other.main, self.children - other.children)


def peak_rss_self() -> int:
    """This process's lifetime peak RSS in bytes (``ru_maxrss`` is KiB on Linux)."""
    value = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return value if os.uname().sysname == "Darwin" else value * 1024
