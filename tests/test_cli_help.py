"""What ``llm-ocr --help`` and each command's help say, as a user reads them.

At ``--help`` time no model is chosen yet, so the list of commands names no model family; an
option whose default is the model family's (the render options a recipe sets) says so, and
shows no one family's value as "the" default; ``bench-accuracy`` renders as the pipeline does
for the model it measures. A stage's ``--help`` fits on a few screens (the common options in
full, the others named by group) and ``--help all`` lists every option; no help shows reST or
Markdown markup. The help is the command line's own parser, asked in-process.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from llm_ocr.cli import build_parser, parse_args
from llm_ocr.config import env_name, flag_name
from llm_ocr.options import COMMON_OPTIONS
from llm_ocr.stage_table import STAGES
from llm_ocr.testing import SimulatedServer
from llm_ocr.vlm.families import FAMILIES
from tests.conftest import REPO, run_cli

#: Names of the families llm-ocr has a recipe for, as help text would spell them (olmOCR-bench is
#: a benchmark, not a model).
FAMILY_NAMES = re.compile(r"deepseek|olmocr(?!-bench)|dots\.m?ocr|chandra|mineru|granite|paddleocr|glm-ocr|nanonets|"
                          r"lighton|qwen", re.I)

#: Inline markup a terminal shows as is: reST roles and literals, Markdown code and bold.
MARKUP = re.compile(r":[a-z]+:`|``|`[^`\s][^`\n]*`|\*\*")


@pytest.fixture
def help_of(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch):
    """``llm-ocr ARGV --help ...``'s output; ``columns`` is the terminal's width (argparse wraps to it)."""

    def run(*argv: str, columns: int = 1000) -> str:
        monkeypatch.setenv("COLUMNS", str(columns))
        with pytest.raises(SystemExit) as exited:
            parse_args(list(argv))
        assert exited.value.code in (0, None)
        return capsys.readouterr().out

    return run


def option_help(text: str, flag: str) -> str:
    """The help of ``flag`` (argparse puts it on the flag's line, or below it when the flag is
    long), on one line."""
    blocks = re.split(r"\n(?=  -)", text)
    (block,) = [b for b in blocks if b.strip().startswith((flag + " ", flag + ","))]
    return " ".join(block.split())


def named(text: str, option: str) -> bool:
    """Whether ``text`` names ``option``'s flag (``--cut-loops``, or ``--[no-]cut-loops`` in a list)."""
    return re.search(rf"--(\[no-\])?{option.replace('_', '-')}(?![\w-])", text) is not None


def test_the_list_of_commands_names_no_model_family(help_of) -> None:
    top = help_of("--help")
    assert "extract" in top and "serve" in top
    assert not FAMILY_NAMES.findall(top), top


def test_an_option_whose_default_is_the_model_familys_shows_no_one_value(help_of) -> None:
    # The render options any family's recipe sets when the user does not (stages/extract.py family_render).
    from_family = sorted({key for family in FAMILIES for key in family.rendering.options()})
    assert {"dpi", "image_format"} <= set(from_family)
    for command in ("run", "extract", "fields"):
        text = help_of(command, "--help", "render")
        for name in from_family:
            line = option_help(text, flag_name(name))
            described, _, after = line.partition(f"[env {env_name(name)}]")
            assert "model family's" in described, (command, line)
            assert after.strip() == "", (command, line)  # no "(default: 144.0)": DeepSeek-OCR's value only


def test_bench_accuracy_renders_pages_as_the_pipeline_does_for_the_model(tmp_path: Path) -> None:
    """olmOCR-2's pages are PNGs 1288 pixels on their longer side (its recipe), not DeepSeek-OCR's
    144 DPI JPEGs."""
    pdf = REPO / "samples" / "report.pdf"
    with SimulatedServer("--instant", "--served-model-name", "allenai/olmOCR-2-7B-1025-FP8", corpus=pdf) as sim:
        done = run_cli("bench-accuracy", str(pdf), "--engine-url", sim.base_url)
        sent = [part["image_url"]["url"]["data_uri"] for request in sim.requests()
                for part in request["body"]["messages"][0]["content"] if part["type"] == "image_url"]
    assert done.returncode == 0, done.stderr
    assert re.search(r"2 pages at longest side 1288 px \(png\)", done.stdout), done.stdout
    assert sent == ["image/png", "image/png"]


@pytest.mark.parametrize("stage", list(STAGES))
def test_a_stages_help_is_short_and_names_every_option(stage: str, help_of) -> None:
    """``llm-ocr run --help`` was 525 lines at 80 columns: every option in full, after a usage
    line that listed them all again."""
    short = help_of(stage, "--help", columns=80)
    assert len(short.splitlines()) < 150, short
    assert f"'llm-ocr {stage} --help GROUP' shows a group in full" in " ".join(short.split())
    options = STAGES[stage].option_names()
    assert [name for name in options if not named(short, name)] == []
    for name in COMMON_OPTIONS & set(options):  # in full, with their variable
        assert env_name(name) in option_help(short, flag_name(name)), name
    everything = help_of(stage, "--help", "all")
    for name in options:
        assert f"[env {env_name(name)}]" in option_help(everything, flag_name(name)), name
    for group, model in STAGES[stage].models().items():
        one = help_of(stage, "--help", group)
        shown = [name for name in model.model_fields if name not in STAGES[stage].excluded]
        assert [name for name in shown if f"[env {env_name(name)}]" not in one] == [], group


def test_an_unknown_help_group_is_refused_with_the_groups(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        parse_args(["run", "--help", "servers"])
    assert exited.value.code == 2
    assert "give one of job, server, render" in capsys.readouterr().err


def every_help() -> dict[str, str]:
    """The help of every command and sub-command, as ``--help`` prints it (a stage's, and its ``--help all``)."""
    from llm_ocr.commands import launch, serve
    from llm_ocr.commands.option_help import ALL, stage_help
    from llm_ocr.engines.cpu.cli import build_parser as cpu_parser
    from llm_ocr.engines.sim.cli import build_parser as sim_parser
    from llm_ocr.launchers import PLATFORMS, platform_class

    texts: dict[str, str] = {}

    def add(name: str, parser: argparse.ArgumentParser) -> None:
        texts[name] = parser.format_help()
        if name in STAGES:
            texts[name] = stage_help(parser, name)
            texts[f"{name} --help {ALL}"] = stage_help(parser, name, ALL)
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub, child in action.choices.items():
                    add(f"{name} {sub}".strip(), child)

    add("", build_parser())
    for platform in PLATFORMS:
        texts[f"launch {platform}"] = launch._launch_parser(platform, platform_class(platform)).format_help()
    texts["serve"] = serve.build_parser().format_help()
    texts["serve --engine sim"] = sim_parser().format_help()
    texts["serve --engine cpu"] = cpu_parser().format_help()
    return texts


def test_no_help_shows_markup() -> None:
    """Option descriptions and group titles are written in the code's reST (a literal --endpoint
    in double backticks, a :class: role); ``--help`` shows them as plain text."""
    texts = every_help()
    assert {"run", "fields", "status", "launch slurm", "serve"} <= set(texts)
    marked = {name: MARKUP.findall(text) for name, text in texts.items() if MARKUP.search(text)}
    assert marked == {}
