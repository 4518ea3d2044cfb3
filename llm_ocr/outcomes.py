"""How a stage's run ends, as types every layer shares.

- :class:`RunError`: the run could not run or had to stop. The runners raise it, the command
  line logs it and exits 2, the Python API raises it to the caller.
- :class:`ExitCode`: how the run ended, a number with its meaning: the command line's exit
  status and :attr:`llm_ocr.Result.exit_code` (an ``int``: ``result.exit_code == 0`` holds).
  The numbers are a contract: shells, the platforms' retry policies and relaunches read them.
  (An outcome as an enum that names each case, as docling's ``ConversionStatus`` does in
  ``docling/datamodel/base_models.py``.)
- :class:`PageStats`, :class:`AssembleStats`, :class:`FieldsStats`: typed views of a completion
  marker. The marker is the JSON the runners write (``OUT/_state/STAGE/done-*.json``), read by
  relaunches, ``llm-ocr jobs status`` and older outputs; its format stays what it is. Reading
  it through :func:`stage_stats` (or a view's ``model_validate``) gives typed counts, with the defaults a marker lacks,
  instead
  of ``.get(...) or {}`` chains; keys the views do not name are kept (``extra``).

This module imports nothing of llm-ocr: the runners, the API, the command line and the
launchers all use it.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import IntEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class RunError(Exception):
    """The run could not start, or had to stop (exit code 2): the message says why and what to do.
    Completed pages are kept; running it again resumes."""


class ExitCode(IntEnum):
    """How a stage's run over a shard ended (:attr:`meaning` says it in words)."""

    #: Every page ok or truncated (every document ok, for Assemble and Fields).
    OK = 0
    #: Finished, but some pages failed, or an upstream stage is not finished: run again to retry them.
    PAGES_FAILED = 1
    #: Could not run (bad options, inputs, output or endpoint): the error says why.
    COULD_NOT_RUN = 2
    #: Interrupted (SIGTERM, SIGINT, a notebook's stop button): completed rows are kept, run again to resume.
    INTERRUPTED = 3

    @property
    def meaning(self) -> str:
        """The exit code in words."""
        return _MEANINGS[self]

    def __str__(self) -> str:
        # The number, as an int prints (Python 3.10's IntEnum would print "ExitCode.OK").
        return str(self.value)

    def __repr__(self) -> str:
        # Shown as the number it is, as before it was an enum (a notebook shows result.exit_code
        # as 0, and a Result as exit_code=0); .name and .meaning say it in words.
        return str(self.value)


_MEANINGS = {
    ExitCode.OK: "every page ok or truncated",
    ExitCode.PAGES_FAILED: "finished, but some pages failed or an upstream stage is not finished (run again to retry "
                           "them)",
    ExitCode.COULD_NOT_RUN: "could not run",
    ExitCode.INTERRUPTED: "interrupted (run again to resume)",
}


class _View(BaseModel):
    # A view, not the format: keys it does not name are kept, none is required.
    model_config = ConfigDict(extra="allow")


class PageCounts(_View):
    """A page stage's rows of this run by status, and the pages earlier runs did (``skipped``)."""

    ok: int = 0
    truncated: int = 0
    error: int = 0
    quarantined: int = 0
    #: Quarantined rows kept from earlier runs (Extract).
    quarantined_earlier: int = 0
    #: With work groups: error and quarantined rows of this shard's groups that other processes
    #: read (other shards, or earlier runs), which a rerun of this shard retries like its own.
    error_read_elsewhere: int = 0
    quarantined_read_elsewhere: int = 0
    total: int = 0
    skipped: int = 0
    seen: int = 0

    def by_status(self) -> dict[str, int]:
        """The counts :attr:`llm_ocr.Result.pages` shows: the statuses, and ``skipped``."""
        return {"ok": self.ok, "truncated": self.truncated, "error": self.error, "quarantined": self.quarantined,
                "skipped": self.skipped}


