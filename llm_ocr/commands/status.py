"""``llm-ocr status OUT``: account for every page of an output location, without running anything.

Reads only the ``status``/``doc_id``/``page`` columns of each part and the completion markers,
so it is cheap on object storage too.
"""

from __future__ import annotations

import argparse
import io
import json
from collections import Counter, defaultdict
from typing import Any

import pyarrow.parquet as pq

from llm_ocr.storage import Storage
from llm_ocr.storage.parts import PART_RE, list_parts
from llm_ocr.storage.state import list_markers

STAGES = ("extract", "describe", "assemble")


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``status`` sub-command."""
    parser = sub.add_parser(
        "status",
        help="count pages by status per stage and shard in an output location (runs nothing)",
        description="Reconcile an output location: rows by status per stage and shard, duplicates, finished shards.",
    )
    parser.add_argument("output", metavar="OUT", help="output folder or URL")
    parser.add_argument("--storage-options", default=None, help="JSON object of fsspec storage options")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.set_defaults(handler=run)


def stage_status(out: Storage, stage: str) -> dict[str, Any]:
    """Rows by status per shard of one stage, plus duplicates and finished shards."""
    folder = out.child(stage)
    shards: dict[str, Counter[str]] = defaultdict(Counter)
    seen: Counter[tuple[str, int]] = Counter()
    key_column = "page" if stage != "assemble" else None
    unreadable = []
    for path in list_parts(folder):
        match = PART_RE.search(path)
        shard = f"{int(match.group(1)):05d}-of-{int(match.group(2)):05d}" if match else "?"
        try:
            columns = ["doc_id", "status"] + ([key_column, "quarantined"] if key_column else [])
            # ParquetFile.read skips a column a part lacks (parts written before "quarantined").
            table = pq.ParquetFile(io.BytesIO(folder.read_bytes(path))).read(columns=columns)
        except Exception:  # noqa: BLE001 - an unreadable part is reported, not fatal
            unreadable.append(folder.display(path))
            continue
        pages = table.column(key_column).to_pylist() if key_column else [0] * table.num_rows
        held = table.column("quarantined").to_pylist() if "quarantined" in table.column_names else [None] * table.num_rows
        for doc_id, status, page, quarantined in zip(table.column("doc_id").to_pylist(), table.column("status").to_pylist(), pages, held):
            # A quarantined page is an error row counted in its own column (as the run's line does).
            shards[shard]["quarantined" if quarantined else status] += 1
            seen[(doc_id, page)] += 1
    markers = list_markers(out, stage)
    finished = sorted(f"{m.get('shard', 0):05d}-of-{m.get('num_shards', 1):05d}" for m in markers)
    total: Counter[str] = Counter()
    for counts in shards.values():
        total.update(counts)
    return {
        "stage": stage,
        "rows": sum(total.values()),
        "by_status": dict(total),
        "shards": {k: dict(v) for k, v in sorted(shards.items())},
        "finished_shards": finished,
        "duplicates": sum(n - 1 for n in seen.values() if n > 1),
        "unreadable_parts": unreadable,
    }


def run(args: argparse.Namespace) -> int:
    """Handle ``llm-ocr status``."""
    options = json.loads(args.storage_options) if args.storage_options else {}
    out = Storage(args.output, options)
    report = [stage_status(out, stage) for stage in STAGES]
    report = [r for r in report if r["rows"] or r["finished_shards"]]
    if args.json:
        print(json.dumps(report, indent=2, sort_keys=True))
        return 0
    if not report:
        print(f"{args.output}: no output yet")
        return 0
    for stage in report:
        counts = stage["by_status"]
        unit = "documents" if stage["stage"] == "assemble" else "pages"
        parts = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
        print(f"{stage['stage']}: {stage['rows']} {unit} = {parts or 'none'}; shards finished: {len(stage['finished_shards'])}"
              + (f"; DUPLICATES: {stage['duplicates']}" if stage["duplicates"] else "")
              + (f"; unreadable parts: {len(stage['unreadable_parts'])}" if stage["unreadable_parts"] else ""))
        for shard, shard_counts in stage["shards"].items():
            detail = ", ".join(f"{k} {v}" for k, v in sorted(shard_counts.items()))
            print(f"  shard {shard}: {sum(shard_counts.values())} = {detail}")
    return 0
