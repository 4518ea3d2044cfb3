"""Runs Fields over one shard: ``OUT/assemble`` rows → classified, extracted, validated fields →
one row per document in ``OUT/fields``.

The schema (or classes file) is loaded and checked before anything else: a schema that does not
parse, a pydantic path that does not import or a classes file that names a missing schema stops
the run with exit status 2 before any request. Documents are read from Assemble's rows of this
shard (any ``--num-shards`` Assemble ran with), a few columns only; requests are issued as soon
as a document is read, up to ``--max-in-flight`` at once.

Resume: a rerun keeps the rows ``ok`` and ``invalid`` of documents Assemble had complete
(``document_status`` ok), and redoes ``error`` rows and rows made from partial documents (their
pages may have been read since). Every part records the schema's fingerprint; a rerun with
another schema into the same output is refused (the rows would not share their columns).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from llm_ocr.options import FieldsOptions, StageSpec
from llm_ocr.outcomes import ExitCode, FieldsStats, RunError
from llm_ocr.runners.lifecycle import Finished, Markers, Shard, ShardStage, StageResult, run_stage, stage_endpoint
from llm_ocr.runners.page_flow import acquire_unless_stopped, finish_in_flight, iterate_in_thread
from llm_ocr.runners.progress import ProgressReporter, RunCounters
from llm_ocr.runners.shard import DEFAULT_IN_FLIGHT, ShardOutcome
from llm_ocr.serving.in_flight import InFlightLimit
from llm_ocr.serving.open import Endpoint, EndpointError, choose_engine
from llm_ocr.stages.fields import (
    Classes,
    FieldsContext,
    FieldsResult,
    SchemaError,
    document_fields,
    fields_arrow_schema,
    load_classes,
    load_fields_schema,
    run_fingerprint,
    single_class,
    typed_columns,
)
from llm_ocr.stages.fields.columns import SCHEMA_METADATA_KEY, TypedColumn
from llm_ocr.stages.fields.export import write_exports
from llm_ocr.storage import Storage
from llm_ocr.storage.parts import PartWriter, ShardLayoutError, list_parts
from llm_ocr.storage.state import progress_writer
from llm_ocr.storage.stores import StorageError
from llm_ocr.storage.upstream import (
    UnreadablePart,
    iter_shard_rows,
    keep_final_rows,
    read_columns,
    stage_has_parts,
    upstream_complete,
)
from llm_ocr.vlm.client import EndpointDown, served_model_card

log = logging.getLogger("llm_ocr")

STAGE = "fields"
#: Assemble columns Fields reads (``figures`` holds images and is not needed: their captions
#: are in the Markdown already).
DOCUMENT_COLUMNS = ["doc_id", "doc_index", "source", "num_pages", "markdown", "status", "failed_pages", "error",
                    "page_starts"]  # a column older parts lack: the Parquet reader skips it there


@dataclass
class FieldsPlan:
    """What a Fields run extracts: the classes (one, for ``--schema``) and the output's columns."""

    classes: Classes
    single: bool
    columns: list[TypedColumn]
    fingerprint: str

    @property
    def arrow_schema(self) -> pa.Schema:
        """The Arrow schema of this run's rows."""
        return fields_arrow_schema(self.columns, self.fingerprint)


def plan_fields(options: FieldsOptions, storage_options: dict[str, Any] | None = None) -> FieldsPlan:
    """Load and check the schema or classes file (a :class:`RunError` names what is wrong)."""
    if bool(options.fields_schema) == bool(options.classes):
        raise RunError("llm-ocr fields needs exactly one of --schema (one kind of document) or --classes (several)")
    try:
        if options.classes:
            classes, single = load_classes(options.classes, storage_options), False
        else:
            classes, single = single_class(load_fields_schema(options.fields_schema or "",
                                                              storage_options=storage_options)), True
    except SchemaError as exc:
        raise RunError(str(exc)) from exc
    return FieldsPlan(classes, single, typed_columns(classes.schemas), run_fingerprint(classes.schemas))


def scan_fields(stage: Storage, shard: int, num_shards: int, fingerprint: str) -> tuple[set[str], int]:
    """Documents this shard already has a final row for, and the next part number.

    Rows to redo (``error``, or made from a document Assemble had not completed) are removed from
    their parts (rewritten atomically); unreadable parts are deleted. Parts written with another
    schema stop the run.
    """

    def final(table: pa.Table) -> list[bool]:
        if (table.schema.metadata or {}).get(SCHEMA_METADATA_KEY, b"").decode() != fingerprint:
            raise RunError(
                f"{stage.display(stage.root)} holds rows extracted with another schema or classes file: write to "
                f"another --output, or delete {stage.display(stage.root)} to extract again"
            )
        return [s in ("ok", "invalid") and d in (None, "ok")
                for s, d in zip(table.column("status").to_pylist(), table.column("document_status").to_pylist())]

    return keep_final_rows(stage, shard, num_shards, ["doc_id", "status", "document_status"], final)


