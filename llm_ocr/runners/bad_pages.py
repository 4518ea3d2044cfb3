"""One bad page costs one page: what the page-flow runners wrap around their page handler.

* The endpoint's crash tracker (:mod:`llm_ocr.serving.quarantine`) guards every page: a page convicted
  of crashing the model server gets an ``error`` row with ``quarantined`` set, and the run goes
  on. That row is the quarantine's record: a rerun keeps it (``--retry-quarantined`` opts back in).
* A PDF page that ends as an error or truncated gets its PDF text layer as ``fallback_text`` when
  the layer reads as English (:mod:`llm_ocr.sources.text_layer`), read in a worker process.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

from llm_ocr.outcomes import ExitCode, PageStats
from llm_ocr.records import PageResult
from llm_ocr.runners.workers import WorkerPool
from llm_ocr.serving.quarantine import CrashTracker, PageQuarantined
from llm_ocr.sources.base import DocumentRef, PageFailure, PageImage
from llm_ocr.sources.text_layer import TextLayer, read_text_layer
from llm_ocr.stages.extract import ExtractOptions, failure_result
from llm_ocr.stages.fallback import with_fallback
from llm_ocr.storage.parts import ShardIndex

log = logging.getLogger("llm_ocr")

R = TypeVar("R")
RefT = TypeVar("RefT", bound=DocumentRef)
ItemT = TypeVar("ItemT", bound=PageImage | PageFailure)


class BadPages:
    """Quarantine rows and text-layer fallbacks for one shard's page flow."""

    def __init__(
        self, tracker: CrashTracker | None, pool: WorkerPool, options: ExtractOptions, storage_options: dict[str, Any]
    ) -> None:
        self.tracker = tracker
        self.pool = pool
        self.options = options
        self.storage_options = storage_options

    async def read_layer(self, location: str, page: int) -> TextLayer:
        """Read and judge a PDF page's text layer in a worker (pypdfium2 is not thread-safe)."""
        try:
            return await self.pool.run(read_text_layer, location, page, self.storage_options)
        except Exception as exc:  # noqa: BLE001 - a fallback must never fail its page
            return TextLayer(None, f"PDF text layer rejected: could not read it ({type(exc).__name__}: {exc})")

    async def fallback(self, ref: DocumentRef, page: PageResult) -> PageResult:
        """``page`` with its text-layer fallback when it is a failed or truncated PDF page."""
        if not self.options.text_layer_fallback:
            return page
        return await with_fallback(ref, page, self.read_layer)

    async def quarantined(
        self, ref: DocumentRef, item: PageImage | PageFailure, num_pages: int | None, exc: PageQuarantined
    ) -> PageResult:
        """The row of a page convicted of crashing the server (attempts: the crashes it was at)."""
        row = failure_result(ref, item.page, exc.message, num_pages, attempts=exc.crashes)
        row.quarantined = True
        return await self.fallback(ref, row)

    def guard(
        self,
        handler: Callable[[RefT, ItemT, int | None], Awaitable[R]],
        on_quarantine: Callable[[RefT, ItemT, int | None, PageQuarantined], Awaitable[R]],
    ) -> Callable[[RefT, ItemT, int | None], Awaitable[R]]:
        """``handler`` with its pages tracked; a conviction becomes ``on_quarantine``'s result
        (:meth:`quarantined`, for a handler that returns one row)."""
        if self.tracker is None:
            return handler
        return self.tracker.guard(handler, on_quarantine)


def quarantined_in(marker: Mapping[str, Any] | None) -> int:
    """Quarantined pages a completion marker records (this run's and those kept from earlier)."""
    return PageStats.model_validate(marker).quarantined if marker else 0


def marker_settles(marker: Mapping[str, Any] | None, options: ExtractOptions) -> bool:
    """Whether an Extract completion marker means there is nothing left to do: no error rows,
    and no quarantined ones when ``--retry-quarantined`` asks for them again."""
    if not marker:
        return False
    stats = PageStats.model_validate(marker)
    return not stats.errors and not (options.retry_quarantined and stats.quarantined)


def extract_settles(marker: Mapping[str, Any] | None, options: ExtractOptions) -> ExitCode | None:
    """The exit code of an Extract shard its marker settles (1 when it holds quarantined rows),
    else None (see :func:`marker_settles`)."""
    if not marker_settles(marker, options):
        return None
    return ExitCode.PAGES_FAILED if quarantined_in(marker) else ExitCode.OK


def describe_settles(marker: Mapping[str, Any] | None, extract_marker: Mapping[str, Any] | None) -> bool:
    """Whether a Describe completion marker means there is nothing left to do: no error rows, and
    its quarantined rows are Extract's (a page Extract retried and read since must be described)."""
    if not marker or PageStats.model_validate(marker).errors:
        return False
    return quarantined_in(marker) == quarantined_in(extract_marker)


def note_retried(index: ShardIndex) -> None:
    """Log the error rows of earlier runs a shard is about to retry."""
    if index.dropped_error_rows:
        log.info("retrying %d failed page(s) from earlier runs", index.dropped_error_rows)


def note_kept(index: ShardIndex) -> None:
    """Log the quarantined rows a shard keeps from earlier runs."""
    if index.kept_quarantined:
        log.warning(
            "keeping %d quarantined page(s) from earlier runs (the model server crashed on them); "
            "--retry-quarantined tries them again", index.kept_quarantined,
        )
