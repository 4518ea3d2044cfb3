"""Test helpers shipped with the package, so users can test their own integrations.

:class:`SimulatedServer` runs the simulated DeepSeek-OCR server
(``python -m llm_ocr.engines.sim``) as a real subprocess on a free port::

    from llm_ocr.testing import SimulatedServer

    with SimulatedServer("--slots", "4", corpus="tests/data/pdfs") as sim:
        client = openai.OpenAI(base_url=sim.base_url, api_key="EMPTY")
        sim.inject("error", count=2, status=503)   # the next two chat requests fail
        ...
        assert sim.stats()["requests"] == 3

:class:`CpuServer` runs the CPU OCR engine (``python -m llm_ocr.engines.cpu``) the same way.

Both are started and stopped by the process manager llm-ocr runs its own model servers with
(:class:`~llm_ocr.serving.vllm.process.ManagedServer`: its own process group, a watcher that stops it
should the test process be killed), on a private event loop, with no restarts: a test sees a
crash as it happened. Their own HTTP calls use only the standard library.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
import tempfile
import threading
import urllib.error
import urllib.request
from collections.abc import Coroutine
from pathlib import Path
from types import TracebackType
from typing import Any, ClassVar, TypeVar

__all__ = ["OFFLINE_ENV", "CpuServer", "LocalServer", "SimulatedServer", "SimulatedServerError"]

T = TypeVar("T")


class SimulatedServerError(RuntimeError):
    """A local server failed to start or answered a control request with an error."""


class LocalServer:
    """A model server module (``python -m MODULE``) in a subprocess, as a context manager.

    Args:
        *args: extra command-line options of the module (``"--slots", "2"`` ...);
            ``--port 0 --port-file`` are added.
        request_log: where to write the request log; ``None`` uses a temporary file that
            :meth:`requests` reads (``False`` disables the log).
        startup_timeout: seconds to wait for ``/health`` to answer 200.
        wait_ready: wait for ``/health`` 200 in :meth:`start` (False: only for the port).
        python: interpreter to run the server with (default: this one).
        env: extra environment variables for the server process.
        port: the port to listen on (default 0: a free one the OS picks).

    A subclass names the :attr:`module` it runs and how messages call it (:attr:`label`).
    """

    module: ClassVar[str]
    label: ClassVar[str]

    def __init__(
        self,
        *args: str,
        request_log: str | os.PathLike[str] | bool | None = None,
        startup_timeout: float = 30.0,
        wait_ready: bool = True,
        python: str | None = None,
        env: dict[str, str] | None = None,
        port: int = 0,
    ) -> None:
        self.args = [str(a) for a in args]
        self._listen_port = port  # 0: the OS picks a free one
        self._request_log_arg = request_log
        self.startup_timeout = startup_timeout
        self.wait_ready = wait_ready
        self.python = python or sys.executable
        self.env = env
        self.request_log: Path | None = None
        self._tmp: str | None = None
        self._final_requests: list[dict[str, Any]] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: Any = None  # the ManagedServer

    # -- lifecycle ---------------------------------------------------------------------------

    def __enter__(self) -> LocalServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> LocalServer:
        """Start the process and wait until it listens (and, by default, is healthy)."""
        from llm_ocr.serving.vllm.process import ManagedServer, ServerFailed

        if self._server is not None:
            raise SimulatedServerError("already started")
        self._tmp = tempfile.mkdtemp(prefix="llm-ocr-server-")
        port_file = Path(self._tmp) / "port"
        command = [self.python, "-m", self.module, *self.args, "--port", str(self._listen_port), "--port-file",
                   str(port_file)]
        if self._request_log_arg is not False:
            self.request_log = Path(
                self._request_log_arg if isinstance(self._request_log_arg, (str, os.PathLike))
                else Path(self._tmp) / "requests.jsonl"
            )
            command += ["--request-log", str(self.request_log)]
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=f"llm-ocr-{self.module}", daemon=True)
        self._thread.start()
        self._server = ManagedServer(
            command, host="127.0.0.1", port=self._listen_port, port_file=port_file,
            log_path=Path(self._tmp) / "server.log",
            env=self.env, startup_timeout=self.startup_timeout, max_restarts=0, stop_grace=5.0, name=self.label,
            unhealthy_timeout=None,
        )  # fmt: skip
        try:
            if self.wait_ready:
                self._run(self._server.__aenter__())
            else:
                self._run(self._server.start())
                self._run(self._port_written())
        except ServerFailed as exc:
            self.stop()
            raise SimulatedServerError(f"{self.label} did not start: {exc}") from exc
        except BaseException:
            self.stop()
            raise
        return self

    async def _port_written(self) -> None:
        from llm_ocr.serving.vllm.process import ServerFailed

        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.startup_timeout
        while not self._server.read_port_file():
            if self.returncode is not None:
                raise ServerFailed(f"{self.label} exited with code {self.returncode}", log_tail=self.stderr_tail())
            if loop.time() > deadline:
                raise ServerFailed(f"{self.label} not listening after {self.startup_timeout} s",
                                   log_tail=self.stderr_tail())
            await asyncio.sleep(0.02)

    def _run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()

    def stop(self, grace: float = 5.0) -> int | None:
        """Terminate the process group (SIGTERM, then SIGKILL after ``grace`` s); its exit code."""
        code = None
        if self._server is not None and self._loop is not None:
            self._server.stop_grace = grace
            self._run(self._server.stop())
            code = self.returncode
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            assert self._thread is not None
            self._thread.join()
            self._loop.close()
            self._loop = None
        if self._tmp is not None:
            # Keep a caller-chosen request log; the temporary folder goes.
            self._final_requests = self._read_requests() if self._owns_log() else None
            self._log_tail = self.stderr_tail()
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None
        return code

    def _owns_log(self) -> bool:
        return self.request_log is not None and self._tmp is not None and str(self.request_log).startswith(self._tmp)

    def wait_exit(self, timeout: float = 10.0) -> int:
        """Wait for the process to exit by itself (e.g. after an injected crash); its code."""
        process = self._process()
        return process.wait(timeout)

    def _process(self) -> Any:
        process = getattr(self._server, "_proc", None)
        if process is None:
            raise SimulatedServerError("not started")
        return process

    @property
    def pid(self) -> int | None:
        """The server's process id (also its process group's), once started."""
        return self._server.pid if self._server is not None else None

    @property
    def returncode(self) -> int | None:
        """The exit code once the process has ended, else None."""
        process = getattr(self._server, "_proc", None)
        return None if process is None else process.poll()

    def stderr_tail(self, lines: int = 30) -> str:
        """The last lines the server wrote (its stdout and stderr)."""
        if self._server is None or self._tmp is None:
            return getattr(self, "_log_tail", "")
        return str(self._server.log_tail(lines))

    # -- addresses ----------------------------------------------------------------------------

    @property
    def port(self) -> int | None:
        """The port it listens on, once known."""
        if self._server is None or not self._server.read_port_file():
            return None
        return int(self._server.port)

    @property
    def url(self) -> str:
        """Root URL, e.g. ``http://127.0.0.1:PORT``."""
        if self.port is None:
            raise SimulatedServerError("not started")
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        """OpenAI base URL, e.g. ``http://127.0.0.1:PORT/v1``."""
        return f"{self.url}/v1"

    # -- HTTP helpers -------------------------------------------------------------------------

    def call(self, method: str, path: str, body: Any = None, timeout: float = 10.0) -> tuple[int, bytes]:
        """One HTTP request to the server; ``body`` is sent as JSON. Returns (status, body
        bytes) for any status, so tests can look at error answers."""
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method)  # noqa: S310 - our http:// URL
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 - our http:// URL
                return resp.status, resp.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()

    def call_json(self, method: str, path: str, body: Any = None) -> Any:
        """:meth:`call` that expects 200 and returns the parsed JSON answer."""
        status, data = self.call(method, path, body)
        if status != 200:
            raise SimulatedServerError(f"{method} {path} answered {status}: {data[:500]!r}")
        return json.loads(data)

    def health(self) -> int | None:
        """Status of ``GET /health``, or None when nothing answers."""
        try:
            return self.call("GET", "/health", timeout=2.0)[0]
        except (OSError, urllib.error.URLError):
            return None

    def metrics_text(self) -> str:
        """The raw Prometheus text of ``GET /metrics``."""
        status, data = self.call("GET", "/metrics")
        if status != 200:
            raise SimulatedServerError(f"GET /metrics answered {status}")
        return data.decode()

    def metrics(self) -> dict[str, float]:
        """Parsed ``/metrics`` (see :func:`llm_ocr.serving.vllm.prometheus.parse_prometheus`)."""
        from llm_ocr.serving.vllm.prometheus import parse_prometheus

        return parse_prometheus(self.metrics_text())

    def requests(self, since: float | None = None) -> list[dict[str, Any]]:
        """The request log so far: one dict per chat request, in the order they ended.

        ``since`` (a ``time.time()``): only the requests that arrived then or later: a step's
        own, on a server that other steps share, without counting the log's length before and
        after it. (A streamed request's line is written before its answer's last chunk, so a
        client that has its whole answer finds it.)"""
        if self._tmp is None and self._final_requests is not None:
            logged = list(self._final_requests)
        else:
            logged = self._read_requests()
        return logged if since is None else [entry for entry in logged if entry.get("time", 0.0) >= since]

    def _read_requests(self) -> list[dict[str, Any]]:
        if self.request_log is None or not self.request_log.exists():
            return []
        out = []
        for line in self.request_log.read_text(encoding="utf-8").splitlines():
            if line.strip():
                out.append(json.loads(line))
        return out


