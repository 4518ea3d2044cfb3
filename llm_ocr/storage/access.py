"""Start-up access checks: fail before any GPU time, with a message that says what to set.

Inputs are checked by :func:`llm_ocr.sources.list_documents` (every INPUT is listed, and one
byte of a remote input read, before the first page is rendered); this module checks the output.
"""

from __future__ import annotations

import uuid

from llm_ocr.storage.stores import StorageError, explain
from llm_ocr.storage.url import Storage


def check_output(out: Storage) -> None:
    """Raise :class:`StorageError` unless ``out`` can be written.

    Where writes are plain puts, a probe file is written and removed (a unique name, so shards
    starting together do not trip over each other). Where every write is a commit (the Hub), the
    committer checks the right to write without committing, creates the repo if absent, and
    queues the dataset card (see :func:`llm_ocr.storage.hub.check_hub_output`).
    """
    committer_check = getattr(getattr(out.sink, "committer", None), "check_output", None)
    if committer_check is not None and committer_check(out):
        return
    probe_write(out)


def probe_write(out: Storage) -> None:
    """Write and remove a probe file under ``OUT/_state``; :class:`StorageError` if that fails."""
    probe = out.path("_state", f".write-probe-{uuid.uuid4().hex[:12]}")
    try:
        out.write_atomic(probe, b"ok")
        out.delete(probe)
    except StorageError:
        raise
    except Exception as exc:  # any failure here means "cannot write there"
        raise StorageError(explain(exc, out.url, "write to")) from exc

