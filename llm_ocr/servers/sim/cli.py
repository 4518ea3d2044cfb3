"""A simulated OpenAI-compatible DeepSeek-OCR server (vLLM look-alike) for tests, benchmarks
and demos without a GPU.

Run it as its own process, like a real server::

    python -m llm_ocr.servers.sim --port 8000 --corpus docs/ --slots 64

It answers ``/health``, ``/v1/models``, ``/metrics`` and ``/v1/chat/completions`` the way
vLLM serving DeepSeek-OCR does (validation, error JSON, metric names), with latency from a
simple batch model, and faults on demand (``POST /sim/faults``) or at random rates. Pages of
PDFs given with ``--corpus`` are recognised and answered from their text layer; any other
image gets a deterministic synthetic page. See :mod:`llm_ocr.servers.sim.server` for the timing
model and :mod:`llm_ocr.testing` for a context manager that runs it in tests.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING

from . import FAULT_KINDS
from .metrics import parse_prometheus

if TYPE_CHECKING:  # the server (and aiohttp) is imported only when it runs
    from .server import SimConfig

__all__ = ["FAULT_KINDS", "build_parser", "config_from_args", "main", "parse_prometheus"]


def _fraction(text: str) -> float:
    value = float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"{text} is not a fraction between 0 and 1")
    return value


def _non_negative(text: str) -> float:
    value = float(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text} is negative")
    return value


def _positive(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text} must be greater than 0")
    return value


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} must be at least 1")
    return value


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    """The command-line parser (pass ``parser`` to add the options to a subcommand's)."""
    p = parser or argparse.ArgumentParser(
        prog="python -m llm_ocr.servers.sim",
        description="Simulated OpenAI-compatible DeepSeek-OCR server (vLLM look-alike) for tests "
        "and benchmarks without a GPU.",
    )
    net = p.add_argument_group("network")
    net.add_argument("--host", default="127.0.0.1", help="address to bind (default %(default)s)")
    net.add_argument("--port", type=int, default=0, help="port to bind; 0 picks a free port (default %(default)s)")
    net.add_argument("--port-file", metavar="PATH", help="write the bound port to PATH (atomically) once listening")
    model = p.add_argument_group("model")
    model.add_argument(
        "--served-model-name",
        nargs="+",
        action="extend",
        metavar="NAME",
        dest="served_model_names",
        help="model name(s) to answer to, repeatable (default deepseek-ai/DeepSeek-OCR)",
    )
    model.add_argument("--max-model-len", type=_positive_int, default=8192,
                       help="context length: prompt + max_tokens must fit (default %(default)s)")
    model.add_argument("--corpus", action="append", default=[], metavar="DIR_OR_FILE",
                       help="PDF file or folder (recursive) whose pages are answered from their text "
                       "layer; repeatable")
    model.add_argument("--tokens-per-char", type=_positive, default=0.3,
                       help="output tokens per character of answer text (default %(default)s)")
    model.add_argument("--output-tokens-mean", type=_non_negative, default=0.0, metavar="TOKENS",
                       help="give synthetic page answers a lognormal length with this mean in tokens, "
                       "fixed per image and --seed (a long tail, like real pages); 0 keeps their "
                       "natural length of a few hundred tokens (default %(default)s)")
    model.add_argument("--output-tokens-sigma", type=_non_negative, default=0.5, metavar="SIGMA",
                       help="sigma of the log of that length: 0.5 puts ~5%% of pages above twice the "
                       "mean (default %(default)s)")
    perf = p.add_argument_group("performance")
    perf.add_argument("--slots", type=_positive_int, default=64,
                      help="sequences decoded at once, like vLLM --max-num-seqs; more requests wait "
                      "in a queue (default %(default)s)")
    perf.add_argument("--prefill-ms", type=_non_negative, default=20.0,
                      help="time per request before its first token (default %(default)s)")
    perf.add_argument("--decode-ms-per-token", type=_non_negative, default=0.0,
                      help="base time per output token of one sequence (default %(default)s)")
    perf.add_argument("--load-slowdown", type=_non_negative, default=1.0,
                      help="per-token time is base * (1 + load_slowdown * running / slots), "
                      "re-evaluated as the batch changes (default %(default)s)")
    perf.add_argument("--instant", action="store_true", help="no latency at all (measures the client's ceiling)")
    perf.add_argument("--startup-delay", type=_non_negative, default=0.0, metavar="S",
                      help="seconds /health answers 503 before becoming ready (default %(default)s)")
    faults = p.add_argument_group("faults")
    faults.add_argument("--loop-rate", type=_fraction, default=0.0,
                        help="fraction of (image, prompt) pairs that loop until max_tokens, finish_reason "
                        "'length'; decided per image so retries loop again (default %(default)s)")
    faults.add_argument("--error-rate", type=_fraction, default=0.0,
                        help="fraction of requests answered HTTP 500 (default %(default)s)")
    faults.add_argument("--hang-rate", type=_fraction, default=0.0,
                        help="fraction of requests never answered (default %(default)s)")
    faults.add_argument("--reset-rate", type=_fraction, default=0.0,
                        help="fraction of requests whose connection is reset (default %(default)s)")
    faults.add_argument("--seed", type=int, default=0, help="seed of the random faults (default %(default)s)")
    p.add_argument("--request-log", metavar="PATH",
                   help="append one JSON line per chat request (body with images replaced by sha256 "
                   "and size, status, outcome)")
    return p


def config_from_args(args: argparse.Namespace) -> SimConfig:
    """A :class:`~llm_ocr.servers.sim.server.SimConfig` from parsed arguments."""
    from .server import SimConfig

    return SimConfig(
        host=args.host,
        port=args.port,
        port_file=args.port_file,
        served_model_names=list(args.served_model_names or ["deepseek-ai/DeepSeek-OCR"]),
        max_model_len=args.max_model_len,
        corpus=list(args.corpus),
        slots=args.slots,
        prefill_ms=args.prefill_ms,
        decode_ms_per_token=args.decode_ms_per_token,
        load_slowdown=args.load_slowdown,
        tokens_per_char=args.tokens_per_char,
        output_tokens_mean=args.output_tokens_mean,
        output_tokens_sigma=args.output_tokens_sigma,
        loop_rate=args.loop_rate,
        error_rate=args.error_rate,
        hang_rate=args.hang_rate,
        reset_rate=args.reset_rate,
        seed=args.seed,
        request_log=args.request_log,
        startup_delay=args.startup_delay,
        instant=args.instant,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` and run the server until SIGTERM/SIGINT; returns the exit code."""
    from .server import serve

    args = build_parser().parse_args(argv)
    return asyncio.run(serve(config_from_args(args)))


if __name__ == "__main__":
    raise SystemExit(main())