class SimulatedServer(LocalServer):
    """The simulated DeepSeek-OCR server (``python -m llm_ocr.engines.sim``) in a subprocess.

    Args:
        *args, request_log, startup_timeout, wait_ready, python, env, port: as for :class:`LocalServer`.
        corpus: PDF file(s) or folder(s) the server should know (``--corpus``).
    """

    module = "llm_ocr.engines.sim"
    label = "simulated server"

    def __init__(
        self,
        *args: str,
        corpus: str | os.PathLike[str] | list[str | os.PathLike[str]] | None = None,
        **options: Any,
    ) -> None:
        corpora = [] if corpus is None else corpus if isinstance(corpus, list) else [corpus]
        super().__init__(*args, *(arg for c in corpora for arg in ("--corpus", os.fspath(c))), **options)

    def inject(self, kind: str, count: int = 1, **kw: Any) -> dict[str, Any]:
        """Queue ``count`` faults for the next chat requests.

        ``kind`` is one of error, hang, reset, loop, empty, untagged, bad_boxes, crash; extra
        keywords: ``status`` (error, default 500), ``seconds`` (hang, default 3600),
        ``message`` (error).
        """
        return self.call_json("POST", "/sim/faults", {"kind": kind, "count": count, **kw})

    def release(self) -> int:
        """End every ``hang`` fault under way: their requests are answered normally. Returns how
        many were held when it ended them."""
        return int(self.call_json("POST", "/sim/release")["released"])

    def clear_faults(self) -> int:
        """Drop the queued faults; how many there were."""
        return int(self.call_json("DELETE", "/sim/faults")["cleared"])

    def end_startup(self) -> None:
        """End ``--startup-delay`` now: the server answers once its corpus is indexed."""
        self.call_json("POST", "/sim/ready")

    def stats(self) -> dict[str, Any]:
        """``GET /sim/stats``: request counters, prompt kinds, faults applied, peak load."""
        return self.call_json("GET", "/sim/stats")


