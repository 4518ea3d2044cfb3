"""Command line of the CPU OCR engine: ``python -m llm_ocr.servers.cpu`` / ``llm-ocr serve --engine cpu``."""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the server (aiohttp, rapidocr) is imported only when it runs
    from .server import CpuConfig


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} must be at least 1")
    return value


def _positive(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text} must be greater than 0")
    return value


def _fraction(text: str) -> float:
    value = float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"{text} is not a fraction between 0 and 1")
    return value


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    """The command-line parser (pass ``parser`` to add the options to a subcommand's)."""
    from .engine import default_threads

    p = parser or argparse.ArgumentParser(
        prog="python -m llm_ocr.servers.cpu",
        description="CPU OCR engine (RapidOCR, models from its wheel, no network) behind the same "
        "OpenAI-compatible API as vLLM serving DeepSeek-OCR. Text only: it finds no figures.",
    )
    net = p.add_argument_group("network")
    net.add_argument("--host", default="127.0.0.1", help="address to bind (default %(default)s)")
    net.add_argument("--port", type=int, default=8000, help="port to bind; 0 picks a free port (default %(default)s)")
    net.add_argument("--port-file", metavar="PATH", help="write the bound port to PATH (atomically) once listening")
    model = p.add_argument_group("model")
    model.add_argument(
        "--served-model-name",
        nargs="+",
        action="extend",
        metavar="NAME",
        dest="served_model_names",
        help="model name(s) to answer to (default deepseek-ai/DeepSeek-OCR, so clients pick the "
        "DeepSeek-OCR request recipe and get its grounding markup)",
    )
    model.add_argument("--max-model-len", type=_positive_int, default=8192,
                       help="context length: estimated prompt tokens + max_tokens must fit (default %(default)s)")
    model.add_argument("--tokens-per-char", type=_positive, default=0.3,
                       help="tokens reported per character of answer text (default %(default)s)")
    perf = p.add_argument_group("performance")
    perf.add_argument("--threads", type=_positive_int, default=default_threads(),
                      help="pages read at once, one RapidOCR instance each; more requests wait in a "
                      "queue (default: the usable cores, %(default)s)")
    perf.add_argument("--intra-op-threads", type=_positive_int, default=1,
                      help="onnxruntime threads per page (default %(default)s: pages in parallel "
                      "scale better than threads within a page)")
    ocr = p.add_argument_group("OCR (defaults are the measured best, see the README, 'The CPU engine')")
    ocr.add_argument("--cls", dest="use_cls", action="store_true",
                     help="run RapidOCR's 0/180 degree line direction classifier (its default; off here: "
                     "on upright pages it flips long lines and turns them into garbage)")
    ocr.add_argument("--det-limit-side-len", type=_positive_int, default=736,
                     help="detector input size bound in pixels (default %(default)s)")
    ocr.add_argument("--det-limit-type", choices=["min", "max"], default="min",
                     help="'min': the shorter side is scaled up to at least --det-limit-side-len; "
                     "'max': the longer side is scaled down to at most it (default %(default)s)")
    ocr.add_argument("--text-score", type=_fraction, default=0.5,
                     help="drop lines recognised with a lower confidence (default %(default)s)")
    ocr.add_argument("--det-model", metavar="ONNX", help="detection model file instead of the shipped one")
    ocr.add_argument("--rec-model", metavar="ONNX",
                     help="recognition model file instead of the shipped one (its character list "
                     "must be in the ONNX metadata, as in RapidOCR's models)")
    ocr.add_argument("--cls-model", metavar="ONNX", help="direction classifier file instead of the shipped one")
    p.add_argument("--request-log", metavar="PATH",
                   help="append one JSON line per chat request (body with images replaced by sha256 "
                   "and size, status, outcome, OCR time)")
    return p


def config_from_args(args: argparse.Namespace) -> CpuConfig:
    """A :class:`~llm_ocr.servers.cpu.server.CpuConfig` from parsed arguments."""
    from .engine import EngineOptions
    from .server import CpuConfig

    return CpuConfig(
        host=args.host,
        port=args.port,
        port_file=args.port_file,
        served_model_names=list(args.served_model_names or ["deepseek-ai/DeepSeek-OCR"]),
        max_model_len=args.max_model_len,
        threads=args.threads,
        tokens_per_char=args.tokens_per_char,
        request_log=args.request_log,
        engine=EngineOptions(
            intra_op_threads=args.intra_op_threads,
            use_cls=args.use_cls,
            det_model=args.det_model,
            rec_model=args.rec_model,
            cls_model=args.cls_model,
            det_limit_side_len=args.det_limit_side_len,
            det_limit_type=args.det_limit_type,
            text_score=args.text_score,
        ),
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` and run the server until SIGTERM/SIGINT; returns the exit code."""
    from .server import serve

    args = build_parser().parse_args(argv)
    return asyncio.run(serve(config_from_args(args)))
