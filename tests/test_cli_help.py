"""What ``llm-ocr --help`` and each command's help say about the model, as a user reads them.

At ``--help`` time no model is chosen yet, so the list of commands names no model family; an
option whose default is the model family's (the render options a recipe sets) says so, and
shows no one family's value as "the" default; ``bench-accuracy`` renders as the pipeline does
for the model it measures.
"""

from __future__ import annotations

import re
from pathlib import Path

from llm_ocr.config import env_name, flag_name
from llm_ocr.testing import SimulatedServer
from llm_ocr.vlm.families import FAMILIES
from tests.conftest import REPO, run_cli

#: argparse wraps help to the terminal: one line per option makes it readable here.
WIDE = {"COLUMNS": "1000"}

#: Names of the families llm-ocr has a recipe for, as help text would spell them (olmOCR-bench is
#: a benchmark, not a model).
FAMILY_NAMES = re.compile(r"deepseek|olmocr(?!-bench)|dots\.m?ocr|chandra|mineru|granite|paddleocr|glm-ocr|nanonets|"
                          r"lighton|qwen", re.I)


def help_of(*command: str) -> str:
    done = run_cli(*command, "--help", env=WIDE)
    assert done.returncode == 0, done.stderr
    return done.stdout


def option_help(text: str, flag: str) -> str:
    """The help of ``flag`` (argparse puts it on the flag's line, or below it when the flag is
    long), on one line."""
    blocks = re.split(r"\n(?=  -)", text)
    (block,) = [b for b in blocks if b.strip().startswith(flag + " ")]
    return " ".join(block.split())


def test_the_list_of_commands_names_no_model_family() -> None:
    top = help_of()
    assert "extract" in top and "serve" in top
    assert not FAMILY_NAMES.findall(top), top


def test_an_option_whose_default_is_the_model_familys_shows_no_one_value() -> None:
    # The render options any family's recipe sets when the user does not (stages/extract.py family_render).
    from_family = sorted({key for family in FAMILIES for key in family.rendering.options()})
    assert {"dpi", "image_format"} <= set(from_family)
    for command in ("run", "extract", "fields"):
        text = help_of(command)
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
