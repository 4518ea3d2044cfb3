"""Extract of real PDFs through the simulated server playing PaddleOCR-VL, GLM-OCR, Nanonets-OCR2,
LightOnOCR-2 (and its -bbox variant), Qwen2.5-VL / Qwen3-VL, Surya OCR 2, Qianfan-OCR (and its
Layout-as-Thought recipe), HunyuanOCR, MiniCPM-OCR 1.0 and FireRed-OCR.

The server refuses every page request that strays from the family's recipe
(``llm_ocr/engines/sim/checks.py``) and answers in the family's own format, so a run proves the requests on the wire and the parser
together: the page words come back (recall >= 0.95 of the PDF's text), every chart is cropped
where the family gives boxes, and no request was refused. The sweep over the families reads
each one through the Python API in this process (tests/sweeps.py: the recipe is tested, not the
command's start-up); Qianfan-OCR's and HunyuanOCR's tests run ``llm-ocr extract`` as a subprocess.
"""

from __future__ import annotations

import io
import re
from collections import Counter
from pathlib import Path

import pytest
from PIL import Image

from llm_ocr.testing import SimulatedServer
from tests.conftest import read_stage, run_cli
from tests.docs import make_corpus
from tests.sweeps import extract

#: (served model name, whether the family gives figure boxes)
FAMILIES = [
    ("PaddlePaddle/PaddleOCR-VL", False),
    ("PaddlePaddle/PaddleOCR-VL-1.6", False),
    ("zai-org/GLM-OCR", False),
    ("nanonets/Nanonets-OCR2-3B", False),
    ("lightonai/LightOnOCR-2-1B", False),
    ("lightonai/LightOnOCR-2-1B-bbox-soup", True),
    ("Qwen/Qwen2.5-VL-7B-Instruct", True),
    ("Qwen/Qwen3-VL-8B-Instruct", True),
    ("datalab-to/surya-ocr-2", True),
    ("baidu/Qianfan-OCR", False),
    ("tencent/HunyuanOCR", False),
    ("openbmb/MiniCPM-OCR-1.0", False),
    ("FireRedTeam/FireRed-OCR", False),
]

NANONETS = "nanonets/Nanonets-OCR2-3B"
#: Where tests/docs.py draws the chart of an odd page: x 72..372 pt, y 232..412 pt from the
#: top of a 612 x 792 pt Letter page, as fractions of the page.
CHART = (72 / 612, 232 / 792, 372 / 612, 412 / 792)


def _words(text: str) -> Counter[str]:
    return Counter(re.findall(r"[a-z0-9]+", text.lower()))


def _recall(truth: str, got: str) -> float:
    want, have = _words(truth), _words(got)
    return sum(min(n, have[w]) for w, n in want.items()) / max(1, sum(want.values()))


def _iou(a: tuple[float, ...], b: tuple[float, ...]) -> float:
    ix = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    iy = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = ix * iy
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


@pytest.fixture(scope="module")
def sim(corpus: tuple[Path, dict[str, list[list[str]]]]):  # a SimulatedServer
    """One simulated server answering to every family's name (it plays each name's family), with
    the largest context of them (Nanonets-OCR2's 32768: 15000 answer tokens and the page)."""
    names = [model for model, _ in FAMILIES]
    with SimulatedServer("--instant", "--max-model-len", "32768", "--served-model-name", *names, corpus=corpus[0]) as server:
        yield server


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, list[list[str]]]]:
    folder = tmp_path_factory.mktemp("docs")
    return folder, make_corpus(folder, documents=1, pages=3)


@pytest.mark.parametrize(("model", "boxes"), FAMILIES, ids=[m for m, _ in FAMILIES])
def test_extract_reads_every_word_and_crops_charts_where_the_family_gives_boxes(
    corpus: tuple[Path, dict[str, list[list[str]]]], sim: SimulatedServer, tmp_path: Path, model: str, boxes: bool
) -> None:
    docs, texts = corpus
    out = tmp_path / "out"
    refused = sim.stats()["recipe_refused"]
    # In this process (what is tested is the family's recipe and parser; the command is run as
    # a subprocess by the tests below).
    result = extract(docs, out, sim, model)
    assert result.exit_code == 0, result
    assert sim.stats()["recipe_refused"] == refused
    rows = read_stage(out, "extract")
    assert len(rows) == sum(len(pages) for pages in texts.values())
    for row in rows:
        assert row["status"] == "ok", row["error"]
        truth = "\n".join(texts[row["doc_id"]][row["page"] - 1])
        assert _recall(truth, row["markdown"]) >= 0.95, (model, row["page"], row["markdown"][:500])
        charted = row["page"] % 2 == 1
        if not (boxes and charted):
            assert row["figures"] == [], row["figures"]
            continue
        assert len(row["figures"]) == 1, row["figures"]
        figure = row["figures"][0]
        x1, y1, x2, y2 = figure["bbox"]
        found = (x1 / row["width"], y1 / row["height"], x2 / row["width"], y2 / row["height"])
        assert _iou(found, CHART) > 0.8, (found, CHART)
        with Image.open(io.BytesIO(figure["image"]["bytes"])) as crop:
            assert crop.size == (x2 - x1, y2 - y1)
        assert f"(figure:{figure['id']})" in row["markdown"]


