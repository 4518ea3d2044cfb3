"""The family framework: choosing a family, the request it builds, the check that refuses strays."""

from __future__ import annotations

import json
from typing import Any

import pytest

from llm_ocr.config import OptionError, resolve_options
from llm_ocr.engines.sim.checks import RecipeError, check_request, prompt_text, sent_image
from llm_ocr.options import JobOptions
from llm_ocr.vlm.box import Box
from llm_ocr.vlm.families import FAMILIES, UnknownRecipe, family_for, family_named, names
from llm_ocr.vlm.families.base import Retries
from llm_ocr.vlm.families.deepseek import DEEPSEEK_OCR
from llm_ocr.vlm.families.generic import GENERIC
from llm_ocr.vlm.families.markup import display_math, dollars_to_brackets, markdown_table_to_html, otsl_to_html
from llm_ocr.vlm.layout import LayoutBuilder, to_pixels

PNG = b"\x89PNG\r\n\x1a\nfake"


def wire(body: dict[str, Any], model: str = "m") -> dict[str, Any]:
    """What the server receives for ``body`` (keyword arguments of ``create``): ``extra_body``
    fields at the top level, as the openai SDK sends them."""
    out = {k: v for k, v in body.items() if k != "extra_body"}
    out.update(body.get("extra_body", {}))
    return {"model": model, **json.loads(json.dumps(out))}


def test_the_family_is_chosen_from_the_served_name_or_named() -> None:
    assert family_for("deepseek-ai/DeepSeek-OCR") is DEEPSEEK_OCR
    assert family_for("deepseek-ai/DeepSeek-OCR-2") is DEEPSEEK_OCR
    assert family_for("acme/my-ocr-finetune") is GENERIC
    assert family_for("acme/my-ocr-finetune", "deepseek-ocr") is DEEPSEEK_OCR  # --recipe
    with pytest.raises(UnknownRecipe, match="choose one of"):
        family_named("nope")
    assert len(set(names())) == len(FAMILIES)


def test_recipe_option_names_a_family_or_says_which_exist() -> None:
    import argparse

    ok = resolve_options(JobOptions, argparse.Namespace(), output="o", recipe="deepseek-ocr")
    assert ok.recipe == "deepseek-ocr"
    with pytest.raises(OptionError, match=r"--recipe.*unknown recipe 'olmocr2'.*deepseek-ocr"):
        resolve_options(JobOptions, argparse.Namespace(), output="o", recipe="olmocr2")


def test_deepseek_request_is_the_vllm_recipe_and_passes_its_own_check() -> None:
    body = DEEPSEEK_OCR.body(PNG, "image/png", temperature=0.0, max_tokens=7168)
    (message,) = body["messages"]
    assert [p["type"] for p in message["content"]] == ["image_url", "text"]
    assert message["content"][1]["text"] == "<|grounding|>Convert the document to markdown."
    assert body["extra_body"] == {
        "skip_special_tokens": False,
        "vllm_xargs": {"ngram_size": 30, "window_size": 90, "whitelist_token_ids": [128821, 128822]},
    }
    assert body["max_tokens"] == 7168 and body["temperature"] == 0.0
    received = wire(body)
    assert check_request(DEEPSEEK_OCR, received) == "page"
    assert sent_image(received) == PNG and prompt_text(received) == message["content"][1]["text"]
    # The budget leaves the context's image and prompt tokens out, whatever was asked.
    assert DEEPSEEK_OCR.max_tokens(None, 8192) == 7168
    assert DEEPSEEK_OCR.max_tokens(100_000, 8192) == 7168 and DEEPSEEK_OCR.max_tokens(500, 8192) == 500


@pytest.mark.parametrize(
    "change, fragment",
    [
        (lambda b: b.update(skip_special_tokens=True), "skip_special_tokens must be false"),
        (lambda b: b.pop("vllm_xargs"), "vllm_xargs must be"),
        (lambda b: b["vllm_xargs"].update(ngram_size=20), "vllm_xargs must be"),
        (lambda b: b.update(top_p=0.9), "sets no top_p"),
        (lambda b: b.pop("temperature"), "must set temperature"),
        (lambda b: b.pop("max_tokens"), "must set max_tokens"),
        (lambda b: b["messages"][0]["content"].reverse(), "content parts"),
        (lambda b: b["messages"].insert(0, {"role": "system", "content": "You are OCR."}), "roles"),
    ],
)
def test_a_deepseek_page_request_that_strays_is_refused(change: Any, fragment: str) -> None:
    received = wire(DEEPSEEK_OCR.body(PNG, "image/png", temperature=0.0, max_tokens=100))
    change(received)
    with pytest.raises(RecipeError, match=fragment):
        check_request(DEEPSEEK_OCR, received)


