"""The simulator finds a piece of a page at the scale its family's rule renders it, and refuses
one cut from a downscaled render.

LightOnOCR-3 sizes every image by its longest side (2,048 px): a tile of a page, rendered from
the source as a page of its own, is sent at a scale of its own, which the simulator searches
for. The same tile cut from the page's own 2,048 px render is at half that scale: refused,
unless the context is too small to hold the tile at the family's scale (then a quarter of the
context left beside the answer is all it is owed).
"""

from __future__ import annotations

import io
import json
import urllib.error
import urllib.request
from pathlib import Path

import pypdfium2 as pdfium
import pytest
from PIL import Image

from llm_ocr.testing import SimulatedServer
from llm_ocr.vlm.families import family_named
from tests.newspaper import newspaper_pdf

FAMILY = family_named("lightonocr-3")


@pytest.fixture(scope="module")
def paper(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("paper")
    newspaper_pdf(folder / "courier.pdf", seed=3)
    return folder


def render(folder: Path, region: tuple[float, float, float, float], long_side: int | None = None) -> Image.Image:
    """``region`` (page fractions) of the page, rendered from the PDF with ``long_side`` pixels
    on its longer side (the family's rule for the region as a page), or cut from the whole page
    rendered so (None: the family's page image, 2,048 px on its longer side)."""
    pdf = pdfium.PdfDocument(str(folder / "courier.pdf"))
    try:
        page = pdf[0]
        width, height = page.get_size()
        x1, y1, x2, y2 = region[0] * width, region[1] * height, region[2] * width, region[3] * height
        if long_side is not None:
            scale = long_side / max(x2 - x1, y2 - y1)
            return page.render(scale=scale, crop=(x1, height - y2, width - x2, y1)).to_pil().convert("RGB")
        scale = FAMILY.rendering.long_side / max(width, height)
        whole = page.render(scale=scale).to_pil().convert("RGB")
        return whole.crop((round(x1 * scale), round(y1 * scale), round(x2 * scale), round(y2 * scale)))
    finally:
        pdf.close()


def ask(sim: SimulatedServer, image: Image.Image, max_tokens: int) -> tuple[int, str]:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    body = FAMILY.body(buffer.getvalue(), "image/png", temperature=FAMILY.retries.temperatures[0],
                       max_tokens=max_tokens)
    body = {**{k: v for k, v in body.items() if k != "extra_body"}, **body.get("extra_body", {}),
            "model": FAMILY.models[0]}
    request = urllib.request.Request(f"{sim.base_url}/chat/completions", json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def server(folder: Path, context: int) -> SimulatedServer:
    return SimulatedServer("--instant", "--max-model-len", str(context), "--served-model-name", FAMILY.models[0],
                           "--recipe", FAMILY.name, corpus=folder)


@pytest.mark.parametrize("region", [(0.0, 0.0, 0.5, 0.5), (0.3, 0.2, 0.7, 0.45), (0.1, 0.1, 0.35, 0.3)])
def test_a_tile_rendered_at_the_familys_longest_side_is_found_where_it_is(paper: Path, region) -> None:
    with server(paper, 32768) as sim:
        status, text = ask(sim, render(paper, region, long_side=2048), max_tokens=1024)
        (record,) = sim.requests()
    assert status == 200, text
    found = record["known_page"]["region"]
    assert all(abs(a - b) < 0.01 for a, b in zip(found, region)), (found, region)


def test_a_tile_cut_from_the_familys_page_image_is_refused_unless_the_context_cannot_hold_more(paper: Path) -> None:
    quarter = render(paper, (0.0, 0.0, 0.5, 0.5))  # 662 x 1,024 px: half the scale the rule gives it
    with server(paper, 32768) as sim:
        status, text = ask(sim, quarter, max_tokens=1024)
        stats = sim.stats()
    assert status == 400 and "cut from a downscaled render" in text, text
    assert stats["unreadable_refused"] == 1
    # 4,096 tokens with 3,072 for the answer: at the family's scale the tile (2,048 px long, some
    # 2,700 image tokens) cannot fit beside the answer; at the page's scale it is a fair share.
    with server(paper, 4096) as sim:
        status, text = ask(sim, quarter, max_tokens=3072)
        stats = sim.stats()
    assert status == 200, text
    assert stats["unreadable_refused"] == 0 and stats["known_crops"] == 1
