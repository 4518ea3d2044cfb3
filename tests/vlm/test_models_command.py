"""``llm-ocr models``: every family listed, with the serve command llm-ocr starts for it and
whether its dense pages are tiled, as Extract decides it."""

from __future__ import annotations

import json
import shlex

import pytest

from llm_ocr.cli import main
from llm_ocr.serving.command_lines import vllm_command
from llm_ocr.serving.vllm.presets import PRESETS
from llm_ocr.stages.tiled import tiling_allowed
from llm_ocr.vlm.families import FAMILIES


def test_models_lists_every_family_with_its_serve_command_and_dense_page_policy(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["models", "--json", "--gpu-preset", "l4-24gb"]) == 0
    rows = {row["family"]: row for row in json.loads(capsys.readouterr().out)}
    assert list(rows) == [f.name for f in FAMILIES]
    for family in FAMILIES:
        row = rows[family.name]
        # What Extract does with a page longer than one answer, for this family.
        assert row["dense_pages"] == ("read in tiles" if tiling_allowed(family, True) else "read whole"), family.name
        model = family.models[0] if family.models else "MODEL"
        started = vllm_command(model, host="127.0.0.1", port=8000, preset=PRESETS["l4-24gb"], family=family)
        assert shlex.split(row["serve"]) == started  # the command a run without --endpoint starts
    assert rows["deepseek-ocr"]["dense_pages"] == "read in tiles"
    assert "dense:   read in tiles" in (main(["models", "deepseek-ocr"]), capsys.readouterr().out)[1]


def test_models_refuses_an_unknown_preset_with_the_known_ones(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["models", "--gpu-preset", "h200-9000gb"]) == 2
    assert "a100-80gb" in capsys.readouterr().out
