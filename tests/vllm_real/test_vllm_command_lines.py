"""Every vLLM command line the launcher can build, parsed by the installed vLLM's own argument parser.

The launcher builds vLLM's command line from a GPU preset (every preset and its multi-GPU
variants; a machine with several GPUs runs one server per GPU, on the one-GPU preset), a model
family (each family may add its own flags) and the server command (``vllm serve MODEL`` in the
images, ``python -m vllm.entrypoints.openai.api_server --model MODEL`` as here). vLLM's parser
(``vllm serve``'s, and the API server module's) must accept each one, so a misspelt flag, a flag
vLLM removed or a value of the wrong type fails here rather than in a GPU job. The fake ``vllm``
of the default suite refuses the same flags from a table written from this parser; that table
must match it.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import io
import shlex
import sys
from collections.abc import Iterable

import pytest

if importlib.util.find_spec("vllm") is None:
    pytest.skip("vLLM is not installed (pip install 'llm-ocr[test-vllm]'; see scripts/test-vllm)", allow_module_level=True)

from llm_ocr.gpu_presets import PRESETS, with_gpus
from llm_ocr.serving.command_lines import api_key_to_env
from llm_ocr.serving.open import ServerOptions, _command
from llm_ocr.vlm import families
from tests.fakes import vllm_flags

# A hang guard: importing vLLM alone took over 300 s with three of the suite's runs on 2 cores.
pytestmark = [pytest.mark.vllm, pytest.mark.timeout(900)]

SERVE = "vllm serve"
API_SERVER = f"{sys.executable} -m vllm.entrypoints.openai.api_server"


def model_per_family() -> dict[str, str]:
    """A served-model name for every model family (each may add server flags and sizing)."""
    return {
        family.name: family.models[0] if family.models else "HuggingFaceTB/SmolVLM-256M-Instruct"
        for family in families.FAMILIES
    }


def command_lines(preset_names: Iterable[str] = PRESETS) -> list[tuple[str, list[str]]]:
    """``(id, argv)`` for every preset (of ``preset_names``) x family x server command, single
    server and one of a fleet."""
    found = []
    for preset_name in sorted(preset_names):
        preset = PRESETS[preset_name]
        for family, model in sorted(model_per_family().items()):
            for how, server in (("serve", SERVE), ("api-server", API_SERVER)):
                options = ServerOptions(engine="vllm", server_command=server, server_args="--api-key sk-test")
                single = _command("vllm", model, 8000, options, preset, family)
                # A fleet's server: the one-GPU preset, the key moved to the environment.
                fleet, _ = api_key_to_env(_command("vllm", model, 8001, options, with_gpus(preset, 1), family))
                found += [(f"{preset_name}-{family}-{how}", single), (f"{preset_name}-{family}-{how}-fleet", fleet)]
    return found


@functools.cache
def serve_parser() -> tuple[object, object]:
    """``vllm serve``'s parser and subcommand, built once: building one takes vLLM ~6 ms (it deep-copies
    every config class's fields), which over 1,600 command lines was a third of this module's CPU."""
    from vllm.entrypoints.cli.serve import ServeSubcommand
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser(prog="vllm")
    command = ServeSubcommand()
    command.subparser_init(parser.add_subparsers(dest="subparser"))
    return parser, command


@functools.cache
def api_server_parser() -> tuple[object, object]:
    """The API server module's parser and its check, built once (as :func:`serve_parser`)."""
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    try:
        from vllm.entrypoints.launchers.cli_args import make_arg_parser, validate_parsed_serve_args
    except ImportError:  # vLLM before the launchers package (0.29's layout)
        from vllm.entrypoints.openai.cli_args import make_arg_parser, validate_parsed_serve_args
    return make_arg_parser(FlexibleArgumentParser(prog="api_server")), validate_parsed_serve_args


def vllm_parse(argv: list[str]) -> object:
    """``argv`` as vLLM parses it (SystemExit on a refused flag or value), then vLLM's own checks."""
    if argv[:2] == shlex.split(SERVE):
        parser, command = serve_parser()
        args = parser.parse_args(argv[1:])  # type: ignore[attr-defined]
        command.validate(args)  # type: ignore[attr-defined]
        return args
    assert argv[:3] == shlex.split(API_SERVER), argv
    parser, validate = api_server_parser()
    args = parser.parse_args(argv[3:])  # type: ignore[attr-defined]
    validate(args)  # type: ignore[operator]
    return args


def refusals(lines: Iterable[tuple[str, list[str]]]) -> dict[str, str]:
    """``{id: what vLLM said}`` for each command line of ``lines`` that vLLM's parser or its checks refuse."""
    refused = {}
    for name, argv in lines:
        said = io.StringIO()
        try:
            with contextlib.redirect_stderr(said):  # argparse prints its reason, then exits
                args = vllm_parse(argv)
        except SystemExit:
            refused[name] = said.getvalue().strip().splitlines()[-1]
        except Exception as exc:  # noqa: BLE001 - vLLM's own checks raise what they like
            refused[name] = repr(exc)
        else:
            if not (getattr(args, "model", None) or getattr(args, "model_tag", None)):
                refused[name] = "parsed without a model"
    return refused


# One test per preset, each line's refusal reported by its id: 16 tests, not 1,600 (pytest's own
# cost per test was most of what the 1,600 cost once the parsers were built once).
@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_vllms_parser_accepts_every_command_line_the_launcher_builds(preset: str) -> None:
    lines = command_lines([preset])
    assert len(lines) == 4 * len(families.FAMILIES)
    assert refusals(lines) == {}


def test_a_misspelt_flag_is_refused_by_the_same_parser() -> None:
    (name, argv), *_ = command_lines()
    with pytest.raises(SystemExit):
        vllm_parse([*argv, "--served-modle-name", "x"])
    with pytest.raises(SystemExit):
        vllm_parse([*argv, "--max-num-seqs", "many"])
    # ... and the per-preset test reports each refused line by its id, and only those.
    bad = [(f"{name}-misspelt", [*argv, "--served-modle-name", "x"]), (name, argv)]
    assert list(refusals(bad)) == [f"{name}-misspelt"]
    assert "--served-modle-name" in refusals(bad)[f"{name}-misspelt"]


def test_the_fake_vllms_flag_table_is_vllms() -> None:
    # Out of date: regenerate with `.venv-vllm/bin/python -m tests.fakes.vllm_flags --write`.
    assert vllm_flags.load() == vllm_flags.describe(vllm_flags.vllm_serve_parser())
