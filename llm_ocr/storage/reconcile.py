"""Account for every row of an output location from its Parquet parts and completion markers.

Reads only the ``status``/``doc_id``/``page``/``quarantined`` columns of each part, so it is
cheap on object storage too. ``llm-ocr status`` prints it; launchers count shards' rows with it.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

from llm_ocr.storage.parts import PART_RE, list_parts, parquet_file
from llm_ocr.storage.state import list_markers
from llm_ocr.storage.url import Storage

STAGES = ("extract", "escalate", "describe", "assemble", "fields")
#: Stages whose rows are documents, not pages.
DOCUMENT_STAGES = ("assemble", "fields")


def stage_status(out: Storage, stage: str) -> dict[str, Any]:
    """Rows by status per shard of one stage, plus duplicates and finished shards."""
    folder = out.child(stage)
    shards: dict[str, Counter[str]] = defaultdict(Counter)
    seen: Counter[tuple[str, int]] = Counter()
    key_column = "page" if stage not in DOCUMENT_STAGES else None
    unreadable = []
    for path in list_parts(folder):
        match = PART_RE.search(path)
        shard = f"{int(match.group(1)):05d}-of-{int(match.group(2)):05d}" if match else "?"
        try:
            columns = ["doc_id", "status"] + ([key_column, "quarantined"] if key_column else [])
            # ParquetFile.read skips a column a part lacks (parts written before "quarantined").
            table = parquet_file(folder.read_bytes(path)).read(columns=columns)
        except Exception:  # noqa: BLE001 - an unreadable part is reported, not fatal
            unreadable.append(folder.display(path))
            continue
        pages = table.column(key_column).to_pylist() if key_column else [0] * table.num_rows
        held = (table.column("quarantined").to_pylist() if "quarantined" in table.column_names
                else [None] * table.num_rows)
        for doc_id, status, page, quarantined in zip(table.column("doc_id").to_pylist(),
                                                     table.column("status").to_pylist(), pages, held):
            # A quarantined page is an error row counted in its own column (as the run's line does).
            shards[shard]["quarantined" if quarantined else status] += 1
            seen[(doc_id, page)] += 1
    markers = list_markers(out, stage)
    finished = sorted(f"{m.get('shard', 0):05d}-of-{m.get('num_shards', 1):05d}" for m in markers)
    routes: Counter[str] = Counter()
    models: dict[str, Counter[str]] = defaultdict(Counter)
    # Each finished shard's pages/s, beside what a plan estimated for its model and GPUs.
    speed = {f"{m.get('shard', 0):05d}-of-{m.get('num_shards', 1):05d}": {
        "pages_per_s": m.get("pages_per_s"), "estimate": m["estimate"]} for m in markers if m.get("estimate")}
    for marker in markers:  # how the finished shards' pages were read (markers written since routes)
        routes.update(marker.get("routes") or {})
        for model, counts in (marker.get("models") or {}).items():
            models[model].update({k: v for k, v in counts.items() if isinstance(v, (int, float))})
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
        "routes": dict(routes),
        "models": {model: dict(counts) for model, counts in sorted(models.items())},
        "speed": dict(sorted(speed.items())),
    }
