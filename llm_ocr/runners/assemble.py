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
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from llm_ocr.options import AssembleOptions, JobOptions, StageSpec
from llm_ocr.outcomes import AssembleStats, ExitCode, RunError
from llm_ocr.records import DocumentResult, document_schema
from llm_ocr.runners.documents import batches, index_documents, read_batch, source_stage
from llm_ocr.runners.export import ExportResult, export_docling
from llm_ocr.runners.lifecycle import Finished, Markers, Shard, ShardStage, StageResult, run_stage
from llm_ocr.runners.shard import ShardOutcome
from llm_ocr.stages.assemble import assemble_document
from llm_ocr.stages.docling_chunkers import ChunkerError, chunker_name, make_chunker
from llm_ocr.stages.export import export_document, markdown_path
from llm_ocr.storage import Storage
from llm_ocr.storage.parts import PartWriter, ShardLayoutError
from llm_ocr.storage.upstream import (
    UnreadablePart,
    iter_shard_rows,
    keep_final_rows,
    stage_has_parts,
    upstream_complete,
)

if TYPE_CHECKING:
    from docling_core.transforms.chunker.base import BaseChunker

log = logging.getLogger("llm_ocr")

#: Upstream columns Assemble needs (``raw`` can be large and is not used; ``blocks`` and ``height``
#: say where the page furniture is: :mod:`llm_ocr.stages.furniture`).
PAGE_COLUMNS = ["doc_id", "doc_index", "page", "source", "num_pages", "markdown", "figures", "status", "error",
                "fallback_text",  # a column parts written before it lack: the Parquet reader skips it there
                "blocks", "height"]


def scan_assembled(stage: Storage, shard: int, num_shards: int) -> tuple[set[str], int]:
    """Documents this shard already assembled ``ok`` and the next part number.

    Rows of ``partial`` and ``error`` documents are removed from their parts (rewritten
    atomically) so they are assembled again from whatever the upstream holds now; unreadable
    parts are deleted.
    """
    return keep_final_rows(stage, shard, num_shards, ["doc_id", "status"],
                           lambda table: [s == "ok" for s in table.column("status").to_pylist()])


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
            grouped = await asyncio.to_thread(read_batch, source, entries, batch, PAGE_COLUMNS)
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
    chunked = await _chunks(plan, options, stop)
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
        "chunked": chunked is not None and not chunked.errors,
        **({"chunker": _chunker_name(options)} if chunked is not None else {}),
        **({"docling": {"documents": chunked.documents, "chunks": chunked.chunks, "errors": len(chunked.errors)}}
           if chunked is not None else {}),
        "wall_time_s": round(time.monotonic() - started, 3),
    }
    log.info(
        "[assemble %d/%d] documents ok %d, partial %d, error %d, skipped %d (from %s)",
        shard + 1, num_shards, counts["ok"], counts["partial"], counts["error"], len(skipped), plan.source_name,
    )
    failed = bool(counts["partial"] or counts["error"] or (chunked is not None and chunked.errors))
    return StageResult("assemble", stats, failed=failed)


async def _chunks(plan: _Plan, options: AssembleOptions, stop: asyncio.Event) -> ExportResult | None:
    """With ``--chunks``, the shard's DoclingDocuments and chunk rows, written by the export's own
    runner (:func:`llm_ocr.runners.export.export_docling`) over the same documents."""
    if not options.chunks or stop.is_set():
        return None
    chunker = await asyncio.to_thread(_chunker, options)
    result = await asyncio.to_thread(export_docling, plan.out, True, options.assemble_batch_pages, plan.shard,
                                     plan.num_shards, chunker)
    log.info("[assemble %d/%d] DoclingDocuments %d, chunks %d, failed %d", plan.shard + 1, plan.num_shards,
             result.documents, result.chunks, len(result.errors))
    return result


def need_docling(options: AssembleOptions) -> None:
    """Raise :class:`RunError` when ``--chunks`` is asked for without docling-core installed, or
    with a ``--chunk-tokenizer`` that does not load: said before any page is read, not after."""
    if not options.chunks:
        return
    try:
        import docling_core  # noqa: F401
    except ImportError as exc:
        raise RunError(f"--chunks needs docling-core: pip install 'llm-ocr[docling]' ({exc})") from exc
    _chunker(options)


def _chunker(options: AssembleOptions) -> BaseChunker:
    """The chunker of ``--chunker`` (its tokenizer loaded: a local folder's in milliseconds)."""
    try:
        return make_chunker(options.chunker, options.chunk_tokenizer, options.chunk_max_tokens)
    except ChunkerError as exc:
        raise RunError(str(exc)) from exc


def _chunker_name(options: AssembleOptions) -> str:
    return chunker_name(options.chunker, options.chunk_tokenizer, options.chunk_max_tokens)


def assemble_finished(marker: Mapping[str, Any] | None, options: AssembleOptions) -> bool:
    """Whether an earlier run left nothing to do: every document ok (and exported if asked)."""
    if not marker:
        return False
    stats = AssembleStats.model_validate(marker)
    if stats.documents.partial or stats.documents.error:
        return False
    # Chunks of another chunker (an earlier run's hierarchical ones, say) are chunked again.
    chunked = stats.chunked and (stats.chunker or "hierarchical") == _chunker_name(options)
    return (not options.export_markdown or stats.exported) and (not options.chunks or chunked)


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
        need_docling(self.spec.assemble)
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
