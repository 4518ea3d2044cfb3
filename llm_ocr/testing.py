"""Test helpers shipped with the package, so users can test their own integrations.

:class:`SimulatedServer` runs the simulated DeepSeek-OCR server
(``python -m llm_ocr.servers.sim``) as a real subprocess on a free port::

    from llm_ocr.testing import SimulatedServer

    with SimulatedServer("--slots", "4", corpus="tests/data/pdfs") as sim:
        client = openai.OpenAI(base_url=sim.base_url, api_key="EMPTY")
        sim.inject("error", count=2, status=503)   # the next two chat requests fail
        ...
        assert sim.stats()["requests"] == 3

:class:`CpuServer` runs the CPU OCR engine (``python -m llm_ocr.servers.cpu``) the same way.

Only the standard library is used for HTTP here, so the helper adds no dependencies.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Any, NoReturn

__all__ = ["CpuServer", "OFFLINE_ENV", "SimulatedServer", "SimulatedServerError"]


class SimulatedServerError(RuntimeError):
    """The simulated server failed to start or answered a control request with an error."""


class SimulatedServer:
    """The simulated DeepSeek-OCR server in a subprocess, as a context manager.

    Args:
        *args: extra command-line options for ``python -m llm_ocr.servers.sim``
            (``"--slots", "2"``, ``"--instant"`` ...). ``--port 0 --port-file`` are added.
        corpus: PDF file(s) or folder(s) the server should know (``--corpus``).
        request_log: where to write the request log; ``None`` uses a temporary file that
            :meth:`requests` reads (``False`` disables the log).
        startup_timeout: seconds to wait for ``/health`` to answer 200.
        wait_ready: wait for ``/health`` 200 in :meth:`start` (False: only for the port).
        python: interpreter to run the server with (default: this one).
        env: extra environment variables for the server process.
        port: the port to listen on (default 0: a free one the OS picks).

    Subclasses run another server with the same command-line contract (``--port 0
    --port-file --request-log``) by setting :attr:`module` and :attr:`label`.
    """

    #: The module run with ``python -m``.
    module = "llm_ocr.servers.sim"
    #: How messages name the server.
    label = "simulated server"

    def __init__(
        self,
        *args: str,
        corpus: str | os.PathLike[str] | list[str | os.PathLike[str]] | None = None,
        request_log: str | os.PathLike[str] | bool | None = None,
        startup_timeout: float = 30.0,
        wait_ready: bool = True,
        python: str | None = None,
        env: dict[str, str] | None = None,
        port: int = 0,
    ) -> None:
        self.args = [str(a) for a in args]
        self._listen_port = port  # 0: the OS picks a free one
        if corpus is not None:
            for c in corpus if isinstance(corpus, list) else [corpus]:
                self.args += ["--corpus", os.fspath(c)]
        self._request_log_arg = request_log
        self.startup_timeout = startup_timeout
        self.wait_ready = wait_ready
        self.python = python or sys.executable
        self.env = env
        self.process: subprocess.Popen[bytes] | None = None
        self.port: int | None = None
        self.request_log: Path | None = None
        self._tmp: str | None = None
        self._stderr_file: Any = None
        self._final_requests: list[dict[str, Any]] | None = None

    # -- lifecycle ---------------------------------------------------------------------------

    def __enter__(self) -> SimulatedServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> SimulatedServer:
        """Start the process and wait until it listens (and, by default, is healthy)."""
        if self.process is not None:
            raise SimulatedServerError("already started")
        self._tmp = tempfile.mkdtemp(prefix="llm-ocr-sim-")
        port_file = Path(self._tmp) / "port"
        cmd = [self.python, "-m", self.module, *self.args, "--port", str(self._listen_port), "--port-file", str(port_file)]
        if self._request_log_arg is not False:
            self.request_log = Path(
                self._request_log_arg if isinstance(self._request_log_arg, (str, os.PathLike))
                else Path(self._tmp) / "requests.jsonl"
            )
            cmd += ["--request-log", str(self.request_log)]
        # stderr goes to a file, not a pipe: a pipe nobody reads would block a chatty server.
        self._stderr_file = open(Path(self._tmp) / "stderr.log", "w+b")  # noqa: SIM115 - closed in stop()
        env = {**os.environ, **(self.env or {})}
        self.process = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=self._stderr_file, env=env)
        try:
            self._wait_started(port_file)
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_started(self, port_file: Path) -> None:
        deadline = time.monotonic() + self.startup_timeout
        while True:
            self._check_alive()
            if self.port is None and port_file.exists():
                self.port = int(port_file.read_text().strip())
                if not self.wait_ready:
                    return
            if self.port is not None and self.health() == 200:
                return
            if time.monotonic() > deadline:
                raise SimulatedServerError(
                    f"{self.label} not ready after {self.startup_timeout} s\n{self.stderr_tail()}"
                )
            time.sleep(0.02)

    def _check_alive(self) -> None:
        assert self.process is not None
        if self.process.poll() is not None:
            raise SimulatedServerError(
                f"{self.label} exited with code {self.process.returncode}\n{self.stderr_tail()}"
            )

    def stop(self, grace: float = 5.0) -> int | None:
        """Terminate the process (SIGTERM, then SIGKILL after ``grace`` s); its exit code."""
        code = None
        if self.process is not None:
            if self.process.poll() is None:
                self.process.send_signal(signal.SIGTERM)
                try:
                    self.process.wait(grace)
                except subprocess.TimeoutExpired:
                    self.process.kill()
                    self.process.wait()
            code = self.process.returncode
        if self._stderr_file is not None:
            self._stderr_file.close()
            self._stderr_file = None
        if self._tmp is not None:
            # Keep a caller-chosen request log; the temporary folder goes.
            self._final_requests = self._read_requests() if self._owns_log() else None
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None
        return code

    def _owns_log(self) -> bool:
        return self.request_log is not None and self._tmp is not None and str(self.request_log).startswith(self._tmp)

    def wait_exit(self, timeout: float = 10.0) -> int:
        """Wait for the process to exit by itself (e.g. after an injected crash); its code."""
        assert self.process is not None
        return self.process.wait(timeout)

    @property
    def returncode(self) -> int | None:
        """The exit code once the process has ended, else None."""
        return None if self.process is None else self.process.poll()

    def stderr_tail(self, lines: int = 30) -> str:
        """The last lines the server wrote to stderr."""
        if self._stderr_file is None:
            return ""
        self._stderr_file.flush()
        self._stderr_file.seek(0)
        text = self._stderr_file.read().decode("utf-8", "replace")
        return "\n".join(text.splitlines()[-lines:])

    # -- addresses ----------------------------------------------------------------------------

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
        req = urllib.request.Request(self.url + path, data=data, method=method)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
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

    def inject(self, kind: str, count: int = 1, **kw: Any) -> dict[str, Any]:
        """Queue ``count`` faults for the next chat requests.

        ``kind`` is one of error, hang, reset, loop, empty, untagged, bad_boxes, crash; extra
        keywords: ``status`` (error, default 500), ``seconds`` (hang, default 3600),
        ``message`` (error).
        """
        return self.call_json("POST", "/sim/faults", {"kind": kind, "count": count, **kw})

    def clear_faults(self) -> int:
        """Drop the queued faults; how many there were."""
        return int(self.call_json("DELETE", "/sim/faults")["cleared"])

    def stats(self) -> dict[str, Any]:
        """``GET /sim/stats``: request counters, prompt kinds, faults applied, peak load."""
        return self.call_json("GET", "/sim/stats")

    def metrics_text(self) -> str:
        """The raw Prometheus text of ``GET /metrics``."""
        status, data = self.call("GET", "/metrics")
        if status != 200:
            raise SimulatedServerError(f"GET /metrics answered {status}")
        return data.decode()

    def metrics(self) -> dict[str, float]:
        """Parsed ``/metrics`` (see :func:`llm_ocr.servers.sim.parse_prometheus`)."""
        from llm_ocr.servers.frame.metrics import parse_prometheus

        return parse_prometheus(self.metrics_text())

    def requests(self) -> list[dict[str, Any]]:
        """The request log so far: one dict per chat request, oldest first."""
        if self._tmp is None and self._final_requests is not None:
            return list(self._final_requests)
        return self._read_requests()

    def _read_requests(self) -> list[dict[str, Any]]:
        if self.request_log is None or not self.request_log.exists():
            return []
        out = []
        for line in self.request_log.read_text(encoding="utf-8").splitlines():
            if line.strip():
                out.append(json.loads(line))
        return out


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


class CpuServer(SimulatedServer):
    """``python -m llm_ocr.servers.cpu`` in a subprocess, as a context manager.

    Args:
        *args: extra options (``"--threads", "2"`` ...); ``--port 0 --port-file`` are added.
        request_log: as for :class:`~llm_ocr.testing.SimulatedServer`.
        startup_timeout: seconds to wait for the models to load (``/health`` 200).
        offline: run with HTTP(S) proxies pointing at a closed port (see :data:`OFFLINE_ENV`).
        env, python: as for :class:`~llm_ocr.testing.SimulatedServer`.
    """

    module = "llm_ocr.servers.cpu"
    label = "CPU OCR engine"

    def __init__(
        self,
        *args: str,
        request_log: str | os.PathLike[str] | bool | None = None,
        startup_timeout: float = 120.0,
        offline: bool = False,
        env: dict[str, str] | None = None,
        python: str | None = None,
    ) -> None:
        full_env = {**(OFFLINE_ENV if offline else {}), **(env or {})}
        super().__init__(*args, request_log=request_log, startup_timeout=startup_timeout, env=full_env, python=python)

    def _unsupported(self, what: str) -> NoReturn:
        raise SimulatedServerError(f"the CPU OCR engine has no {what}")

    def inject(self, kind: str, count: int = 1, **kw: Any) -> dict[str, Any]:
        """Not available: the CPU engine has no fault injection."""
        self._unsupported("fault injection")

    def clear_faults(self) -> int:
        """Not available: the CPU engine has no fault injection."""
        self._unsupported("fault injection")

    def stats(self) -> dict[str, Any]:
        """Not available: the CPU engine has no ``/sim/stats``."""
        self._unsupported("/sim/stats")
