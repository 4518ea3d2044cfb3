"""Retrying storage calls: transient failures are retried with backoff, the rest explained.

Every store operation of :class:`~llm_ocr.storage.url.Storage` and the Hub committer's checks go
through :func:`retry_io`, so throttling and network blips cost a short wait, not a run, and a
denied access says which store failed and what to set.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from typing import TypeVar

from llm_ocr.backoff import backoff_delay
from llm_ocr.storage.stores import StorageError, classify, explain, retry_after, scrub

__all__ = ["retry_io"]

log = logging.getLogger("llm_ocr.storage")

T = TypeVar("T")

# Errors callers rely on by type ("absent folder", "not a file"): raised as they are.
_PERMANENT = (FileNotFoundError, IsADirectoryError, NotADirectoryError, FileExistsError, ValueError)


def retry_io(
    fn: Callable[[], T], *, what: str, attempts: int | None = None, base_delay: float | None = None,
    max_delay: float = 30.0
) -> T:
    """Call ``fn`` retrying transient storage errors with exponential backoff and jitter.

    Transient means network failures, throttling and server errors as each store's client
    raises them (:func:`llm_ocr.storage.stores.classify`: botocore/s3fs ``SlowDown``, gcsfs
    ``HttpError`` 429/5xx, huggingface_hub ``HfHubHTTPError`` 429/5xx...). The budget is
    bounded: ``attempts`` (default ``LLM_OCR_STORAGE_RETRIES`` or 6) with delays doubling from
    ``base_delay`` (``LLM_OCR_STORAGE_RETRY_DELAY`` or 0.5 s) up to ``max_delay``, at least what
    a ``Retry-After`` header asks. When it is spent, or on denied access, :class:`StorageError`
    says which store failed and what to set; "not found"-like errors keep their type.
    """
    attempts = attempts or int(_env_number("LLM_OCR_STORAGE_RETRIES", 6))
    base_delay = base_delay if base_delay is not None else _env_number("LLM_OCR_STORAGE_RETRY_DELAY", 0.5)
    for attempt in range(1, attempts + 1):
        try:
            return fn()
        except _PERMANENT:
            raise
        except Exception as exc:  # classified below
            kind = classify(exc)
            if kind == "missing":
                raise FileNotFoundError(f"{what}: {scrub(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)}") from exc  # noqa: E501 - not wrapped yet
            if kind == "other":
                raise
            if kind == "access" or attempt == attempts:
                raise StorageError(_explain_what(exc, what)) from exc
            delay = max(backoff_delay(attempt, base_delay, max_delay), min(retry_after(exc) or 0.0, max_delay * 4))
            log.warning("%s failed (%s); retry %d/%d in ~%.1fs", what, scrub(str(exc)[:200]), attempt, attempts - 1,
                        delay)
            time.sleep(delay)
    raise AssertionError("unreachable")


def _env_number(name: str, default: float) -> float:
    try:
        return float(os.environ.get(name) or default)
    except ValueError:
        return default


def _explain_what(exc: BaseException, what: str) -> str:
    """``explain`` for a retry_io description such as ``"writing s3://b/out/x"``."""
    verb, _, url = what.partition(" ")
    action = {"writing": "write to", "reading": "read", "listing": "list", "checking": "read", "deleting": "delete"}
    return explain(exc, url or what, action.get(verb, verb))
