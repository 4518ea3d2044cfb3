"""The knobs of reading a page in pieces, in the open: one options object, listed with its
provenance, set by a run, and written in the run's completion marker.

The run reads through the Python API in this process against the simulated server: a one-page
PDF of ~60 lines (about 1,900 tokens at the first guess, under the 0.9 share of ``max_tokens``
the planner tiles at) is read whole by default, and in tiles at once when the run lowers
``tile_at``; the marker says which value was in force.
"""

from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path

import pytest
from reportlab.lib.pagesizes import letter
from reportlab.pdfgen import canvas

from llm_ocr.cli import main
from llm_ocr.options import DenseOptions, dense_options, using_dense
from llm_ocr.runners.workers import WorkerPool
from llm_ocr.sources.segments import Segment, plan_segments
from llm_ocr.stages.fields.chunks import PageText, estimate_tokens, text_chunks
from llm_ocr.stages.pieces.rate import RateBook
from llm_ocr.testing import SimulatedServer
from llm_ocr.vlm.streaming import TokenRatio
from tests.conftest import read_stage
from tests.docs import paragraph
from tests.sweeps import extract


def test_every_knob_is_listed_with_its_unit_and_provenance(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["models", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    knobs = {k["name"]: k for k in rows[0]["dense_options"]}
    assert set(knobs) == set(DenseOptions.model_fields) and len(knobs) >= 50
    for name, knob in knobs.items():
        assert knob["provenance"] in ("reasoned", "measured", "simulator"), name
        assert knob["unit"] and knob["description"], name
    # Values git history shows were set to meet a target measured on the simulator alone.
    assert {n for n, k in knobs.items() if k["provenance"] == "simulator"} >= {
        "tile_tokens", "tile_line_reach", "rest_min_side", "tokens_per_char"}


def _estimates() -> tuple[float, int, int, int]:
    """What each use of the first guess of tokens per character makes of it: the pieces
    planner's rate, a cut stream's tokens, a Fields request's tokens, and how many characters
    a Fields request of 1,000 tokens may carry."""
    (chunk, *_) = text_chunks([PageText((1,), "x" * 100_000)], 1000)
    assert chunk.text is not None
    return RateBook().rate(None), TokenRatio().estimate(1000), estimate_tokens("y" * 1000), len(chunk.text)


def test_one_first_guess_of_tokens_per_character_everywhere() -> None:
    """Setting ``tokens_per_char`` moves every estimate made from it, consistently: no use of
    it keeps a constant of its own."""
    first = DenseOptions().tokens_per_char
    assert _estimates() == (first, round(1000 * first), round(1000 * first), int(1000 / first))
    with using_dense(dense_options(["tokens_per_char=0.5"])):
        assert _estimates() == (0.5, 500, 500, 2000)


def test_a_knob_is_refused_by_name_and_read_from_the_environment() -> None:
    with pytest.raises(ValueError, match="no dense option tile_a"):
        dense_options(["tile_a=0.5"])
    knobs = dense_options(["max_pieces=12"], {"LLM_OCR_DENSE_TILE_AT": "0.4", "LLM_OCR_DENSE_OPTION": "[]"})
    assert (knobs.tile_at, knobs.max_pieces) == (0.4, 12)
    with pytest.raises(ValueError):
        dense_options(["tile_at=-1"])


def _page(path: Path) -> None:
    rng = random.Random(5)
    pdf = canvas.Canvas(str(path), pagesize=letter)
    pdf.setFont("Helvetica", 8)
    for k in range(62):
        pdf.drawString(40, 760 - 12 * k, paragraph(rng, 12))
    pdf.save()


def test_a_run_sets_a_knob_and_its_marker_records_it(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    _page(docs / "page.pdf")
    with SimulatedServer("--instant", "--max-model-len", "4096", corpus=docs) as server:
        default = extract(docs, tmp_path / "default", server, "deepseek-ai/DeepSeek-OCR")
        tuned = extract(docs, tmp_path / "tuned", server, "deepseek-ai/DeepSeek-OCR", dense_option=["tile_at=0.3"])
    assert default.pages.get("ok") == tuned.pages.get("ok") == 1
    (whole,) = read_stage(tmp_path / "default", "extract")
    (tiled,) = read_stage(tmp_path / "tuned", "extract")
    assert whole["segments"] is None
    assert tiled["segments"] >= 2 and "tiles at once" in tiled["cut_reason"], tiled["cut_reason"]
    (marker,) = (tmp_path / "tuned" / "_state" / "extract").glob("done-*.json")
    in_force = json.loads(marker.read_text())["dense_options"]
    assert in_force["tile_at"] == 0.3 and in_force["tile_tokens"] == DenseOptions().tile_tokens


@pytest.mark.parametrize("workers", [0, 1], ids=["thread", "process"])
def test_a_render_worker_reads_the_knobs_in_force(workers: int) -> None:
    """A long page's segments are planned in the render workers, which do not share the run's
    context: every call to them carries the knobs in force."""
    knobs = dense_options(["segment_aspect=1.25"])

    async def plan() -> list[Segment]:
        with using_dense(knobs):
            return await pool.run(plan_segments, 100, 1000)

    with WorkerPool(workers) as pool:
        segments = asyncio.run(plan())
    # A 1:10 strip, 100 px wide: segments 125 px long, not the default's 200.
    assert {s.height for s in segments} == {125} and {s.height for s in plan_segments(100, 1000)} == {200}


def test_the_path_s_tuning_numbers_are_knobs_a_run_sets() -> None:
    """The paper's grey level, the cuts' floors, the join's word counts and look-back were inline
    numbers (issue 47: none could be set or seen by a run); each is a knob, and the code reads it."""
    import numpy as np
    from PIL import Image

    from llm_ocr.sources.wide import ink_of
    from llm_ocr.stages.pieces.join import drop_exact_repeat

    named = {"paper_percentile", "strip_floor_percentile", "min_strip_px", "pitch_min_lines", "cut_window",
             "max_half_reach", "min_believed_share", "min_margin_px", "min_wide_gutter_px", "fit_search",
             "gutter_samples", "order_depth", "replan_attempts", "min_estimate_pitches", "pitch_search_share",
             "min_repeat_tokens", "min_tail_tokens", "anchor_words", "same_start_words", "twin_lookback"}
    assert named <= set(DenseOptions.model_fields)
    # A grey ramp, 0 to 255 down the page: the paper is its paper_percentile level, the ink below it.
    ramp = Image.fromarray(np.repeat(np.arange(256, dtype=np.uint8), 4).reshape(-1, 1).repeat(8, axis=1))
    assert float(ink_of(ramp).max()) == pytest.approx(242, abs=2)  # the 95th percentile
    with using_dense(dense_options(["paper_percentile=50"])):
        assert float(ink_of(ramp).max()) == pytest.approx(127, abs=2)
    # Two pieces of a band sharing two words: no repeat at the default four, one at two.
    assert drop_exact_repeat("the harbour lantern", "harbour lantern copper willow") == "harbour lantern copper willow"
    with using_dense(dense_options(["min_repeat_tokens=2"])):
        assert drop_exact_repeat("the harbour lantern", "harbour lantern copper willow") == "copper willow"
