"""The Python API: llm-ocr's stages from a program or a notebook, in this process.

::

    import llm_ocr

    result = llm_ocr.run("samples/", output="out", endpoint="http://gpu-box:8000/v1")
    result.exit_code, result.pages, result.documents, result.cost
    pages = llm_ocr.load("out", "describe")        # a datasets.Dataset, figure images decoded

Keyword arguments are the command line's long options in snake_case (``--max-in-flight`` is
``max_in_flight``), checked by the same typed models (:mod:`llm_ocr.options`) before any work
starts: a misspelt name or a bad value raises :class:`~llm_ocr.config.OptionError`. Options not
given come from the ``LLM_OCR_*`` environment variables, then the defaults, as on the command
line. ``llm-ocr run|extract|describe|assemble`` are these functions behind argparse.

A run works the same in a script and in Jupyter, where an event loop is already running: the
run then gets its own loop in a worker thread. Interrupting it (Ctrl-C, or the notebook's stop
button) stops it as SIGTERM stops the command: intake stops, the pages in flight finish within
``grace_period``, the parts are written, a launched server is stopped, and ``KeyboardInterrupt``
is raised; calling it again resumes. A second interrupt cancels the pages in flight at once.
Async code awaits :func:`arun`. In a notebook, progress is a bar, not log lines.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeAlias

from llm_ocr.config import Naming, OptionError, annotation_text, check_names, expand_aliases, resolve_options
from llm_ocr.options import StageSpec
from llm_ocr.outcomes import AssembleStats, ExitCode, FieldsStats, PageStats, RunError, stage_stats
from llm_ocr.stage_table import STAGE_FOLDERS, STAGES, Stage, stage_named

if TYPE_CHECKING:
    import datasets
    from typing_extensions import Unpack

    from llm_ocr.keywords import (
        AssembleKeywords,
        DescribeKeywords,
        EscalateKeywords,
        ExtractKeywords,
        FieldsKeywords,
        RunKeywords,
    )
    from llm_ocr.runners.shard import ShardOutcome
    from llm_ocr.storage.reconcile import Failures

__all__ = ["Result", "RunError", "arun", "load"]
__all__ += list(STAGES)  # llm_ocr.STAGE: one function per stage, made from the stage table (below)

log = logging.getLogger("llm_ocr")

#: A local path or a URL (``s3://``, ``gs://``, ``hf://`` ...).
PathOrUrl: TypeAlias = "str | os.PathLike[str]"


@dataclass
class Result:
    """How a run over this process's shard ended.

    ``pages`` counts this run's page rows by status (``ok``, ``truncated``, ``error``,
    ``quarantined``) plus ``skipped``, the pages earlier runs did; ``documents`` the documents
    (Assemble's by status; for ``fields``, its rows: ``ok``, ``invalid``, ``error``); ``cost`` the GPU time and its
    estimated price. They come from the
    completion markers the run wrote (or would have written, when it stopped early); ``stats``
    holds the markers themselves. ``routes`` counts the pages by the route of the reading they
    keep (``text-layer``, ``model``, ``escalated``: docs/routes.md) and ``models`` what each model
    did (pages read, readings used, tokens, ``busy_s``), over Extract and Escalate.
    ``failures``: when pages or documents failed (exit code 1), the failed documents of this
    shard in each stage folder the run wrote, the first 20 named with their errors; printing the
    result names them (the end of ``llm-ocr run|extract|...`` is this text).
    """

    stage: str
    output: str
    exit_code: ExitCode
    pages: dict[str, int] = field(default_factory=dict)
    documents: dict[str, int] = field(default_factory=dict)
    cost: dict[str, Any] | None = None
    stats: dict[str, Any] = field(default_factory=dict, repr=False)
    routes: dict[str, int] = field(default_factory=dict)
    models: dict[str, dict[str, int | float]] = field(default_factory=dict)
    failures: list[Failures] = field(default_factory=list, repr=False)

    @property
    def ok(self) -> bool:
        """True when every page is ok or truncated (exit code 0)."""
        return self.exit_code == ExitCode.OK

    @property
    def meaning(self) -> str:
        """The exit code in words."""
        try:
            return ExitCode(self.exit_code).meaning
        except ValueError:
            return "unknown"

    @classmethod
    def of(cls, stage: str, output: str, outcome: ShardOutcome, failures: Sequence[Failures] = ()) -> Result:
        """The result of a stage's outcome, read from its stats (the marker; for a stage that
        writes several folders, ``run``, one marker per folder) through their typed views."""
        views = [view for view in map(stage_stats, _markers(stage, outcome.stats or {})) if view is not None]
        page_stage = next((view for view in views if isinstance(view, PageStats)), None)  # Extract's, else Describe's
        assembled = next((view for view in views if isinstance(view, AssembleStats)), None)
        fielded = next((view for view in views if isinstance(view, FieldsStats)), None)
        pages = page_stage.pages.by_status() if page_stage else {}
        # Fields' rows are documents (ok, invalid, error); otherwise Assemble's, else those a page stage reached.
        counted = fielded if stage == "fields" else assembled or page_stage
        documents = counted.documents.model_dump() if counted else {}
        cost = (page_stage.gpu if page_stage else None) or (fielded.gpu if fielded else None)
        readers = [view for view in views if isinstance(view, PageStats) and view.stage in ("extract", "escalate")]
        # The routes of the last page stage that read pages (Escalate's rows are the final readings).
        routes = next((dict(view.routes) for view in reversed(readers) if view.routes), {})
        models: dict[str, dict[str, int | float]] = {}
        for view in readers:
            for model, counts in view.models.items():
                into = models.setdefault(model, {})
                for key, value in counts.items():
                    into[key] = round(into.get(key, 0) + value, 3)
        return cls(stage, output, outcome.exit_code, pages, documents, cost, outcome.stats or {}, routes, models,
                   list(failures))

    def __str__(self) -> str:
        """One sentence (the exit code, pages, documents, routes, cost), then the failed
        documents, a line each (see :func:`llm_ocr.storage.reconcile.failure_lines`)."""
        pages = ", ".join(f"{k} {v}" for k, v in self.pages.items())
        documents = ", ".join(f"{k} {v}" for k, v in self.documents.items())
        cost = (self.cost or {}).get("estimated_cost_usd")
        routes = ", ".join(f"{k} {v}" for k, v in self.routes.items())
        sentence = (f"llm-ocr {self.stage} -> {self.output}: exit code {self.exit_code} ({self.meaning})"
                    + (f"; pages: {pages}" if pages else "") + (f"; documents: {documents}" if documents else "")
                    + (f"; routes: {routes}" if routes and set(self.routes) != {"model"} else "")
                    + (f"; estimated GPU cost ${cost}" if cost is not None else ""))
        if not self.failures:
            return sentence
        from llm_ocr.storage.reconcile import failure_lines

        return "\n".join([sentence, *failure_lines(self.failures)])


def _markers(stage: str, stats: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The completion markers in a stage's stats (``run`` has one per stage folder)."""
    return list(stats.values()) if len(STAGES[stage].markers) > 1 else [stats]