def fields_settled(marker: Mapping[str, Any] | None, fingerprint: str) -> bool:
    """Whether an earlier run with the same schema left nothing to do: no ``error`` row and no
    row made from a partial document (those are redone: their pages may have been read since)."""
    if not marker:
        return False
    stats = FieldsStats.model_validate(marker)
    return stats.fingerprint == fingerprint and not stats.errors and not stats.documents_partial


def exit_code(errors: int) -> ExitCode:
    """0 when every document has its verdict (``ok`` or ``invalid``); 1 when ``errors`` failed (a
    rerun retries those). ``invalid`` is a verdict on the document, like a truncated page: a rerun
    keeps it, so exiting 1 would only make a platform retry the job to the same end."""
    return ExitCode.PAGES_FAILED if errors else ExitCode.OK


def fields_wanted(options: FieldsOptions) -> bool:
    """Whether ``llm-ocr run`` was asked for fields (a schema or a classes file)."""
    return bool(options.fields_schema or options.classes)


def not_a_language_model(where: str) -> str:
    """The refusal of a Fields run whose model would be the CPU OCR engine (``where``: which
    server that is), saying what to do instead."""
    return (
        f"fields needs a language model, and {where} is llm-ocr's CPU OCR engine: it reads page images, it cannot "
        "answer questions about a document (its answers would be made up). Point --fields-endpoint at an "
        "OpenAI-compatible server of an instruct model (e.g. vLLM serving Qwen/Qwen2.5-7B-Instruct) and name the "
        "model with --fields-model"
    )


def launched_engine_refusal(spec: StageSpec) -> str | None:
    """Why Fields cannot run, known from the options alone: its requests would go to the CPU
    engine this process launches (no ``--fields-endpoint``, no ``--endpoint``, and ``--engine``
    is ``cpu``, or ``auto`` on a machine without a CUDA GPU and vLLM). None: nothing known yet
    (an ``--endpoint`` is checked once open, see :func:`served_by_ocr_engine`)."""
    if spec.fields.fields_endpoint or spec.job.endpoint:
        return None
    try:
        engine, why, _ = choose_engine(spec.server)
    except EndpointError:  # a bad --gpu-preset: the endpoint's opening says so
        return None
    if engine != "cpu":
        return None
    chosen = f"--engine {spec.server.engine}" + (f": {why}" if spec.server.engine == "auto" else "")
    return not_a_language_model(f"the model server this run launches ({chosen})")


async def served_by_ocr_engine(endpoint: Endpoint, api_key: str | None) -> bool:
    """Whether ``endpoint`` is the CPU OCR engine: its ``/v1/models`` entry says so (``ocr_engine``)."""
    card = await served_model_card(endpoint.client.base_url, endpoint.client.model, api_key)
    return "ocr_engine" in card


def _exports(options: FieldsOptions) -> list[str]:
    return [s for s, on in (("jsonl", options.export_jsonl), ("csv", options.export_csv)) if on]


