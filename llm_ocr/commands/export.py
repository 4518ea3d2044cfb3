"""``llm-ocr export OUT --format docling [--chunks [--chunker hybrid --chunk-tokenizer NAME
--chunk-max-tokens N]] [--num-shards N --shard-index I]``: page rows as DoclingDocuments and chunks,
one shard of the documents per process if asked."""

from __future__ import annotations

import argparse
import json
import logging

from llm_ocr.options import AssembleOptions, JobOptions

log = logging.getLogger("llm_ocr")


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``export`` sub-command."""
    parser = sub.add_parser(
        "export",
        help="write each document of OUT as a DoclingDocument (OUT/docling/NAME.json), and chunks with --chunks",
        description=(
            "Read the page rows of OUT (Describe, else Escalate, else Extract) and write each document as a "
            "docling-core DoclingDocument JSON, items with their page and box in page pixels (origin top "
            "left); with --chunks also OUT/chunks/chunks-SSSSS-of-NNNNN.parquet, one row per chunk of docling-core's "
            "HierarchicalChunker (or, with --chunker hybrid, its HybridChunker: chunks of at most --chunk-max-tokens "
            "tokens of --chunk-tokenizer). With --num-shards, each process exports the documents of its "
            "--shard-index (the shards Assemble uses), writing its own files. Needs the docling extra: "
            "pip install 'llm-ocr[docling]'."
        ),
        epilog="exit status: 0 written; 1 some documents failed (logged); 2 could not run.",
    )
    parser.add_argument("output", metavar="OUT", help="output folder or URL of a run")
    parser.add_argument("--format", default="docling", choices=["docling"], help="export format")
    parser.add_argument("--chunks", action="store_true",
                        help="also write OUT/chunks/chunks-SSSSS-of-NNNNN.parquet (one file per shard)")
    # Assemble's own chunker options (run --chunks takes them too), checked as its are.
    chunking = AssembleOptions.model_fields
    parser.add_argument("--chunker", default="hierarchical", choices=["hierarchical", "hybrid"],
                        help=chunking["chunker"].description)
    parser.add_argument("--chunk-tokenizer", default=None, metavar="NAME_OR_PATH",
                        help=chunking["chunk_tokenizer"].description)
    parser.add_argument("--chunk-max-tokens", type=int, default=None, metavar="N",
                        help=chunking["chunk_max_tokens"].description)
    # The stages' own shard options (JobOptions' help), resolved as theirs are: given, else the platform's.
    shards = JobOptions.model_fields
    parser.add_argument("--num-shards", type=int, default=None, help=shards["num_shards"].description)
    parser.add_argument("--shard-index", type=int, default=None, help=shards["shard_index"].description)
    parser.add_argument("--storage-options", default=None, help="JSON object of fsspec storage options")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Handle ``llm-ocr export``."""
    from llm_ocr.outcomes import RunError
    from llm_ocr.runners.documents import source_stage
    from llm_ocr.runners.export import export_docling
    from llm_ocr.runners.shard import resolve_shard
    from llm_ocr.stages.docling_chunkers import make_chunker
    from llm_ocr.storage import Storage
    from llm_ocr.storage.upstream import stage_has_parts

    try:
        import docling_core  # noqa: F401 - an optional extra: say how to get it, not a traceback
    except ImportError as exc:
        log.error("llm-ocr export needs docling-core: pip install 'llm-ocr[docling]' (%s)", exc)
        return 2
    options = json.loads(args.storage_options) if args.storage_options else {}
    try:
        job = JobOptions(output=args.output, num_shards=args.num_shards, shard_index=args.shard_index)
        num_shards, shard = resolve_shard(job)
        chunking = AssembleOptions(chunks=args.chunks, chunker=args.chunker, chunk_tokenizer=args.chunk_tokenizer,
                                   chunk_max_tokens=args.chunk_max_tokens)
        # The tokenizer is loaded before any page is read: a wrong name stops here, not per document.
        chunker = make_chunker(chunking.chunker, chunking.chunk_tokenizer, chunking.chunk_max_tokens) \
            if args.chunks else None
    except (ValueError, RunError) as exc:  # pydantic's ValidationError and ChunkerError are ValueErrors
        log.error("%s", exc)
        return 2
    out = Storage(args.output, options)
    if not stage_has_parts(out.child(source_stage(out))):
        log.error("nothing to export: %s holds no page rows", out.url)
        return 2
    result = export_docling(out, chunks=args.chunks, shard=shard, num_shards=num_shards, chunker=chunker)
    print(json.dumps({"documents": result.documents, "chunks": result.chunks, "errors": result.errors,
                      "shard": shard, "num_shards": num_shards}))
    return 1 if result.errors else 0