def shard_failures(stage: str, spec: StageSpec, outcome: ShardOutcome) -> list[Failures]:
    """The failed documents of this shard in each folder ``stage`` wrote, when pages or
    documents failed (exit code 1); none otherwise. Reading them never fails the run: a store
    that cannot be read now is logged, and the result names none."""
    if outcome.exit_code != ExitCode.PAGES_FAILED:
        return []
    from llm_ocr.storage import Storage
    from llm_ocr.storage.reconcile import stage_failures

    out = Storage(spec.job.output, spec.job.storage_options)
    found = []
    try:
        for marker in _markers(stage, outcome.stats or {}):
            if isinstance(marker, Mapping) and marker.get("stage") in STAGE_FOLDERS:
                failed = stage_failures(out, str(marker["stage"]), int(marker.get("shard", 0)),
                                        int(marker.get("num_shards", 1)))
                found.append(failed)
    except Exception as exc:  # noqa: BLE001 - naming the failures is a courtesy; the counts are above
        log.warning("could not read the failed rows to name them (%s): llm-ocr status %s names them", exc,
                    spec.job.output)
    return found


def summarize(stage: str, spec: StageSpec, outcome: ShardOutcome) -> Result:
    """The :class:`Result` of ``outcome``, its failed documents read from this shard's rows."""
    return Result.of(stage, spec.job.output, outcome, shard_failures(stage, spec, outcome))


