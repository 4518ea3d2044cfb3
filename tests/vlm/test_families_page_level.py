"""PaddleOCR-VL, GLM-OCR, Nanonets-OCR2, LightOnOCR-2 and Qwen-VL: requests and parsers.

The answers below have the shapes the families' own sources show (docs/models.md cites them):
the Qwen2.5-VL cookbook's QwenVL HTML (boxes in pixels of the 1008 x 1540 image the processor
made of a 1014 x 1532 page), GLM-OCR's example results, Nanonets' tags, LightOnOCR's figure
references with the -bbox variants' 0..1000 boxes.
"""

from __future__ import annotations

import pytest

from llm_ocr.engines.sim.checks import RecipeError, check_request
from llm_ocr.resizing import smart_resize
from llm_ocr.vlm.families import family_for
from llm_ocr.vlm.families.glm_ocr import GLM_OCR
from llm_ocr.vlm.families.lighton import LIGHTON_OCR, LIGHTON_OCR_BBOX
from llm_ocr.vlm.families.nanonets import NANONETS_OCR, NANONETS_PROMPT
from llm_ocr.vlm.families.paddleocr import PADDLEOCR_VL
from llm_ocr.vlm.families.qwen_vl import MAX_PIXELS, MIN_PIXELS, QWEN3_VL, QWEN25_SYSTEM, QWEN25_VL

PNG = "image/png"


@pytest.mark.parametrize(
    ("model", "family"),
    [
        ("PaddlePaddle/PaddleOCR-VL", "paddleocr-vl"),
        ("zai-org/GLM-OCR", "glm-ocr"),
        ("nanonets/Nanonets-OCR2-3B", "nanonets"),
        ("lightonai/LightOnOCR-2-1B", "lightonocr"),
        ("lightonai/LightOnOCR-2-1B-bbox-soup", "lightonocr-bbox"),
        ("Qwen/Qwen2.5-VL-7B-Instruct", "qwen2.5-vl"),
        ("Qwen/Qwen3-VL-8B-Instruct", "qwen3-vl"),
    ],
)
def test_model_names_pick_their_family(model: str, family: str) -> None:
    assert family_for(model).name == family


def test_fine_tunes_of_qwen_keep_their_own_family() -> None:
    # olmOCR-2 and Nanonets are Qwen2.5-VL fine-tunes: their names must not fall to the Qwen recipe.
    assert family_for("nanonets/Nanonets-OCR2-3B").name == "nanonets"
    assert family_for("allenai/olmOCR-2-7B-1025").name != "qwen2.5-vl"


def _parts(body: dict) -> list[str]:
    return [p["type"] for p in body["messages"][-1]["content"]]


def test_requests_have_each_familys_chat_shape_and_sampling() -> None:
    paddle = PADDLEOCR_VL.body(b"img", PNG, temperature=0.0, max_tokens=100)
    assert [m["role"] for m in paddle["messages"]] == ["user"] and _parts(paddle) == ["image_url", "text"]
    assert paddle["messages"][0]["content"][1]["text"] == "OCR:" and "extra_body" not in paddle

    glm = GLM_OCR.body(b"img", PNG, temperature=0.0, max_tokens=100)
    assert glm["messages"][0]["content"][1]["text"] == "Text Recognition:"
    assert glm["top_p"] == 0.00001 and glm["extra_body"] == {"top_k": 1, "repetition_penalty": 1.1}

    lighton = LIGHTON_OCR.body(b"img", PNG, temperature=0.2, max_tokens=4096)
    assert _parts(lighton) == ["image_url"]  # the image alone: no text part at all
    assert lighton["temperature"] == 0.2 and lighton["top_p"] == 0.9

    nano = NANONETS_OCR.body(b"img", PNG, temperature=0.0, max_tokens=15000)
    assert nano["messages"][0] == {"role": "system", "content": "You are a helpful assistant."}
    assert _parts(nano) == ["image_url", "text"] and nano["messages"][1]["content"][1]["text"] == NANONETS_PROMPT

    q25 = QWEN25_VL.body(b"img", PNG, temperature=0.0, max_tokens=100)
    assert q25["messages"][0] == {"role": "system", "content": QWEN25_SYSTEM}
    assert _parts(q25) == ["text", "image_url"]  # the cookbook puts the text first
    q3 = QWEN3_VL.body(b"img", PNG, temperature=0.0, max_tokens=100)
    assert [m["role"] for m in q3["messages"]] == ["user"] and _parts(q3) == ["image_url", "text"]


