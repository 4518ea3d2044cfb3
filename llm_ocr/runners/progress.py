"""Progress a user can watch: a live bar on a terminal, a progress bar in a notebook, periodic
log lines elsewhere.

Each names what is running (``extract``, ``describe``, ``escalate``, ``extract+describe`` for
``llm-ocr run``'s page flow) and, where the total is known, ``done/total`` and the time left.
The total is known once the intake has reached every document (then ``pages_found`` is the
shard's pages), or, before that, as documents, when the listing counted the shard's documents
ahead (a folder, Parquet footers); a streamed input shows counts only, and no time left. The
time left is the work left over the rate of the last two minutes (:class:`Throughput`), never a
guess: none before the first row, none while nothing moves.

On a terminal, log records are printed above the live bar (:func:`logs_above`), not into it.
"""

from __future__ import annotations

import asyncio
import io
import logging
import sys
import time
from collections import Counter, deque
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Literal

log = logging.getLogger("llm_ocr")

ProgressMode = Literal["auto", "live", "bar", "log", "off"]


def in_notebook() -> bool:
    """Whether this process is a Jupyter kernel (IPython with a kernel attached)."""
    shell = sys.modules.get("IPython")
    if shell is None:
        return False
    try:
        ipython = shell.get_ipython()
    except Exception:  # noqa: BLE001 - an IPython too old or too odd: treat it as a terminal
        return False
    return ipython is not None and hasattr(ipython, "kernel")


def auto_progress() -> ProgressMode:
    """What ``--progress auto`` means here: a bar in a notebook, a live view on a terminal, else log lines."""
    if in_notebook():
        return "bar"
    return "live" if sys.stderr.isatty() else "log"


