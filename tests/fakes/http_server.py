"""The lifecycle every fake HTTP service of the tests shares (the Hub and Jobs, Kubernetes,
SageMaker, Cloud Run: tests/fakes/fake_*.py).

A fake is a :class:`FakeHTTPServer` subclass: its ports are bound when it is made (its URL is known
before it serves, e.g. to write a kubeconfig), it serves from threads of the test process between
``start()`` and ``stop()`` (or as a ``with`` block), and ``stop()`` first ends whatever the fake
runs (:meth:`FakeHTTPServer.stop_work`: its jobs' processes), then kills every process still
carrying the fake's mark (:meth:`FakeHTTPServer.marked`: each process a fake starts has it in its
environment, and so has everything that process starts, a model server in a session of its own or
re-parented included), then stops answering: nothing a fake started outlives it to write into the
next test's output. Each request,
whatever its method, goes to :meth:`FakeHTTPServer.handle` with the request's handler; a fake
whose handler needs helpers of its own gives its class (:meth:`FakeHTTPServer.handler_class`,
a :class:`FakeHandler`). What a fake answers is its own: refusing what the real service refuses
(tests/launchers/test_fakes_refuse.py) stays in each fake.
"""

from __future__ import annotations

import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TypeVar

from tests.fakes.container import kill_marked

F = TypeVar("F", bound="FakeHTTPServer")

#: The variable in the environment of every process a fake starts; its value is the fake's own.
FAKE_MARK = "LLM_OCR_TEST_FAKE"


class FakeHandler(BaseHTTPRequestHandler):
    """A request to a fake: every method to the fake's :meth:`FakeHTTPServer.handle`; no access log."""

    server: _Server

    def _serve(self) -> None:
        self.server.fake.handle(self)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = _serve

    def log_message(self, *args: Any) -> None:  # keep the tests' output quiet
        pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True  # a client that hangs on (a followed log) does not hold up the test's end
    fake: FakeHTTPServer


class FakeHTTPServer:
    """A fake service on ``ports`` free loopback ports (the first is :attr:`url`), in threads of
    the test process; see the module docstring."""

    #: How many ports the fake answers on (the fake Hub's second stands for LFS storage).
    ports = 1

    def __init__(self) -> None:
        #: This fake's value of :data:`FAKE_MARK`.
        self.mark = uuid.uuid4().hex
        handler = self.handler_class()
        self.servers: list[_Server] = []
        for _ in range(self.ports):
            server = _Server(("127.0.0.1", 0), handler)
            server.fake = self
            self.servers.append(server)
        self._threads: list[threading.Thread] = []

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT`` of the first port."""
        return self.url_of(0)

    def url_of(self, index: int) -> str:
        """``http://127.0.0.1:PORT`` of port ``index``."""
        host, port = self.servers[index].server_address[:2]
        return f"http://{host}:{port}"

    def handler_class(self) -> type[BaseHTTPRequestHandler]:
        """The request handler: :class:`FakeHandler` (every method to :meth:`handle`) unless a
        fake needs its own."""
        return FakeHandler

    def handle(self, handler: BaseHTTPRequestHandler) -> None:
        """Answer one request (``handler.command``, ``handler.path``, ...)."""
        raise NotImplementedError

    def start(self: F) -> F:
        """Serve (once; a started fake is returned as it is)."""
        if not self._threads:
            for server in self.servers:
                thread = threading.Thread(target=server.serve_forever, name=f"{type(self).__name__}-serve", daemon=True)
                thread.start()
                self._threads.append(thread)
        return self

    def marked(self, env: dict[str, str]) -> dict[str, str]:
        """``env`` with this fake's mark: the environment of every process the fake starts."""
        return {**env, FAKE_MARK: self.mark}

    def stop_work(self) -> None:
        """End what the fake runs (its jobs' processes) before it stops answering."""

    def stop(self) -> None:
        """End the fake's work and every process that carries its mark, then stop serving and
        close the ports."""
        self.stop_work()
        kill_marked(FAKE_MARK, self.mark)
        for server in self.servers:
            if self._threads:
                server.shutdown()
            server.server_close()
        self._threads = []

    def __enter__(self: F) -> F:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
