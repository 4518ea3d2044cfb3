"""The ``llm-ocr`` command line. Every option is also an ``LLM_OCR_*`` environment variable.

Whatever the command, a reader of its output that goes away early (``llm-ocr status OUT | head``)
ends it quietly with :data:`BROKEN_PIPE_EXIT`, and an option whose value is a piece of a command
line takes a value that starts with ``-`` (``--server-args "--enforce-eager"``:
:func:`llm_ocr.config.join_fragments`).
"""

from __future__ import annotations

import argparse
import atexit
import importlib
import logging
import os
import sys
import threading
from collections.abc import Callable, Sequence
from typing import NoReturn

from llm_ocr.config import OptionError, fragment_flags, join_fragments, plain_help
from llm_ocr.outcomes import ExitCode

log = logging.getLogger("llm_ocr")

#: The exit status of a command whose standard output was closed under it (``| head``): 128 +
#: SIGPIPE (13), what the shell reports for a command that signal ended. Not 1, Python's own
#: status on EPIPE: for llm-ocr's stages 1 means that pages failed.
BROKEN_PIPE_EXIT = 141

#: Sub-command modules, in the order ``--help`` lists them; each has ``register(subparsers)``.
COMMAND_MODULES = (
    "llm_ocr.commands.stage",  # run, extract, describe, assemble, fields: one per stage of the stage table
    "llm_ocr.commands.report",
    "llm_ocr.commands.export",
    "llm_ocr.commands.bench",
    "llm_ocr.commands.bench_reads",
    "llm_ocr.commands.bench_cascade",
    "llm_ocr.commands.status",
    "llm_ocr.commands.plan",
    "llm_ocr.commands.models",
    "llm_ocr.commands.bench_accuracy",
    "llm_ocr.commands.bench_quality",
    "llm_ocr.commands.compare",
    "llm_ocr.commands.launch",
    "llm_ocr.commands.service",  # service, worker
)

#: The module that registers each command other than the stages' (whose names are the stage
#: table's): a command line names one command, and only its module is imported to parse it. A
#: shard of ``llm-ocr extract`` then starts without the report's, the launchers' and the
#: benchmarks' imports (issue 46: many shards starting at once on a busy machine).
#: ``tests/test_command_line.py`` checks this against what the modules register.
COMMAND_MODULE_OF = {
    "report": "llm_ocr.commands.report",
    "export": "llm_ocr.commands.export",
    "bench": "llm_ocr.commands.bench",
    "bench-reads": "llm_ocr.commands.bench_reads",
    "bench-cascade": "llm_ocr.commands.bench_cascade",
    "status": "llm_ocr.commands.status",
    "plan": "llm_ocr.commands.plan",
    "models": "llm_ocr.commands.models",
    "bench-accuracy": "llm_ocr.commands.bench_accuracy",
    "bench-quality": "llm_ocr.commands.bench_quality",
    "compare": "llm_ocr.commands.compare",
    "launch": "llm_ocr.commands.launch",
    "jobs": "llm_ocr.commands.launch",
    "service": "llm_ocr.commands.service",
    "worker": "llm_ocr.commands.service",
}


def _serve_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "serve",
        help="run a model server in the foreground: vllm (the model family's recipe), cpu, or sim",
        add_help=False,
    )
    parser.add_argument("--engine", default="auto", choices=["auto", "vllm", "cpu", "sim"], help="which server to run")
    parser.set_defaults(handler=None, serve=True)