def test_nanonets_keeps_its_inline_figure_description(
    corpus: tuple[Path, dict[str, list[list[str]]]], sim: SimulatedServer, tmp_path: Path
) -> None:
    """Nanonets describes the chart inline; the row keeps it and has no crop for Describe."""
    docs, _ = corpus
    out = tmp_path / "out"
    result = extract(docs, out, sim, NANONETS)
    assert result.exit_code == 0, result
    charted = [r for r in read_stage(out, "extract") if r["page"] % 2 == 1]
    assert charted and all("[Figure: " in r["markdown"] for r in charted)
    assert all(r["figures"] == [] for r in charted)


def test_qianfan_layout_as_thought_keeps_its_analysis_in_raw_and_reads_the_markdown_after_it(
    corpus: tuple[Path, dict[str, list[list[str]]]], sim: SimulatedServer, tmp_path: Path
) -> None:
    """--recipe qianfan-ocr-think turns the thinking phase on (chat_template_kwargs); the layout
    analysis stays in raw, the Markdown after </think> is the page. A server playing the plain
    recipe refuses the thinking request (a 400 per page: error rows, not a silent other answer)."""
    docs, texts = corpus
    model = "baidu/Qianfan-OCR"
    with SimulatedServer("--instant", "--max-model-len", "32768", "--served-model-name", model,
                         "--recipe", "qianfan-ocr-think", corpus=docs) as thinking:
        out = tmp_path / "think"
        result = run_cli("extract", str(docs), "--output", str(out), "--endpoint", thinking.base_url, "--model",
                         model, "--recipe", "qianfan-ocr-think", "--workers", "0", "--progress", "off")
        assert result.returncode == 0, result.stderr[-3000:]
        requests = thinking.requests()
        assert thinking.stats()["recipe_refused"] == 0
    assert requests and all(r["body"]["chat_template_kwargs"] == {"enable_thinking": True} for r in requests)
    for row in read_stage(out, "extract"):
        assert row["status"] == "ok", row["error"]
        assert "<think>" in row["raw"] and "</think>" in row["raw"]
        assert "think>" not in row["markdown"]
        truth = "\n".join(texts[row["doc_id"]][row["page"] - 1])
        assert _recall(truth, row["markdown"]) >= 0.95, row["markdown"][:500]
    # The shared server plays the plain recipe (no thinking): the same request is off its recipe.
    refused = sim.stats()["recipe_refused"]
    result = run_cli("extract", str(docs), "--output", str(tmp_path / "plain"), "--endpoint", sim.base_url,
                     "--model", model, "--recipe", "qianfan-ocr-think", "--workers", "0", "--progress", "off")  # fmt: skip
    assert result.returncode == 1, result.stderr[-3000:]
    assert sim.stats()["recipe_refused"] > refused
    rows = read_stage(tmp_path / "plain", "extract")
    assert rows and all(r["status"] == "error" and "chat_template_kwargs" in r["error"] for r in rows), rows[0]["error"]


def test_hunyuan_sends_its_empty_system_message(
    corpus: tuple[Path, dict[str, list[list[str]]]], sim: SimulatedServer, tmp_path: Path
) -> None:
    """HunyuanOCR's chat starts with a system message whose content is the empty string."""
    docs, _ = corpus
    before = len(sim.requests())
    result = run_cli("extract", str(docs), "--output", str(tmp_path / "out"), "--endpoint", sim.base_url,
                     "--model", "tencent/HunyuanOCR", "--workers", "0", "--progress", "off")  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    sent = sim.requests()[before:]
    assert sent and all(r["body"]["messages"][0] == {"role": "system", "content": ""} for r in sent)
    assert all(r["body"]["top_k"] == 1 and r["body"]["repetition_penalty"] == 1.0 for r in sent)
