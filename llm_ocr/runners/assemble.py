"""Runs Assemble over one shard: page rows → one row per document in ``OUT/assemble``.

Memory stays bounded whatever the size of the input: a first pass reads only ``doc_id`` and
``doc_index`` of the upstream parts (a column projection: a few kilobytes per part) to learn
which documents this shard owns and which parts hold their pages; then documents are assembled in
batches of at most ``--assemble-batch-pages`` pages, each batch reading just the parts that hold
it, one part at a time. The upstream may have been written with any ``--num-shards``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter, defaultdict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from llm_ocr.options import AssembleOptions, JobOptions, StageSpec
from llm_ocr.outcomes import AssembleStats, ExitCode, RunError
from llm_ocr.records import DocumentResult, document_schema
from llm_ocr.runners.lifecycle import Finished, Markers, Shard, ShardStage, StageResult, run_stage
from llm_ocr.runners.shard import ShardOutcome
from llm_ocr.stages.assemble import assemble_document
from llm_ocr.stages.export import export_document, markdown_path
from llm_ocr.storage import Storage
from llm_ocr.storage.parts import PartWriter, ShardLayoutError
from llm_ocr.storage.upstream import (
    UnreadablePart,
    iter_shard_rows,
    keep_final_rows,
    owns_row,
    read_columns,
    shard_parts,
    stage_has_parts,
    upstream_complete,
)

log = logging.getLogger("llm_ocr")

#: Upstream columns Assemble needs (``raw`` can be large and is not used; ``blocks`` and ``height``
#: say where the page furniture is: :mod:`llm_ocr.stages.furniture`).
PAGE_COLUMNS = ["doc_id", "doc_index", "page", "source", "num_pages", "markdown", "figures", "status", "error",
                "fallback_text",  # a column parts written before it lack: the Parquet reader skips it there
                "blocks", "height"]


@dataclass
class DocumentEntry:
    """Where one document's page rows are: its id, how many rows, which parts."""

    doc_id: str
    rows: int = 0
    parts: set[str] = field(default_factory=set)


def source_stage(out: Storage) -> str:
    """The stage Assemble reads: Describe if it has written anything, else Escalate, else Extract."""
    for name in ("describe", "escalate"):
        if stage_has_parts(out.child(name)):
            return name
    return "extract"


def index_documents(source: Storage, shard: int, num_shards: int) -> dict[int, DocumentEntry]:
    """The documents of our shard in ``source``, by ``doc_index``, reading two columns per part."""
    entries: dict[int, DocumentEntry] = {}
    for path in shard_parts(source, shard, num_shards):
        table = read_columns(source, path, ["doc_id", "doc_index"])
        for doc_id, doc_index in zip(table.column("doc_id").to_pylist(), table.column("doc_index").to_pylist()):
            if not owns_row(path, doc_index, shard, num_shards):
                continue
            entry = entries.setdefault(doc_index, DocumentEntry(doc_id))
            entry.rows += 1
            entry.parts.add(path)
    return entries


def scan_assembled(stage: Storage, shard: int, num_shards: int) -> tuple[set[str], int]:
    """Documents this shard already assembled ``ok`` and the next part number.

    Rows of ``partial`` and ``error`` documents are removed from their parts (rewritten
    atomically) so they are assembled again from whatever the upstream holds now; unreadable
    parts are deleted.
    """
    return keep_final_rows(stage, shard, num_shards, ["doc_id", "status"],
                           lambda table: [s == "ok" for s in table.column("status").to_pylist()])


def batches(todo: list[int], entries: dict[int, DocumentEntry], max_rows: int) -> Iterator[list[int]]:
    """Consecutive documents holding at most ``max_rows`` page rows together (at least one)."""
    batch: list[int] = []
    rows = 0
    for doc_index in todo:
        size = entries[doc_index].rows
        if batch and rows + size > max_rows:
            yield batch
            batch, rows = [], 0
        batch.append(doc_index)
        rows += size
    if batch:
        yield batch


def read_batch(source: Storage, entries: dict[int, DocumentEntry], batch: list[int],
               columns: list[str] = PAGE_COLUMNS) -> dict[int, list[dict[str, Any]]]:
    """The page rows of a batch of documents, grouped by ``doc_index``, one part read at a time."""
    wanted = pa.array(batch, pa.int64())
    grouped: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for path in sorted(set().union(*(entries[i].parts for i in batch))):
        table = read_columns(source, path, columns)
        table = table.filter(pc.is_in(table.column("doc_index"), value_set=wanted))
        for row in table.to_pylist():
            grouped[row["doc_index"]].append(row)
    return grouped


def _export_earlier(out: Storage, stage: Storage, shard: int, num_shards: int, doc_ids: set[str]) -> int:
    # Documents assembled by an earlier run without --export-markdown: export those not there yet.
    count = 0
    for row in iter_shard_rows(stage, shard, num_shards, batch_rows=16):
        if row["doc_id"] in doc_ids and not out.exists(markdown_path(out, row["doc_id"])):
            fields: dict[str, Any] = {k: row.get(k) for k in DocumentResult.__dataclass_fields__}
            export_document(out, DocumentResult(**fields))
            count += 1
    return count


