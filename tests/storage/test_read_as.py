"""How an output's pages were read, and what the pieces cost, in ``llm-ocr status`` and the
report (issue 47, item 3): a user sees at once whether pieces are eating the GPU.

Each row read in pieces ends its ``cut_reason`` with its cost against its whole-page reading
(``stages/pieces/cost.py``); the tally adds the pages' tokens and requests and their whole-page
readings (tokens over the multiple), so a route's figure is the pages' total against their
total, not a mean of multiples. The rows here are written by hand, with the clause's words as
rows read in pieces carry them (tests/stages/test_scanned_pages.py reads such rows).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from llm_ocr.commands import status
from llm_ocr.report.writer import write_report

#: Two pages read in tiles: 20,000 tokens in 10 requests at 2x and 5x their whole reading
#: (10,000 tokens, 2 requests), 10,000 in 2 at 1x: together 30,000 tokens in 12 requests against
#: 20,000 in 4, 1.50x the tokens and 3.00x the requests.
TILES = [
    ("its ink looks like ~12,197 characters, ~4,269 tokens, more than one answer holds (max_tokens 3072): read in 2 "
    "tiles (8 pieces once cut again) at once; cost 20,000 tokens in 10 requests: 2.00x the tokens and 5.00x the "
    "requests of reading it whole (bound 16x)"),
    ("its text layer holds 9,000 characters: read in 2 tiles at once; cost 10,000 tokens in 2 requests: 1.00x the "
    "tokens and 1.00x the requests of reading it whole (bound 16x)"),
]
BANDS = ("read in 4 bands (9 pieces once cut again) at once; band 2 [0:400, 0:900] ran to max_tokens (2048 tokens) "
         "without repeating itself, and the page reached its cost bound (16x the 4,352 tokens and 8 requests of "
         "reading it whole, cost_bound): its text up to there kept; cost 69,632 tokens in 16 requests: 16.00x the "
         "tokens and 2.00x the requests of reading it whole (bound 16x)")


@pytest.fixture
def out(tmp_path: Path) -> Path:
    """An output whose extract holds 3 pages read whole, 2 in tiles, 1 in bands at the cost
    bound and 1 long page in segments none cut again (no cost clause)."""
    rows = [(None, None, "ok")] * 3 + [(8, TILES[0], "ok"), (2, TILES[1], "ok"), (9, BANDS, "truncated"),
                                       (4, None, "ok")]
    folder = tmp_path / "out" / "extract"
    folder.mkdir(parents=True)
    n = len(rows)
    pq.write_table(pa.table({
        "doc_id": [f"d{i}.pdf" for i in range(n)], "doc_index": list(range(n)), "page": [1] * n,
        "status": [r[2] for r in rows], "source": [f"d{i}.pdf" for i in range(n)], "num_pages": [1] * n,
        "quarantined": [False] * n, "segments": pa.array([r[0] for r in rows], pa.int64()),
        "cut_reason": pa.array([r[1] for r in rows], pa.string()), "markdown": ["text"] * n,
    }), folder / "part-00000-of-00001-000000.parquet")
    return tmp_path / "out"


LINES = [
    ("bands: 1 page, 69,632 tokens in 16 requests: 16.00x the tokens and 2.00x the requests of reading them whole "
    "(1 at the cost bound)"),
    "segments: 1 page",
    "tiles: 2 pages, 30,000 tokens in 12 requests: 1.50x the tokens and 3.00x the requests of reading them whole",
    "whole: 3 pages",
]


def test_status_says_how_many_pages_each_route_took_and_what_the_pieces_cost(out: Path,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    assert status.run(argparse.Namespace(output=str(out), storage_options=None, json=False)) == 0
    printed = capsys.readouterr().out
    assert "  read as: " + "; ".join(LINES) + "\n" in printed, printed
    assert status.run(argparse.Namespace(output=str(out), storage_options=None, json=True)) == 0
    assert '"tokens_x": 1.5' in capsys.readouterr().out


def test_the_report_says_it_in_its_summary(out: Path) -> None:
    result = write_report(str(out))
    html = Path(result.path).read_text()
    assert "<th>Pages read as</th><td>" + "<br>".join(LINES) + "</td>" in html, html[:3000]