def test_the_check_refuses_what_strays_from_each_recipe() -> None:
    body = GLM_OCR.body(b"img", PNG, temperature=0.0, max_tokens=100)
    flat = {**{k: v for k, v in body.items() if k != "extra_body"}, **body["extra_body"]}
    assert check_request(GLM_OCR, flat) == "page"
    with pytest.raises(RecipeError, match="repetition_penalty"):
        check_request(GLM_OCR, {**flat, "repetition_penalty": 1.0})
    nano = NANONETS_OCR.body(b"img", PNG, temperature=0.0, max_tokens=100)
    with pytest.raises(RecipeError, match="roles"):
        check_request(NANONETS_OCR, {**nano, "messages": nano["messages"][1:]})  # the system message dropped
    q25 = QWEN25_VL.body(b"img", PNG, temperature=0.0, max_tokens=100)
    swapped = [q25["messages"][0], {"role": "user", "content": q25["messages"][1]["content"][::-1]}]
    with pytest.raises(RecipeError, match="content parts"):
        check_request(QWEN25_VL, {**q25, "messages": swapped})


def test_smart_resize_matches_the_cookbook() -> None:
    # The Qwen2.5-VL cookbook printed "1540 1008" for its 1014 x 1532 example page.
    assert smart_resize(1532, 1014, 28, MIN_PIXELS, MAX_PIXELS) == (1540, 1008)
    height, width = smart_resize(4000, 3000, 28, MIN_PIXELS, MAX_PIXELS)
    assert height * width <= 12_845_056 and height % 28 == 0 and width % 28 == 0
    # A small image raised to min_pixels can overshoot max_pixels: dots.ocr's copy caps it again
    # (20 x 60 px raised to 56 x 112 = 6,272 px, over 3,200: back to 28 x 56), Qwen's does not.
    assert smart_resize(20, 60, 28, 3136, 3200) == (56, 112)
    assert smart_resize(20, 60, 28, 3136, 3200, recap=True) == (28, 56)


# The first blocks of the Qwen2.5-VL cookbook's answer (cookbooks/document_parsing.ipynb); its lines
# ending in a space keep it as an escape (\x20), visible.
QWEN25_ANSWER = """```html
<html><body>
<h2 data-bbox="310 94 658 132">Qwen2.5 Technical Report</h2>\x20
 <p data-bbox="427 154 542 182">Qwen Team</p>\x20
 <div class="image" data-bbox="262 195 708 272"><img data-bbox="262 195 708 272"/></div>\x20
 <h2 data-bbox="436 289 533 317">Abstract</h2>\x20
 <p data-bbox="99 339 869 565">In this report, we introduce Qwen2.5, a comprehensive series of large language models (LLMs) designed to meet diverse needs.</p>\x20
 <table data-bbox="99 600 869 700"><tr><th>Model</th><th>Size</th></tr><tr><td>Qwen2.5</td><td>72B</td></tr></table>
 <div class="formula" data-bbox="99 710 869 760">E = m c^{2}</div>
</body></html>
```"""


def test_qwen25_html_boxes_are_resized_image_pixels_mapped_to_the_page() -> None:
    layout = QWEN25_VL.parse(QWEN25_ANSWER, width=1014, height=1532, page=3)
    # The processor saw 1008 x 1540: x scales by 1014/1008, y by 1532/1540.
    assert [f.bbox for f in layout.figures] == [(263, 193, 712, 270)]
    assert layout.figures[0].id == "p3-f1"
    assert layout.blocks[0].boxes == [(311, 93, 661, 131)]
    md = layout.markdown
    assert md.startswith("## Qwen2.5 Technical Report\n\nQwen Team\n\n![](figure:p3-f1)\n\n## Abstract")
    assert "<table><tr><th>Model</th><th>Size</th></tr><tr><td>Qwen2.5</td><td>72B</td></tr></table>" in md
    assert "\\[ E = m c^{2} \\]" in md and "data-bbox" not in md
    assert [b.label for b in layout.blocks] == ["title", "text", "image", "title", "text", "table", "equation"]


def test_qwen3_html_boxes_are_thousandths_of_the_image() -> None:
    answer = ('<html><body><h1 data-bbox="100 50 900 80">Annual report</h1>'
              '<div class="image caption" data-bbox="100 100 600 400">Figure 1: Sales by region</div>'
              '<p data-bbox="100 420 900 500">Sales rose in every region.</p></body></html>')
    layout = QWEN3_VL.parse(answer, width=2000, height=1000, page=1)
    assert [f.bbox for f in layout.figures] == [(200, 100, 1200, 400)]
    assert layout.figures[0].description == "Figure 1: Sales by region"
    assert "# Annual report" in layout.markdown and "Sales rose in every region." in layout.markdown


