"""A dense newspaper page read through ``llm-ocr extract``: the one command-line case of
tests/runners/test_dense_every_family.py, which reads it with every family in one process
(the Python API)."""

from __future__ import annotations

from pathlib import Path

from llm_ocr.vlm.families import family_named
from tests.conftest import run_cli
from tests.newspaper import newspaper_pdf
from tests.runners.test_dense_every_family import check_dense_read, server_for
from tests.sweeps import Counters


def test_the_command_reads_a_dense_page_in_tiles_at_a_small_context(tmp_path: Path) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    truth = newspaper_pdf(folder / "courier.pdf", seed=3)
    family = family_named("deepseek-ocr")
    out = tmp_path / "out"
    with server_for(family, folder) as server:
        counters = Counters(server)
        result = run_cli("extract", str(folder), "--output", str(out), "--endpoint", server.base_url,
                         "--model", family.models[0], "--workers", "0", "--progress", "off", timeout=600)
        stats, requests = counters.since(), counters.requests()
    assert result.returncode == 0, result.stderr[-3000:]
    check_dense_read(out, truth, family, stats, requests)
