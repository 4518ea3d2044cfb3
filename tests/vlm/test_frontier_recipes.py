"""The frontier families' requests as their sources write them, and the check the simulated server
runs refusing what strays: values, not only names (a temperature, a window size, the text before
the image, a page image larger than the model was trained on)."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from llm_ocr.engines.sim.checks import RecipeError, check_image, check_request
from llm_ocr.testing import SimulatedServer
from llm_ocr.vlm.box import Box
from llm_ocr.vlm.families import Family, family_for
from llm_ocr.vlm.families.infinity import INFINITY_PARSER2
from llm_ocr.vlm.families.lighton3 import LIGHTON_OCR_3, LIGHTON_OCR_3_1B
from llm_ocr.vlm.families.paddleocr import FORMULA_PROMPT, PADDLEOCR_VL, TABLE_PROMPT
from llm_ocr.vlm.families.unlimited import UNLIMITED_OCR
from llm_ocr.vlm.view import Element, View
from tests.conftest import read_stage, run_cli
from tests.docs import make_pdf


def sent(family: Family) -> dict[str, Any]:
    """A page request of ``family`` as the server receives it (``extra_body`` at the top level)."""
    body = family.body(b"png", "image/png", temperature=family.retries.temperatures[0], max_tokens=100)
    return json.loads(json.dumps({k: v for k, v in body.items() if k != "extra_body"} | body.get("extra_body", {})))


def test_each_frontier_request_is_its_sources() -> None:
    lighton = sent(LIGHTON_OCR_3)
    assert [p["type"] for p in lighton["messages"][0]["content"]] == ["image_url", "text"]
    assert lighton["messages"][0]["content"][1]["text"] == "grounding"
    assert (lighton["temperature"], lighton["top_p"]) == (0.1, 1.0)
    assert lighton["chat_template_kwargs"] == {"enable_thinking": False}
    unlimited = sent(UNLIMITED_OCR)
    # The text first, beginning with the literal image placeholder; the n-gram blocker's values.
    assert [p["type"] for p in unlimited["messages"][0]["content"]] == ["text", "image_url"]
    assert unlimited["messages"][0]["content"][0]["text"] == "<image>document parsing."
    assert unlimited["vllm_xargs"] == {"ngram_size": 35, "window_size": 128}
    assert unlimited["skip_special_tokens"] is False and unlimited["temperature"] == 0.0
    infinity = sent(INFINITY_PARSER2)
    assert infinity["messages"][0]["content"][1]["text"].startswith("\n- Extract layout information")
    assert (infinity["temperature"], infinity["top_p"]) == (0.0, 1.0)
    assert infinity["chat_template_kwargs"] == {"enable_thinking": False}
    # Unlimited-OCR's answer budget is the context's rest, under what vLLM allows after the image.
    assert UNLIMITED_OCR.max_tokens(None, 32_768) == 32_768 - 4096
    assert LIGHTON_OCR_3.max_tokens(None, 18_000) == 12_288
    assert LIGHTON_OCR_3.max_tokens(20_000, 18_000) <= 18_000 - 64 * 64  # a 2048-px page: 4096 image tokens
    assert family_for("lightonai/LightOnOCR-3-1B") is LIGHTON_OCR_3_1B


def _set(path: tuple[Any, ...], value: Any) -> Callable[[dict[str, Any]], None]:
    def change(body: dict[str, Any]) -> None:
        target = body
        for key in path[:-1]:
            target = target[key]
        if value is KeyError:
            del target[path[-1]]
        else:
            target[path[-1]] = value
    return change


STRAYS = [
    (LIGHTON_OCR_3, _set(("temperature",), 0.0), "below the recipe's first attempt"),
    (LIGHTON_OCR_3, _set(("chat_template_kwargs",), KeyError), "chat_template_kwargs"),
    (LIGHTON_OCR_3, _set(("chat_template_kwargs", "enable_thinking"), True), "chat_template_kwargs"),
    (LIGHTON_OCR_3, _set(("top_p",), 0.9), "top_p must be 1.0"),
    (UNLIMITED_OCR, _set(("vllm_xargs", "window_size"), 1024), "vllm_xargs"),
    (UNLIMITED_OCR, _set(("skip_special_tokens",), True), "skip_special_tokens"),
    (UNLIMITED_OCR, lambda b: b["messages"][0]["content"].reverse(), "content parts"),
    (INFINITY_PARSER2, _set(("top_p",), 0.95), "top_p must be 1.0"),
    (INFINITY_PARSER2, _set(("chat_template_kwargs",), KeyError), "chat_template_kwargs"),
]


@pytest.mark.parametrize(("family", "change", "fragment"), STRAYS, ids=lambda v: getattr(v, "name", None))
def test_a_frontier_request_that_strays_is_refused(family: Family, change: Callable[[dict[str, Any]], None],
                                                    fragment: str) -> None:
    body = copy.deepcopy(sent(family))
    assert check_request(family, body) == "page"
    change(body)
    with pytest.raises(RecipeError, match=fragment):
        check_request(family, body)


def test_page_images_larger_than_the_model_was_trained_on_are_refused() -> None:
    check_image(LIGHTON_OCR_3, 1584, 2048)
    check_image(LIGHTON_OCR_3_1B, 1191, 1540)
    with pytest.raises(RecipeError, match="2048 px"):
        check_image(LIGHTON_OCR_3, 2550, 3300)
    with pytest.raises(RecipeError, match="1540 px"):
        check_image(LIGHTON_OCR_3_1B, 1584, 2048)
    # Infinity-Parser2's client resizes every image to multiples of 32 within 2,048..16,777,216 px:
    # Letter at its 300 DPI (2550 x 3300) goes as 2560 x 3296, and nothing else does.
    check_image(INFINITY_PARSER2, 2560, 3296)
    with pytest.raises(RecipeError, match="sent as 2560 x 3296"):
        check_image(INFINITY_PARSER2, 2550, 3300)
    with pytest.raises(RecipeError, match="16,777,216"):
        check_image(INFINITY_PARSER2, 5120, 5120)


def test_paddleocr_table_and_formula_modes_read_back() -> None:
    table = Element("table", Box(0, 0, 1, 0.5), "<table><tr><td>Year</td><td>Sales</td></tr>"
                                                "<tr><td>2023</td><td>12</td></tr></table>")
    formula = Element("equation", Box(0, 0.6, 1, 0.7), "\\[ a = b \\]")
    view = View(1000, 800, (table, formula))
    mode = PADDLEOCR_VL.with_prompt(TABLE_PROMPT)
    answer = PADDLEOCR_VL.write(view, "page", TABLE_PROMPT)
    assert "<fcel>" in answer or "<ched>" in answer  # OTSL, as the table task answers
    assert check_request(mode, sent(mode)) == "page"
    md = mode.parse(answer, width=1000, height=800, page=1).markdown
    assert md.startswith("<table>") and "<td>2023</td>" in md and "Sales" in md
    formula_mode = PADDLEOCR_VL.with_prompt(FORMULA_PROMPT)
    md = formula_mode.parse(PADDLEOCR_VL.write(view, "page", FORMULA_PROMPT), width=1000, height=800, page=1).markdown
    assert md == "\\[ a = b \\]"
    # Spotting's answer format is not published: not a page mode the simulator plays.
    assert "Spotting:" not in PADDLEOCR_VL.page_texts()


def test_a_page_rendered_larger_than_lightonocr3_takes_is_refused_by_the_simulated_server(tmp_path: Path) -> None:
    make_pdf(tmp_path / "one.pdf", pages=1, seed=7)
    model = "lightonai/LightOnOCR-3-1B"
    with SimulatedServer("--instant", "--served-model-name", model, corpus=tmp_path / "one.pdf") as server:
        result = run_cli("extract", str(tmp_path / "one.pdf"), "--output", str(tmp_path / "out"), "--endpoint",
                         server.base_url, "--model", model, "--long-side", "2048", "--workers", "0", "--progress",
                         "off", timeout=300)  # fmt: skip
        refused = server.stats()["recipe_refused"]
    assert result.returncode == 1 and refused >= 1
    (row,) = read_stage(tmp_path / "out", "extract")
    assert row["status"] == "error" and "1540 px" in row["error"]
