"""``llm-ocr status OUT``: account for every page of an output location, without running anything.

The counting is :func:`llm_ocr.storage.reconcile.stage_status`; this module prints it, with
each stage's failed documents (the first 20, their errors, and where the rest are).
"""

from __future__ import annotations

import argparse
import json

from llm_ocr.page_routes import describe
from llm_ocr.storage import Storage
from llm_ocr.storage.claims import claims_summary
from llm_ocr.storage.reconcile import DOCUMENT_STAGES, STAGES, Failures, stage_status


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


def run(args: argparse.Namespace) -> int:
    """Handle ``llm-ocr status``."""
    options = json.loads(args.storage_options) if args.storage_options else {}
    out = Storage(args.output, options)
    report = [stage_status(out, stage) for stage in STAGES]
    report = [r for r in report if r["rows"] or r["finished_shards"]]
    groups = claims_summary(out)
    for stage in report:
        if stage["stage"] == "extract" and groups:  # the page flows that claim groups all write extract
            stage["work_groups"] = groups
    if args.json:
        print(json.dumps(report, indent=2, sort_keys=True))
        return 0
    if not report:
        print(f"{args.output}: no output yet")
        return 0
    named: dict[str, str] = {}  # failed documents an earlier stage named (one unreadable file fails in each)
    for stage in report:
        counts = stage["by_status"]
        unit = "documents" if stage["stage"] in DOCUMENT_STAGES else "pages"
        parts = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
        print(f"{stage['stage']}: {stage['rows']} {unit} = {parts or 'none'}; shards finished: "
              f"{len(stage['finished_shards'])}"
              + (f"; DUPLICATES: {stage['duplicates']}" if stage["duplicates"] else "")
              + (f"; unreadable parts: {len(stage['unreadable_parts'])}" if stage["unreadable_parts"] else ""))
        if any(route != "whole" for route in stage.get("read_as") or {}):
            print("  read as: " + "; ".join(describe(stage["read_as"])))
        if stage.get("routes"):
            print("  routes (finished shards): " + ", ".join(f"{k} {v}" for k, v in sorted(stage["routes"].items())))
        for model, counts in stage.get("models", {}).items():
            print(f"  {model}: read {int(counts.get('pages', 0))} page(s), {int(counts.get('used', 0))} used, "
                  f"{counts.get('busy_s', 0.0):.1f} s busy, {int(counts.get('completion_tokens', 0))} tokens out")
        labels: dict[str, int] = {}
        for shard, shard_counts in stage["shards"].items():
            detail = ", ".join(f"{k} {v}" for k, v in sorted(shard_counts.items()))
            speed = _speed(stage.get("speed", {}).get(shard), labels)
            print(f"  shard {shard}: {sum(shard_counts.values())} = {detail}{speed}")
        for label, number in labels.items():
            print(f"  [{number}] {label}")
        for line in Failures.from_dict(stage["stage"], stage["failed"]).lines(named, stage=False):
            print(f"  {line}")
    for flow, shards in groups.items():
        print(f"work groups ({'llm-ocr ' + flow}; docs/stragglers.md): who read each shard's page groups")
        for shard, entry in shards.items():
            own = shard.split("-")[0]
            readers = ", ".join(f"{n} by {'itself' if by == own else 'shard ' + by}"
                                for by, n in sorted(entry["done_by"].items()))
            line = f"  shard {shard}: {entry['done']} done" + (f" ({readers})" if readers else "")
            if entry["working"]:
                line += f"; {entry['working']} being read"
            if entry["free"]:
                line += f"; {entry['free']} released or with a lease run out (the next run takes them)"
            print(line)
    return 0


def _speed(speed: dict | None, labels: dict[str, int]) -> str:
    """``; 2.10 pages/s (estimate 2.31 [1])``: a finished shard's pages/s beside its plan's."""
    if not speed or speed.get("pages_per_s") is None:
        return ""
    estimate = speed.get("estimate") or {}
    ref = f" [{labels.setdefault(estimate['label'], len(labels) + 1)}]" if estimate.get("label") else ""
    guess = estimate.get("pages_per_s")
    said = f"estimate {guess:.2f}{ref}" if guess is not None else f"no estimate{ref}"
    return f"; {speed['pages_per_s']:.2f} pages/s ({said})"
