"""``--pieces auto|off|always`` and the cost bound of a page read in pieces.

Every run reads through the Python API in this process against the simulated server. A model
that answers every piece of a page with text like the page's own that runs to ``max_tokens``
(the simulator at 40 tokens a character) makes every piece run out: each is cut again, and its
halves run out too. The page must not cost more than ``cost_bound`` (16) times reading it whole
(its first attempt and LightOnOCR's one truncation retry, each its prompt and ``max_tokens``);
without the bound this page took 91 requests, 30 times the whole-page tokens.
"""

from __future__ import annotations

import random
from pathlib import Path

from reportlab.pdfgen import canvas

from llm_ocr.options import DenseOptions
from llm_ocr.testing import SimulatedServer
from llm_ocr.vlm.families import FAMILIES
from tests.conftest import read_stage
from tests.docs import paragraph
from tests.sweeps import extract

MODEL = "deepseek-ai/DeepSeek-OCR"
#: LightOnOCR sends the image alone: the simulator's 40 tokens a character inflate no prompt text.
LIGHTON = next(f for f in FAMILIES if f.name == "lightonocr")


def _page(path: Path, size: tuple[float, float], lines: int, points: float = 8, words: int = 12) -> None:
    """A one-page PDF of ``lines`` lines of ``words`` words (a text layer the simulator answers from)."""
    rng = random.Random(11)
    pdf = canvas.Canvas(str(path), pagesize=size)
    pdf.setFont("Helvetica", points)
    for k in range(lines):
        pdf.drawString(20, size[1] - 30 - 1.4 * points * k, paragraph(rng, words))
    pdf.save()


def test_a_model_whose_every_piece_runs_out_costs_at_most_the_bound(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    _page(docs / "page.pdf", (612, 792), 88, points=6, words=18)  # ~12,000 characters: read in pieces
    model = LIGHTON.models[0]
    with SimulatedServer("--instant", "--max-model-len", "8192", "--served-model-name", model, "--recipe",
                         LIGHTON.name, "--tokens-per-char", "40", corpus=docs) as server:
        result = extract(docs, tmp_path / "out", server, model, LIGHTON.name)
        requests = server.requests()
        # The page as reading it whole sends it: its prompt tokens, as the simulator counts them.
        extract(docs, tmp_path / "whole", server, model, LIGHTON.name, pieces="off")
        page_prompt = max(r["prompt_tokens"] for r in server.requests()[len(requests):])
    assert result.exit_code == 0, result
    (row,) = read_stage(tmp_path / "out", "extract")
    # Read in pieces straight away: every piece ran out.
    pieces = [r for r in requests if "region" in (r.get("known_page") or {})]
    assert len(pieces) == len(requests) and all(r["finish_reason"] == "length" for r in requests)
    one_request = page_prompt + requests[0]["body"]["max_tokens"]
    # Reading it whole: a first attempt and its family's retry, each at most one_request.
    bound = DenseOptions().cost_bound
    assert LIGHTON.retries.count == 1 and len(requests) <= bound * 2
    assert sum(r["prompt_tokens"] + r["completion_tokens"] for r in requests) <= bound * 2 * one_request
    assert row["status"] == "truncated" and row["markdown"]
    assert "cost bound" in row["cut_reason"], row["cut_reason"]
    assert row["completion_tokens"] == sum(r["completion_tokens"] for r in requests)


def test_pieces_off_reads_every_page_whole_and_always_cuts_an_ordinary_page(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    _page(docs / "strip.pdf", (150, 900), 70, words=4)  # 1:6: read in segments by default
    _page(docs / "page.pdf", (612, 792), 40)  # an ordinary page: read whole by default
    with SimulatedServer("--instant", "--max-model-len", "8192", corpus=docs) as server:
        extract(docs, tmp_path / "auto", server, MODEL)
        auto_requests = len(server.requests())
        extract(docs, tmp_path / "off", server, MODEL, pieces="off")
        off_requests = len(server.requests()) - auto_requests
        extract(docs, tmp_path / "always", server, MODEL, pieces="always")
    auto = {r["doc_id"]: r for r in read_stage(tmp_path / "auto", "extract")}
    off = {r["doc_id"]: r for r in read_stage(tmp_path / "off", "extract")}
    always = {r["doc_id"]: r for r in read_stage(tmp_path / "always", "extract")}
    assert auto["strip.pdf"]["segments"] >= 2 and auto["page.pdf"]["segments"] is None
    # off: one request a page, no pieces.
    assert off_requests == 2 and all(r["segments"] is None and r["status"] == "ok" for r in off.values())
    # always: the ordinary page is read in tiles too, and says why; the strip still in segments.
    assert always["page.pdf"]["segments"] >= 2 and "--pieces always" in always["page.pdf"]["cut_reason"]
    assert always["page.pdf"]["status"] == "ok" and always["strip.pdf"]["segments"] >= 2
