"""The fields rows for people who work in spreadsheets: JSON Lines and CSV files.

``--export-jsonl`` writes ``OUT/fields.jsonl`` (one JSON object per document, ``fields`` as an
object), ``--export-csv`` writes ``OUT/fields.csv`` (one line per document, the same columns as
the Parquet rows; lists and ``fields`` as JSON text; UTF-8 with a byte-order mark so spreadsheet
programs read accents right). A run of several shards writes one file per shard,
``OUT/fields-SHARD-of-N.jsonl``. Each file is rewritten whole, atomically, from every row the
shard has (this run's and earlier runs'), in document order.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
from collections.abc import Iterable
from typing import Any

from llm_ocr.storage import Storage


def export_name(shard: int, num_shards: int, suffix: str) -> str:
    """``fields.csv`` for a run of one shard, else ``fields-00003-of-00016.csv``."""
    return f"fields.{suffix}" if num_shards == 1 else f"fields-{shard:05d}-of-{num_shards:05d}.{suffix}"


def _plain(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        return value.isoformat()
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def jsonl_bytes(rows: Iterable[dict[str, Any]]) -> bytes:
    """One JSON object per row; ``fields`` parsed into an object."""
    lines = []
    for row in rows:
        item = _plain(dict(row))
        if isinstance(item.get("fields"), str):
            item["fields"] = json.loads(item["fields"])
        lines.append(json.dumps(item, ensure_ascii=False))
    return ("\n".join(lines) + ("\n" if lines else "")).encode("utf-8")


def csv_bytes(rows: Iterable[dict[str, Any]], columns: list[str]) -> bytes:
    """A CSV file of ``rows`` with ``columns``; lists as JSON text, dates ISO, nulls empty."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\r\n")
    writer.writerow(columns)
    for row in rows:
        cells = []
        for name in columns:
            value = _plain(row.get(name))
            if isinstance(value, (list, dict)):
                value = json.dumps(value, ensure_ascii=False)
            elif isinstance(value, bool):
                value = "true" if value else "false"
            cells.append("" if value is None else value)
        writer.writerow(cells)
    return ("\ufeff" + buffer.getvalue()).encode("utf-8")


def write_exports(out: Storage, rows: list[dict[str, Any]], columns: list[str], shard: int, num_shards: int, *,
                  jsonl: bool, csv_: bool) -> list[str]:
    """Write the asked-for exports of one shard's rows; returns the paths written."""
    ordered = sorted(rows, key=lambda r: (r.get("doc_index") if r.get("doc_index") is not None else 2**62, r["doc_id"]))
    written = []
    if jsonl:
        path = out.path(export_name(shard, num_shards, "jsonl"))
        out.write_atomic(path, jsonl_bytes(ordered))
        written.append(path)
    if csv_:
        path = out.path(export_name(shard, num_shards, "csv"))
        out.write_atomic(path, csv_bytes(ordered, columns))
        written.append(path)
    return written