class Fields(ShardStage):
    """Fields as a :class:`~llm_ocr.runners.lifecycle.ShardStage`.

    The schema (or classes file) is loaded when the lifecycle first asks whether the shard is
    settled, before anything is read or sent: bad input stops the run with exit status 2.
    ``main``: an endpoint the caller has open (``llm-ocr run``), used when it serves the model.
    """

    writes = (STAGE,)

    def __init__(self, spec: StageSpec, *, main: Endpoint | None = None, limit: InFlightLimit | None = None) -> None:
        self.spec = spec
        self.main = main
        #: The limit of requests at ``main`` that the caller shares (the service's worker: its
        #: pages' limit, so a worker's Fields requests count against its --max-in-flight); used
        #: when Fields runs on ``main``. None: the run's own, of --max-in-flight requests.
        self.limit = limit
        self._plan: FieldsPlan | None = None
        self.complete = True
        self.done: set[str] = set()
        self.next_seq = 0

    @property
    def plan(self) -> FieldsPlan:
        """The run's classes and columns (the schema is loaded and checked once)."""
        if self._plan is None:
            self._plan = plan_fields(self.spec.fields, self.spec.job.storage_options)
        return self._plan

    def settled(self, markers: Markers) -> ExitCode | None:
        marker = markers[STAGE]
        if not marker or not fields_settled(marker, self.plan.fingerprint):
            return None
        stats = FieldsStats.model_validate(marker)
        if not set(_exports(self.spec.fields)) <= set(stats.exported):
            return None
        return exit_code(stats.errors)

    async def check(self, shard: Shard, markers: Markers) -> None:
        refusal = await asyncio.to_thread(launched_engine_refusal, self.spec)  # runs nvidia-smi
        if refusal:
            raise RunError(refusal)
        source = shard.folder("assemble")
        self.complete = await asyncio.to_thread(upstream_complete, shard.out, "assemble", source, shard.index,
                                                shard.count)
        if not self.complete and not await asyncio.to_thread(stage_has_parts, source):
            raise RunError(f"nothing to extract fields from: {source.url} holds no Assemble output; run llm-ocr "
                           "assemble first")

    async def resume(self, shard: Shard, markers: Markers) -> None:
        try:
            self.done, self.next_seq = await asyncio.to_thread(
                scan_fields, shard.folder(STAGE), shard.index, shard.count, self.plan.fingerprint
            )
        except ShardLayoutError as exc:
            raise RunError(str(exc)) from exc
        if not self.complete:
            log.warning(
                "assemble has not finished every shard this fields shard reads: documents not there yet are left "
                "out; rerun fields once it is done (no completion marker is written until then)"
            )

    async def work(self, shard: Shard) -> Finished:
        job, options = shard.job, self.spec.fields
        secret = options.fields_api_key or job.api_key
        async with stage_endpoint(
            shard, self.spec.client, self.spec.server, url=options.fields_endpoint,
            model=options.fields_model or job.model,
            api_key=secret.get_secret_value() if secret else None, main=self.main, log_prefix="server-fields",
        ) as endpoint:
            # Before any request: the CPU engine would answer every one with an error (or, for
            # page images, a figure's caption shaped like the schema), never with the fields.
            if await served_by_ocr_engine(endpoint, secret.get_secret_value() if secret else None):
                raise RunError(not_a_language_model(f"the fields endpoint {endpoint.client.display_url}"))
            run = _Run(self.spec, self.plan, shard)
            shared = self.limit if endpoint is self.main else None
            try:
                result = await run.go(endpoint, self.done, self.next_seq, shared)
            except UnreadablePart as exc:
                raise RunError(str(exc)) from exc
        return Finished([result], complete=self.complete, preset=endpoint.preset)


async def fields_shard(spec: StageSpec, stop: asyncio.Event | None = None) -> ShardOutcome:
    """Run Fields over this process's shard of ``OUT/assemble``."""
    return await run_stage(Fields(spec), spec.job, stop)