@dataclass
class RunCounters:
    """Counters of one shard's run, updated by the pipeline and read by the reporters."""

    stage: str
    shard: int
    num_shards: int
    docs_seen: int = 0
    docs_skipped: int = 0
    docs_finished: int = 0
    pages: Counter[str] = field(default_factory=Counter)
    pages_skipped: int = 0
    #: Pages the input holds in the documents this run reached (a document that cannot be read
    #: counts one, for its error row), counted from the input and not from the rows written, so
    #: that the end-of-run line can catch a page that got no row. None: not counted (then the
    #: line can only restate the rows).
    pages_found: int | None = None
    #: The intake has reached every document: ``pages_found`` is the total of the shard's pages.
    intake_done: bool = False
    #: The shard's documents, counted ahead from the listing (None: not known ahead, e.g. a
    #: streamed dataset or work groups): the total shown until the pages' total is known.
    docs_total: int | None = None
    in_flight: int = 0
    #: Rendered pages waiting for a slot in the look-ahead (:mod:`llm_ocr.runners.look_ahead`).
    waiting: int = 0
    #: The look-ahead's bounds and the most it held (``pages``, ``mb``, ``peak_pages``,
    #: ``peak_mb``), once a flow with one has run; recorded in the completion marker.
    look_ahead: dict[str, float] = field(default_factory=dict)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    started: float = field(default_factory=time.monotonic)
    server: dict[str, float] = field(default_factory=dict)

    @property
    def pages_done(self) -> int:
        """Pages with a row written this run (any status)."""
        return sum(self.pages.values())

    @property
    def elapsed(self) -> float:
        """Seconds since the run started."""
        return time.monotonic() - self.started

    def rate(self) -> float:
        """Pages per second this run."""
        return self.pages_done / self.elapsed if self.elapsed > 0 else 0.0

    @property
    def pages_total(self) -> int | None:
        """The shard's pages, once the intake has reached every document; else None."""
        return self.pages_found if self.intake_done and self.pages_found is not None else None

    def line(self, eta_s: float | None = None, label: str | None = None) -> str:
        """A one-line summary for logs: what runs, pages (``done/total`` when the total is known),
        documents, speed, the time left when known (``eta_s``), pages in flight."""
        head = (label or self.stage) + (f" shard {self.shard + 1}/{self.num_shards}" if self.num_shards > 1 else "")
        return f"{head}: " + " | ".join(self.parts(eta_s))

    def statuses(self) -> str:
        """``ok 3, truncated 0, error 0, 2 done earlier``: this run's rows by status, and the pages
        earlier runs did."""
        text = f"ok {self.pages['ok']}, truncated {self.pages['truncated']}, error {self.pages['error']}"
        if self.pages["quarantined"]:
            text += f", quarantined {self.pages['quarantined']}"
        return text + (f", {self.pages_skipped} done earlier" if self.pages_skipped else "")

    def counts(self) -> str:
        """``pages 5/9 (ok 3, ...)``: pages with a row (``/total`` when known), by status."""
        total = self.pages_total
        return f"pages {self.pages_done + self.pages_skipped}" + (f"/{total}" if total is not None else "") + \
            f" ({self.statuses()})"

    def documents(self) -> str:
        """``docs 1/3``: documents finished or done earlier, of the shard's when known."""
        settled = self.docs_finished + self.docs_skipped
        return f"docs {settled}" + (f"/{self.docs_total}" if self.docs_total is not None else "")

    def extras(self) -> list[str]:
        """Speed, pages in flight (and waiting for a slot), the server's queue when polled."""
        extras = [f"{self.rate():.2f} pages/s",
                  f"in flight {self.in_flight}" + (f", {self.waiting} waiting" if self.waiting else "")]
        if self.server:
            extras.append(
                f"server running {self.server.get('running', 0):.0f} waiting {self.server.get('waiting', 0):.0f}"
            )
        return extras

    def parts(self, eta_s: float | None = None) -> list[str]:
        """The pieces of :meth:`line` after its head."""
        eta = [f"ETA {format_duration(eta_s)}"] if eta_s is not None else []
        return [self.counts(), self.documents(), *eta, *self.extras()]

    def goal(self) -> tuple[int, int | None, str]:
        """``(done, total, unit)`` of the bar: pages once their total is known, else documents
        when the listing counted them, else pages without a total."""
        total = self.pages_total
        if total is None and self.docs_total is not None:
            return self.docs_finished + self.docs_skipped, self.docs_total, "docs"
        return self.pages_done + self.pages_skipped, total, "pages"

    @property
    def pages_seen(self) -> int:
        """Pages of the input this run reached (see ``pages_found``)."""
        return self.pages_done + self.pages_skipped if self.pages_found is None else self.pages_found

    @property
    def pages_left(self) -> int:
        """Pages seen that got no row (interrupted or stopped: the rerun does them)."""
        return self.pages_seen - self.pages_done - self.pages_skipped

    @property
    def pages_failed(self) -> int:
        """Pages that got an error row this run, quarantined ones included (exit status 1)."""
        return self.pages["error"] + self.pages["quarantined"]

    def reconciliation(self) -> str:
        """The end-of-run accounting line: every page seen is ok, truncated, error, quarantined
        (an error row for a page the model server crashed on, see :mod:`llm_ocr.serving.quarantine`) or
        done before.

        Pages seen are counted from the input (``pages_found``), so the equation can fail: pages
        left without a row are named (an interrupted run leaves some for the rerun), and a count
        that does not add up says MISMATCH.
        """
        left = self.pages_left
        return (
            f"[{self.stage} shard {self.shard + 1}/{self.num_shards}] pages seen {self.pages_seen} = "
            f"ok {self.pages['ok']} + truncated {self.pages['truncated']} + error {self.pages['error']}"
            f" + quarantined {self.pages['quarantined']} + done earlier {self.pages_skipped}"
            + (f" + left for the rerun {left}" if left > 0 else "")
            + (f" MISMATCH: {-left} row(s) more than pages seen" if left < 0 else "")
            + f"; documents {self.docs_seen} ({self.docs_skipped} already complete)"
        )

    def summary(self) -> dict[str, Any]:
        """The stats recorded in the completion marker."""
        elapsed = self.elapsed
        return {
            "stage": self.stage,
            "shard": self.shard,
            "num_shards": self.num_shards,
            "documents": {"finished": self.docs_finished, "skipped": self.docs_skipped},
            "pages": {
                "ok": self.pages["ok"],
                "truncated": self.pages["truncated"],
                "error": self.pages["error"],
                "quarantined": self.pages["quarantined"],
                "total": self.pages_done,
                "skipped": self.pages_skipped,
                "seen": self.pages_seen,
            },
            "tokens": {"prompt": self.prompt_tokens, "completion": self.completion_tokens},
            "wall_time_s": round(elapsed, 3),
            "pages_per_s": round(self.rate(), 4),
            "tokens_per_s": round(self.completion_tokens / elapsed, 2) if elapsed > 0 else 0.0,
            **({"look_ahead": {**self.look_ahead, "waiting": self.waiting}} if self.look_ahead else {}),
        }


def format_duration(seconds: float) -> str:
    """``0:01:23``, ``1 day, 2:03:04``: a time left as the progress bars print it."""
    return str(timedelta(seconds=round(max(0.0, seconds))))


