"""Every stage of llm-ocr, declared once: the table the Python API, the command line, the
launchers and the keyword types (``scripts/keyword_types.py``) read.

A :class:`Stage` says what the stage is called, which option groups it takes (by
:class:`~llm_ocr.options.StageSpec` attribute, in ``--help`` order) and which of their options
it has no use for, whether it reads INPUTs (else it reads OUT), the stage folders whose
completion markers mark a shard of it done, its runner, and what ``llm-ocr --help``,
``llm-ocr STAGE --help`` and ``help(llm_ocr.STAGE)`` say of it, what each exit code means for it
included.

The runner is named by its import path (``module:function``) and imported only when the stage
runs: listing the stages (``llm-ocr --help``, the launchers) imports no runner. Like
:mod:`llm_ocr.options`, this module imports nothing but the option models (and the exit codes),
so every layer may read it.

Adding a stage is an entry in :data:`STAGES`, its runner module (a
:class:`~llm_ocr.runners.lifecycle.ShardStage`) and its options model (``options.py``); docs/
architecture.md#adding-a-stage says what follows from it.
"""

from __future__ import annotations

import importlib
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING

from pydantic import BaseModel

from llm_ocr.options import GROUPS
from llm_ocr.outcomes import ExitCode

if TYPE_CHECKING:
    import asyncio

    from llm_ocr.options import StageSpec
    from llm_ocr.runners.shard import ShardOutcome

#: What a runner is: ``(spec, stop) -> the outcome of the stage over this process's shard``.
StageRunner = Callable[["StageSpec", "asyncio.Event | None"], Awaitable["ShardOutcome"]]

#: What each exit code means for a stage whose rows are pages, in the words ``--help`` ends with.
PAGE_EXIT_STATUS: Mapping[ExitCode, str] = MappingProxyType({
    ExitCode.OK: "every page ok or truncated",
    ExitCode.PAGES_FAILED: "finished but some pages failed",
    ExitCode.COULD_NOT_RUN: "could not run (bad options, inputs, output or endpoint)",
    ExitCode.INTERRUPTED: "interrupted (rerun to resume)",
})


@dataclass(frozen=True)
class Stage:
    """One stage: its options, what it reads and writes, its runner, and how it is described."""

    #: The command (``llm-ocr NAME``) and the API function (``llm_ocr.NAME``).
    name: str
    #: Its option groups, by :class:`~llm_ocr.options.StageSpec` attribute, in ``--help`` order.
    groups: tuple[str, ...]
    #: The coroutine function that runs it over one shard, as ``module:function``.
    runner: str
    #: The stage folders it writes, in order: a shard is done when each has its completion
    #: marker; the first one's rows are those a launch's table counts.
    markers: tuple[str, ...]
    #: One line in ``llm-ocr --help``.
    summary: str
    #: ``llm-ocr NAME --help``'s description.
    description: str
    #: The docstring of ``llm_ocr.NAME``.
    doc: str
    #: It reads INPUTs (files, folders, URLs, a dataset); else it reads OUT.
    reads_inputs: bool = False
    #: Options of its groups it has no use for.
    excluded: frozenset[str] = frozenset()
    #: What each exit code means for it, in the words ``llm-ocr NAME --help`` ends with.
    exit_status: Mapping[ExitCode, str] = field(default_factory=lambda: PAGE_EXIT_STATUS)

    def __post_init__(self) -> None:
        missing = [code.name for code in ExitCode if code not in self.exit_status]
        if missing:
            raise ValueError(f"stage {self.name!r} does not say what exit codes {', '.join(missing)} mean")

    @property
    def epilog(self) -> str:
        """``exit status: 0 ...; 1 ...; 2 ...; 3 ....``: what ``llm-ocr NAME --help`` ends with."""
        return "exit status: " + "; ".join(f"{code.value} {self.exit_status[code]}" for code in ExitCode) + "."

    def models(self) -> dict[str, type[BaseModel]]:
        """Its option models, by :class:`~llm_ocr.options.StageSpec` attribute."""
        return {group: GROUPS[group] for group in self.groups}

    def option_names(self) -> list[str]:
        """Every option it takes (the command line's long options in snake_case), in ``--help`` order."""
        return [name for model in self.models().values() for name in model.model_fields if name not in self.excluded]

    @property
    def primary(self) -> str:
        """The stage folder whose rows count its pages (or documents): ``run`` counts Extract's."""
        return self.markers[0]

    def load_runner(self) -> StageRunner:
        """Its runner, imported now (the heavy part)."""
        module, _, function = self.runner.partition(":")
        runner: StageRunner = getattr(importlib.import_module(module), function)
        return runner


