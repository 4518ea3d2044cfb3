"""A 5,000-page PDF through extract in this process, against the simulated server: every page
once, parts in input order (the run's scale is tested, not the command's start-up)."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pypdfium2
import pytest

from llm_ocr.testing import SimulatedServer
from llm_ocr.vlm.recipes import DEFAULT_MODEL
from tests.conftest import read_stage
from tests.sweeps import extract as extract_in_process


# The hang guard, not a speed limit: 5,000 pages in this process took over 300 s of wall time
# with three fresh-clone runs of the suite on 2 cores (load 10-24, 2026-11-27).
@pytest.mark.timeout(900)
def test_a_five_thousand_page_pdf_completes_with_every_page_once(tmp_path: Path) -> None:
    big = pypdfium2.PdfDocument.new()
    for _ in range(5000):
        big.new_page(612, 792)
    big.save(str(tmp_path / "big.pdf"))
    # In this process (the run's scale is tested, not the command's start-up), rendering in a
    # thread: a subprocess with a worker process took 35 CPU-s and ran into its 300 s timeout at load 35.
    with SimulatedServer("--instant") as server:
        result = extract_in_process(tmp_path / "big.pdf", tmp_path / "out", server, DEFAULT_MODEL, dpi=9,
                                    min_page_side=0, max_in_flight=64, progress_interval=5)
    assert result.exit_code == 0, result
    rows = read_stage(tmp_path / "out", "extract")
    # Every page once; rows are in input order within each part (parts are written as pages
    # finish, so a part may hold a page of the next thousand).
    assert sorted(r["page"] for r in rows) == list(range(1, 5001))
    parts = sorted((tmp_path / "out" / "extract").glob("*.parquet"))
    assert len(parts) >= 5
    for part in parts:
        pages = pq.read_table(part, columns=["page"])["page"].to_pylist()
        assert pages == sorted(pages), part.name
    assert {r["num_pages"] for r in rows} == {5000}
