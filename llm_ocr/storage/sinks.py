"""Where :class:`~llm_ocr.storage.Storage` writes go: at once, or batched into commits.

A :class:`PartSink` takes whole files (``put``) and removals (``delete``) and makes them
visible, atomically per file, at the latest on ``flush()``/``close()``:

- :class:`DirectSink` writes at once (temporary file + rename locally, one put on object stores:
  see :meth:`llm_ocr.storage.Storage.write_atomic`).
- :class:`BatchingSink` queues operations and hands them to a :class:`Committer` in batches,
  for stores where every write is a commit with a rate limit (the Hugging Face Hub: one commit
  per file otherwise, docs/facts.md#hugging-face-datasets-and-the-hub). A batch is committed
  when ``max_files`` are queued, when the oldest queued operation is ``max_age`` seconds old (a
  background timer), and on ``flush()``/``close()``. Operations keep their order: a completion
  marker queued after the parts it covers lands in the same commit or a later one, never
  earlier. Operations still queued when the process is killed are lost, which is safe: their
  pages are redone on rerun.

Sinks are shared per filesystem instance (fsspec caches instances, so every Storage of one
output shares one queue); :func:`close_all` flushes them at the end of a run (and, as a safety
net, at interpreter exit).
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, Protocol

log = logging.getLogger(__name__)


class PartSink(Protocol):
    """Accepts whole files and deletions; makes them visible by ``flush()`` at the latest."""

    def put(self, path: str, data: bytes) -> None:
        """Store ``data`` at ``path`` (replacing it), atomically."""

    def delete(self, path: str) -> None:
        """Remove ``path`` if it exists."""

    def flush(self) -> None:
        """Make every accepted operation visible; raises if that fails."""

    def close(self) -> None:
        """Flush and release resources."""


class DirectSink:
    """Performs every operation at once (local disk, S3, GCS, ``memory://``...)."""

    def __init__(self, write: Callable[[str, bytes], None], remove: Callable[[str], None]) -> None:
        self._write = write
        self._remove = remove

    def put(self, path: str, data: bytes) -> None:
        self._write(path, data)

    def delete(self, path: str) -> None:
        self._remove(path)

    def flush(self) -> None:
        return None

    def close(self) -> None:
        return None


@dataclass
class Operation:
    """One queued change: add (or replace) a file, or delete one."""

    kind: Literal["put", "delete"]
    path: str
    data: bytes = b""


class Committer(Protocol):
    """Applies batches of operations to a store in which every change is a commit."""

    def batches(self, path: str) -> bool:
        """Whether writes to ``path`` go through commits (False: write them directly)."""

    def exists(self, path: str) -> bool:
        """Whether ``path`` exists in the store now (deleting an absent file fails a commit)."""

    def commit(self, operations: list[Operation], message: str) -> None:
        """Apply ``operations`` in as few atomic commits as the store allows, retrying transient
        failures; raise when they cannot be applied."""

    def create_exclusive(self, path: str, data: bytes) -> bool:
        """Commit ``path`` at once if no file has that name (True), else leave it (False): a
        commit conditional on the head at which the name was checked absent."""


def _env_number(name: str, default: float) -> float:
    value = os.environ.get(name)
    try:
        return float(value) if value else default
    except ValueError:
        log.warning("ignoring %s=%r: not a number", name, value)
        return default


class BatchingSink:
    """Queues operations and commits them in batches (see the module docstring).

    Args:
        committer: applies a batch.
        direct: where paths the committer does not batch go (e.g. ``hf://buckets``).
        max_files: operations per commit (default ``LLM_OCR_HUB_COMMIT_FILES`` or 64).
        max_bytes: queued bytes that trigger a commit, bounding memory (default
            ``LLM_OCR_HUB_COMMIT_BYTES`` or 1 GiB).
        max_age: seconds an operation may wait (default ``LLM_OCR_HUB_COMMIT_INTERVAL`` or 240).
        name: how log lines name the store.
    """

    def __init__(
        self,
        committer: Committer,
        direct: PartSink,
        *,
        max_files: int | None = None,
        max_bytes: int | None = None,
        max_age: float | None = None,
        name: str = "store",
    ) -> None:
        self.committer = committer
        self.direct = direct
        self.max_files = max(1, int(max_files or _env_number("LLM_OCR_HUB_COMMIT_FILES", 64)))
        self.max_bytes = int(max_bytes or _env_number("LLM_OCR_HUB_COMMIT_BYTES", 2**30))
        self.max_age = max_age if max_age is not None else _env_number("LLM_OCR_HUB_COMMIT_INTERVAL", 240.0)
        self.name = name
        self._ops: list[Operation] = []
        self._oldest: float | None = None
        self._lock = threading.RLock()
        self._failure: BaseException | None = None
        self._timer: threading.Thread | None = None
        self._closing = threading.Event()
        self.commits = 0  # commits made by this sink (for stats and tests)

    # -- PartSink -------------------------------------------------------------------------------

    def put(self, path: str, data: bytes) -> None:
        if not self.committer.batches(path):
            self.direct.put(path, data)
            return
        with self._lock:
            self._raise_failure()
            self._enqueue(Operation("put", path, data if isinstance(data, bytes) else bytes(data)))
            if len(self._ops) >= self.max_files or self.pending_bytes >= self.max_bytes:
                self._commit_locked(self._ops[: self.max_files])
        self._ensure_timer()

    def put_now(self, path: str, data: bytes) -> None:
        """Store ``data`` at ``path`` in a commit of its own, now (a queued write of it is dropped)."""
        if not self.committer.batches(path):
            self.direct.put(path, data)
            return
        with self._lock:
            self._raise_failure()
            self._ops = [op for op in self._ops if op.path != path]
            self.committer.commit([Operation("put", path, bytes(data))], "llm-ocr: 1 file")
            self.commits += 1

    def delete(self, path: str) -> None:
        if not self.committer.batches(path):
            self.direct.delete(path)
            return
        with self._lock:
            self._raise_failure()
            had_pending = any(op.path == path for op in self._ops)
            self._ops = [op for op in self._ops if op.path != path]
            if self.committer.exists(path):
                self._enqueue(Operation("delete", path))
            elif not had_pending:
                return

    def flush(self) -> None:
        with self._lock:
            while self._ops:
                self._commit_locked(self._ops[: self.max_files])
            self._failure = None  # everything queued is now stored

    def close(self) -> None:
        self._closing.set()
        timer, self._timer = self._timer, None
        if timer is not None:
            timer.join()
        self._closing = threading.Event()  # the sink is shared: a later run may use it again
        self.flush()

    # -- internals ------------------------------------------------------------------------------

    @property
    def pending(self) -> int:
        """Operations queued and not yet committed."""
        return len(self._ops)

    @property
    def pending_bytes(self) -> int:
        """Bytes held by queued operations (they live in memory until committed)."""
        return sum(len(op.data) for op in self._ops)

    def _enqueue(self, op: Operation) -> None:
        # A newer operation on the same path replaces the queued one (a Hub commit may not touch
        # a path twice); it moves to the end, which only delays it, never reorders it earlier.
        self._ops = [queued for queued in self._ops if queued.path != op.path]
        self._ops.append(op)
        if self._oldest is None:
            self._oldest = time.monotonic()

    def _commit_locked(self, batch: list[Operation]) -> None:
        puts = sum(op.kind == "put" for op in batch)
        message = f"llm-ocr: {puts} file(s)" + (f", {len(batch) - puts} deletion(s)" if len(batch) > puts else "")
        try:
            self.committer.commit(list(batch), message)
        except BaseException as exc:
            self._failure = exc
            raise
        done = {id(op) for op in batch}
        self._ops = [op for op in self._ops if id(op) not in done]
        self._oldest = time.monotonic() if self._ops else None
        self.commits += 1
        log.debug("committed %d operation(s) to %s (%d still queued)", len(batch), self.name, len(self._ops))

    def _raise_failure(self) -> None:
        if self._failure is not None:
            failure = self._failure
            raise failure

    def _ensure_timer(self) -> None:
        if self._timer is not None or self.max_age <= 0:
            return
        with self._lock:
            if self._timer is None:
                self._timer = threading.Thread(target=self._tick, name="llm-ocr-commit-timer", daemon=True)
                self._timer.start()

    def _tick(self) -> None:
        period = min(5.0, max(0.05, self.max_age / 4))
        closing = self._closing
        while not closing.wait(period):
            with self._lock:
                if self._failure is not None or self._oldest is None:
                    continue
                if time.monotonic() - self._oldest < self.max_age:
                    continue
                try:
                    while self._ops:
                        self._commit_locked(self._ops[: self.max_files])
                except Exception as exc:  # noqa: BLE001 - reported by the next put/flush
                    log.warning("commit to %s failed: %s", self.name, exc)


# --------------------------------------------------------------------------------------------
# One sink per filesystem instance

_sinks: dict[int, tuple[Any, PartSink]] = {}
_sinks_lock = threading.Lock()
_atexit_registered = False

def batching_sink(fs: Any, direct: PartSink, committer_for: Callable[[Any], Committer]) -> BatchingSink:
    """The batching sink shared by every Storage on ``fs``, committing through
    ``committer_for(fs)`` (made once per filesystem instance)."""
    global _atexit_registered
    with _sinks_lock:
        entry = _sinks.get(id(fs))
        if entry is not None and entry[0] is fs:
            return entry[1]  # type: ignore[return-value]
        sink = BatchingSink(committer_for(fs), direct, name=getattr(fs, "endpoint", None) or type(fs).__name__)
        _sinks[id(fs)] = (fs, sink)
        if not _atexit_registered:
            # A safety net for commands that do not call close_all() (a notebook, `report`):
            # whatever is still queued at exit is committed.
            atexit.register(close_all, quiet=True)
            _atexit_registered = True
        return sink


def close_all(*, quiet: bool = False) -> None:
    """Flush every batching sink of this process (end of a run); raises the first failure."""
    with _sinks_lock:
        sinks = [sink for _, sink in _sinks.values()]
    first: BaseException | None = None
    for sink in sinks:
        try:
            sink.close()
        except Exception as exc:  # noqa: BLE001 - try every sink, report the first failure
            if quiet:
                log.error("could not commit queued files: %s", exc)
            first = first or exc
    if first is not None and not quiet:
        raise first
