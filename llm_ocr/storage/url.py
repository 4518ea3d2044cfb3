"""One storage door for every URL: local paths, ``s3://``, ``gs://``, ``hf://``, ``memory://``.

Everything goes through fsspec; nothing here branches on the URL scheme. The only
distinction is made on the filesystem's *capability*: a local filesystem can rename, so an
atomic write is "temporary file, then rename"; object stores publish an object only when its
upload completes, so a single put is already atomic.

:meth:`Storage.create_exclusive` is the one atomic create-if-absent (work claims, see
docs/stragglers.md): a hard link of a complete temporary file on local disk (``link(2)`` fails
with ``EEXIST`` when the name exists), ``PutObject`` with ``If-None-Match: *`` on S3 and an upload
with ``ifGenerationMatch=0`` on GCS (both through fsspec's ``mode="create"``), a commit whose
``parent_commit`` is the head it checked on the Hub (:mod:`.hub`).
"""

from __future__ import annotations

import fnmatch
import importlib
import logging
import os
import posixpath
import threading
import uuid
from collections.abc import Callable
from typing import Any

import fsspec
from fsspec.implementations.local import LocalFileSystem

from llm_ocr.storage.retry import retry_io
from llm_ocr.storage.sinks import BatchingSink, Committer, DirectSink, PartSink, batching_sink
from llm_ocr.storage.stores import StorageError, redact, store_options

__all__ = ["Storage"]

log = logging.getLogger("llm_ocr.storage")

#: Filesystem classes in which every write is a commit, by import path, with the import path of
#: their committer's factory. Matching by class path keeps store clients out of this module's
#: imports; the committer is imported only when such a filesystem is opened.
COMMITTING_FILESYSTEMS: dict[str, str] = {
    "huggingface_hub.hf_file_system.HfFileSystem": "llm_ocr.storage.hub:HubCommitter",
}


#: Filesystem classes whose ``pipe_file(..., mode="create")`` is atomic on the server: s3fs sends
#: ``PutObject`` with ``If-None-Match: *`` and gcsfs uploads with ``ifGenerationMatch=0``; either
#: raises ``FileExistsError`` when the object exists (s3fs ``_pipe_file``, gcsfs ``simple_upload``
#: and ``retry.validate_response``). fsspec's generic ``pipe_file`` checks, then writes: not atomic.
EXCLUSIVE_CREATE_FILESYSTEMS = frozenset({"s3fs.core.S3FileSystem", "gcsfs.core.GCSFileSystem"})
#: ``memory://`` (tests, notebooks) lives in one process: a lock makes its check-then-write atomic.
_MEMORY_FILESYSTEM = "fsspec.implementations.memory.MemoryFileSystem"
_memory_lock = threading.Lock()


def _class_paths(fs: Any) -> set[str]:
    return {f"{cls.__module__}.{cls.__qualname__}" for cls in type(fs).__mro__}


def _committer_factory(fs: Any) -> Callable[[Any], Committer] | None:
    for cls in type(fs).__mro__:
        target = COMMITTING_FILESYSTEMS.get(f"{cls.__module__}.{cls.__qualname__}")
        if target is not None:
            module, _, name = target.partition(":")
            return getattr(importlib.import_module(module), name)
    return None


