"""Every model family end to end: Extract of real PDFs against the simulated server playing the
family (its answer format, its coordinate space, and a 400 for any page request that strays
from its recipe): the words, every figure, and no stray request. The sweep over the families
reads each one through the Python API in this process against one server playing them all
(tests/sweeps.py); the other tests run ``llm-ocr extract`` and ``llm-ocr run`` as subprocesses."""

from __future__ import annotations

import io
import re
from pathlib import Path

import numpy as np
import pypdfium2
import pytest
from PIL import Image

from llm_ocr.testing import SimulatedServer
from llm_ocr.vlm.families import family_named
from tests.conftest import read_stage, run_cli
from tests.docs import make_pdf
from tests.sweeps import Counters
from tests.sweeps import extract as in_process_extract

#: A served name of each family (the family is chosen from it, as for a real server).
MODELS = {
    "deepseek-ocr": "deepseek-ai/DeepSeek-OCR-2",
    "olmocr": "allenai/olmOCR-2-7B-1025-FP8",
    "dots-ocr": "rednote-hilab/dots.mocr",
    "chandra": "datalab-to/chandra-ocr-2",
    "chandra-1": "datalab-to/chandra",
    "mineru": "opendatalab/MinerU2.5-2509-1.2B",
    "granite-docling": "ibm-granite/granite-docling-258M",
    "lightonocr-3": "lightonai/LightOnOCR-3-4B",
    "lightonocr-3-1b": "lightonai/LightOnOCR-3-1B",
    "unlimited-ocr": "baidu/Unlimited-OCR",
    "infinity-parser2": "infly/Infinity-Parser2-Pro",
}
#: The chart tests/docs.py draws on odd pages: x=72pt, y=380pt from the bottom, 300x180 pt.
CHART_PT = (72, 792 - 380 - 180, 372, 792 - 380)


def words(text: str) -> list[str]:
    return re.findall(r"[A-Za-z0-9.]+", text)


def recall(expected: list[str], text: str) -> float:
    have: dict[str, int] = {}
    for word in words(text):
        have[word] = have.get(word, 0) + 1
    found = 0
    for word in expected:
        if have.get(word, 0) > 0:
            have[word] -= 1
            found += 1
    return found / max(1, len(expected))


def extract(inputs: list[str], out: Path, server: SimulatedServer, model: str, *extra: str):
    return run_cli(
        "extract", *inputs, "--output", str(out), "--endpoint", server.base_url, "--model", model,
        "--workers", "0", "--progress", "off", *extra, timeout=300,
    )  # fmt: skip


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[list[str]]]:
    """A folder with one two-page report (a chart on page 1), and its lines of text by page."""
    docs = tmp_path_factory.mktemp("docs")
    return docs, make_pdf(docs / "report.pdf", pages=2, seed=5)


@pytest.fixture(scope="module")
def every_family(report: tuple[Path, list[list[str]]]):  # a SimulatedServer
    """One server answering to every name of MODELS, playing each name's family (tests of one
    worker run one after the other: each reads its own run from the counters' change), with the
    largest context of them (Infinity-Parser2's): a server of one family has its family's."""
    context = max(family_named(family).serving.context for family in MODELS)
    with SimulatedServer("--instant", "--max-model-len", str(context), "--served-model-name", *MODELS.values(),
                         corpus=report[0]) as server:
        yield server


@pytest.mark.parametrize("family", list(MODELS))
def test_extract_of_real_pdfs_gets_the_words_and_every_figure(
    report: tuple[Path, list[list[str]]], every_family: SimulatedServer, tmp_path: Path, family: str
) -> None:
    model = MODELS[family]
    recipe = family_named(family)
    docs, texts = report
    counters = Counters(every_family)
    # In this process (the family's recipe and parser are tested, not the command's start-up;
    # the tests below run the command).
    result = in_process_extract(docs, tmp_path / "out", every_family, model)
    stats, requests = counters.since(), counters.requests()
    assert result.exit_code == 0, result
    assert stats["recipe_refused"] == 0
    # Every request was one of the family's page requests (none fell to a description).
    kinds = stats["families"]
    assert kinds and all(k.startswith(f"{family}:") for k in kinds), kinds
    assert sum(kinds.values()) == len(requests)
    rows = read_stage(tmp_path / "out", "extract")
    assert [r["page"] for r in rows] == [1, 2]
    for row, lines in zip(rows, texts):
        assert row["status"] == "ok", row["error"]
        expected = [w for line in lines for w in words(line)]
        assert recall(expected, row["markdown"]) >= 0.95, (family, row["markdown"][:500])
        assert row["model"] == model and row["raw"]
        # Boxes are page pixels, whatever the family's own space.
        for block in row["blocks"]:
            for x1, y1, x2, y2 in block["boxes"]:
                assert 0 <= x1 < x2 <= row["width"] and 0 <= y1 < y2 <= row["height"]
    page1, page2 = rows
    assert page2["figures"] == []
    if not recipe.outputs.figure_crops:
        assert page1["figures"] == []
        return
    (figure,) = page1["figures"]
    # The chart's box, in this family's page image (its own DPI or longest side).
    scale = page1["width"] / 612
    expected_box = [v * scale for v in CHART_PT]
    assert np.allclose(figure["bbox"], expected_box, atol=max(6, 0.012 * page1["width"])), (figure["bbox"], expected_box)
    assert re.search(rf"!\[[^\]]*\]\(figure:{figure['id']}\)", page1["markdown"])
    crop = Image.open(io.BytesIO(figure["image"]["bytes"]))
    assert crop.size == (figure["bbox"][2] - figure["bbox"][0], figure["bbox"][3] - figure["bbox"][1])
    # A family that describes its figures keeps the description (Describe will not ask again).
    assert bool(figure["description"]) == recipe.outputs.figure_descriptions


