"""The page image each family is sent obeys the resize rule its own sources state.

A Letter page is rendered as a run renders it for the family (``family_render``, then
``sources/render.py``) and read as a run reads it (``stages/extract.py`` ``read_page``, the
family's ``read``, the workers' real image transform); every image in the requests it sends is
decoded and measured against the rule below. The rules are written here from the numbers the
cited sources give, not taken from the families' constants or their ``check_image`` (the
simulated server's check must agree with them, which its own tests prove).
"""

from __future__ import annotations

import asyncio
import base64
import io
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from PIL import Image
from reportlab.lib.pagesizes import letter
from reportlab.pdfgen import canvas

from llm_ocr.options import ExtractOptions, RenderOptions
from llm_ocr.runners.workers import crop_figures, transform_image
from llm_ocr.sources.base import DocumentRef, PageImage
from llm_ocr.sources.render import render_pages
from llm_ocr.stages.extract import ExtractContext, family_render, read_page
from llm_ocr.vlm.client import ChatResult
from llm_ocr.vlm.families import family_named


@dataclass(frozen=True)
class Rule:
    """What the family's sources say of the image they send: a render resolution (``dpi``), then
    each side a multiple of ``multiple`` (rounded to the nearest), the pixels within bounds, the
    longer side exactly ``long_side`` or at most ``max_long_side``; or one fixed ``size``."""

    source: str
    dpi: float | None = None
    multiple: int | None = None
    min_pixels: int = 1
    max_pixels: int | None = None
    long_side: int | None = None
    max_long_side: int | None = None
    size: tuple[int, int] | None = None