#: Every stage, in the order the command line lists them.
STAGES: dict[str, Stage] = {
    stage.name: stage
    for stage in (
        Stage(
            "run",
            ("job", "server", "render", "dataset", "extract", "route", "steal", "escalate", "describe", "assemble",
             "fields", "client"),
            "llm_ocr.runners.run:run_shard",
            markers=("extract", "describe", "assemble"),
            reads_inputs=True,
            summary="all stages in one process: OCR, figure descriptions, assembled documents",
            description="Run Extract -> Describe -> Assemble over this shard of the inputs against one endpoint: "
            "each page is described in memory right after its OCR; writes OUT/extract, OUT/describe and "
            "OUT/assemble; with --schema or --classes, then Fields (OUT/fields) on the same endpoint. With "
            "--escalate-to MODEL, Extract, then Escalate (OUT/escalate: the pages whose first reading trips "
            "--escalate-on, read again by MODEL), then Describe and Assemble.",
            doc="Extract, Describe and Assemble over this process's shard of ``inputs`` into ``output``\n"
            "(``llm-ocr run``); with ``schema=`` (or ``classes=``), then Fields. Rerunning resumes.\n"
            "Raises :class:`RunError` when it cannot run.",
        ),
        Stage(
            "extract",
            ("job", "server", "render", "dataset", "extract", "route", "steal", "client"),
            "llm_ocr.runners.extract:extract_shard",
            markers=("extract",),
            reads_inputs=True,
            summary="page images -> the OCR model -> Markdown, layout blocks and figure crops (OUT/extract)",
            description="Run the Extract stage over this shard of the inputs.",
            doc="Extract over this process's shard of ``inputs`` into ``output/extract`` (``llm-ocr extract``).",
        ),
        Stage(
            "escalate",
            ("job", "server", "render", "dataset", "extract", "escalate", "client"),
            "llm_ocr.runners.escalate:escalate_shard",
            markers=("escalate",),
            # The stage's model is --model (the stronger one); the dataset row is named by its doc_id.
            # Its pages come from rows, in their order (no look-ahead).
            excluded=frozenset({"escalate_to", "escalate_endpoint", "escalate_api_key", "escalate_server_args",
                                "config", "split", "retry_quarantined", "look_ahead", "look_ahead_mb",
                                "estimate_ahead", "dedup", "dedup_index"}),
            summary="pages of OUT/extract whose reading trips --escalate-on -> read again by --model (OUT/escalate)",
            description="Run the Escalate stage over this shard of OUT/extract: every page whose first reading "
            "trips one of the --escalate-on signals is rendered again and read by --model (a stronger model); "
            "OUT/escalate gets every page row, the reading used in each (Describe and Assemble read it).",
            doc="Escalate the pages of ``output/extract`` whose reading trips ``escalate_on`` to ``model``,\n"
            "into ``output/escalate`` (``llm-ocr escalate``).",
        ),
        Stage(
            "describe",
            ("job", "server", "describe", "client"),
            "llm_ocr.runners.describe:describe_shard",
            markers=("describe",),
            excluded=frozenset({"workers"}),
            summary="figure crops of OUT/extract -> VLM descriptions (OUT/describe)",
            description="Run the Describe stage over this shard of OUT/extract: every figure without a description "
            "is sent to a vision-language model and the answer stored on the figure.",
            doc="Describe the figures of ``output/extract`` into ``output/describe`` (``llm-ocr describe``).",
        ),
        Stage(
            "assemble",
            ("job", "assemble"),
            "llm_ocr.runners.assemble:assemble_shard",
            markers=("assemble",),
            # Assemble runs no model server and renders nothing.
            excluded=frozenset({
                "endpoint", "model", "recipe", "api_key", "max_in_flight", "workers", "grace_period", "flush_interval",
                "progress", "progress_interval",
            }),
            summary="pages of OUT/describe (else OUT/extract) -> one Markdown document each (OUT/assemble)",
            description="Run the Assemble stage over this shard: each document's pages in order, figures linked "
            "with their captions. CPU only; no model server.",
            doc="Assemble the pages of ``output`` into one row per document in ``output/assemble``\n"
            "(``llm-ocr assemble``); CPU only.",
            exit_status={
                ExitCode.OK: "every document ok",
                ExitCode.PAGES_FAILED: "finished but some documents are partial or failed, or the upstream stage is "
                "not finished yet",
                ExitCode.COULD_NOT_RUN: "could not run",
                ExitCode.INTERRUPTED: "interrupted (rerun to resume)",
            },
        ),
        Stage(
            "fields",
            ("job", "server", "render", "dataset", "fields", "client"),
            "llm_ocr.runners.fields:fields_shard",
            markers=("fields",),
            # Fields re-reads a dataset row's images for --from images: the doc_id names its config
            # and split, only the image column may need saying again.
            excluded=frozenset({"workers", "config", "split"}),
            summary="documents of OUT/assemble -> fields validated against a schema (OUT/fields)",
            description="Run the Fields stage over this shard of OUT/assemble: each document is classified (with "
            "--classes), its fields extracted by a model with structured outputs, validated against the schema "
            "and its checks, and every value looked up in the document's text.",
            doc="Fields of the documents of ``output/assemble`` into ``output/fields`` (``llm-ocr fields``):\n"
            "give ``schema=`` (a JSON Schema file, inline JSON, or ``\"package.module:Model\"``) or\n"
            "``classes=`` (a classes file). A schema that cannot be used raises :class:`RunError` before\n"
            "any request; ``result.documents`` counts the rows by status (``ok``, ``invalid``, ``error``).",
            exit_status={
                ExitCode.OK: "every document's fields are ok (or it is of no known class)",
                ExitCode.PAGES_FAILED: "finished but some documents' fields are invalid or failed (rerun to retry the "
                "failed ones), or Assemble is not finished yet",
                ExitCode.COULD_NOT_RUN: "could not run (a schema or classes file that cannot be used, bad options, "
                "unwritable output, endpoint down)",
                ExitCode.INTERRUPTED: "interrupted (rerun to resume)",
            },
        ),
    )
}

#: The order of the stage folders a page goes through (Escalate's rows replace Extract's downstream).
_PIPELINE = ("extract", "escalate", "describe", "assemble", "fields")

#: Every stage folder of OUT that holds rows (``llm_ocr.load`` reads them), in pipeline order.
STAGE_FOLDERS: tuple[str, ...] = tuple(sorted(
    dict.fromkeys(folder for stage in STAGES.values() for folder in stage.markers),
    key=lambda folder: _PIPELINE.index(folder) if folder in _PIPELINE else len(_PIPELINE),
))


def stage_named(name: str) -> Stage:
    """The stage called ``name``; ``ValueError`` naming the stages otherwise."""
    try:
        return STAGES[name]
    except KeyError:
        raise ValueError(f"stage must be one of {', '.join(STAGES)} (got {name!r})") from None