def test_each_family_renders_pages_as_it_was_trained(every_family: SimulatedServer, tmp_path: Path) -> None:
    make_pdf(tmp_path / "one.pdf", pages=1, seed=2)
    sizes = {}
    for family in ("olmocr", "dots-ocr", "mineru"):
        model = MODELS[family]
        counters = Counters(every_family)
        assert in_process_extract(tmp_path / "one.pdf", tmp_path / family, every_family, model).exit_code == 0
        (entry,) = counters.requests(model)[:1]
        (row,) = read_stage(tmp_path / family, "extract")
        sizes[family] = (row["width"], row["height"])
        url = next(p for m in entry["body"]["messages"] if isinstance(m["content"], list) for p in m["content"]
                   if p["type"] == "image_url")["image_url"]["url"]
        assert url["data_uri"] == "image/png"
    assert sizes["olmocr"] == (996, 1288)  # longest side 1288 px (olmOCR's target_longest_image_dim)
    assert sizes["dots-ocr"] == (1700, 2200)  # 200 DPI
    assert sizes["mineru"] == (1700, 2200)  # 200 DPI


def test_mineru_reads_the_layout_then_each_block(tmp_path: Path) -> None:
    make_pdf(tmp_path / "one.pdf", pages=1, seed=3)
    model = MODELS["mineru"]
    with SimulatedServer("--instant", "--served-model-name", model, corpus=tmp_path / "one.pdf") as server:
        assert extract([str(tmp_path / "one.pdf")], tmp_path / "out", server, model).returncode == 0
        stats, requests = server.stats(), server.requests()
    (row,) = read_stage(tmp_path / "out", "extract")
    text_blocks = [b for b in row["blocks"] if b["label"] != "image"]
    # One layout request, then one per text block; the figure is cropped, not read.
    assert stats["families"] == {"mineru:layout": 1, "mineru:block": len(text_blocks)}
    layout = requests[0]["body"]
    assert layout["messages"][0] == {"role": "system", "content": "You are a helpful assistant."}
    assert layout["messages"][1]["content"][1]["text"] == "\nLayout Detection:"
    assert layout["vllm_xargs"] == {"no_repeat_ngram_size": 100, "debug": False}
    assert layout["top_k"] == 1 and layout["top_p"] == 0.01 and layout["skip_special_tokens"] is False
    assert all(r["body"]["presence_penalty"] == 1.0 for r in requests[1:])
    assert row["attempts"] == len(requests) and row["prompt_tokens"] > 0


def test_a_page_olmocr_says_is_rotated_is_turned_and_read_again(tmp_path: Path) -> None:
    # A scan fed in sideways: the page of a PDF (which the simulated server knows upright),
    # rendered and turned a quarter clockwise.
    (lines,) = make_pdf(tmp_path / "upright.pdf", pages=1, seed=4)
    page = pypdfium2.PdfDocument(str(tmp_path / "upright.pdf"))[0].render(scale=1.5).to_pil()
    page.transpose(Image.Transpose.ROTATE_270).save(tmp_path / "sideways.png")
    model = MODELS["olmocr"]
    with SimulatedServer("--instant", "--served-model-name", model, corpus=tmp_path / "upright.pdf") as server:
        assert extract([str(tmp_path / "sideways.png")], tmp_path / "out", server, model).returncode == 0
        requests = server.requests()
    (row,) = read_stage(tmp_path / "out", "extract")
    assert len(requests) == 2  # read, turned as the model said, read again
    assert row["status"] == "ok" and "turned 90°" in row["error"]
    assert row["height"] > row["width"]  # upright again: portrait
    assert recall([w for line in lines for w in words(line)], row["markdown"]) >= 0.95
    # The figure's box refers to the upright page the crop was taken from.
    (figure,) = row["figures"]
    scale = row["width"] / 612
    assert np.allclose(figure["bbox"], [v * scale for v in CHART_PT], atol=0.012 * row["width"])


def test_a_figure_the_model_described_inline_is_not_described_again_unless_asked(tmp_path: Path) -> None:
    make_pdf(tmp_path / "one.pdf", pages=1, seed=6)
    model = MODELS["olmocr"]
    with SimulatedServer("--instant", "--served-model-name", model, corpus=tmp_path / "one.pdf") as server:
        base = ("--endpoint", server.base_url, "--model", model, "--workers", "0", "--progress", "off")
        assert run_cli("run", str(tmp_path / "one.pdf"), "--output", str(tmp_path / "kept"), *base).returncode == 0
        kept_requests = len(server.requests())
        assert run_cli("run", str(tmp_path / "one.pdf"), "--output", str(tmp_path / "again"), *base,
                       "--redescribe").returncode == 0
        again_requests = len(server.requests()) - kept_requests
    (kept,) = read_stage(tmp_path / "kept", "describe")
    (figure,) = kept["figures"]
    assert figure["description"] == "A chart of coloured bars"  # olmOCR-2's own alt text
    assert kept_requests == 1  # the page only: no description asked for
    (again,) = read_stage(tmp_path / "again", "describe")
    assert again_requests == 2 and again["figures"][0]["description"] != "A chart of coloured bars"