def stage_spec(
    stage: str,
    inputs: PathOrUrl | Sequence[PathOrUrl] | None,
    given: argparse.Namespace | Mapping[str, Any],
    *,
    naming: Naming = "keyword",
) -> StageSpec:
    """The validated :class:`StageSpec` of ``stage`` from ``given`` (keyword arguments, or parsed
    flags), then ``LLM_OCR_*`` variables, then defaults; :class:`OptionError` names a bad value."""
    listed = [inputs] if isinstance(inputs, (str, os.PathLike)) else list(inputs or [])
    problems = []
    if STAGES[stage].reads_inputs and not listed:  # said first: what to read comes before where to write
        how = f": llm-ocr {stage} INPUT... --output OUT" if naming == "flag" else ""
        problems.append(f"no INPUT given: name at least one file, folder, URL or hf://datasets/OWNER/NAME{how}")
    groups = {}
    for name, model in STAGES[stage].models().items():
        try:
            groups[name] = resolve_options(model, given, naming=naming)
        except OptionError as exc:
            problems.append(str(exc))
    if problems:
        raise OptionError("; ".join(problems))
    return StageSpec(inputs=[os.fspath(i) for i in listed], **groups)  # type: ignore[arg-type]


def keyword_spec(stage: str, inputs: PathOrUrl | Sequence[PathOrUrl] | None, output: PathOrUrl,
                 options: Mapping[str, Any]) -> StageSpec:
    """:func:`stage_spec` of ``llm_ocr.STAGE(inputs, output, **options)``; an unknown keyword
    raises :class:`OptionError` naming the closest option (nothing has run)."""
    options = expand_aliases(stage, options, f"llm_ocr.{stage}()")
    check_names(options, STAGES[stage].option_names(), f"llm_ocr.{stage}()")
    return stage_spec(stage, inputs, {**options, "output": os.fspath(output)})


def shard_coroutine(stage: str, spec: StageSpec) -> Callable[[asyncio.Event], Awaitable[ShardOutcome]]:
    """``stop -> the stage's run over this process's shard`` (imported now: the heavy part)."""
    runner = STAGES[stage].load_runner()
    return lambda stop: runner(spec, stop)


def execute(stage: str, spec: StageSpec, *, command_line: bool = False) -> ShardOutcome:
    """Run ``stage`` over this process's shard from synchronous code (see the module docstring);
    ``command_line``: also stop gracefully on SIGTERM, and map every failure to its exit code
    (the command line's behaviour) instead of raising."""
    from llm_ocr.runners.shard import run_blocking

    if spec.job.progress == "auto":
        from llm_ocr.runners.progress import auto_progress

        spec.job.progress = auto_progress()
    return run_blocking(shard_coroutine(stage, spec), command_line=command_line)


def _raise_for(outcome: ShardOutcome) -> None:
    """Raise what a caller gets for a run that was interrupted or could not run."""
    if outcome.interrupted_by_user:
        raise KeyboardInterrupt
    if outcome.error is not None:
        if outcome.unexpected or isinstance(outcome.error, RunError):
            raise outcome.error
        # An input, endpoint or storage failure: the same message, as the one error a caller catches.
        raise RunError(str(outcome.error)) from outcome.error


def _finish(stage: str, spec: StageSpec, outcome: ShardOutcome) -> Result:
    _raise_for(outcome)
    return summarize(stage, spec, outcome)


def _call(stage: str, inputs: PathOrUrl | Sequence[PathOrUrl] | None, output: PathOrUrl,
          options: Mapping[str, Any]) -> Result:
    spec = keyword_spec(stage, inputs, output, options)
    return _finish(stage, spec, execute(stage, spec))


