"""The simulator's dense page: a known page whose text exceeds ``max_tokens``, whose crops (the
tiles a client reads it in) are each answered with the text of their region."""

from __future__ import annotations

import io
import json
import re
from collections import Counter
from pathlib import Path

import pypdfium2 as pdfium
import pytest
from PIL import Image

from llm_ocr.bench.corpus import dense_pdf
from llm_ocr.testing import SimulatedServer
from tests.engines.test_simulated import TAG, ocr, run, words


@pytest.fixture(scope="module")
def dense(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[tuple[str, list[list[str]]]], Image.Image]:
    folder = tmp_path_factory.mktemp("dense")
    path = folder / "gazette.pdf"
    (parts,) = dense_pdf(path, seed=3)
    pdf = pdfium.PdfDocument(str(path))
    try:
        page = pdf[0].render(scale=144 / 72).to_pil().convert("RGB")  # as llm-ocr renders it
    finally:
        pdf.close()
    return path, parts, page


@pytest.fixture(scope="module")
def sim(dense: tuple[Path, list, Image.Image]) -> SimulatedServer:
    with SimulatedServer("--prefill-ms", "0", corpus=dense[0]) as server:
        yield server


def png(image: Image.Image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, "PNG")
    return buffer.getvalue()


def test_a_dense_page_read_whole_runs_out_of_tokens(sim: SimulatedServer, dense: tuple) -> None:
    _, parts, page = dense
    answer = run(ocr(sim.base_url, png(page), mime="image/png", max_tokens=7168)).choices[0]
    assert answer.finish_reason == "length"
    got = Counter(words(TAG.sub(" ", answer.message.content)))
    truth = Counter(words(" ".join(line for _, paragraphs in parts for p in paragraphs for line in p)))
    recall = sum((truth & got).values()) / sum(truth.values())
    assert 0.5 < recall < 0.95, recall  # most of the page, not all of it


def test_each_tile_of_a_dense_page_is_answered_with_the_text_of_its_region(sim: SimulatedServer, dense: tuple) -> None:
    _, parts, page = dense
    width, height = page.size
    columns = {name: [line for p in paragraphs for line in p] for name, paragraphs in parts if name.startswith("column")}
    # Two bands (overlapping by 80 px) of three tiles each, cut in the gutters after columns 2
    # and 4 (the gutters are 32 px wide at 144 DPI).
    gutter = [round((36 + c * (89.14 + 16) - 8) * 2) for c in (2, 4)]
    tiles = [(left, top, right, bottom)
             for top, bottom in ((0, height // 2 + 40), (height // 2 - 40, height))
             for left, right in ((0, gutter[0]), (gutter[0], gutter[1]), (gutter[1], width))]  # fmt: skip
    answers = [run(ocr(sim.base_url, png(page.crop(t)), mime="image/png", max_tokens=7168)).choices[0] for t in tiles]
    assert all(a.finish_reason == "stop" for a in answers)  # each tile fits
    texts = [a.message.content for a in answers]
    for text in texts:
        for _, det in TAG.findall(text):  # boxes relative to the tile
            box = json.loads(det)[0]
            assert 0 <= box[0] < box[2] <= 999 and 0 <= box[1] < box[3] <= 999
    # The first tile (top left) holds the masthead and the top of columns 1-2, nothing of
    # column 3 or of the bottom; the last (bottom right) the end of column 7.
    assert "Gazette" in texts[0] and columns["column 1"][0] in texts[0] and columns["column 2"][0] in texts[0]
    assert columns["column 3"][0] not in texts[0] and columns["column 1"][-1] not in texts[0]
    assert columns["column 7"][-1] in texts[5] and columns["column 7"][0] not in texts[5]
    assert columns["column 3"][0] in texts[1] and columns["column 5"][0] in texts[2]
    # Together the tiles hold the whole page.
    truth = Counter(words(" ".join(line for _, paragraphs in parts for p in paragraphs for line in p)))
    got = Counter(words(" ".join(TAG.sub(" ", t) for t in texts)))
    assert sum((truth & got).values()) / sum(truth.values()) >= 0.995
    assert sim.stats()["known_crops"] >= 6


def test_a_crop_at_another_scale_or_of_another_page_is_not_taken_for_a_tile(sim: SimulatedServer, dense: tuple) -> None:
    _, _, page = dense
    quarter = page.crop((0, 0, page.width // 2, page.height // 2))
    small = quarter.resize((quarter.width // 2, quarter.height // 2))  # as if rendered at 72 DPI
    before = sim.stats()
    text = run(ocr(sim.base_url, png(small), mime="image/png")).choices[0].message.content
    assert "Gazette" not in text
    blank = Image.new("RGB", (600, 600), "white")
    run(ocr(sim.base_url, png(blank), mime="image/png"))
    after = sim.stats()
    assert after["known_crops"] == before["known_crops"] and after["synthetic_pages"] == before["synthetic_pages"] + 2
    assert not re.search(r"known_page", json.dumps(sim.requests()[-1]))
