"""A static HTTP file server on 127.0.0.1 that counts the bytes it serves.

Serves a folder the way fsspec's ``HTTPFileSystem`` expects (``HEAD`` with ``Content-Length``,
``GET`` with ``Range``, including suffix ranges ``bytes=-N``; a folder ``GET`` answers an HTML page
of links), and records every request with the bytes of its body, so a test or ``llm-ocr
bench-reads`` can see what a reader really pulled over the network, not what it meant to.
"""

from __future__ import annotations

import html
import re
import threading
import urllib.parse
from collections import defaultdict
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

_RANGE = re.compile(r"bytes=(\d*)-(\d*)$")


@dataclass
class ServedCounts:
    """Bytes of response bodies and requests, in total and per served path."""

    bytes: int = 0
    requests: int = 0
    by_path: dict[str, int] = field(default_factory=lambda: defaultdict(int))


class CountingFileServer:
    """Serve ``root`` over HTTP on a free loopback port, counting what is sent.

    Use as a context manager; :attr:`url` is the root's URL (ending in ``/``), :meth:`counts`
    a snapshot of the counters and :meth:`reset` zeroes them between measurements.
    """

    def __init__(self, root: Path) -> None:
        self.root = Path(root).resolve()
        self._lock = threading.Lock()
        self._counts = ServedCounts()
        self._server = _QuietServer(("127.0.0.1", 0), _handler(self))
        self._thread = threading.Thread(target=self._server.serve_forever, name="counting-file-server", daemon=True)

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT/``."""
        return f"http://127.0.0.1:{self._server.server_address[1]}/"

    def start(self) -> CountingFileServer:
        """Start serving in a background thread."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket."""
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> CountingFileServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def counts(self) -> ServedCounts:
        """A copy of the counters."""
        with self._lock:
            return ServedCounts(self._counts.bytes, self._counts.requests, dict(self._counts.by_path))

    def reset(self) -> None:
        """Zero the counters."""
        with self._lock:
            self._counts = ServedCounts()

    def _record(self, path: str, sent: int, *, request: bool = False) -> None:
        # Counted before the bytes go out: a client never holds bytes the counts do not show.
        with self._lock:
            self._counts.bytes += sent
            self._counts.requests += int(request)
            self._counts.by_path[path] += sent


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        # Readers hang up mid-body when they have what they need (fsspec does): not an error.
        pass


def _handler(server: CountingFileServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as real object stores do

        def log_message(self, *args: Any) -> None:  # quiet: tests and the bench print their own
            pass

        def do_HEAD(self) -> None:  # the http.server naming
            self._serve(body=False)

        def do_GET(self) -> None:
            self._serve(body=True)

        def _serve(self, body: bool) -> None:
            rel = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path).lstrip("/")
            target = (server.root / rel).resolve()
            if not target.is_relative_to(server.root) or not target.exists():
                self._send(404, b"not found", "text/plain", body, rel)
            elif target.is_dir():
                self._send(200, _listing(target, rel), "text/html; charset=utf-8", body, rel)
            else:
                self._send_file(target, body, rel)

        def _send_file(self, target: Path, body: bool, rel: str) -> None:
            size = target.stat().st_size
            start, end, status = 0, size, 200
            match = _RANGE.match(self.headers.get("Range", ""))
            if match and (match.group(1) or match.group(2)):
                first, last = match.group(1), match.group(2)
                if first:
                    start, end = int(first), min(size, int(last) + 1) if last else size
                else:  # a suffix: the last N bytes
                    start, end = max(0, size - int(last)), size
                if start >= size:
                    server._record(rel, 0, request=True)
                    self.send_response(416)
                    self.send_header("Content-Range", f"bytes */{size}")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                status = 206
            server._record(rel, 0, request=True)
            self.send_response(status)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Accept-Ranges", "bytes")
            self.send_header("Content-Length", str(end - start))
            if status == 206:
                self.send_header("Content-Range", f"bytes {start}-{end - 1}/{size}")
            self.end_headers()
            sent = 0
            with target.open("rb") as f:
                f.seek(start)
                while body and sent < end - start:
                    chunk = f.read(min(1 << 20, end - start - sent))
                    if not chunk:
                        break
                    server._record(rel, len(chunk))
                    self.wfile.write(chunk)
                    sent += len(chunk)

        def _send(self, status: int, data: bytes, content_type: str, body: bool, rel: str) -> None:
            server._record(rel, len(data) if body else 0, request=True)
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if body:
                self.wfile.write(data)

    return Handler


def _listing(folder: Path, rel: str) -> bytes:
    """An HTML page linking every entry of ``folder`` (folders end in ``/``), as fsspec parses."""
    base = "/" + (rel.rstrip("/") + "/" if rel else "")
    links = []
    for entry in sorted(folder.iterdir()):
        name = entry.name + ("/" if entry.is_dir() else "")
        links.append(f'<a href="{html.escape(base + urllib.parse.quote(name))}">{html.escape(name)}</a>')
    return ("<html><body>\n" + "\n".join(links) + "\n</body></html>\n").encode()