class DocumentsSeen(_View):
    """The documents a page stage reached: finished this run, and done by earlier runs."""

    finished: int = 0
    skipped: int = 0


class PageStats(_View):
    """The completion marker of a page stage (Extract, Describe): one shard's pages."""

    stage: str = ""
    shard: int = 0
    num_shards: int = 1
    pages: PageCounts = Field(default_factory=PageCounts)
    documents: DocumentsSeen = Field(default_factory=DocumentsSeen)
    wall_time_s: float = 0.0
    #: The GPU time and its estimated price (:func:`llm_ocr.costs.gpu_cost`), when a model was used.
    gpu: dict[str, Any] | None = None
    #: Pages by the route of the reading their row holds (``text-layer``, ``model``, ``escalated``).
    routes: dict[str, int] = Field(default_factory=dict)
    #: Per model this stage used: pages it read, readings used, tokens, ``busy_s`` (its server's time).
    models: dict[str, dict[str, int | float]] = Field(default_factory=dict)

    @property
    def quarantined(self) -> int:
        """Quarantined pages it records: this run's and those kept from earlier runs."""
        return self.pages.quarantined + self.pages.quarantined_earlier + self.pages.quarantined_read_elsewhere

    @property
    def errors(self) -> int:
        """Rows that failed (a rerun retries them)."""
        return self.pages.error + self.pages.error_read_elsewhere


class AssembleCounts(_View):
    """Assemble's documents by status, and those earlier runs assembled."""

    ok: int = 0
    partial: int = 0
    error: int = 0
    skipped: int = 0


class AssembleStats(_View):
    """Assemble's completion marker: one shard's documents."""

    stage: str = "assemble"
    shard: int = 0
    num_shards: int = 1
    documents: AssembleCounts = Field(default_factory=AssembleCounts)
    #: The Markdown files were exported (``--export-markdown``).
    exported: bool = False
    #: The DoclingDocuments and chunks were written, every document's (``--chunks``).
    chunked: bool = False
    #: Which chunker wrote them (``--chunker``, its tokenizer and budget); absent: hierarchical.
    chunker: str | None = None
    wall_time_s: float = 0.0

    @property
    def errors(self) -> int:
        """Documents that failed."""
        return self.documents.error


class FieldsCounts(_View):
    """Fields' rows by status (``invalid``: a verdict on the document, kept), and earlier runs'."""

    ok: int = 0
    invalid: int = 0
    error: int = 0
    skipped: int = 0


class FieldsStats(_View):
    """Fields' completion marker: one shard's documents."""

    stage: str = "fields"
    shard: int = 0
    num_shards: int = 1
    documents: FieldsCounts = Field(default_factory=FieldsCounts)
    #: Rows made from documents Assemble had partial (redone by a rerun).
    documents_partial: int = 0
    #: The fingerprint of the schema (or classes) the rows were extracted with.
    fingerprint: str | None = Field(None, alias="schema")
    #: The exports written (``jsonl``, ``csv``).
    exported: list[str] = Field(default_factory=list)
    wall_time_s: float = 0.0
    gpu: dict[str, Any] | None = None

    @property
    def errors(self) -> int:
        """Rows that failed (a rerun retries them)."""
        return self.documents.error


#: The view of each stage folder's completion marker.
_VIEWS: dict[str, type[PageStats | AssembleStats | FieldsStats]] = {
    "extract": PageStats, "escalate": PageStats, "describe": PageStats, "assemble": AssembleStats,
    "fields": FieldsStats,
}


def stage_stats(marker: Mapping[str, Any] | None) -> PageStats | AssembleStats | FieldsStats | None:
    """The typed view of a completion marker (or of a stage's stats in a run's outcome), by the
    stage its ``stage`` key names; None for none, or for a stage without a view."""
    view = _VIEWS.get(str((marker or {}).get("stage")))
    return view.model_validate(marker) if view is not None else None
