"""One storage door for every URL: local paths, ``s3://``, ``gs://``, ``hf://``, ``memory://``.

Everything goes through fsspec; nothing here branches on the URL scheme. The only
distinction is made on the filesystem's *capability*: a local filesystem can rename, so an
atomic write is "temporary file, then rename"; object stores publish an object only when its
upload completes, so a single put is already atomic.
"""

from __future__ import annotations

import logging
import os
import posixpath
import random
import time
import uuid
from collections.abc import Callable
from typing import Any, TypeVar

import fsspec
from fsspec.implementations.local import LocalFileSystem

log = logging.getLogger(__name__)

T = TypeVar("T")

# Errors worth retrying: the network and throttling, never "not found" or "permission denied".
_PERMANENT = (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError, ValueError)


def retry_io(fn: Callable[[], T], *, what: str, attempts: int = 5, base_delay: float = 0.5) -> T:
    """Call ``fn`` retrying transient storage errors with exponential backoff and jitter."""
    for attempt in range(1, attempts + 1):
        try:
            return fn()
        except _PERMANENT:
            raise
        except (OSError, ConnectionError, TimeoutError) as exc:
            if attempt == attempts:
                raise
            delay = base_delay * 2 ** (attempt - 1)
            log.warning("%s failed (%s); retry %d/%d in ~%.1fs", what, exc, attempt, attempts - 1, delay)
            time.sleep(random.uniform(delay / 2, delay))
    raise AssertionError("unreachable")


class Storage:
    """A folder addressed by URL, with the handful of operations the pipeline needs."""

    def __init__(self, url: str, storage_options: dict[str, Any] | None = None) -> None:
        self.url = url.rstrip("/") or url
        # fsspec may mutate the options it is given; keep the caller's dict untouched.
        self.fs, self.root = fsspec.core.url_to_fs(self.url, **dict(storage_options or {}))
        self.root = self.root.rstrip("/") or "/"

    @property
    def is_local(self) -> bool:
        """True when writes can use rename for atomicity."""
        return isinstance(self.fs, LocalFileSystem)

    def path(self, *parts: str) -> str:
        """The filesystem path of ``parts`` under this folder."""
        return posixpath.join(self.root, *parts)

    def display(self, path: str) -> str:
        """A user-facing URL for ``path`` (for messages)."""
        if self.is_local:
            return path
        return self.fs.unstrip_protocol(path)

    def child(self, *parts: str) -> Storage:
        """A Storage rooted at a sub-folder, sharing this one's filesystem."""
        sub = object.__new__(Storage)
        sub.fs = self.fs
        sub.root = self.path(*parts)
        sub.url = posixpath.join(self.url, *parts)
        return sub

    def exists(self, path: str) -> bool:
        """Whether ``path`` exists."""
        return retry_io(lambda: self.fs.exists(path), what=f"checking {self.display(path)}")

    def glob(self, *parts: str) -> list[str]:
        """Sorted paths matching a glob under this folder (an absent folder matches nothing)."""
        pattern = self.path(*parts)
        try:
            self.fs.invalidate_cache()
            found = retry_io(lambda: self.fs.glob(pattern), what=f"listing {self.display(pattern)}")
        except FileNotFoundError:
            return []
        return sorted(str(p) for p in found)

    def read_bytes(self, path: str) -> bytes:
        """The whole content of ``path``."""
        return retry_io(lambda: self.fs.cat_file(path), what=f"reading {self.display(path)}")

    def write_atomic(self, path: str, data: bytes) -> None:
        """Write ``data`` so that readers see either nothing or all of it, never a prefix."""
        if self.is_local:
            os.makedirs(posixpath.dirname(path), exist_ok=True)
            tmp = f"{path}.{uuid.uuid4().hex[:8]}.tmp"
            with open(tmp, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, path)
            return
        retry_io(lambda: self.fs.pipe_file(path, data), what=f"writing {self.display(path)}")

    def delete(self, path: str) -> None:
        """Remove ``path`` if it exists."""
        try:
            retry_io(lambda: self.fs.rm_file(path), what=f"deleting {self.display(path)}")
        except FileNotFoundError:
            pass
