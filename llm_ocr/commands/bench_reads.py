"""``llm-ocr bench-reads``: bytes each shard of a dataset INPUT reads against its share, and the
time to its first page (see docs/datasets.md)."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from llm_ocr.argtypes import positive_int as _positive
from llm_ocr.config import OptionError
from llm_ocr.options import DatasetOptions
from llm_ocr.sources import InputError


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``bench-reads`` sub-command."""
    parser = sub.add_parser(
        "bench-reads",
        help="bytes a shard of a dataset INPUT reads vs its share, and time to its first page",
        description=(
            "For each --num-shards N and --shard-index I: plan the INPUT as a shard job does (every Parquet "
            "footer), list shard I of N to the end, and report bytes read (footers, row groups) against the "
            "shard's share (dataset bytes / N), requests, and the time to the first page ready to send. "
            "Without INPUT, a FineVision-shaped dataset is generated and served over HTTP on 127.0.0.1 by a "
            "server that counts the bytes it sends. --plan N prints how an N-shard plan splits the dataset, "
            "from the footers alone."
        ),
    )
    parser.add_argument(
        "inputs", nargs="*", metavar="INPUT", help="Parquet dataset folder/file/URL or hf://datasets/OWNER/NAME"
    )
    parser.add_argument("--num-shards", type=_positive, nargs="+", default=[1, 8], help="shard counts to measure "
                                                                                        "(default: 1 8)")
    parser.add_argument("--shard-index", type=int, nargs="+", default=[0], help="shards to measure for each count "
                                                                                "(default: 0)")
    parser.add_argument("--plan", type=_positive, nargs="*", default=[], metavar="N", help="also print the N-shard "
                                                                                           "plan from footers")
    parser.add_argument("--config", default=None, help="dataset configuration (Hub datasets)")
    parser.add_argument("--split", default="train", help="dataset split (default: train)")
    parser.add_argument("--image-column", default=None, help="column of the page images (default: found)")
    parser.add_argument("--storage-options", default=None, help="JSON object of fsspec storage options")
    generate = parser.add_argument_group("generated dataset (without INPUT)")
    generate.add_argument("--files", type=_positive, default=16, help="Parquet files (default %(default)s)")
    generate.add_argument("--rows", type=_positive, nargs=2, default=[40, 120], metavar=("MIN", "MAX"),
                          help="rows per file, drawn between MIN and MAX (default 40 120)")
    generate.add_argument("--row-group-rows", type=_positive, default=2,
                          help="rows per row group (default %(default)s)")
    generate.add_argument("--image-side", type=_positive, nargs=2, default=[80, 200], metavar=("MIN", "MAX"),
                          help="page image side in pixels, one per file (default 80 200)")
    generate.add_argument("--seed", type=int, default=0, help="seed of the generated dataset (default %(default)s)")
    generate.add_argument("--corpus-dir", metavar="DIR", help="keep the generated dataset here and reuse it")
    parser.add_argument("--json", action="store_true", help="print the report as JSON on stdout")
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    """Handle ``llm-ocr bench-reads``."""
    from llm_ocr.bench.reads import dump_json, format_plan, format_reads, measure_shard, plan_report

    for count in args.num_shards:
        bad = [i for i in args.shard_index if not 0 <= i < count]
        if bad:
            raise OptionError(f"--shard-index {bad[0]} is out of range for --num-shards {count}")
    try:
        so = json.loads(args.storage_options) if args.storage_options else None
    except json.JSONDecodeError as exc:
        raise OptionError(f"--storage-options must be JSON: {exc}") from exc
    dataset = DatasetOptions(config=args.config, split=args.split, image_column=args.image_column)
    import datasets  # noqa: F401 - imported once here, so the first shard's times do not include it
    with _dataset(args) as (inputs, counter):
        try:
            results = [
                measure_shard(inputs, count, index, dataset=dataset, storage_options=so, served=counter)
                for count in args.num_shards
                for index in args.shard_index
            ]
            plans = [plan_report(inputs, count, dataset=dataset, storage_options=so) for count in args.plan]
        except InputError as exc:
            raise OptionError(str(exc)) from exc
    if args.json:
        print(dump_json(results, plans))
    else:
        print(f"input: {' '.join(inputs)}")
        print(format_reads(results))
        for report in plans:
            print(format_plan(report))
    sys.stdout.flush()
    return 0


@contextlib.contextmanager
def _dataset(args: argparse.Namespace) -> Iterator[tuple[list[str], Callable[[], int] | None]]:
    """The INPUTs given, or a generated dataset served over HTTP with the server's byte count."""
    if args.inputs:
        yield list(args.inputs), None
        return
    from llm_ocr.bench.file_server import CountingFileServer
    from llm_ocr.bench.finevision import write_finevision

    with contextlib.ExitStack() as stack:
        root = Path(args.corpus_dir) if args.corpus_dir else Path(stack.enter_context(tempfile.TemporaryDirectory()))
        folder = root / "finevision"
        if not any(folder.glob("*.parquet")):
            write_finevision(
                folder, files=args.files, rows=tuple(args.rows), row_group_rows=args.row_group_rows,
                image_side=tuple(args.image_side), seed=args.seed,
            )  # fmt: skip
        server = stack.enter_context(CountingFileServer(root))
        yield [server.url + "finevision/"], lambda: server.counts().bytes
