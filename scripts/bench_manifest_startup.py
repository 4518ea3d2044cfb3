"""Start-up of one shard: from a manifest of N rows, and from listing a folder of N files.

    .venv/bin/python scripts/bench_manifest_startup.py --rows 100000 1000000 --folder 20000

For each size it writes a synthetic input under a temporary folder (manifest rows name documents
that need not exist: start-up reads no document), then runs a fresh Python process that imports
llm-ocr, resolves the INPUT and lists shard ``--shard`` of ``--num-shards``' documents, the point
where the shard knows what to read, and prints that process's wall seconds and peak RSS
(``VmHWM``; Linux). ``import`` alone is measured too, the floor of every line.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
from llm_ocr.sources import plan_inputs
inp, num_shards, shard = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
docs = 0
if inp != "-":
    plan = plan_inputs([inp])
    size = plan.shard_size(num_shards, shard)
    docs = sum(1 for _ in plan.documents(num_shards, shard))
    assert size in (None, docs), (size, docs)
seconds = time.perf_counter() - t0
# VmHWM, this process's peak RSS: ru_maxrss would carry the parent's across fork and exec.
hwm = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print(json.dumps({"seconds": seconds, "docs": docs, "peak_mb": hwm / 1024}))
"""


def measure(inp: str, num_shards: int, shard: int) -> dict:
    """One fresh process's start-up on ``inp`` ("-": the import alone)."""
    out = subprocess.run([sys.executable, "-c", CHILD, inp, str(num_shards), str(shard)], check=True,
                         capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def parquet_manifest(folder: str, rows: int) -> str:
    from llm_ocr.sources.manifest_write import write_rows

    url = os.path.join(folder, f"manifest-{rows}")
    write_rows([(f"d{i:09d}.pdf", f"s3://bucket/docs/d{i:09d}.pdf", 100_000 + i) for i in range(rows)], url)
    return url


def jsonl_manifest(folder: str, rows: int) -> str:
    path = os.path.join(folder, f"manifest-{rows}.jsonl")
    with open(path, "w") as f:
        for i in range(rows):
            f.write(json.dumps({"url": f"s3://bucket/docs/d{i:09d}.pdf", "size": 100_000 + i}) + "\n")
    return path


def file_folder(folder: str, files: int) -> str:
    root = os.path.join(folder, f"folder-{files}")
    for i in range(files):
        sub = os.path.join(root, f"{i // 1000:04d}")
        os.makedirs(sub, exist_ok=True)
        with open(os.path.join(sub, f"d{i:09d}.pdf"), "wb"):
            pass
    return root


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, nargs="*", default=[100_000, 1_000_000])
    parser.add_argument("--jsonl", type=int, nargs="*", default=[], help="JSONL manifests of these many rows too")
    parser.add_argument("--folder", type=int, nargs="*", default=[], help="folders of these many (empty) files")
    parser.add_argument("--num-shards", type=int, default=1000)
    parser.add_argument("--shard", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cases = [("import only", "-", 0)]
        cases += [(f"Parquet manifest, {n:,} rows", parquet_manifest(tmp, n), n) for n in args.rows]
        cases += [(f"JSONL manifest, {n:,} rows", jsonl_manifest(tmp, n), n) for n in args.jsonl]
        cases += [(f"folder listing, {n:,} files", file_folder(tmp, n), n) for n in args.folder]
        print(f"shard {args.shard} of {args.num_shards}, Python {sys.version.split()[0]}, {os.cpu_count()} CPUs")
        for name, inp, _ in cases:
            got = measure(inp, args.num_shards, args.shard)
            print(f"{name:36s} {got['seconds']:7.2f} s  {got['peak_mb']:7.1f} MB peak  {got['docs']:,} documents")


if __name__ == "__main__":
    main()
