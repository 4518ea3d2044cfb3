"""``llm-ocr export OUT --format docling [--chunks]``: page rows as DoclingDocuments and chunks."""

from __future__ import annotations

import argparse
import json
import logging

log = logging.getLogger("llm_ocr")


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``export`` sub-command."""
    parser = sub.add_parser(
        "export",
        help="write each document of OUT as a DoclingDocument (OUT/docling/NAME.json), and chunks with --chunks",
        description=(
            "Read the page rows of OUT (Describe, else Escalate, else Extract) and write each document as a "
            "docling-core DoclingDocument JSON, items with their page and box in page pixels (origin top "
            "left); with --chunks also OUT/chunks/chunks.parquet, one row per chunk of docling-core's "
            "HierarchicalChunker. Needs the docling extra: pip install 'llm-ocr[docling]'."
        ),
        epilog="exit status: 0 written; 1 some documents failed (logged); 2 could not run.",
    )
    parser.add_argument("output", metavar="OUT", help="output folder or URL of a run")
    parser.add_argument("--format", default="docling", choices=["docling"], help="export format")
    parser.add_argument("--chunks", action="store_true", help="also write OUT/chunks/chunks.parquet")
    parser.add_argument("--storage-options", default=None, help="JSON object of fsspec storage options")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Handle ``llm-ocr export``."""
    from llm_ocr.runners.export import export_docling
    from llm_ocr.storage import Storage

    try:
        import docling_core  # noqa: F401 - an optional extra: say how to get it, not a traceback
    except ImportError as exc:
        log.error("llm-ocr export needs docling-core: pip install 'llm-ocr[docling]' (%s)", exc)
        return 2
    options = json.loads(args.storage_options) if args.storage_options else {}
    out = Storage(args.output, options)
    result = export_docling(out, chunks=args.chunks)
    if not result.documents and not result.errors:
        log.error("nothing to export: %s holds no page rows", out.url)
        return 2
    print(json.dumps({"documents": result.documents, "chunks": result.chunks, "errors": result.errors}))
    return 1 if result.errors else 0
