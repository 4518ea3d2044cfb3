"""``llm-ocr bench``: the Extract pipeline against a simulated vLLM, measured against the best
any client could do on that server (see docs/benchmarks.md)."""

from __future__ import annotations

import argparse
import logging
import sys
from typing import TYPE_CHECKING

from llm_ocr.argtypes import non_negative, positive_int
from llm_ocr.config import OptionError
from llm_ocr.engines.sim.cli import DECODE_DEFAULTS, add_decode_options
from llm_ocr.outcomes import ExitCode

if TYPE_CHECKING:  # imported when the command runs
    from llm_ocr.bench.config import BenchConfig
    from llm_ocr.bench.run import RunResult

log = logging.getLogger("llm_ocr")


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``bench`` sub-command."""
    from llm_ocr.bench import BenchConfig
    from llm_ocr.bench.ordering import WORKLOADS as ORDERING_WORKLOADS

    d = BenchConfig()
    parser = sub.add_parser(
        "bench",
        help="benchmark Extract against a simulated vLLM: pages/s, slot use, CPU, memory, vs a perfect client",
        description=(
            "Generate Letter pages (144 DPI) as PDFs, run the real Extract pipeline (worker processes, "
            "Parquet output) against the simulated vLLM server configured like a GPU engine, and report "
            "pages/s, tokens/s, the server's slot utilisation, client CPU per page, peak RSS, and the "
            "wall time over the lower bound (a perfect client on the same server, same requests)."
        ),
    )
    run = parser.add_argument_group("run")
    run.add_argument("--pages", type=positive_int, nargs="+", default=[d.pages],
                     help="pages in the corpus; several values run one after the other (default %(default)s)")
    run.add_argument("--image-format", nargs="+", choices=["jpeg", "png"], default=[d.image_format],
                     help="page image encoding; several values run each (default %(default)s)")
    run.add_argument("--workers", type=int, default=None, help="render worker processes (default: one per core)")
    run.add_argument("--max-in-flight", type=positive_int, default=None,
                     help="requests in flight at once (default: --slots plus a queue of a quarter, at least 8, "
                     "as the runner uses with vLLM)")
    run.add_argument("--max-tokens", type=positive_int, default=d.max_tokens,
                     help="max_tokens per request; looping pages stop here (default %(default)s)")
    run.add_argument("--truncation-retries", type=int, default=d.truncation_retries,
                     help="retries of a page that hit max_tokens (default %(default)s)")
    run.add_argument("--repeat", type=positive_int, default=1, help="runs per configuration (default %(default)s)")
    server = parser.add_argument_group("simulated server (the decode model)")
    add_decode_options(server, {name: getattr(d, name) for name in DECODE_DEFAULTS})
    losses = parser.add_argument_group("where GPU time is lost: each mechanism off, then on")
    losses.add_argument("--losses", action="store_true",
                        help="run the loss workloads (loops, 256 and 64 slots behind --endpoint, 1 vs 4 GPUs, a "
                        "1:61 page, dense pages behind 256 slots and their recall (DeepSeek-OCR at 4,096 and 8,192 "
                        "tokens of context, olmOCR-2, answers denser than the planner's guess), a long tail of long "
                        "pages at 64 "
                        "and 256 slots) each the old way and the new way, and print them side by side")
    losses.add_argument("--workload", action="append", metavar="NAME",
                        choices=["loops", "256 slots", "64 slots, long tail", "GPUs", "long page",
                                 "long page, olmOCR-2",
                                 "dense pages, 256 slots", "dense recall", "dense recall, DeepSeek-OCR 4096",
                                 "dense recall, DeepSeek-OCR 8192", "dense recall, olmOCR-2 8192",
                                 "dense recall, denser answers", "long tail, 64 slots", "long tail, 256 slots",
                                 *ORDERING_WORKLOADS],
                        help="with --losses or --ordering, run only this workload (repeatable)")
    ordering = parser.add_argument_group("the order pages are rendered and sent in (issue 46)")
    ordering.add_argument("--ordering", action="store_true",
                          help="run the ordering sweep (a long tail, longest pages last, mixed documents, scans "
                          "without a text layer, scans with a wrong OCR layer, born-digital and scans together) at 64 "
                          "and 256 slots, ranking pages once rendered and then from their PDFs before rendering; print "
                          "each estimate's rank correlation with the answers' lengths and the longest-first bound over "
                          "the wall time (--pages: pages per workload)")
    ordering.add_argument("--slots-sweep", type=positive_int, nargs="+", default=None, metavar="SLOTS",
                          help="with --ordering: the slot counts to run (default 64 256)")
    stragglers = parser.add_argument_group("stragglers (docs/stragglers.md)")
    stragglers.add_argument("--stragglers", action="store_true",
                            help="run --shards shard processes of llm-ocr extract, each against a simulated server of "
                            "its own, shard 0's --slow-factor times slower: static shards, then work groups; print the "
                            "wall times against the even-split bound (--pages: pages in all, default 3840)")
    stragglers.add_argument("--shards", type=positive_int, default=8, help="with --stragglers: shards (default 8)")
    stragglers.add_argument("--slow-factor", type=float, default=5.0,
                            help="with --stragglers: how many times slower shard 0's server is (default 5)")
    stragglers.add_argument("--slow-shards", type=positive_int, default=1,
                            help="with --stragglers: how many shards (the first ones) are slow (default 1)")
    stragglers.add_argument("--pages-per-doc", type=positive_int, default=1,
                            help="with --stragglers: pages per document (default 1)")
    stragglers.add_argument("--group-docs", type=positive_int, default=None,
                            help="with --stragglers: the shards' --group-docs (default: llm-ocr's)")
    stragglers.add_argument("--no-static", action="store_true",
                            help="with --stragglers: skip the run with static shards")
    stragglers.add_argument("--held-out", action="store_true",
                            help="with --stragglers: issue 46's shape instead: 8 shards of eight 4-page documents, "
                            "shard 0 5x slower, an even-split bound near 77 s (work groups only)")
    stragglers.add_argument("--sweep", action="store_true",
                            help="with --stragglers: sweep the shape instead (1, 2, 8, 64 and 800 work groups per "
                            "shard; one and two slow shards; 2x and 5x slower; work groups only) and print the worst")
    report = parser.add_argument_group("report")
    report.add_argument("--json", action="store_true", help="print the report as JSON on stdout")
    report.add_argument("--keep", action="store_true", help="keep each run's output folder (paths are printed)")
    report.add_argument("--fidelity", action="store_true",
                        help="also compare JPEG q95 with PNG: encode time, size, PSNR in the model's views")
    report.add_argument("--corpus-dir", metavar="DIR",
                        help="keep the generated corpus here and reuse it next time (default: a temporary folder)")
    report.add_argument("--work-dir", metavar="DIR", help="where runs write output and logs (default: temporary)")
    report.add_argument("--sample-interval", type=non_negative, default=d.sample_interval,
                        help="seconds between /metrics polls (default %(default)s)")
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    """Handle ``llm-ocr bench``."""
    from llm_ocr.bench import BenchConfig, dump_json, format_table, run_bench

    if args.workers is not None and args.workers < 0:
        raise OptionError("--workers must be 0 or more")
    if args.sample_interval <= 0:
        raise OptionError("--sample-interval must be greater than 0")
    config = BenchConfig(
        workers=args.workers,
        max_in_flight=args.max_in_flight,
        instant=args.instant,
        **{name: getattr(args, name) for name in DECODE_DEFAULTS},  # the decode model's options
        max_tokens=args.max_tokens,
        truncation_retries=args.truncation_retries,
        sample_interval=args.sample_interval,
    )

    if args.losses:
        return _losses(args, config)
    if args.ordering:
        return _ordering(args)
    if args.stragglers:
        return _stragglers(args, default_pages=BenchConfig().pages)

    def progress(result: RunResult) -> None:
        log.info(
            "run done: %d pages in %.1f s (%.2f pages/s)%s",
            result.pages, result.wall_s, result.pages_per_s,
            f", {result.wall_over_lower_bound:.3f} x the lower bound" if result.wall_over_lower_bound else "",
        )  # fmt: skip

    results, encoding = run_bench(
        config,
        pages=args.pages,
        image_formats=args.image_format,
        repeat=args.repeat,
        corpus_dir=args.corpus_dir,
        work_dir=args.work_dir,
        keep=args.keep,
        fidelity=args.fidelity,
        on_result=progress,
    )
    print(dump_json(results, encoding) if args.json else format_table(results, encoding))
    sys.stdout.flush()
    finished = all(r.exit_code in (ExitCode.OK, ExitCode.PAGES_FAILED) for r in results)
    return ExitCode.OK if finished else ExitCode.COULD_NOT_RUN


def _losses(args: argparse.Namespace, config: BenchConfig) -> int:
    import json
    from dataclasses import replace

    from llm_ocr.bench.losses import format_losses, run_losses

    def progress(name: str, label: str, result: RunResult) -> None:
        log.info("%s (%s): %d pages in %.1f s (%.2f pages/s)", name, label, result.pages, result.wall_s,
                 result.pages_per_s)

    comparisons = run_losses(
        replace(config, pages=args.pages[0]),
        corpus_dir=args.corpus_dir,
        work_dir=args.work_dir,
        only=args.workload,
        on_result=progress,
    )
    if args.json:
        print(json.dumps([{"workload": c.name, "lines": c.lines, "today": c.today.to_dict(), "new": c.new.to_dict()}
                          for c in comparisons], indent=2))
    else:
        print(format_losses(comparisons))
    sys.stdout.flush()
    finished = all(r.exit_code in (ExitCode.OK, ExitCode.PAGES_FAILED) for c in comparisons for r in (c.today, c.new))
    return ExitCode.OK if finished else ExitCode.COULD_NOT_RUN


def _ordering(args: argparse.Namespace) -> int:
    import json
    from dataclasses import asdict, replace

    from llm_ocr.bench.ordering import SLOTS, OrderingRun, base_config, format_ordering, run_ordering

    def progress(run: OrderingRun) -> None:
        fraction = f"{run.fraction:.3f}" if run.fraction is not None else "-"
        log.info("%s, %d slots, %s: %.1f s, %s of the longest-first bound", run.workload, run.slots, run.label,
                 run.result.wall_s, fraction)

    base = replace(base_config(args.pages[0], 0, args.workers), sample_interval=args.sample_interval)
    runs, cost = run_ordering(base, corpus_dir=args.corpus_dir, work_dir=args.work_dir, only=args.workload,
                              slots=args.slots_sweep or tuple(SLOTS), on_result=progress)
    if args.json:
        print(json.dumps({"runs": [{"workload": r.workload, "slots": r.slots, "label": r.label, "fraction": r.fraction,
                                    "order": r.order, "spearman": r.spearman, "pages_ranked": r.pages_ranked,
                                    "result": r.result.to_dict()} for r in runs],
                          "reading_cost": asdict(cost)}, indent=2))
    else:
        print(format_ordering(runs, cost))
    sys.stdout.flush()
    finished = all(r.result.exit_code in (ExitCode.OK, ExitCode.PAGES_FAILED) for r in runs)
    return ExitCode.OK if finished else ExitCode.COULD_NOT_RUN


def _stragglers(args: argparse.Namespace, default_pages: int) -> int:
    import json
    import tempfile
    from pathlib import Path

    from llm_ocr.bench.stragglers import (
        HELD_OUT,
        StragglerConfig,
        format_stragglers,
        format_sweep,
        run_stragglers,
        sweep,
    )

    if args.slow_factor < 1:
        raise OptionError("--slow-factor must be 1 or more")
    if args.slow_shards >= args.shards:
        raise OptionError("--slow-shards must be fewer than --shards")
    config = StragglerConfig(shards=args.shards, slow_factor=args.slow_factor, slow_shards=args.slow_shards,
                             pages_per_doc=args.pages_per_doc, group_docs=args.group_docs)
    if args.pages != [default_pages]:
        config.pages = args.pages[0]
    configs = sweep() if args.sweep else [HELD_OUT] if args.held_out else [config]
    static = not (args.no_static or args.sweep or args.held_out)
    results = []
    with tempfile.TemporaryDirectory(prefix="llm-ocr-stragglers-") as scratch:
        work = Path(args.work_dir) if args.work_dir else Path(scratch)
        for config in configs:
            runs = run_stragglers(config, work, static=static)
            results.append((config, runs))
            if args.sweep:  # a long sweep says how it goes
                log.info("%s", format_sweep([(config, runs[-1])]).splitlines()[1])
    if args.json:
        print(json.dumps([{"config": c.__dict__, "runs": [r.to_dict() for r in runs]} for c, runs in results],
                         indent=2))
    elif args.sweep:
        print(format_sweep([(c, runs[-1]) for c, runs in results]))
    else:
        print(format_stragglers(*results[0]))
    sys.stdout.flush()
    every = [r for _, runs in results for r in runs]
    finished = all(code == 0 for r in every for code in r.exit_codes) and all(r.duplicates == 0 for r in every)
    return ExitCode.OK if finished else ExitCode.COULD_NOT_RUN
