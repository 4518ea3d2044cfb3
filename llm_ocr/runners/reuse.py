"""What a long-lived caller keeps open across many runs (the service's worker reads each document
as a run of its own): model endpoints with their in-flight limits, the render pool, the served
model's context length. A run's stages use them instead of opening their own, and leave them open.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any

from llm_ocr.runners.workers import WorkerPool
from llm_ocr.serving.in_flight import RunLimits
from llm_ocr.serving.open import Endpoint


class ContextLength:
    """The served model's context length (``/v1/models``' ``max_model_len``) for a long-lived
    caller's runs: read at most once every ``ttl`` seconds, not twice per run (Extract's and
    Describe's contexts each asked). The service's worker makes a run per document: two requests
    to the model server beside each one-page document's page, CPU taken from a server that shares
    the machine. Read again after ``ttl`` so that a server restarted with another context is seen."""

    def __init__(self, client: Any, ttl: float = 60.0) -> None:
        self.client = client
        self.ttl = ttl
        self._value: int | None = None
        self._read_at: float | None = None
        #: One read at a time: the documents a worker opens at once would otherwise all ask.
        self._lock = asyncio.Lock()

    async def __call__(self) -> int | None:
        """The context length, read from the endpoint when not read within ``ttl`` seconds."""
        async with self._lock:
            if self._read_at is None or time.monotonic() - self._read_at >= self.ttl:
                self._value = await self.client.max_model_len()
                self._read_at = time.monotonic()
            return self._value


@dataclass
class Reuse:
    """What a long-lived caller keeps open across many runs (the service's worker reads each
    document as a run of its own): the model endpoint (its client, connections, crash tracker)
    and the render pool. A run uses them instead of opening its own, and leaves them open."""

    #: Used by runs of its model (a run of another model opens its own).
    endpoint: Endpoint | None = None
    pool: WorkerPool | None = None
    #: The in-flight limits of every run on :attr:`endpoint`: the runs at once share its slots
    #: (None: each run sizes its own).
    limits: RunLimits | None = None
    #: True when the caller checked that the runs' outputs can be written (the service's worker
    #: checks its results folder once): a run then writes no probe file of its own.
    writable_checked: bool = False
    #: The context length of :attr:`endpoint`'s model, read once for many runs (None: each run asks).
    context_length: ContextLength | None = None
    #: False: the runs write no progress file (``OUT/_state/progress``): the service's documents
    #: are followed through its queue, and the file cost two writes with ``fsync`` a document.
    progress_files: bool = True
    #: The stronger model's, for the Escalate stage of an escalating run (``--escalate-to``): its
    #: endpoint and limits, shared by every run as :attr:`endpoint`'s are (None: each escalating
    #: run opens the stronger model's endpoint and sizes its limits for itself).
    escalate: Reuse | None = None

    def serving(self, model: str) -> Endpoint | None:
        """:attr:`endpoint` if it serves ``model`` (a stage of another model opens its own)."""
        return self.endpoint if self.endpoint is not None and self.endpoint.client.model == model else None

    @contextlib.asynccontextmanager
    async def endpoint_for(
        self, model: str, opener: Callable[[], AbstractAsyncContextManager[Endpoint]]
    ) -> AsyncIterator[Endpoint]:
        """The kept endpoint when it serves ``model`` (left open), else the one ``opener`` opens
        (closed on the way out)."""
        kept = self.serving(model)
        if kept is not None:
            yield kept
            return
        async with opener() as endpoint:
            yield endpoint

    def work_options(self, endpoint: Endpoint) -> dict[str, Any]:
        """:class:`~llm_ocr.runners.lifecycle.PageWork`'s options for a stage on ``endpoint``: on
        the kept one, its shared limits (fixed: no run sizes them for itself); the render pool and
        the progress file's choice either way."""
        kept = self.endpoint is not None and endpoint is self.endpoint
        return {"pool": self.pool, "adapt": not kept, "limits": self.limits if kept else None,
                "progress_file": self.progress_files}

    def context_of(self, endpoint: Endpoint) -> Callable[[], Awaitable[int | None]] | None:
        """Where a stage on ``endpoint`` reads the served model's context length (None: asks it)."""
        return self.context_length if self.endpoint is not None and endpoint is self.endpoint else None