class Storage:
    """A folder addressed by URL, with the handful of operations the pipeline needs."""

    def __init__(self, url: str, storage_options: dict[str, Any] | None = None) -> None:
        self.url = url.rstrip("/") or url
        # store_options: a copy (fsspec may mutate it) of the flat keys plus this protocol's entry.
        options = store_options(self.url, storage_options)
        log.debug("opening %s with storage options %s", self.url, redact(options))
        self.fs, self.root = fsspec.core.url_to_fs(self.url, **options)
        self.root = self.root.rstrip("/") or "/"
        self.sink: PartSink = self._make_sink()

    def _make_sink(self) -> PartSink:
        # Capability, not scheme: where every write is a commit (the Hub), writes are batched.
        direct = DirectSink(self._write_now, self._delete_now)
        factory = _committer_factory(self.fs)
        return batching_sink(self.fs, direct, factory) if factory is not None else direct

    @property
    def batches_writes(self) -> bool:
        """True when writes are queued into commits and visible only after :meth:`flush`."""
        return isinstance(self.sink, BatchingSink)

    def flush(self) -> None:
        """Make every write so far visible (a no-op where writes are immediate)."""
        self.sink.flush()

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
        sub.sink = self.sink
        return sub

    def exists(self, path: str) -> bool:
        """Whether ``path`` exists."""
        return retry_io(lambda: self.fs.exists(path), what=f"checking {self.display(path)}")

    def glob(self, *parts: str) -> list[str]:
        """Sorted paths matching a glob under this folder (an absent folder matches nothing)."""
        if self.is_local:
            return self._glob_local(parts)
        pattern = self.path(*parts)
        try:
            self.fs.invalidate_cache()
            found = retry_io(lambda: self.fs.glob(pattern), what=f"listing {self.display(pattern)}")
        except FileNotFoundError:
            return []
        return sorted(str(p) for p in found)

    def _glob_local(self, parts: tuple[str, ...]) -> list[str]:
        """:meth:`glob` on local disk: one directory listing per folder the pattern reaches, the
        names matched as fsspec's glob matches them (``*`` and ``?`` within one name, ``[...]``,
        names that start with a dot too; a folder whose own name looks like a pattern is a name,
        where fsspec's glob found nothing in it), and nothing else read. fsspec's glob stats every
        entry: 27 ms of CPU for a claims folder of 2,400 files, listed for each of 7 other shards
        at every group a process takes (docs/stragglers.md: 800 groups a shard)."""
        found = [self.root]
        for part in "/".join(parts).split("/"):
            if not part:
                continue
            reached = []
            for base in found:
                if not any(c in part for c in "*?["):
                    if os.path.lexists(path := posixpath.join(base, part)):
                        reached.append(path)
                    continue
                try:
                    names = os.listdir(base)
                except (FileNotFoundError, NotADirectoryError):
                    continue
                reached += [posixpath.join(base, name) for name in fnmatch.filter(names, part)]
            found = reached
        return sorted(found)

    def read_bytes(self, path: str) -> bytes:
        """The whole content of ``path``."""
        return retry_io(lambda: self.fs.cat_file(path), what=f"reading {self.display(path)}")

    def write_atomic(self, path: str, data: bytes) -> None:
        """Write ``data`` so that readers see either nothing or all of it, never a prefix.

        Goes through :attr:`sink`: at once on local disk and object stores, batched into
        commits on the Hub (visible after :meth:`flush`, in the order written).
        """
        self.sink.put(path, data)

    def write_now(self, path: str, data: bytes) -> None:
        """:meth:`write_atomic`, visible at once also where writes are batched (on the Hub, a
        commit of its own: for the few small files others must see now, such as claims)."""
        if isinstance(self.sink, BatchingSink):
            self.sink.put_now(path, data)
        else:
            self.sink.put(path, data)

    def _write_now(self, path: str, data: bytes) -> None:
        if self.is_local:
            os.makedirs(posixpath.dirname(path), exist_ok=True)
            tmp = f"{path}.{uuid.uuid4().hex[:8]}.tmp"
            with open(tmp, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, path)
            return
        # S3 and GCS publish an object only when its upload completes, also for the multipart
        # (s3fs, >= 100 MB) and resumable (gcsfs, >= 50 MB) uploads pipe_file uses for large
        # payloads; tests/e2e/storage/test_storage_stores.py pins that a concurrent reader never sees a prefix.
        retry_io(lambda: self.fs.pipe_file(path, data), what=f"writing {self.display(path)}")

    @property
    def exclusive_create(self) -> str | None:
        """How :meth:`create_exclusive` is atomic here (for messages), or None where it cannot be."""
        if self.is_local:
            return "a hard link of a complete temporary file (link fails when the name exists)"
        classes = _class_paths(self.fs)
        if classes & EXCLUSIVE_CREATE_FILESYSTEMS:
            return "a conditional put (S3 If-None-Match: *, GCS ifGenerationMatch=0)"
        if _MEMORY_FILESYSTEM in classes:
            return "a lock (one process)"
        if isinstance(self.sink, BatchingSink) and self.sink.committer.batches(self.root):
            return "a commit conditional on the head it checked (parent_commit)"
        return None

    def create_exclusive(self, path: str, data: bytes) -> bool:
        """Create ``path`` holding ``data`` if no file has that name: True when this call created
        it, False when it existed. Atomic on the store itself, so of any number of processes on
        any machines racing to create one name, exactly one gets True (:attr:`exclusive_create`
        says how; a store where it cannot be raises :class:`StorageError`).

        A create whose answer was lost and was retried finds its own file: it counts as created
        when the file holds exactly ``data`` (callers make ``data`` unique, e.g. with a token).
        The file is visible at once, also on the Hub (a commit of its own, not batched).
        """
        if self.is_local:
            return self._create_local(path, data)
        classes = _class_paths(self.fs)
        if classes & EXCLUSIVE_CREATE_FILESYSTEMS:
            return self._create_remote(path, data)
        if _MEMORY_FILESYSTEM in classes:
            with _memory_lock:
                if self.fs.exists(path):
                    return bool(self.fs.cat_file(path) == data)
                self.fs.pipe_file(path, data)
                return True
        if isinstance(self.sink, BatchingSink) and self.sink.committer.batches(path):
            return self.sink.committer.create_exclusive(path, data)
        raise StorageError(
            f"cannot create files atomically in {self.display(self.root)}: work claims need local disk, S3, Google "
            "Cloud Storage or a Hugging Face Hub repo as the output (run with --no-steal)"
        )

    def _create_local(self, path: str, data: bytes) -> bool:
        os.makedirs(posixpath.dirname(path), exist_ok=True)
        tmp = f"{path}.{uuid.uuid4().hex[:8]}.tmp"
        with open(tmp, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        try:
            # link(2) creates the name only if it is free, and the file it names is already
            # complete: a reader never sees it half-written (O_EXCL then write would show that).
            os.link(tmp, path)
            return True
        except FileExistsError:
            return False
        finally:
            os.unlink(tmp)

    def _create_remote(self, path: str, data: bytes) -> bool:
        try:
            retry_io(lambda: self.fs.pipe_file(path, data, mode="create"), what=f"writing {self.display(path)}")
            return True
        except FileExistsError:
            # Also the answer to a retry of a create that landed while its answer was lost.
            try:
                return self.read_bytes(path) == data
            except FileNotFoundError:
                return False

    def delete(self, path: str) -> None:
        """Remove ``path`` if it exists (through :attr:`sink`, like writes)."""
        self.sink.delete(path)

    def _delete_now(self, path: str) -> None:
        try:
            retry_io(lambda: self.fs.rm_file(path), what=f"deleting {self.display(path)}")
        except FileNotFoundError:
            pass
