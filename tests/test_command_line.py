"""What the command line does the same way for every command: a reader of its output that goes
away early, a flag whose value is a piece of a command line, a run given nothing to read."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from llm_ocr.cli import COMMAND_MODULES, build_parser, parse_args
from llm_ocr.config import resolve_options
from llm_ocr.options import EscalateOptions, ServerOptions
from tests.conftest import REPO, run_cli
from tests.waiting import HANG_GUARD_S


@pytest.mark.parametrize("command", [["status", "OUT"], ["run", "--help"]], ids=["a handler's output", "--help"])
def test_a_reader_that_goes_away_ends_any_command_quietly(command: list[str], tmp_path: Path) -> None:
    """``llm-ocr status OUT | head``: once ``head`` has its lines and exits, the next write fails
    (EPIPE). Here the pipe's read end is closed before the command starts, so it fails for certain."""
    argv = [str(tmp_path / "out") if word == "OUT" else word for word in command]
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        done = subprocess.run([sys.executable, "-m", "llm_ocr.cli", *argv], stdout=write_end, stderr=subprocess.PIPE,
                              text=True, timeout=HANG_GUARD_S, cwd=REPO)
    finally:
        os.close(write_end)
    assert done.returncode == 141, done.stderr  # 128 + SIGPIPE, as the shell reports a command SIGPIPE ended
    assert done.stderr == ""  # no traceback, no "Exception ignored ... BrokenPipeError"


@pytest.mark.parametrize(
    ("argv", "option", "value"),
    [
        (["run", "in", "--output", "o", "--server-args", "--instant", "--engine", "sim"], "server_args", "--instant"),
        (["extract", "in", "--output", "o", "--server-args", "--a 1 --b"], "server_args", "--a 1 --b"),
        (["run", "in", "--output", "o", "--escalate-server-args", "--enforce-eager"], "escalate_server_args",
         "--enforce-eager"),
        (["bench-accuracy", "--engine-args", "--threads=2"], "engine_args", "--threads=2"),
    ],
)
def test_a_flag_whose_value_is_a_command_line_takes_a_value_that_starts_with_a_dash(
    argv: list[str], option: str, value: str
) -> None:
    """argparse alone refuses ``--server-args --instant`` ("expected one argument"); only
    ``--server-args=--instant`` passed."""
    assert getattr(parse_args(argv), option) == value


def test_the_value_after_a_double_dash_is_left_alone() -> None:
    args = parse_args(["run", "--output", "o", "--", "--server-args"])
    assert args.inputs == ["--server-args"] and args.server_args is None


def test_server_args_from_the_environment_still_count_and_a_flag_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLM_OCR_SERVER_ARGS", "--instant --slots 4")
    assert resolve_options(ServerOptions, parse_args(["run", "in", "--output", "o"])).server_args == "--instant --slots 4"
    given = parse_args(["run", "in", "--output", "o", "--server-args", "--slots 8"])
    assert resolve_options(ServerOptions, given).server_args == "--slots 8"
    assert resolve_options(EscalateOptions, given).escalate_server_args is None


def test_a_run_given_no_input_says_so_first_and_how() -> None:
    """It said only ``--output: Field required``: the INPUT, what the run reads, was never named."""
    done = run_cli("run")
    assert done.returncode == 2, done.stderr
    said = done.stderr
    assert "no INPUT given" in said and "llm-ocr run INPUT... --output OUT" in said, said
    assert said.index("no INPUT given") < said.index("--output: required"), said
    assert "Field required" not in said


def test_a_command_line_is_parsed_by_the_module_that_registers_its_command() -> None:
    """A command line builds only its own command's parser (not every command's: their imports
    cost a shard a quarter of a CPU-second as it starts). Each name leads to the module that
    registers it and to nothing else."""
    import argparse
    import importlib

    for module in COMMAND_MODULES:
        sub = argparse.ArgumentParser().add_subparsers()
        importlib.import_module(module).register(sub)
        for command in sub.choices:
            built = build_parser(command)._subparsers._group_actions[0].choices  # type: ignore[union-attr]
            assert set(built) == {*sub.choices, "serve"}, command


def test_the_command_line_ends_without_the_interpreters_teardown_but_with_its_exit_handlers(tmp_path: Path) -> None:
    """A shard took 7-15 s after its completion marker to exit on a busy machine, in the
    interpreter's teardown (docs/stragglers.md). The command line's process skips it: no object is
    finalized at exit (the canary), but what the exit must still do is done: the ``atexit``
    handlers run (logging's flush, multiprocessing's reaping) and buffered output is written."""
    code = (
        "import atexit, sys\n"
        "from llm_ocr import cli\n"
        "class Canary:\n"
        "    def __del__(self): print('finalized', flush=True)\n"
        "canary = Canary()\n"
        "atexit.register(print, 'atexit ran')\n"
        "print('buffered', end=' ')\n"
        f"sys.argv = ['llm-ocr', 'status', {str(tmp_path)!r}]\n"
        "cli.run()\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=HANG_GUARD_S, cwd=REPO)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["buffered", f"{tmp_path}:", "no", "output", "yet", "atexit", "ran"], done.stdout