#: Environment that makes any attempt to download over HTTP(S) fail at once (a proxy on a
#: closed port), to prove that the engine works offline.
OFFLINE_ENV = {
    "HTTP_PROXY": "http://127.0.0.1:9",
    "HTTPS_PROXY": "http://127.0.0.1:9",
    "http_proxy": "http://127.0.0.1:9",
    "https_proxy": "http://127.0.0.1:9",
    "NO_PROXY": "127.0.0.1,localhost",
    "no_proxy": "127.0.0.1,localhost",
}


class CpuServer(LocalServer):
    """The CPU OCR engine (``python -m llm_ocr.engines.cpu``) in a subprocess.

    Args:
        *args, request_log, python, env: as for :class:`LocalServer`.
        startup_timeout: seconds to wait for the models to load (``/health`` 200).
        offline: run with HTTP(S) proxies pointing at a closed port (see :data:`OFFLINE_ENV`).
    """

    module = "llm_ocr.engines.cpu"
    label = "CPU OCR engine"

    def __init__(
        self,
        *args: str,
        startup_timeout: float = 120.0,
        offline: bool = False,
        env: dict[str, str] | None = None,
        **options: Any,
    ) -> None:
        full_env = {**(OFFLINE_ENV if offline else {}), **(env or {})}
        super().__init__(*args, startup_timeout=startup_timeout, env=full_env, **options)