def test_qwen_answer_without_html_keeps_its_text_and_warns() -> None:
    layout = QWEN3_VL.parse("Just some plain text from the page.", width=100, height=100, page=1)
    assert layout.markdown == "Just some plain text from the page." and layout.figures == []
    assert layout.warnings


def test_qwen_html_cut_inside_a_block_keeps_the_blocks_before_it() -> None:
    cut = QWEN25_ANSWER[: QWEN25_ANSWER.index("comprehensive series")]
    layout = QWEN25_VL.parse(cut, width=1014, height=1532, page=1)
    assert "## Abstract" in layout.markdown and "In this report, we introduce Qwen2.5, a" in layout.markdown
    assert len(layout.figures) == 1


# GLM-OCR's answer shape: examples/result/paper/paper.md of zai-org/GLM-OCR.
GLM_ANSWER = (
    "B-5 First solution: Put $ Q= x_{1}^{2}+\\cdots+x_{n}^{2} $ . Since Q is homogeneous, P is divisible by Q.\n\n"
    "$$\n\\sum_ {i = 1} ^ {n} x _ {i} \\frac {\\partial R}{\\partial x _ {i}} = d R.\n$$\n\n"
    '<table class="table table-bordered"><thead><tr><th>项目</th><th>本期金额</th></tr></thead>'
    "<tbody><tr><td>委托他人投资或管理资产的损益</td><td>-342,273.79</td></tr></tbody></table>"
)


def test_glm_ocr_math_becomes_brackets_and_tables_stay_html() -> None:
    md = GLM_OCR.parse(GLM_ANSWER, width=1000, height=1400, page=1).markdown
    assert "\\( Q= x_{1}^{2}+\\cdots+x_{n}^{2} \\)" in md
    assert "\\[ \\sum_ {i = 1} ^ {n} x _ {i} \\frac {\\partial R}{\\partial x _ {i}} = d R. \\]" in md
    assert "<td>-342,273.79</td>" in md and "$" not in md


def test_paddleocr_page_text_is_kept_whole() -> None:
    answer = "Quarterly results\nRevenue grew by 12 percent.\nCosts fell."
    layout = PADDLEOCR_VL.parse(answer, width=800, height=1000, page=2)
    assert layout.markdown == answer and layout.figures == [] and layout.blocks[0].boxes == []


def test_nanonets_keeps_its_figure_description_and_drops_only_the_tags() -> None:
    answer = (
        "# Sales report\n\nRevenue grew by $12\\%$ this year.\n\n"
        "<img>Bar chart of revenue by quarter, Q4 highest.</img>\n\n"
        "<table><tr><td>Q1</td><td>10</td></tr></table>\n\n☑ Approved ☐ Rejected\n\n"
        "<watermark>CONFIDENTIAL</watermark>\n<page_number>7</page_number>"
    )
    layout = NANONETS_OCR.parse(answer, width=100, height=100, page=7)
    md = layout.markdown
    assert "[Figure: Bar chart of revenue by quarter, Q4 highest.]" in md
    assert layout.metadata == {"figure_descriptions": ["Bar chart of revenue by quarter, Q4 highest."]}
    assert "\\( 12\\% \\)" in md and "CONFIDENTIAL" in md and "7" in md and "☑ Approved" in md
    assert "<img>" not in md and "<page_number>" not in md and "<watermark>" not in md
    assert layout.figures == []  # no box: nothing to crop, nothing for Describe to ask again


def test_lighton_bbox_figures_are_cropped_from_thousandths() -> None:
    answer = "Intro paragraph.\n\n![image](image_1.png) 100,200,500,600\n\nFigure 1: the setup.\n\n![image](image_2.png)"
    layout = LIGHTON_OCR_BBOX.parse(answer, width=1000, height=2000, page=4)
    assert [f.bbox for f in layout.figures] == [(100, 400, 500, 1200)]
    assert layout.markdown == "Intro paragraph.\n\n![](figure:p4-f1)\n\nFigure 1: the setup."


def test_lighton_plain_references_point_at_nothing_and_are_left_out() -> None:
    layout = LIGHTON_OCR.parse("Text before.\n\n![image](image_1.png)\n\nText after.", width=10, height=10, page=1)
    assert layout.markdown == "Text before.\n\nText after." and layout.figures == []
