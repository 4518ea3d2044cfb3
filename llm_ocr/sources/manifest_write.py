"""Writing a manifest: the documents of file and folder INPUTs, listed once, as sharded Parquet.

``llm-ocr plan INPUT... --write-manifest OUT/manifest/`` and ``llm-ocr launch`` write one, so
that shards read a list instead of each listing the folders (:mod:`.manifest` reads it). The
folder holds ``part-NNNNN.parquet`` files of :data:`ROWS_PER_FILE` rows, row groups of
:data:`ROWS_PER_GROUP` rows, columns ``id`` (the ``doc_id`` the listing gives, so outputs are
the same as listing the folder), ``url`` (absolute) and ``size`` (bytes, from the listing), and
``_manifest.json``, the index of the parts and their row counts, written last: a shard reads the
index and the footers of only the parts holding its rows. Page counts are not written: they
would mean opening every PDF (``llm-ocr plan`` samples them instead).
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq

from llm_ocr.storage.stores import store_options

from .listing import InputError, InputPlan, _FilesPlan
from .manifest import MANIFEST_INDEX

#: Where ``llm-ocr launch`` writes the listing of folder INPUTs, under ``OUT/_state/``; a shard
#: whose OUT holds the listing of its very INPUTs reads it instead of listing them.
MANIFEST_FOLDER = "manifest"
#: Rows per Parquet file: a shard reads the footers of the files holding its rows only.
ROWS_PER_FILE = 100_000
#: Rows per row group: the least a shard reads (1,000 short rows: some 100 KB).
ROWS_PER_GROUP = 1_000
SCHEMA = pa.schema([("id", pa.string()), ("url", pa.string()), ("size", pa.int64())])


@dataclass
class WrittenManifest:
    """What :func:`write_manifest` wrote."""

    url: str
    rows: int
    files: int
    bytes: int


def write_manifest(
    plan: InputPlan, out: str, *, inputs: list[str] | None = None, storage_options: dict | None = None,
) -> WrittenManifest:
    """Write the documents of ``plan`` (file and folder INPUTs only) as a manifest folder ``out``.

    ``inputs`` are recorded in the index (what was listed). Raises :class:`InputError` for a
    dataset or manifest INPUT, which is a list already.
    """
    for resolved in plan.plans:
        if not isinstance(resolved, _FilesPlan):
            raise InputError(f"{resolved.url} is a dataset or a manifest already: pass it as the INPUT itself")
    rows = [(doc_id, plan_file.source(path), size)
            for plan_file in plan.plans if isinstance(plan_file, _FilesPlan)
            for doc_id, (path, _), size in zip(plan_file.doc_ids, plan_file.files,
                                                plan_file.sizes or [None] * len(plan_file.files))]
    return write_rows(rows, out, inputs=inputs, storage_options=storage_options)


def write_rows(
    rows: Sequence[tuple[str, str, int | None]], out: str, *, inputs: list[str] | None = None,
    storage_options: dict | None = None,
) -> WrittenManifest:
    """Write ``(id, url, size)`` rows as a manifest folder ``out`` (parts, then the index)."""
    so = dict(storage_options or {})
    fs, root = fsspec.core.url_to_fs(out, **store_options(out, so))
    root = root.rstrip("/")
    fs.makedirs(root, exist_ok=True)
    entries: list[dict[str, Any]] = []
    for number, first in enumerate(range(0, max(len(rows), 1), ROWS_PER_FILE)):
        part = rows[first : first + ROWS_PER_FILE]
        name = f"part-{number:05d}.parquet"
        table = pa.table([[r[0] for r in part], [r[1] for r in part], [r[2] for r in part]], schema=SCHEMA)
        with fs.open(posixpath.join(root, name), "wb") as f:
            pq.write_table(table, f, row_group_size=ROWS_PER_GROUP, compression="zstd")
        entries.append({"name": name, "rows": len(part), "size": int(fs.size(posixpath.join(root, name)))})
    index = {"rows": len(rows), "files": entries, "inputs": list(inputs or [])}
    # Last: a folder without its index is not a manifest, so a half-written one is never read.
    with fs.open(posixpath.join(root, MANIFEST_INDEX), "wb") as f:
        f.write(json.dumps(index, indent=1).encode())
    return WrittenManifest(out, len(rows), len(entries), sum(e["size"] for e in entries))


def manifest_inputs(out: str, storage_options: dict | None = None) -> list[str] | None:
    """The INPUTs the manifest folder ``out`` was written for, or None if there is none there."""
    so = dict(storage_options or {})
    fs, root = fsspec.core.url_to_fs(out, **store_options(out, so))
    try:
        index = json.loads(fs.cat_file(posixpath.join(root.rstrip("/"), MANIFEST_INDEX)))
    except FileNotFoundError:
        return None
    except (ValueError, OSError):
        return None
    inputs = index.get("inputs") if isinstance(index, dict) else None
    return [str(i) for i in inputs] if isinstance(inputs, list) else None
