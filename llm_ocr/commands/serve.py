"""``llm-ocr serve``: run a model server in the foreground.

``--engine vllm`` starts vLLM with the recipe of ``--model``'s family and a GPU preset and babysits it
(restarts on a crash, kills its whole process group on exit); ``--engine sim`` and
``--engine cpu`` run the simulated server and the CPU OCR engine, whose own options follow.
"""

from __future__ import annotations

import argparse
import asyncio
import shlex
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from llm_ocr.config import OptionError, add_options, fragment_flags, join_fragments, plain_help, resolve_options
from llm_ocr.serving.open import EndpointError, ServerOptions, choose_engine
from llm_ocr.vlm.recipes import DEFAULT_MODEL

if TYPE_CHECKING:
    from llm_ocr.gpu_presets import GpuPreset


def build_parser() -> argparse.ArgumentParser:
    """Options of ``llm-ocr serve --engine vllm`` (unknown options go to vLLM)."""
    parser = argparse.ArgumentParser(
        prog="llm-ocr serve",
        description="Run a model server in the foreground. Unknown options are passed to vLLM "
        "(--engine vllm) or to the simulated/CPU server (--engine sim|cpu: see --engine sim --help).",
    )
    parser.add_argument("--model", default=DEFAULT_MODEL, help="model to serve (also its served name)")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--port", type=int, default=8000, help="port to listen on")
    add_options(parser, ServerOptions)
    return plain_help(parser)


def main(argv: Sequence[str]) -> int:
    """Entry point of ``llm-ocr serve`` (argv without the sub-command)."""
    argv = list(argv)
    if "--engine" in argv and argv[argv.index("--engine") + 1 : argv.index("--engine") + 2] in (["sim"], ["cpu"]):
        at = argv.index("--engine")
        engine, rest = argv[at + 1], argv[:at] + argv[at + 2 :]
        if engine == "sim":
            from llm_ocr.engines.sim.cli import main as sim_main

            return sim_main(rest) or 0
        from llm_ocr.engines.cpu import main as cpu_main

        return cpu_main(rest) or 0
    parser = build_parser()
    args, unknown = parser.parse_known_args(join_fragments(argv, fragment_flags(parser)))
    try:
        options = resolve_options(ServerOptions, args)
        engine, _why, preset = choose_engine(options.model_copy(update={"engine": options.engine if options.engine != "auto" else "vllm"}))  # noqa: E501 - not wrapped yet
    except (OptionError, EndpointError) as exc:
        print(f"llm-ocr serve: {exc}", file=sys.stderr)
        return 2
    return asyncio.run(_serve_vllm(args, options, preset, unknown))


async def _serve_vllm(
    args: argparse.Namespace, options: ServerOptions, preset: GpuPreset | None, unknown: list[str]
) -> int:
    import signal

    from llm_ocr.serving.command_lines import vllm_command
    from llm_ocr.serving.vllm.presets import preset_for
    from llm_ocr.serving.vllm.process import ManagedServer, ServerFailed

    command = vllm_command(
        args.model,
        host=args.host,
        port=args.port,
        preset=preset or preset_for(None),
        extra_args=shlex.split(options.server_args) + unknown,
        server_command=shlex.split(options.server_command),
    )
    server = ManagedServer(
        command,
        host=args.host,
        port=args.port,
        log_path=".llm-ocr/logs/vllm-serve.log",
        startup_timeout=options.server_startup_timeout,
        max_restarts=options.server_max_restarts,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    try:
        async with server:
            print(f"vLLM ready on {server.base_url} (log: {server.log_path}); Ctrl-C to stop", file=sys.stderr)
            while not stop.is_set():
                waiter = asyncio.create_task(stop.wait())
                await asyncio.wait({waiter}, timeout=5)
                waiter.cancel()
                await server.wait_ready()  # restarts a crashed server, raises when out of restarts
    except ServerFailed as exc:
        print(f"llm-ocr serve: {exc}", file=sys.stderr)
        return 2
    return 0
