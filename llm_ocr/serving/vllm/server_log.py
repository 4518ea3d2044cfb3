"""A server's output on its way to its log file, with every secret it could repeat taken out.

A model server repeats what it was given: vLLM logs its non-default arguments at start-up, and
a server's argument parser that rejects a flag prints the whole command line, a key after
``--api-key`` too. So the server does not write its log file itself: its stdout and stderr go
to a pipe, and :class:`LogRelay`, a thread of ours, appends what arrives to the file a line at a
time, through a :class:`~llm_ocr.redaction.Redactor` made for the server's command line and
environment. Everything llm-ocr later shows or stores of that output reads the file: the
"last lines of the server log" of a failure, ``OUT/_state/logs/`` and its upload with a remote
output.

Lines are redacted whole (a secret cannot be cut in two by a pipe read); a carriage return
ends a line too (progress bars), and a "line" longer than :data:`MAX_LINE` bytes is written in
pieces. When the server and every process that shares its output have exited, the pipe ends and
so does the thread: :meth:`LogRelay.wait` returns once all of it is in the file.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import IO

log = logging.getLogger(__name__)

#: Bytes of one line held back while waiting for its end (beyond, it is written as it is).
MAX_LINE = 1 << 20


class LogRelay:
    """Copy ``source`` (a server's output pipe) to the end of ``path``, each line redacted.

    Args:
        source: the read end of the pipe; closed when it ends.
        path: the log file, appended to.
        redact: what a line goes through before it is written.
        name: the server's label, for the thread's name and our own log messages.
    """

    def __init__(self, source: IO[bytes], path: Path, redact: Callable[[str], str], name: str) -> None:
        self.source = source
        self.path = path
        self.redact = redact
        self.name = name
        self._thread = threading.Thread(target=self._run, name=f"llm-ocr-{name}-log", daemon=True)

    def start(self) -> LogRelay:
        """Start copying (returns at once)."""
        self._thread.start()
        return self

    def wait(self, timeout: float) -> bool:
        """Wait until everything the server wrote is in the file; False after ``timeout`` s (a
        process that left the server's group may still hold its output open)."""
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def _run(self) -> None:
        fd = self.source.fileno()
        pending = b""
        writable = True
        try:
            with open(self.path, "ab") as out:
                while chunk := os.read(fd, 65536):
                    pending += chunk
                    cut = max(pending.rfind(b"\n"), pending.rfind(b"\r")) + 1  # after the last line's end
                    if not cut and len(pending) > MAX_LINE:
                        cut = len(pending)
                    if cut:
                        writable = self._write(out, pending[:cut], writable)
                        pending = pending[cut:]
                if pending:
                    self._write(out, pending, writable)
        except OSError as exc:  # the file could not be opened: drain the pipe so the server never blocks
            log.warning("cannot write the %s server's log %s: %s", self.name, self.path, exc)
            while os.read(fd, 65536):
                pass
        finally:
            self.source.close()

    def _write(self, out: IO[bytes], data: bytes, writable: bool) -> bool:
        if not writable:
            return False
        # surrogateescape: bytes that are not UTF-8 go through unchanged.
        text = self.redact(data.decode("utf-8", errors="surrogateescape"))
        try:
            out.write(text.encode("utf-8", errors="surrogateescape"))
            out.flush()  # readers of the tail see it at once
        except OSError as exc:  # disk full: keep draining the pipe, stop writing
            log.warning("cannot write the %s server's log %s: %s", self.name, self.path, exc)
            return False
        return True