def test_a_description_request_is_not_a_page_request() -> None:
    body = wire(DEEPSEEK_OCR.body(PNG, "image/png", temperature=0.0, max_tokens=100, text="Describe this image in detail."))
    assert check_request(DEEPSEEK_OCR, body) is None


def test_retry_temperatures_follow_the_family_schedule_then_its_last_step() -> None:
    schedule = Retries((0.1, 0.1, 0.2, 0.3, 0.5, 0.8, 0.9, 1.0))
    assert [schedule.temperature(i) for i in range(9)] == [0.1, 0.1, 0.2, 0.3, 0.5, 0.8, 0.9, 1.0, 1.0]
    assert [round(Retries((0.0, 0.2)).temperature(i), 3) for i in range(4)] == [0.0, 0.2, 0.4, 0.6]


def test_generic_answer_is_markdown_in_the_common_forms() -> None:
    text = "```markdown\n# Title\n\n| a | b |\n| --- | --- |\n| 1 | 2 |\n\nEnergy $E=mc^2$ and $$x^2$$\n```"
    layout = GENERIC.parse(text, width=100, height=100, page=1)
    assert layout.figures == [] and len(layout.blocks) == 1
    assert layout.markdown.startswith("# Title")
    assert "<table><tr><th>a</th><th>b</th></tr><tr><td>1</td><td>2</td></tr></table>" in layout.markdown
    assert "\\( E=mc^2 \\)" in layout.markdown and "\\[ x^2 \\]" in layout.markdown


def test_otsl_spans_become_colspan_and_rowspan() -> None:
    html = otsl_to_html("<ched>Name<ched>Q1<lcel><nl><fcel>a<fcel>1<fcel>2<nl><ucel><fcel>3<ecel><nl>")
    assert html == (
        "<table><tr><th>Name</th><th colspan=\"2\">Q1</th></tr>"
        "<tr><td rowspan=\"2\">a</td><td>1</td><td>2</td></tr>"
        "<tr><td>3</td><td></td></tr></table>"
    )
    assert otsl_to_html("") == ""


def test_math_and_tables_are_rewritten_one_way() -> None:
    assert display_math("$$a+b$$") == display_math("\\[a+b\\]") == display_math("a+b") == "\\[ a+b \\]"
    assert dollars_to_brackets("cost \\$5 and $x$") == "cost \\$5 and \\( x \\)"
    assert markdown_table_to_html("no table | here") == "no table | here"


def test_boxes_map_to_pixels_clamped_and_ordered() -> None:
    assert to_pixels([500, 250, 100, 50], 0.5, 2.0, 400, 400) == (50, 100, 250, 400)
    assert to_pixels([0, 0, 0, 10], 1, 1, 100, 100) is None  # no width
    assert to_pixels(["a", 0, 1, 1], 1, 1, 100, 100) is None
    assert to_pixels([-5, -5, 1000, 1000], 1, 1, 100, 100) == (0, 0, 100, 100)


def test_layout_builder_caps_figures_and_links_them_with_their_description() -> None:
    builder = LayoutBuilder(page=2, width=100, height=100, max_figures=1)
    builder.text("title", [Box(0, 0, 100, 10)], "# Heading")
    builder.figure("Picture", Box(10, 20, 60, 70), description="A [bar] chart")
    builder.figure("Picture", Box(0, 0, 50, 50))
    layout = builder.build()
    (figure,) = layout.figures
    assert figure.id == "p2-f1" and figure.block == 1 and figure.description == "A [bar] chart"
    assert layout.markdown == "# Heading\n\n![A (bar) chart](figure:p2-f1)"
    assert any("not cropped" in w for w in layout.warnings)


def test_stream_fields_only_for_a_vllm_family() -> None:
    body = {"messages": [], "extra_body": {"skip_special_tokens": False}}
    assert DEEPSEEK_OCR.streamed(body)["extra_body"] == {"skip_special_tokens": False, "stream_interval": 64}
    assert DEEPSEEK_OCR.streamed(body)["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    plain = GENERIC.streamed({"messages": []})
    assert plain == {"messages": [], "stream_options": {"include_usage": True}}
