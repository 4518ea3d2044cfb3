"""The 1:60 strip read through ``llm-ocr extract`` with a render worker process: the one
command-line case of tests/stages/test_strip_every_family.py, which reads it with every family
in one process (the Python API). A page's pieces cross from the worker to the run here (what the
sweep's render thread does not show), and the command's exit code and output are the user's."""

from __future__ import annotations

from pathlib import Path

from llm_ocr.testing import SimulatedServer
from llm_ocr.vlm.families import family_named
from tests.conftest import run_cli
from tests.stages.test_strip_every_family import check_strip_read, planned_pieces, strip_pdf
from tests.sweeps import Counters


def test_the_command_reads_a_strip_in_pieces_rendered_by_a_worker_process(tmp_path: Path) -> None:
    folder = tmp_path / "strip"
    folder.mkdir()
    lines = strip_pdf(folder / "strip.pdf")
    family = family_named("olmocr")
    plan = planned_pieces(family)
    model = family.models[0]
    out = tmp_path / "out"
    with SimulatedServer("--instant", "--max-model-len", "32768", "--served-model-name", model,
                         corpus=folder) as sim:
        counters = Counters(sim)
        result = run_cli("extract", str(folder), "--output", str(out), "--endpoint", sim.base_url, "--model", model,
                         "--workers", "1", "--progress", "off", timeout=600)
        counted, sent = counters.since(), counters.requests(model)
    assert result.returncode == 0, result.stderr[-3000:]
    check_strip_read(out, lines, family, plan, counted, sent)