RULES = {
    "infinity-parser2": Rule("infly-ai/INF-MLLM Infinity-Parser2 utils/pdf.py (dpi 300), utils/image.py "
                             "(encode_image_to_base64: smart_resize factor 32, min_pixels 2048, max_pixels 16777216)",
                             dpi=300, multiple=32, min_pixels=2048, max_pixels=16_777_216),
    "dots-ocr": Rule("rednote-hilab/dots.ocr parser.py (dpi 200), utils/consts.py (MIN_PIXELS 3136, MAX_PIXELS "
                     "11289600)", dpi=200, min_pixels=3136, max_pixels=11_289_600),
    "chandra": Rule("datalab-to/chandra settings.py (IMAGE_DPI 192), model/util.py (scale_to_fit: 3072 x 2048 px)",
                    dpi=192, max_pixels=3072 * 2048),
    "chandra-1": Rule("datalab-to/chandra settings.py (IMAGE_DPI 192), model/util.py (scale_to_fit: 3072 x 2048 px)",
                      dpi=192, max_pixels=3072 * 2048),
    "surya": Rule("surya-ocr 0.22.1 settings.py (IMAGE_DPI_HIGHRES 192), inference/util.py (scale_to_fit: "
                  "max_size (3072, 2048), min_size (1792, 28), grid_size 28)", dpi=192, multiple=28,
                  min_pixels=1792 * 28, max_pixels=3072 * 2048),
    "paddleocr-vl": Rule("PaddlePaddle/PaddleOCR-VL preprocessor_config.json (min_pixels 147384, max_pixels 2822400)",
                         min_pixels=147_384, max_pixels=2_822_400),
    "olmocr": Rule("allenai/olmocr pipeline.py (--target_longest_image_dim 1288)", long_side=1288),
    "lightonocr": Rule("LightOnOCR-2-1B model card (longest dimension 1540)", long_side=1540),
    "lightonocr-bbox": Rule("LightOnOCR-2-1B model card (longest dimension 1540)", long_side=1540),
    "lightonocr-3": Rule("lightonai/LightOnOCR lightonocr/render.py (DEFAULT_LONGEST_EDGE 2048)", long_side=2048),
    "lightonocr-3-1b": Rule("lightonai/LightOnOCR lightonocr/models.py (1540 for the 1B)", long_side=1540),
    # Its smart_resize counts two frames (t_patch_size 2) against min_pixels and max_pixels.
    "glm-ocr": Rule("zai-org/GLM-OCR glmocr/config.yaml (pdf_dpi 200; page_loader: t_patch_size 2, min_pixels "
                    "12544, max_pixels 71372800), page_loader.py (3500 px a side), utils/image_utils.py "
                    "(load_image_to_base64: factor 14 x 2)", dpi=200, multiple=28, min_pixels=12_544 // 2,
                    max_pixels=71_372_800 // 2, max_long_side=3500),
    # The layout pass: the page resized to a square (its first request).
    "mineru": Rule("opendatalab/mineru-vl-utils mineru_client.py (layout_image_size (1036, 1036))", size=(1036, 1036)),
    "hunyuan-ocr": Rule("transformers hunyuan_vl image processor (512 x 512 to 2048 x 2048 px)", min_pixels=512 * 512,
                        max_pixels=2048 * 2048),
    "qwen2.5-vl": Rule("QwenLM/Qwen2.5-VL cookbooks/document_parsing.ipynb (min/max pixels 512/2048 x 28 x 28)",
                       min_pixels=512 * 28 * 28, max_pixels=2048 * 28 * 28),
    "qwen3-vl": Rule("QwenLM/Qwen3-VL cookbooks/document_parsing.ipynb (min/max pixels 512/2048 x 32 x 32)",
                     min_pixels=512 * 32 * 32, max_pixels=2048 * 32 * 32),
    "qianfan-ocr": Rule("transformers model_doc/qianfan_ocr.md (448 x 448 tiles of 256 tokens, 4096 tokens at most)",
                        max_pixels=4096 // 256 * 448 * 448),
}

LETTER_PT = letter  # 612 x 792 pt


@pytest.fixture(scope="module")
def letter_pdf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("letter") / "letter.pdf"
    page = canvas.Canvas(str(path), pagesize=letter)
    page.setFont("Helvetica", 11)
    for line in range(40):
        page.drawString(72, 720 - 15 * line, f"Line {line}: the harbour trust moved cargo through three quays.")
    page.save()
    return path


class Recorder:
    """A model that answers nothing, keeping every request it is sent."""

    model = "any"

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []

    async def chat(self, body: dict[str, Any], stream: bool = False, loops: object = None) -> ChatResult:
        self.bodies.append(body)
        return ChatResult("", "stop", 10, 1, 0.01, 1)


def sent_sizes(family_name: str, pdf: Path) -> list[tuple[int, int]]:
    """The size of every image the requests for the Letter page ``pdf`` sent the family."""
    family = family_named(family_name)
    render = family_render(RenderOptions(), family)
    ref = DocumentRef(doc_id="letter", source=str(pdf), location=str(pdf), kind="pdf", index=0)
    (page,) = render_pages(ref, render, 1, 1)
    assert isinstance(page, PageImage)
    client = Recorder()

    async def crop(image: bytes, boxes: Any) -> list[bytes]:
        return await asyncio.to_thread(crop_figures, image, boxes)

    async def transform(image: bytes, *args: Any) -> tuple[bytes, int, int]:
        return await asyncio.to_thread(transform_image, image, *args)

    ctx = ExtractContext(client, family, ExtractOptions(cut_loops=False), 1000, crop, transform)  # type: ignore[arg-type]
    asyncio.run(read_page(page, ctx))
    sizes = []
    for body in client.bodies:
        for part in body["messages"][-1]["content"]:
            if part["type"] == "image_url":
                data = base64.b64decode(part["image_url"]["url"].partition(",")[2])
                with Image.open(io.BytesIO(data)) as image:
                    sizes.append(image.size)
    return sizes


@pytest.mark.parametrize("name", sorted(RULES))
def test_the_image_sent_obeys_the_familys_resize_rule(name: str, letter_pdf: Path) -> None:
    rule = RULES[name]
    sizes = sent_sizes(name, letter_pdf)
    assert sizes, "no image was sent"
    width, height = sizes[0]  # the page request (MinerU's layout pass)
    if rule.size is not None:
        assert (width, height) == rule.size
        return
    pixels = width * height
    if rule.multiple:
        assert width % rule.multiple == 0 and height % rule.multiple == 0, (width, height)
    assert pixels >= rule.min_pixels, (width, height)
    if rule.max_pixels:
        assert pixels <= rule.max_pixels, (width, height)
    if rule.long_side:
        assert max(width, height) == rule.long_side, (width, height)
    if rule.max_long_side:
        assert max(width, height) <= rule.max_long_side, (width, height)
    # The page's shape is kept: within one multiple (or a pixel) of the page's aspect.
    step = rule.multiple or 1
    assert abs(width - height * LETTER_PT[0] / LETTER_PT[1]) <= step, (width, height)
    if rule.dpi is not None and (rule.max_pixels is None or
                                 LETTER_PT[0] * LETTER_PT[1] * (rule.dpi / 72) ** 2 <= rule.max_pixels):
        # Rendered at the DPI, then (a client that resizes) rounded to the nearest multiple.
        for side, points in ((width, LETTER_PT[0]), (height, LETTER_PT[1])):
            assert abs(side - points * rule.dpi / 72) <= step / 2 + 1, (width, height)
    assert all(size == (width, height) for size in sizes[1:])  # a retry sends the same image


def test_a_piece_cut_from_a_page_is_resized_as_the_client_resizes() -> None:
    """Not only whole pages: an image of any size a run sends Infinity-Parser2 (a tile cut from a
    page) is sent with its sides multiples of 32, rounded to the nearest."""
    family = family_named("infinity-parser2")
    client = Recorder()

    async def transform(image: bytes, *args: Any) -> tuple[bytes, int, int]:
        return await asyncio.to_thread(transform_image, image, *args)

    tile = Image.new("RGB", (1001, 517), "white")
    buffer = io.BytesIO()
    tile.save(buffer, "PNG")
    page = PageImage("doc", 1, buffer.getvalue(), "image/png", 1001, 517)
    ctx = ExtractContext(client, family, ExtractOptions(cut_loops=False), 1000, crop_figures, transform)  # type: ignore[arg-type]
    reading = asyncio.run(read_page(page, ctx))
    (body,) = client.bodies
    data = base64.b64decode(body["messages"][-1]["content"][0]["image_url"]["url"].partition(",")[2])
    with Image.open(io.BytesIO(data)) as sent:
        assert sent.size == (992, 512)  # 1001 / 32 = 31.3 -> 31 x 32; 517 / 32 = 16.2 -> 16 x 32
    assert (reading.width, reading.height) == (992, 512)  # the reading's boxes are that image's