def _module_of(command: str) -> str | None:
    """The module that registers ``command``, or None for a name that is no command."""
    if command in COMMAND_MODULE_OF:  # the stage table is not needed to find it
        return COMMAND_MODULE_OF[command]
    from llm_ocr.stage_table import STAGES

    return "llm_ocr.commands.stage" if command in STAGES else None


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The argument parser of ``llm-ocr``; with ``command``, a known command's name, only that
    command's (the same parse of its command line, without importing every other command)."""
    module = _module_of(command) if command else None
    parser = argparse.ArgumentParser(
        prog="llm-ocr",
        description="Batch OCR of PDFs and page images into Markdown, figures and captions.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True)
    for name in [module] if module else COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    _serve_parser(sub)
    return plain_help(parser)


def _setup_logging(verbose: bool) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
        stream=sys.stderr,
    )
    # Third-party request logs would print every request (and URLs with tokens) at INFO.
    for noisy in ("httpx", "httpx2", "openai", "urllib3", "botocore", "aiobotocore", "fsspec", "datasets"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    """``llm-ocr ARGV`` parsed (exits on a usage error or ``--help``, as argparse does), with
    every flag whose value is a piece of a command line joined to that value first."""
    # The first word that is not a flag names the command (``-v`` is the only flag before it).
    command = next((word for word in argv if not word.startswith("-")), None)
    parser = build_parser(command)
    return parser.parse_args(join_fragments(argv, fragment_flags(parser)))


def main(argv: Sequence[str] | None = None, *, own_process: bool = False) -> int:
    """Entry point of the ``llm-ocr`` console script. ``own_process``: this process is the
    command line's own, with no caller's code in it (:func:`run`)."""
    try:
        try:
            return _main(list(sys.argv[1:] if argv is None else argv), own_process)
        finally:  # --help's exit too: flushed here, not at exit, where a closed pipe cannot be handled
            sys.stdout.flush()
    except BrokenPipeError:
        # Python's recipe (https://docs.python.org/3/library/signal.html#note-on-sigpipe): what is
        # still buffered for stdout goes to devnull, so the flush at exit cannot fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return BROKEN_PIPE_EXIT


def run() -> NoReturn:
    """Entry point of the ``llm-ocr`` console script and ``python -m llm_ocr.cli``: :func:`main`,
    then the process ends without the interpreter's teardown (:func:`exit_without_teardown`).
    Only the command line's process ends this way; :func:`main` and the Python API return.
    In this process, pyarrow does not import pandas to ask whether a list is a pandas object
    (:mod:`llm_ocr.storage.arrow_alone`): the commands that read pages write parts."""
    exit_without_teardown(main(own_process=True))


def exit_without_teardown(code: int) -> NoReturn:
    """End the process with ``code`` once what it wrote is written, skipping the interpreter's
    teardown: freeing every object and a last garbage collection, which took a shard 7-15 s of
    wall time after its completion marker on a busy machine (docs/stragglers.md; one final
    collection 9.4 s at load 39), a straggler's tail made of nothing.

    A command's handler returns only once its parts and markers are written and its servers,
    pools and writers are closed. What the interpreter would still do that matters is done
    here: the ``atexit`` handlers (logging's flush, multiprocessing's reaping of children,
    temporary folders' removal) and the standard streams' flush. If a thread that is not a
    daemon is still running, the interpreter's own exit joins it first, as always.
    """
    if any(t.is_alive() and not t.daemon for t in threading.enumerate() if t is not threading.main_thread()):
        sys.exit(code)
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe (main() handled it) or a closed stream: nothing to flush to
            pass
    os._exit(int(code))


def _main(argv: list[str], own_process: bool) -> int:
    if argv[:1] == ["serve"]:
        _setup_logging("-v" in argv or "--verbose" in argv)
        return _serve(argv[1:])
    args = parse_args(argv)
    _setup_logging(args.verbose)
    if own_process and (args.command not in COMMAND_MODULE_OF or args.command in ("service", "worker")):
        # The stages, the service and its workers write parts (Parquet from lists).
        from llm_ocr.storage.arrow_alone import skip_pandas_check

        skip_pandas_check()
    handler: Callable[[argparse.Namespace], int] = args.handler
    try:
        _fetch_secrets()
        return handler(args)
    except OptionError as exc:
        log.error("%s", exc)
        return ExitCode.COULD_NOT_RUN


def _fetch_secrets() -> None:
    """Secrets named in ``LLM_OCR_AWS_SECRET_*`` (SageMaker jobs), fetched before any command runs."""
    from llm_ocr.container.aws_secrets import SecretFetchError, fetch_into_environment, wanted_secrets

    if not wanted_secrets():
        return
    try:
        names = fetch_into_environment()
    except SecretFetchError as exc:
        raise OptionError(str(exc)) from exc
    log.info("fetched %s from AWS Secrets Manager", ", ".join(names))


def _serve(argv: list[str]) -> int:
    from llm_ocr.commands.serve import main as serve_main

    return serve_main(argv)


if __name__ == "__main__":
    run()
