"""``llm-ocr models``: every family listed, with the serve command llm-ocr starts for it and
how it reads a dense page (tiles joined by boxes, or bands joined by text), which the family's
own parser must bear out."""

from __future__ import annotations

import json
import shlex

import pytest

from llm_ocr.cli import main
from llm_ocr.gpu_presets import PRESETS
from llm_ocr.serving.command_lines import vllm_command
from llm_ocr.vlm.box import Box
from llm_ocr.vlm.families import FAMILIES, Family
from llm_ocr.vlm.view import Element, View


def test_models_lists_every_family_with_its_serve_command_and_dense_page_policy(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["models", "--json", "--gpu-preset", "l4-24gb"]) == 0
    rows = {row["family"]: row for row in json.loads(capsys.readouterr().out)}
    assert list(rows) == [f.name for f in FAMILIES]
    for family in FAMILIES:
        row = rows[family.name]
        # What Extract does with a page longer than one answer, for this family.
        assert family.dense in ("tiles", "bands", "blocks")
        if family.dense == "blocks":
            assert row["dense_pages"].startswith("read whole: a layout pass, then a request per block")
        else:
            assert row["dense_pages"].startswith("read in tiles" if family.dense == "tiles" else "read in bands")
            assert "cut in two and read again" in row["dense_pages"], family.name
        # A 1:60 strip: the smallest side it is sent at (the strip test sends it no smaller).
        assert f"never sent under {family.min_readable_side} px" in row["long_pages"], family.name
        model = family.models[0] if family.models else "MODEL"
        started = vllm_command(model, host="127.0.0.1", port=8000, preset=PRESETS["l4-24gb"], family=family)
        assert shlex.split(row["serve"]) == started  # the command a run without --endpoint starts
    assert rows["deepseek-ocr"]["dense_pages"].startswith("read in tiles")
    assert rows["olmocr"]["dense_pages"].startswith("read in bands") and "column by column" in rows["olmocr"]["dense_pages"]
    assert "(1288 px on its longer side)" in rows["olmocr"]["long_pages"]  # olmOCR-2's pipeline size
    assert "dense:   read in tiles" in (main(["models", "deepseek-ocr"]), capsys.readouterr().out)[1]


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.name)
def test_a_family_reads_dense_pages_in_tiles_exactly_when_its_answers_box_every_text_block(family: Family) -> None:
    """Joining tiles needs every text block's box: a family declared ``tiles`` whose parser
    returns text without boxes would lose its pieces' order and duplicate their overlaps; one
    declared ``bands`` whose answers carry boxes would read its columns band by band for nothing."""
    shown = (Element("title", Box(0.1, 0.05, 0.9, 0.1), "Morning Edition"),
             Element("text", Box(0.1, 0.2, 0.45, 0.5), "first column words of the story"),
             Element("text", Box(0.55, 0.2, 0.9, 0.5), "second column words of another story"))  # fmt: skip
    view = View(800, 1000, shown)
    layout = family.parse(family.write(view), width=800, height=1000, page=1)
    text = [b for b in layout.blocks if b.text.strip()]
    # Two passes (a layout pass, answered otherwise than a block's request, then each block read
    # on its own): no answer holds the page's text, so a dense page is read whole ("blocks").
    if family.write(view, "layout") != family.write(view, "block"):
        boxed = family.parse(family.write(view, "layout"), width=800, height=1000, page=1).blocks
        assert boxed and all(b.boxes for b in boxed) and family.dense == "blocks", family.name
        return
    assert text, family.name
    assert family.dense == ("tiles" if all(b.boxes for b in text) else "bands"), [(b.label, b.boxes) for b in text]


def test_models_refuses_an_unknown_preset_with_the_known_ones(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["models", "--gpu-preset", "h200-9000gb"]) == 2
    assert "a100-80gb" in capsys.readouterr().out
