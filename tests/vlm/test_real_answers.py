"""Each new family's parser on answers its model really gave, as published (tests/vlm/real_answers/,
each file citing where its answers come from): not on answers written here.

LightOnOCR-3: the README's grounding example. Infinity-Parser2: the authors' own test fixtures,
with the outcome their tests assert. Unlimited-OCR: its authors publish no answer as text, so a
third party's published vLLM answers (their first characters). granite-docling: a DocTags answer
docling-core's own tests read. PaddleOCR-VL-1.6: none published at page level (docs/models.md
says so).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from llm_ocr.engines.sim.checks import check_request
from llm_ocr.vlm.families import family_for
from llm_ocr.vlm.families.docling import GRANITE_DOCLING
from llm_ocr.vlm.families.infinity import INFINITY_PARSER2
from llm_ocr.vlm.families.lighton3 import LIGHTON_OCR_3
from llm_ocr.vlm.families.unlimited import UNLIMITED_OCR

ANSWERS = Path(__file__).parent / "real_answers"


def load(name: str) -> dict[str, Any]:
    return json.loads((ANSWERS / name).read_text())


def test_lightonocr3_readme_grounding_answer_becomes_boxed_blocks_and_a_described_figure() -> None:
    published = load("lightonocr3.json")
    width, height = 1654, 2339  # an A4 page at 200 DPI: boxes are thousandths of whatever size
    layout = LIGHTON_OCR_3.parse(published["answer"], width=width, height=height, page=3)
    assert [b.label for b in layout.blocks] == ["image", "caption", "title", "text", "page_number"]
    # The README: coordinates 0..1000 of the image; an image block's text is a short description.
    (figure,) = layout.figures
    assert figure.bbox == (int(309 * width / 1000), int(90 * height / 1000), int(691 * width / 1000),
                           int(516 * height / 1000))  # fmt: skip
    assert figure.description == "Model architecture diagram showing NaViT, Projection, Embedding, ..."
    assert layout.blocks[3].boxes == [(int(112 * width / 1000), int(640 * height / 1000), int(882 * width / 1000),
                                       int(698 * height / 1000))]  # fmt: skip
    # The title keeps the model's own heading level; every block's text is kept, in order.
    assert layout.markdown.split("\n\n") == [
        "![Model architecture diagram showing NaViT, Projection, Embedding, ...](figure:p3-f1)",
        "Figure 1: Model architecture.",
        "## 2.2 LightOnOCR-1",
        "The first version of LightOnOCR [13], established the core architecture ...",
        "3",
    ]
    assert layout.warnings == []


def test_lightonocr3_request_is_the_readmes() -> None:
    published = load("lightonocr3.json")["request"]
    family = family_for("lightonai/LightOnOCR-3-1B")
    body = family.body(b"png", "image/png", temperature=family.retries.temperatures[0], max_tokens=100)
    sent = {**{k: v for k, v in body.items() if k != "extra_body"}, **body["extra_body"]}
    assert [p["type"] for p in sent["messages"][0]["content"]] == ["image_url", "text"]
    assert sent["messages"][0]["content"][1] == published["messages"][0]["content"][1]
    assert len(sent["messages"]) == 1 and sent["messages"][0]["role"] == "user"
    assert sent["temperature"] == published["temperature"]
    assert sent["chat_template_kwargs"] == published["chat_template_kwargs"]
    assert check_request(family, sent) == "page"


def test_infinity_parser2_answers_of_the_authors_tests_give_what_their_tests_assert() -> None:
    for case in load("infinity_parser2.json")["answers"]:
        layout = INFINITY_PARSER2.parse(case["text"], width=case["width"], height=case["height"], page=1)
        assert [b.label for b in layout.blocks] == case["categories"], case["test"]
        boxes = [list(box) for block in layout.blocks for box in block.boxes]
        assert boxes == case["boxes"], case["test"]
    # The Markdown test's title keeps its '#'; headers and footers are kept here (the authors'
    # Markdown drops them unless asked), each block labelled with its category.
    cases = {c["test"].split(" ")[0]: c for c in load("infinity_parser2.json")["answers"]}
    title = cases["TestConvertJsonToMarkdown.test_convert_layout_to_markdown"]
    assert INFINITY_PARSER2.parse(title["text"], width=1000, height=1000, page=1).markdown == (
        "# Document Title\n\nParagraph content")
    margins = cases["TestConvertJsonToMarkdown.test_keep_header_footer_when_requested"]
    assert "Header content" in INFINITY_PARSER2.parse(margins["text"], width=1000, height=1000, page=1).markdown
    # The cut answer keeps its complete element and says it recovered it.
    cut = cases["TestTruncateLastIncompleteElement.test_truncate_incomplete_element"]
    layout = INFINITY_PARSER2.parse(cut["text"], width=1000, height=1000, page=1)
    assert layout.markdown == "hello" and "recovered" in layout.warnings[0]


def test_unlimited_ocr_published_answers_become_blocks_with_boxes_on_999() -> None:
    doc1, doc0 = load("unlimited_ocr.json")["answers"]
    width, height = 2550, 3300  # Letter at the authors' 300 DPI
    layout = UNLIMITED_OCR.parse(doc1["text"], width=width, height=height, page=1)
    assert [(b.label, b.text) for b in layout.blocks] == [("page_number", "E13.1"), ("text", "Car")]
    # The authors' code maps a coordinate x to int(x / 999 * width).
    assert layout.blocks[0].boxes == [(int(818 / 999 * width), int(9 / 999 * height), int(907 / 999 * width),
                                       int(35 / 999 * height))]  # fmt: skip
    assert "<PAGE>" not in layout.markdown and "det" not in layout.markdown
    layout = UNLIMITED_OCR.parse(doc0["text"], width=width, height=height, page=1)
    (figure,) = layout.figures  # an 'image' block is a figure: here the whole image
    assert figure.bbox == (0, 0, width, height)
    assert layout.markdown == "![](figure:p1-f1)\n\nIn 2017,"


def test_granite_docling_captions_above_their_tables_come_before_them() -> None:
    """docling-core's page of three tables: each caption is printed above its table, and DocTags
    writes it inside the table after the cells. docling's own Markdown export puts each caption
    right before its table; so must llm-ocr."""
    published = load("granite_docling.json")
    layout = GRANITE_DOCLING.parse(published["answer"], width=published["width"], height=published["height"], page=1)
    paragraphs = layout.markdown.split("\n\n")
    tables = [i for i, p in enumerate(paragraphs) if p.startswith("<table>")]
    assert len(tables) == 3
    for number, index in zip((35, 36, 37), tables):
        assert paragraphs[index - 1].startswith(f"TABLE {number}: "), paragraphs[index - 1]
    # The blocks are in the same order, each caption with its box (above its table's).
    labels = [b.label for b in layout.blocks]
    assert [labels[i - 1 : i + 1] for i, label in enumerate(labels) if label == "table"] == [["caption", "table"]] * 3
    caption, table = layout.blocks[0], layout.blocks[1]
    assert caption.boxes[0].y2 <= table.boxes[0].y1  # 58..76 and 85..204 of 500: 203..266 and 298..715 px
