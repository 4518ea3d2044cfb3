"""What the benchmark measures while a run goes on: the server's slot use, client CPU and memory.

- :class:`Sampler` polls the server's ``/metrics`` (vLLM's ``vllm:num_requests_running`` and
  ``vllm:num_requests_waiting``) and the RSS of this process and its worker processes, every
  ~100 ms, from a thread with one kept-alive connection; its CPU time is measured so that it
  is not counted as the client's.
- :class:`CpuClock` takes ``getrusage`` of this process and of its reaped children: the
  worker pool is shut down (its processes reaped) before the run returns, while the server,
  also a child, is still alive and so not yet counted. The delta is the client's CPU only.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import resource
import threading
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import psutil

from llm_ocr.serving.vllm.prometheus import parse_metrics


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
    """Polls ``metrics_url`` and process memory every ``interval`` seconds, in a thread.

    A thread of its own, not a task on the pipeline's event loop: it never delays the loop it
    measures, and its own CPU time (:attr:`cpu_s`, from the thread's clock) can be taken out of
    the client's. ``exclude`` are pids (with their children) not counted as client workers:
    the server.
    """

    metrics_url: str | None
    interval: float = 0.1
    exclude: set[int] = field(default_factory=set)
    samples: list[Sample] = field(default_factory=list)
    errors: int = 0
    cpu_s: float = 0.0  # CPU time the sampling thread used
    _thread: threading.Thread | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _t0: float = 0.0
    _helpers: set[int] = field(default_factory=set)  # multiprocessing's resource tracker
    _checked: set[int] = field(default_factory=set)
    _children: list[psutil.Process] = field(default_factory=list)
    _polls: int = 0

    #: Listing children scans every process on the machine: do it every this many samples
    #: (reading a known child's memory is one small file).
    CHILDREN_EVERY = 10

    def start(self) -> None:
        """Begin sampling."""
        self._t0 = time.monotonic()
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="bench-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop sampling (returns within about one interval)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def now(self) -> float:
        """Seconds on the samples' clock."""
        return time.monotonic() - self._t0

    def _run(self) -> None:
        me = psutil.Process()
        url = urlsplit(self.metrics_url) if self.metrics_url else None
        conn: http.client.HTTPConnection | None = None
        try:
            while not self._stop.is_set():
                started = time.monotonic()
                running = waiting = None
                if url is not None:
                    try:
                        if conn is None:  # one kept-alive connection, reopened after an error
                            conn = http.client.HTTPConnection(url.hostname or "127.0.0.1", url.port, timeout=2)
                        conn.request("GET", url.path or "/metrics")
                        response = conn.getresponse()
                        values = parse_metrics(response.read().decode("utf-8", errors="replace"))
                        running, waiting = values.get("running"), values.get("waiting")
                    except (OSError, http.client.HTTPException):
                        self.errors += 1  # a missed sample; the time weights absorb it
                        if conn is not None:
                            conn.close()
                        conn = None
                self.samples.append(Sample(started - self._t0, running, waiting, *self._memory(me)))
                self._stop.wait(max(0.0, self.interval - (time.monotonic() - started)))
        finally:
            if conn is not None:
                conn.close()
            self.cpu_s = time.thread_time()

    def _children_seen(self) -> bool:
        return any(c.pid not in self.exclude and c.pid not in self._helpers for c in self._children)

    def _memory(self, me: psutil.Process) -> tuple[int, dict[int, int]]:
        workers: dict[int, int] = {}
        excluded = set(self.exclude)
        # Listing children is costly, so only every few polls, but every poll until the worker
        # pool shows up: a short run would otherwise end before its workers were ever seen.
        if self._polls % self.CHILDREN_EVERY == 0 or not self._children_seen():
            with contextlib.suppress(psutil.Error):
                self._children = me.children(recursive=True)
        self._polls += 1
        for child in self._children:
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

    def rss_trace(self, start: float, end: float, points: int) -> list[int]:
        """The main process's RSS at ``points`` evenly spaced moments between start and end."""
        window = [s for s in self.samples if start <= s.t <= end]
        if not window:
            return []
        step = (len(window) - 1) / max(1, points - 1)
        return [window[round(i * step)].rss_main for i in range(min(points, len(window)))]

    def peak_rss(self) -> dict[str, int]:
        """Peak RSS seen in the samples: main, the largest worker, all workers together (bytes)."""
        samples = self.samples
        return {
            "main": max((s.rss_main for s in samples), default=0),
            "worker": max((max(s.rss_workers.values(), default=0) for s in samples), default=0),
            "workers_total": max((sum(s.rss_workers.values()) for s in samples), default=0),
            "workers_seen": len({pid for s in samples for pid in s.rss_workers}),
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
