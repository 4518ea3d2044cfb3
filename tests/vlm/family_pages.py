"""A family's reading of a page whose layout is known, as the tests make it: the layout (a title,
paragraphs, a figure with its caption, a table, an equation), a model that answers every request
with the family's own writer (:class:`Writer`), and :func:`read`, the family's parser's reading of
those answers. Shared by ``tests/vlm/test_family_round_trip.py`` (what is written is read back)
and ``tests/stages/test_box_spaces.py`` (a known block's box in page pixels and PDF points).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import Any

from llm_ocr.engines.sim.checks import check_request, prompt_text, sent_image
from llm_ocr.stages.attempts import Answer
from llm_ocr.vlm.box import Box
from llm_ocr.vlm.client import ChatResult
from llm_ocr.vlm.families import Family
from llm_ocr.vlm.families.base import BodyFor, PageInput, Reading, Retries
from llm_ocr.vlm.layout import PageLayout
from llm_ocr.vlm.view import Element, View

TITLE = Element("title", Box(0.10, 0.04, 0.70, 0.08), "Annual Report of the Harbour Trust")
INTRO = Element("text", Box(0.10, 0.10, 0.90, 0.21),
                "The harbour trust moved cargo through three quays in 2023, and dredged the eastern channel.")
CHART = Element("image", Box(0.20, 0.24, 0.80, 0.49), "", description="A bar chart of cargo by month")
CAPTION = Element("image_caption", Box(0.20, 0.50, 0.80, 0.53), "Figure 1: Cargo moved each month.")
TABLE = Element("table", Box(0.10, 0.57, 0.90, 0.72),
                "<table><tr><td>Month</td><td>Tonnes</td></tr><tr><td>January</td><td>310</td></tr>"
                "<tr><td>February</td><td>285</td></tr></table>")
EQUATION = Element("equation", Box(0.30, 0.75, 0.70, 0.80), "\\[ t = \\frac{c}{d} \\]")
CLOSING = Element("text", Box(0.10, 0.83, 0.90, 0.93),
                  "Wardens counted seals on the breakwater every spring; their numbers rose again.")
PAGE = (TITLE, INTRO, CHART, CAPTION, TABLE, EQUATION, CLOSING)
CELLS = ["Month", "Tonnes", "January", "310", "February", "285"]

#: Families whose boxes are for figures only (docs/models.md, "The families": their "boxes" column).
FIGURE_BOXES_ONLY = {"olmocr", "lightonocr-bbox"}
#: Families whose answer is the page's text with no markup at all (docs/models.md, "PaddleOCR-VL", "MiniCPM-OCR 1.0").
PLAIN_TEXT = {"paddleocr-vl", "minicpm-ocr"}


def tolerance(size: int) -> float:
    """How far a box edge may move through a family's coordinates: one step of the coarsest
    grid a family writes boxes on (DocTags: 500 steps a side) plus a pixel of truncation."""
    return size / 500 + 1


class Writer:
    """The page tools a family reads with, and a model that answers every request it is sent
    with the family's writer: for the image the request carries (the page, the page resized, or
    a crop of it), what that image shows of :data:`PAGE`."""

    def __init__(self, family: Family, width: int, height: int, page: tuple[Element, ...] = PAGE) -> None:
        self.family, self.width, self.height, self.page = family, width, height, page
        self.kinds: list[str] = []

    def view(self, image: bytes) -> View:
        token = image.decode()
        if token.startswith("crop:"):
            region = Box(*(float(v) for v in token[5:].split(",")))
            page = Box(0, 0, self.width, self.height)
            shown = []
            for element in self.page:
                pixels = element.box.scaled(self.width, self.height)
                x, y = pixels.centre
                if region.x1 <= x <= region.x2 and region.y1 <= y <= region.y2:
                    box = pixels.clipped(region).within(region)
                    shown.append(Element(element.label, box, element.text, element.description))
            assert page.overlaps(region)
            return View(int(region.width), int(region.height), tuple(shown))
        width, height = (1036, 1036) if token == "square" else (self.width, self.height)
        return View(width, height, self.page)

    async def ask(self, body_for: BodyFor, retries: Retries) -> Answer:
        received = flat(body_for(retries.temperatures[0], 0))
        kind = check_request(self.family, received)  # the request as the server gets it: the recipe's own
        assert kind is not None, f"{self.family.name} sent a request its own check does not know"
        self.kinds.append(kind)
        text = self.family.write(self.view(sent_image(received)), kind, prompt_text(received))
        return Answer(ChatResult(text, "stop", 1000, len(text) // 3, 0.1, 1), 1)

    async def crop(self, image: bytes, boxes: Sequence[Box]) -> list[bytes]:
        return [("crop:" + ",".join(str(v) for v in box)).encode() for box in boxes]

    async def transform(
        self, image: bytes, *, rotate: int = 0, size: tuple[int, int] | None = None, min_side: int = 0
    ) -> tuple[bytes, int, int]:
        assert rotate == 0, "the page is upright"
        if size is not None:
            return b"square", *size
        view = self.view(image)
        scale = max(1.0, min_side / min(view.width, view.height))
        return image, round(view.width * scale), round(view.height * scale)


def flat(body: dict[str, Any]) -> dict[str, Any]:
    """A request body as the server receives it: ``extra_body``'s fields at the top level."""
    return json.loads(json.dumps({k: v for k, v in body.items() if k != "extra_body"} | body.get("extra_body", {})))


def read(family: Family, width: int, height: int, page: tuple[Element, ...] = PAGE) -> tuple[PageLayout, list[str]]:
    """The layout ``family`` reads from a ``width`` x ``height`` page showing ``page``, and the
    kinds of the requests it sent."""
    writer = Writer(family, width, height, page)
    page = PageInput(b"page", "image/png", width, height, 7)
    reading: Reading = asyncio.run(family.read(page, writer, max_tokens=8000))
    assert (reading.width, reading.height) == (width, height)
    return reading.layout, writer.kinds
