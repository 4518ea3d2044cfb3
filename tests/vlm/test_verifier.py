"""The verifier's regions (docs/routes.md, "A verifier"): a reading is scored region by region,
as MiniCPM-OCR Jev's model card sets the unit (a text, formula or table region, its crop, its
candidate text), and the simulated verifier refuses a request without a category Jev knows."""

from __future__ import annotations

import base64
import io
import json
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from PIL import Image

from llm_ocr.records import Block
from llm_ocr.testing import SimulatedServer
from llm_ocr.vlm.verifier import PAD, Region, category_of, regions_of
from tests.docs import make_corpus


def test_regions_are_the_readings_blocks_with_their_categories_and_no_figures() -> None:
    blocks = [
        Block("title", [[100, 50, 500, 90]], "# Annual report"),
        Block("image", [[100, 100, 600, 400]], "![](figure:p1-f1)"),
        Block("Picture", [[100, 410, 600, 500]], "A chart"),  # a figure whatever its text
        Block("table", [[100, 520, 900, 700]], "<table><tr><td>1</td></tr></table>"),
        Block("equation", [[300, 720, 700, 760]], "\\[ E = m c^2 \\]"),
        Block("text", [[100, 780, 900, 800], [100, 800, 850, 840]], "Two lines of one paragraph."),
        Block("text", [], "A block without a box"),
        Block("text", [[100, 850, 900, 900]], "   "),
    ]
    # The page was read at 1000 x 1000 px; the verifier is sent the page rendered at 2000 x 2000.
    regions = regions_of(blocks, 1000, 1000, (2000, 2000))
    assert [(r.category, r.text) for r in regions] == [
        ("text", "# Annual report"), ("table", "<table><tr><td>1</td></tr></table>"),
        ("formula", "\\[ E = m c^2 \\]"), ("text", "Two lines of one paragraph."),
    ]
    assert regions[0].box == (200 - PAD, 100 - PAD, 1000 + PAD, 180 + PAD)
    assert regions[-1].box == (200 - PAD, 1560 - PAD, 1800 + PAD, 1680 + PAD)  # both boxes, one region


def test_a_reading_without_boxes_is_one_region_the_whole_page() -> None:
    assert regions_of([Block("text", [], "The page's text.")], 1000, 1400, (1000, 1400)) == []


def test_regions_stay_inside_the_image() -> None:
    (region,) = regions_of([Block("text", [[0, 0, 1000, 1000]], "All of it")], 1000, 1000, (500, 500))
    assert region == Region((0, 0, 500, 500), "All of it", "text")


@pytest.mark.parametrize(("label", "category"), [("Table", "table"), ("Equation-Block", "formula"),
                                                 ("formula", "formula"), ("Section-Header", "text"), ("text", "text")])
def test_block_labels_map_to_jevs_categories(label: str, category: str) -> None:
    assert category_of(label) == category


def test_the_simulated_verifier_refuses_a_request_without_a_category_jev_knows(tmp_path: Path) -> None:
    make_corpus(tmp_path, documents=1, pages=1)
    buffer = io.BytesIO()
    Image.new("RGB", (64, 32), "white").save(buffer, format="PNG")
    image = "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()
    with SimulatedServer("--instant", corpus=tmp_path) as server:

        def post(body: dict) -> tuple[int, str]:
            request = urllib.request.Request(f"{server.url}/sim/verify", data=json.dumps(body).encode(),
                                             headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(request, timeout=60) as response:
                    return response.status, response.read().decode()
            except urllib.error.HTTPError as exc:
                return exc.code, exc.read().decode()

        assert post({"image": image, "text": "Section 0.1"})[0] == 400
        status, said = post({"image": image, "text": "Section 0.1", "category": "paragraph"})
        assert status == 400 and "category" in said
        status, said = post({"image": image, "text": "Section 0.1", "category": "text"})
        assert status == 200 and json.loads(said)["simulated"] is True
