"""``llm-ocr bench-cascade``: routes and escalation against each model alone, on a mixed corpus
with known truth (docs/routes.md, "Measured")."""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
from pathlib import Path

from llm_ocr.argtypes import fraction, positive, positive_int
from llm_ocr.outcomes import ExitCode

log = logging.getLogger("llm_ocr")

CONFIGURATIONS = ("weak", "strong", "weak+escalate", "cascade")


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``bench-cascade`` sub-command."""
    from llm_ocr.bench.cascade import CascadeConfig

    d = CascadeConfig()
    parser = sub.add_parser(
        "bench-cascade",
        help="the cascade (text-layer route, a cheap model, escalation to a strong one) vs each model alone: "
        "word recall, pages per route, GPU-seconds, cost per 1,000 pages (simulated models, known truth)",
        description=(
            "Generate born-digital PDFs and scans of them, start two simulated models (a weak 1B that garbles, "
            "drops and loops on some pages, and a strong 7B seven times slower), run the real stages against "
            "them in four configurations (weak alone, strong alone, weak then Escalate, the text-layer route "
            "plus weak then Escalate) and print each one's word recall against the truth, pages per route, "
            "GPU-seconds and cost per 1,000 pages."
        ),
        epilog="exit status: 0 measured; 2 could not run.",
    )
    parser.add_argument("--documents", type=positive_int, default=d.documents, help="documents (default %(default)s)")
    parser.add_argument("--pages-per-document", type=positive_int, default=d.pages_per_document,
                        help="pages of each document (default %(default)s)")
    parser.add_argument("--scan-share", type=fraction, default=d.scan_share,
                        help="share of the documents that are scans (default %(default)s)")
    parser.add_argument("--garble-rate", type=fraction, default=d.garble_rate,
                        help="pages the weak model garbles (default %(default)s)")
    parser.add_argument("--drop-rate", type=fraction, default=d.drop_rate,
                        help="pages whose text the weak model mostly drops (default %(default)s)")
    parser.add_argument("--loop-rate", type=fraction, default=d.loop_rate,
                        help="pages the weak model loops on (default %(default)s)")
    parser.add_argument("--ramble-rate", type=fraction, default=d.ramble_rate,
                        help="images (pages and their crops) the weak model answers with plausible text that is "
                        "not theirs, never repeating, until max_tokens (default %(default)s)")
    parser.add_argument("--strong-decode-ms", type=positive, default=d.strong_decode_ms,
                        help="the strong model's time per output token of one sequence (default %(default)s)")
    parser.add_argument("--speed-ratio", type=positive, default=d.speed_ratio,
                        help="how many times faster the weak model is (default %(default)s: 7B / 1B)")
    parser.add_argument("--gpu-price-per-hour", type=positive, default=d.gpu_price_per_hour,
                        help="US$ per GPU-hour for the cost column (default %(default)s)")
    parser.add_argument("--workers", type=int, default=None, help="render worker processes (default: one per core)")
    parser.add_argument("--seed", type=int, default=d.seed,
                        help="seed of the corpus and the damage (default %(default)s)")
    parser.add_argument("--only", action="append", choices=CONFIGURATIONS, metavar="NAME",
                        help=f"run only this configuration, of {', '.join(CONFIGURATIONS)} (repeatable)")
    parser.add_argument("--work-dir", metavar="DIR", help="where the corpus and the runs go (default: temporary)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    """Handle ``llm-ocr bench-cascade``."""
    import asyncio

    from llm_ocr.bench.cascade import CascadeConfig, format_outcomes, run_cascade_bench

    config = CascadeConfig(
        documents=args.documents, pages_per_document=args.pages_per_document, scan_share=args.scan_share,
        seed=args.seed, strong_decode_ms=args.strong_decode_ms, speed_ratio=args.speed_ratio,
        garble_rate=args.garble_rate, drop_rate=args.drop_rate, loop_rate=args.loop_rate, ramble_rate=args.ramble_rate,
        gpu_price_per_hour=args.gpu_price_per_hour, workers=args.workers,
    )  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="llm-ocr-cascade-") as scratch:
        work = Path(args.work_dir) if args.work_dir else Path(scratch)
        outcomes = asyncio.run(run_cascade_bench(config, work, args.only))
    print(json.dumps([o.to_dict() for o in outcomes], indent=2) if args.json else format_outcomes(outcomes, config))
    sys.stdout.flush()
    return ExitCode.OK