@dataclass
class _Plan:
    """Where one Assemble shard reads and writes, and what an earlier run already did."""

    out: Storage
    shard: int
    num_shards: int
    source_name: str
    source: Storage
    stage: Storage
    upstream_complete: bool
    done: set[str]
    next_seq: int


async def _assemble(plan: _Plan, options: AssembleOptions, job: JobOptions, stop: asyncio.Event,
                    previous: dict[str, Any] | None) -> StageResult:
    started = time.monotonic()
    out, source, stage, shard, num_shards = plan.out, plan.source, plan.stage, plan.shard, plan.num_shards
    entries = await asyncio.to_thread(index_documents, source, shard, num_shards)
    todo = sorted(i for i, e in entries.items() if e.doc_id not in plan.done)
    skipped = {e.doc_id for e in entries.values() if e.doc_id in plan.done}
    writer = PartWriter(stage, document_schema(), shard, num_shards, start_seq=plan.next_seq, max_rows=job.part_rows)
    counts: Counter[str] = Counter()
    pages = figures = 0
    try:
        for batch in batches(todo, entries, options.assemble_batch_pages):
            if stop.is_set():
                break
            grouped = await asyncio.to_thread(read_batch, source, entries, batch)
            for doc_index in batch:
                document = assemble_document(grouped[doc_index], options)
                counts[document.status] += 1
                pages += document.num_pages
                figures += len(document.figures)
                await writer.add(document.to_row())
                if options.export_markdown:
                    await asyncio.to_thread(export_document, out, document)
        exported_earlier = 0
        already_exported = bool(previous and previous.get("exported"))
        if options.export_markdown and skipped and not already_exported and not stop.is_set():
            await writer.close()  # rows of this run are stored before earlier ones are re-read
            exported_earlier = await asyncio.to_thread(_export_earlier, out, stage, shard, num_shards, skipped)
    finally:
        await writer.close()
    stats: dict[str, Any] = {
        "stage": "assemble",
        "shard": shard,
        "num_shards": num_shards,
        "source": plan.source_name,
        "documents": {"ok": counts["ok"], "partial": counts["partial"], "error": counts["error"],
                      "skipped": len(skipped)},
        "pages": pages,
        "figures": figures,
        "exported": options.export_markdown or already_exported,
        "exported_earlier": exported_earlier,
        "wall_time_s": round(time.monotonic() - started, 3),
    }
    log.info(
        "[assemble %d/%d] documents ok %d, partial %d, error %d, skipped %d (from %s)",
        shard + 1, num_shards, counts["ok"], counts["partial"], counts["error"], len(skipped), plan.source_name,
    )
    return StageResult("assemble", stats, failed=bool(counts["partial"] or counts["error"]))


def assemble_finished(marker: Mapping[str, Any] | None, options: AssembleOptions) -> bool:
    """Whether an earlier run left nothing to do: every document ok (and exported if asked)."""
    if not marker:
        return False
    stats = AssembleStats.model_validate(marker)
    if stats.documents.partial or stats.documents.error:
        return False
    return not options.export_markdown or stats.exported


class Assemble(ShardStage):
    """Assemble as a :class:`~llm_ocr.runners.lifecycle.ShardStage` (CPU only: no model server)."""

    writes = ("assemble",)

    def __init__(self, spec: StageSpec) -> None:
        self.spec = spec
        self.plan: _Plan | None = None
        self.previous: dict[str, Any] | None = None

    def settled(self, markers: Markers) -> ExitCode | None:
        return ExitCode.OK if assemble_finished(markers["assemble"], self.spec.assemble) else None

    async def check(self, shard: Shard, markers: Markers) -> None:
        out = shard.out
        name = await asyncio.to_thread(source_stage, out)
        source, stage = out.child(name), out.child("assemble")
        complete = await asyncio.to_thread(upstream_complete, out, name, source, shard.index, shard.count)
        if not complete and not await asyncio.to_thread(stage_has_parts, source):
            raise RunError(f"nothing to assemble: {out.url} holds no Extract or Describe output; run those stages "
                           "first")
        self.plan = _Plan(out, shard.index, shard.count, name, source, stage, complete, set(), 0)

    async def resume(self, shard: Shard, markers: Markers) -> None:
        plan = self.plan
        assert plan is not None
        # The marker says whether the Markdown export was done.
        self.previous = markers.get("assemble")
        try:
            plan.done, plan.next_seq = await asyncio.to_thread(scan_assembled, plan.stage, shard.index, shard.count)
        except ShardLayoutError as exc:
            raise RunError(str(exc)) from exc
        if not plan.upstream_complete:
            log.warning(
                "%s has not finished every shard this assemble shard reads: documents not there yet are "
                "left out; rerun assemble once it is done (no completion marker is written until then)",
                plan.source_name,
            )

    async def work(self, shard: Shard) -> Finished:
        plan = self.plan
        assert plan is not None
        try:
            result = await _assemble(plan, self.spec.assemble, shard.job, shard.stop, self.previous)
        except UnreadablePart as exc:
            raise RunError(str(exc)) from exc
        return Finished([result], complete=plan.upstream_complete, uses_model=False)


async def assemble_shard(spec: StageSpec, stop: asyncio.Event | None = None) -> ShardOutcome:
    """Run Assemble over this process's shard (CPU only: no model server is involved)."""
    return await run_stage(Assemble(spec), spec.job, stop)