class Throughput:
    """How fast a count grows, over about the last ``window`` seconds (a run's speed changes: the
    server warms up, dense pages come in bursts); the time left is the work left over it."""

    def __init__(self, window: float = 120.0) -> None:
        self.window = window
        self.samples: deque[tuple[float, int]] = deque()

    def add(self, now: float, count: int) -> None:
        """Record ``count`` at ``now`` (seconds, monotonic)."""
        self.samples.append((now, count))
        # Keep the newest sample at least ``window`` old: the rate spans the whole window.
        while len(self.samples) > 2 and now - self.samples[1][0] >= self.window:
            self.samples.popleft()

    def rate(self) -> float | None:
        """Counts per second over the window; None before two samples or while nothing moved."""
        if len(self.samples) < 2:
            return None
        (t0, c0), (t1, c1) = self.samples[0], self.samples[-1]
        return (c1 - c0) / (t1 - t0) if t1 > t0 and c1 > c0 else None

    def time_left(self, left: int) -> float | None:
        """Seconds to do ``left`` more at the window's rate (None when the rate is not known)."""
        if left <= 0:
            return 0.0
        rate = self.rate()
        return left / rate if rate else None


class _AboveLive(io.TextIOBase):
    """A log handler's stream while a live display runs: each line is printed above the display,
    as plain text (a rich ``console.print`` of a string would read ``[...]`` as markup)."""

    def __init__(self, console: Any, stream: Any) -> None:
        self.console = console
        self.stream = stream
        self._partial = ""

    def write(self, text: str) -> int:
        from rich.text import Text

        lines = (self._partial + text).split("\n")
        self._partial = lines.pop()
        for line in lines:
            self.console.print(Text.from_ansi(line), soft_wrap=True)
        return len(text)

    def flush(self) -> None:
        if self._partial:
            self.write("\n")

    def isatty(self) -> bool:
        return True


@contextmanager
def logs_above(console: Any) -> Iterator[None]:
    """While in the block, the logging handlers that write to this terminal (the root logger's,
    ``llm_ocr``'s: ``llm-ocr``'s own, or a script's ``basicConfig``) print through ``console``,
    so that their lines appear above its live display instead of inside its line. Python's last
    resort handler (none configured) writes to ``sys.stderr``, which rich's live display
    redirects the same way."""
    terminal = [stream for stream in (sys.stderr, sys.__stderr__) if stream is not None]
    swapped: list[tuple[logging.StreamHandler, Any]] = []
    for logger in (logging.getLogger(), log):
        for handler in logger.handlers:
            if (isinstance(handler, logging.StreamHandler) and not isinstance(handler, logging.FileHandler)
                    and any(handler.stream is stream for stream in terminal)):
                old = handler.setStream(_AboveLive(console, handler.stream))
                swapped.append((handler, old))
    try:
        yield
    finally:
        for handler, old in swapped:
            handler.setStream(old)


def _cut(text: str, width: int) -> str:
    """``text`` in at most ``width`` characters, cut with an ellipsis (nothing under 8)."""
    if width < 8:
        return ""
    return text if len(text) <= width else text[: width - 1] + "…"


def _bar_class() -> Any:
    """tqdm's notebook widget when ipywidgets is there, else its text bar (which notebooks show
    too); chosen here rather than by ``tqdm.auto``, which warns about the choice it makes."""
    if in_notebook():
        # None without ipywidgets; typeshed's tqdm stubs leave this module global out
        from tqdm.notebook import IProgress  # type: ignore[attr-defined]

        if IProgress is not None:
            from tqdm.notebook import tqdm as notebook_bar

            return notebook_bar
    from tqdm.std import tqdm as text_bar

    return text_bar


