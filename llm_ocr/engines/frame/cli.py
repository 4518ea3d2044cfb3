"""The command-line options every frame server has, and the value types of its flags.

Both servers (``python -m llm_ocr.engines.sim``, ``python -m llm_ocr.engines.cpu``) take the
same network and model options, so that ``llm-ocr serve`` and the process manager start either
with one command-line contract (``--host --port --port-file --served-model-name
--max-model-len --tokens-per-char --request-log``).
"""

from __future__ import annotations

import argparse
from typing import Any

from llm_ocr.argtypes import positive, positive_int

DEFAULT_MODEL_NAME = "deepseek-ai/DeepSeek-OCR"


def add_frame_options(
    p: argparse.ArgumentParser, *, default_port: int, model_help: str, tokens_help: str, log_help: str
) -> argparse._ArgumentGroup:
    """Add the shared network and model options and ``--request-log``; returns the model group
    (for a server's own model options)."""
    net = p.add_argument_group("network")
    net.add_argument("--host", default="127.0.0.1", help="address to bind (default %(default)s)")
    net.add_argument("--port", type=int, default=default_port, help="port to bind; 0 picks a free port (default "
                                                                    "%(default)s)")
    net.add_argument("--port-file", metavar="PATH", help="write the bound port to PATH (atomically) once listening")
    model = p.add_argument_group("model")
    model.add_argument(
        "--served-model-name", nargs="+", action="extend", metavar="NAME", dest="served_model_names", help=model_help
    )
    model.add_argument("--max-model-len", type=positive_int, default=None,
                       help="context length: prompt + max_tokens must fit (default: the model family's, 8192 "
                       "for DeepSeek-OCR)")
    model.add_argument("--tokens-per-char", type=positive, default=0.3, help=f"{tokens_help} (default %(default)s)")
    p.add_argument("--request-log", metavar="PATH", help=log_help)
    return model


def frame_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The shared options' values, as keyword arguments of a :class:`~.app.FrameConfig`."""
    return {
        "host": args.host,
        "port": args.port,
        "port_file": args.port_file,
        "served_model_names": list(args.served_model_names or [DEFAULT_MODEL_NAME]),
        "max_model_len": args.max_model_len or 8192,
        "tokens_per_char": args.tokens_per_char,
        "request_log": args.request_log,
    }