if TYPE_CHECKING:
    # What editors and type checkers read. At run time each function is made from its entry in
    # the stage table by stage_function, with these parameters and its options in its signature.
    def run(inputs: PathOrUrl | Sequence[PathOrUrl], output: PathOrUrl, **options: Unpack[RunKeywords]) -> Result: ...
    def extract(inputs: PathOrUrl | Sequence[PathOrUrl], output: PathOrUrl,
                **options: Unpack[ExtractKeywords]) -> Result: ...
    def escalate(output: PathOrUrl, **options: Unpack[EscalateKeywords]) -> Result: ...
    def describe(output: PathOrUrl, **options: Unpack[DescribeKeywords]) -> Result: ...
    def assemble(output: PathOrUrl, **options: Unpack[AssembleKeywords]) -> Result: ...
    def fields(output: PathOrUrl, **options: Unpack[FieldsKeywords]) -> Result: ...


def stage_function(stage: Stage) -> Callable[..., Result]:
    """``llm_ocr.STAGE``: the stage over this process's shard, its options as keywords. Its
    signature lists them, keyword-only, with their types and defaults: what ``help()`` and a
    notebook's completion show."""
    import inspect

    def with_inputs(inputs: PathOrUrl | Sequence[PathOrUrl], output: PathOrUrl, **options: Any) -> Result:
        return _call(stage.name, inputs, output, options)

    def on_output(output: PathOrUrl, **options: Any) -> Result:
        return _call(stage.name, None, output, options)

    function: Callable[..., Result] = with_inputs if stage.reads_inputs else on_output
    kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
    params = [inspect.Parameter("output", kind, annotation="PathOrUrl")]
    if stage.reads_inputs:
        params.insert(0, inspect.Parameter("inputs", kind, annotation="PathOrUrl | Sequence[PathOrUrl]"))
    names = set(stage.option_names()) - {"output"}
    for model in stage.models().values():
        for name, info in model.model_fields.items():
            if name in names:
                default = inspect.Parameter.empty if info.is_required() else info.get_default(call_default_factory=True)
                params.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default,
                                                annotation=annotation_text(info.annotation)))
    function.__name__ = function.__qualname__ = stage.name
    function.__module__ = __name__
    function.__doc__ = stage.doc
    function.__signature__ = inspect.Signature(params, return_annotation="Result")  # type: ignore[attr-defined]
    return function


async def arun(
    inputs: PathOrUrl | Sequence[PathOrUrl] | None, output: PathOrUrl, *, stage: str = "run", **options: Any
) -> Result:
    """:func:`run` (or ``stage``: ``extract``, ``describe``, ``assemble``) for async callers, on
    the caller's event loop. Cancelling the task stops the run: the parts are written and a
    launched server is stopped before the cancellation goes on."""
    from llm_ocr.runners.shard import run_guarded

    try:
        reads_inputs = stage_named(stage).reads_inputs
    except ValueError as exc:
        raise OptionError(f"llm_ocr.arun(): {exc}") from None
    spec = keyword_spec(stage, inputs if reads_inputs else None, output, options)
    if spec.job.progress == "auto":
        from llm_ocr.runners.progress import auto_progress

        spec.job.progress = auto_progress()
    outcome = await run_guarded(shard_coroutine(stage, spec), asyncio.Event())
    _raise_for(outcome)
    return await asyncio.to_thread(summarize, stage, spec, outcome)  # it may read the failed rows


def load(output: PathOrUrl, stage: str = "assemble", *,
         storage_options: Mapping[str, Any] | None = None) -> datasets.Dataset:
    """The rows of ``output/STAGE`` as a :class:`datasets.Dataset`, figure images decoded
    (PIL images): one row per page for ``extract``, ``escalate`` and ``describe``, per document for
    ``assemble``."""
    import datasets

    from llm_ocr.storage import Storage
    from llm_ocr.storage.parts import list_parts

    if stage not in STAGE_FOLDERS:
        raise ValueError(f"stage must be {', '.join(STAGE_FOLDERS[:-1])} or {STAGE_FOLDERS[-1]} (got {stage!r})")
    options = dict(storage_options or {})
    folder = Storage(os.fspath(output), options).child(stage)
    parts = list_parts(folder)
    if not parts:
        raise FileNotFoundError(f"{folder.url} holds no {stage} rows yet")
    files = [folder.display(path) for path in parts]
    return datasets.load_dataset("parquet", data_files=files, split="train", storage_options=options or None)


# The stage functions, made from the stage table (typed above for type checkers).
for _stage in STAGES.values():
    globals()[_stage.name] = stage_function(_stage)
