"""Progress a user can watch: a live view on a terminal, a progress bar in a notebook, periodic
log lines elsewhere."""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
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

    def line(self) -> str:
        """A one-line summary for logs."""
        parts = [
            f"[{self.stage} {self.shard + 1}/{self.num_shards}]",
            f"docs {self.docs_finished} done" + (f" +{self.docs_skipped} skipped" if self.docs_skipped else ""),
            f"pages {self.pages_done}" + (f" +{self.pages_skipped} skipped" if self.pages_skipped else ""),
            f"(ok {self.pages['ok']}, truncated {self.pages['truncated']}, error {self.pages['error']}"
            + (f", quarantined {self.pages['quarantined']})" if self.pages["quarantined"] else ")"),
            f"{self.rate():.2f} pages/s",
            f"in flight {self.in_flight}" + (f", {self.waiting} waiting" if self.waiting else ""),
        ]
        if self.server:
            parts.append(
                f"server running {self.server.get('running', 0):.0f} waiting {self.server.get('waiting', 0):.0f}"
            )
        return " | ".join(parts)

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
    """Shows :class:`RunCounters` while a run goes on."""

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
        self._task: asyncio.Task[None] | None = None
        self._ticks: asyncio.Task[None] | None = None

    async def _poll(self) -> None:
        if self.poll_server is None:
            return
        try:
            self.counters.server = await self.poll_server()
        except Exception:  # noqa: BLE001 - metrics are a nicety; never fail the run for them
            self.counters.server = {}

    async def _run_log(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            await self._poll()
            log.info(self.counters.line())

    async def _run_live(self) -> None:
        from rich.console import Console
        from rich.live import Live

        console = Console(stderr=True)
        with Live(console=console, refresh_per_second=4, transient=True) as live:
            while True:
                await self._poll()
                live.update(self.counters.line())
                await asyncio.sleep(0.5)

    async def _run_bar(self) -> None:
        counters = self.counters
        bar = _bar_class()(desc=f"{counters.stage} {counters.shard + 1}/{counters.num_shards}", unit="page",
                           dynamic_ncols=True)
        try:
            while True:
                self._update_bar(bar)
                await asyncio.sleep(0.5)
        finally:  # cancelled by stop(): the bar shows the final count
            self._update_bar(bar)
            bar.close()

    def _update_bar(self, bar: Any) -> None:
        counters = self.counters
        if counters.pages_found is not None:
            bar.total = counters.pages_found
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
            log.info(self.counters.line())