class ProgressReporter:
    """Shows :class:`RunCounters` while a run goes on: those of the flow running now
    (:meth:`show`), while ``on_tick`` gets the first ones' (the stage's progress file)."""

    def __init__(
        self,
        counters: RunCounters,
        mode: ProgressMode = "auto",
        interval: float = 30.0,
        poll_server: Callable[[], Awaitable[dict[str, float]]] | None = None,
        on_tick: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        if mode == "auto":
            mode = auto_progress()
        self.mode = mode
        self.counters = counters
        self.interval = interval
        self.poll_server = poll_server
        #: Called (in a thread) with the counters' summary every ``interval`` and at the end,
        #: whatever the display mode: e.g. :func:`llm_ocr.storage.state.progress_writer`.
        self.on_tick = on_tick
        #: What the display shows: the counters of the flow running now, and its name.
        self.shown = counters
        self.label = counters.stage
        self._pages = Throughput(max(120.0, 3 * interval))
        self._docs = Throughput(max(120.0, 3 * interval))
        self._task: asyncio.Task[None] | None = None
        self._ticks: asyncio.Task[None] | None = None

    def show(self, counters: RunCounters, label: str) -> None:
        """Show ``counters`` under ``label`` from now on (a run's next flow: ``llm-ocr run``
        describes pages extracted earlier, then extracts and describes the rest)."""
        if counters is not self.shown:
            self._pages, self._docs = Throughput(self._pages.window), Throughput(self._docs.window)
        self.shown, self.label = counters, label

    def time_left(self) -> float | None:
        """Seconds left at the recent rate, when the total is known (samples the counters)."""
        counters = self.shown
        now = time.monotonic()
        self._pages.add(now, counters.pages_done)
        self._docs.add(now, counters.docs_finished)
        done, total, unit = counters.goal()
        if total is None:
            return None
        return (self._pages if unit == "pages" else self._docs).time_left(total - done)

    def line(self) -> str:
        """The shown counters' line, with the time left."""
        return self.shown.line(self.time_left(), self.label)

    async def _poll(self) -> None:
        if self.poll_server is None:
            return
        try:
            self.counters.server = await self.poll_server()
        except Exception:  # noqa: BLE001 - metrics are a nicety; never fail the run for them
            self.counters.server = {}
        self.shown.server = self.counters.server

    async def _run_log(self) -> None:
        self.time_left()  # the rate's first sample
        while True:
            await asyncio.sleep(self.interval)
            await self._poll()
            log.info(self.line())

    async def _run_live(self) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, Progress, TextColumn

        console = Console(stderr=True)
        bar = BarColumn(bar_width=24)
        # Every text column is plain (markup=False): a label or a count in brackets is shown as it is.
        progress = Progress(
            TextColumn("{task.description}", markup=False), bar, TextColumn("{task.fields[count]}", markup=False),
            TextColumn("{task.fields[eta]}", markup=False), TextColumn("{task.fields[detail]}", markup=False),
            console=console, transient=True, refresh_per_second=4,
        )
        task = progress.add_task(self.label, total=None, count="", eta="", detail="")
        label = self.label
        with progress, logs_above(console):
            while True:
                await self._poll()
                if self.label != label:  # the next flow: a bar of its own (its total not known yet)
                    progress.remove_task(task)
                    task, label = progress.add_task(self.label, total=None, count="", eta="", detail=""), self.label
                counters = self.shown
                eta_s = self.time_left()
                done, total, unit = counters.goal()
                count = f"{done}/{total} {unit}" if total is not None else f"{done} {unit}"
                eta = f"ETA {format_duration(eta_s)}" if eta_s is not None else ""
                # The column before shows pages or documents: the rest goes here.
                shown = [counters.statuses(), counters.documents()] if unit == "pages" else [counters.counts()]
                # One line whatever the terminal's width: the bar narrows, then the details are cut,
                # a few columns short of the edge: the terminal's echo of a ^C typed while the line is
                # up must not wrap it onto a line the next redraw would not clear.
                width = console.width
                bar.bar_width = max(8, min(24, width // 6))
                room = width - len(self.label) - bar.bar_width - len(count) - len(eta) - 4 - 3
                detail = _cut(" | ".join([*shown, *counters.extras()]), room)
                if total is not None:  # (rich keeps the last total when given None)
                    progress.update(task, total=total)
                progress.update(task, description=self.label, completed=done, count=count, eta=eta, detail=detail)
                await asyncio.sleep(0.5)

    async def _run_bar(self) -> None:
        bar = _bar_class()(desc=self.label, unit="page", dynamic_ncols=True)
        try:
            while True:
                self._update_bar(bar)
                await asyncio.sleep(0.5)
        finally:  # cancelled by stop(): the bar shows the final count
            self._update_bar(bar)
            bar.close()

    def _update_bar(self, bar: Any) -> None:
        counters = self.shown
        if bar.desc != self.label:  # the next flow: a bar of its own pages
            bar.reset(total=None)
            bar.set_description_str(self.label, refresh=False)
        # Only a known total: a total that grows as documents are reached would give a wrong ETA.
        if counters.pages_total is not None:
            bar.total = counters.pages_total
        bar.n = counters.pages_done + counters.pages_skipped
        failed = counters.pages_failed
        bar.set_postfix_str(f"in flight {counters.in_flight}" + (f", failed {failed}" if failed else ""), refresh=False)
        bar.refresh()

    async def _tick(self) -> None:
        if self.on_tick is not None:
            await asyncio.to_thread(self.on_tick, self.counters.summary())

    async def _run_ticks(self) -> None:
        while True:
            await self._tick()
            await asyncio.sleep(self.interval)

    def start(self) -> None:
        """Begin reporting in the background."""
        if self.on_tick is not None:
            self._ticks = asyncio.create_task(self._run_ticks())
        if self.mode == "off":
            return
        runner = {"live": self._run_live, "bar": self._run_bar}.get(self.mode, self._run_log)
        self._task = asyncio.create_task(runner())

    async def stop(self) -> None:
        """Stop reporting and log the final line."""
        for task in (self._task, self._ticks):
            if task is None:
                continue
            task.cancel()
            try:
                await task
            except (asyncio.CancelledError, Exception):  # noqa: BLE001, S110 - stopping the display never fails a run
                pass
        if self._ticks is not None:
            await self._tick()
        if self.mode in ("live", "log"):
            log.info(self.shown.line(None, self.label))  # no time left: the flow has ended