class _Run:
    """One shard's Fields run on an open endpoint."""

    def __init__(self, spec: StageSpec, plan: FieldsPlan, shard: Shard) -> None:
        self.spec, self.plan, self.shard = spec, plan, shard
        self.out = shard.out
        self.counts: Counter[str] = Counter()
        self.classes: Counter[str] = Counter()
        self.partial = 0
        # Documents are counted as the lifecycle counts pages: read, written, done earlier.
        self.counters = RunCounters(STAGE, shard.index, shard.count, pages_found=0)
        # pypdfium2 is not thread-safe: page images are rendered one at a time.
        self._render_lock = threading.Lock()

    async def go(self, endpoint: Endpoint, done: set[str], next_seq: int,
                 limit: InFlightLimit | None = None) -> StageResult:
        """Extract the fields of every document of the shard not ``done``; the stage's result.
        ``limit``: the requests' limit, shared with the caller (None: one of --max-in-flight)."""
        shard, job, options = self.shard, self.spec.job, self.spec.fields
        stop = shard.stop
        started = time.monotonic()
        stage = shard.folder(STAGE)
        writer = PartWriter(stage, self.plan.arrow_schema, shard.index, shard.count, start_seq=next_seq,
                            max_rows=job.part_rows)
        skipped = 0
        in_flight = limit.limit if limit is not None else \
            job.max_in_flight or endpoint.suggested_in_flight or DEFAULT_IN_FLIGHT
        ctx = await self._context(endpoint, limit or asyncio.Semaphore(in_flight))
        reporter = ProgressReporter(self.counters, job.progress, job.progress_interval, poll_server=endpoint.metrics,
                                    on_tick=progress_writer(self.out, STAGE, shard.index, shard.count))
        reporter.start()
        # Documents held at once: more than the request slots, so that slots never idle while a
        # document is read; bounded, so that memory does not grow with the shard.
        documents = asyncio.Semaphore(in_flight * 2)
        tasks: set[asyncio.Task[None]] = set()
        fatal: list[BaseException] = []
        try:
            rows = iter_shard_rows(shard.folder("assemble"), shard.index, shard.count, columns=DOCUMENT_COLUMNS,
                                   batch_rows=16)
            async for row in iterate_in_thread(rows):
                if stop.is_set() or fatal:
                    break
                self.counters.pages_found = (self.counters.pages_found or 0) + 1
                if row["doc_id"] in done:
                    skipped += 1
                    self.counters.pages_skipped += 1
                    continue
                if not await acquire_unless_stopped(documents, stop):
                    break
                task = asyncio.create_task(self._one(row, ctx, writer, documents, fatal))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
            else:
                self.counters.intake_done = True  # every document counted: the progress has its total
            await finish_in_flight(tasks, stop, job.grace_period)
            if fatal:
                raise fatal[0]
        except (EndpointDown, StorageError) as exc:
            raise RunError(f"{exc}; completed documents are saved, rerun to resume") from exc
        finally:
            await writer.close()
            await reporter.stop()
            log.info(self.counters.reconciliation())
        exported = []
        if _exports(options) and not stop.is_set():
            await asyncio.to_thread(self._export, stage)
            exported = _exports(options)
        documents_count = {"ok": self.counts["ok"], "invalid": self.counts["invalid"], "error": self.counts["error"],
                           "skipped": skipped}
        stats: dict[str, Any] = {
            "stage": STAGE, "shard": shard.index, "num_shards": shard.count, "documents": documents_count,
            "documents_partial": self.partial, "classes": dict(self.classes), "requests": ctx.counts.requests,
            "repairs": ctx.counts.repairs, "classified_by_model": ctx.counts.classified_by_model,
            "prompt_tokens": ctx.counts.prompt_tokens, "completion_tokens": ctx.counts.completion_tokens,
            "model": ctx.client.model, "structured": ctx.mode, "schema": self.plan.fingerprint, "exported": exported,
            "wall_time_s": round(time.monotonic() - started, 3),
        }  # fmt: skip
        log.info(
            "[fields %d/%d] documents ok %d, invalid %d, error %d, skipped %d; %d requests (%d repairs)",
            shard.index + 1, shard.count, self.counts["ok"], self.counts["invalid"], self.counts["error"], skipped,
            ctx.counts.requests, ctx.counts.repairs,
        )
        return StageResult(STAGE, stats, failed=exit_code(self.counts["error"]) != ExitCode.OK, counters=self.counters)

    async def _one(self, row: dict[str, Any], ctx: FieldsContext, writer: PartWriter, documents: asyncio.Semaphore,
                   fatal: list[BaseException]) -> None:
        self.counters.in_flight += 1
        try:
            result: FieldsResult = await document_fields(row, ctx)
            await writer.add(result.to_row(self.plan.columns))
            self.counts[result.status] += 1
            self.classes[result.class_ or "unclassified"] += 1
            self.partial += row.get("status") == "partial"
            self.counters.pages["error" if result.status == "error" else "ok"] += 1
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # noqa: BLE001 - EndpointDown or a storage failure: stop the run
            if not fatal:
                fatal.append(exc)
                self.shard.stop.set()
        finally:
            self.counters.in_flight -= 1
            documents.release()

    async def _context(self, endpoint: Endpoint, limit: InFlightLimit | asyncio.Semaphore) -> FieldsContext:
        options = self.spec.fields
        mode = "json_schema" if options.fields_structured == "auto" else options.fields_structured
        return FieldsContext(
            client=endpoint.client, classes=self.plan.classes, single=self.plan.single, columns=self.plan.columns,
            source=options.fields_from, mode=mode, fallback=options.fields_structured == "auto",
            classify=options.fields_classify, max_tokens=options.fields_max_tokens,
            max_input_tokens=options.fields_max_input_tokens, context_tokens=await endpoint.client.max_model_len(),
            pages_per_request=options.fields_pages_per_request, instruction=options.fields_prompt,
            temperature=options.fields_temperature, repair=options.fields_repair, limit=limit,
            page_image=self._page_image if options.fields_from != "markdown" else None,
        )  # fmt: skip

    async def _page_image(self, row: dict[str, Any], page: int) -> tuple[bytes, str]:
        """A page re-rendered from the document's source (a dataset row's image read again from
        the dataset), as Extract rendered it."""
        from llm_ocr.sources.rerender import SourcePages

        def render() -> tuple[bytes, str]:
            with self._render_lock, SourcePages(row["doc_id"], row.get("source"), self.spec.render,
                                                self.spec.job.storage_options, self.spec.dataset.image_column) as pages:
                view = pages.page(page)
            if view.data is None:  # e.g. the source was moved or deleted since Extract read it
                raise ValueError(f"{view.note or 'no image'}; --fields-from markdown reads the OCR text instead")
            return view.data, view.mime or "image/jpeg"

        return await asyncio.to_thread(render)

    def _export(self, stage: Storage) -> None:
        rows: list[dict[str, Any]] = []
        for path in list_parts(stage, self.shard.index, self.shard.count):
            rows.extend(read_columns(stage, path, None).to_pylist())
        written = write_exports(self.out, rows, self.plan.arrow_schema.names, self.shard.index, self.shard.count,
                                jsonl=self.spec.fields.export_jsonl, csv_=self.spec.fields.export_csv)
        for path in written:
            log.info("exported %d rows to %s", len(rows), self.out.display(path))
