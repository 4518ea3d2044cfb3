"""Wide images (3:1 to 10:1, one line to several) read end to end as correctly as read whole.

The server is the crop adversary (tests/fakes/crop_adversary.py), playing an honest model: a
crop shows only the letters inside it, so a line cut across its length comes back in pieces
(``quick brov`` / ``k brown fox``), as a real model reads it. Before issue 47 a wide page was cut
left to right into overlapping segments whatever it showed, and the joined text was garbled
while the row said ``ok``; now it is cut only at gutters between columns, else read whole.
Each page goes through ``llm_ocr.extract`` in this process, against one server for the module.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import llm_ocr
from tests.conftest import read_stage
from tests.fakes.crop_adversary import MODEL, CropAdversary, ServedAdversary, TruthPage, draw_page

FOX = "Then the quick brown fox jumps over the lazy dog."
STATEMENT = [
    "Statement of account for March: the warehouse held back orders for",
    "eleven customers while the audit of the northern depot was completed;",
    "all of them were shipped by the fourth of April with a credit note",
    "for the delay, as agreed with the account managers in February.",
]
ALIKE = [  # three columns whose second sections start alike, as a ledger's do: no running header
    [["North depot accounts for March"], ["Balance carried forward from February", "north route seven closed"]],
    [["South depot accounts for March"], ["Balance carried forward from February", "south route nine open"]],
    [["West depot accounts for March"], ["Balance carried forward from February", "west route two open"]],
]
LEDGER = [  # three columns of a wide form, gutters between them
    [["Invoice 2231 paid in full", "Invoice 2232 paid in part", "Invoice 2233 overdue"]],
    [["Carrier north route seven", "Carrier south route nine", "Carrier west route two"]],
    [["Balance carried forward", "Credit note issued today", "Account closed in June"]],
]


def pages() -> dict[str, TruthPage]:
    return {
        "fox-5to1": draw_page("fox-5to1", [[[FOX]]], size=36, margin=40, height=200),
        "fox-10to1": draw_page("fox-10to1", [[[FOX + " " + FOX.lower()]]], size=22, margin=30, height=120,
                               width=1200),
        "statement-3to1": draw_page("statement-3to1", [[STATEMENT]], size=34, margin=40, height=600, width=1900),
        "ledger-10to1": draw_page("ledger-10to1", LEDGER, size=20, margin=20, gutter=120, height=150),
        "ledger-alike": draw_page("ledger-alike", ALIKE, size=20, margin=20, gutter=120),
    }


@pytest.fixture(scope="module")
def wide(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServedAdversary, dict[str, TruthPage], Path]]:
    folder = tmp_path_factory.mktemp("wide")
    drawn = pages()
    for name, page in drawn.items():
        (folder / f"{name}.png").write_bytes(page.png)
    with ServedAdversary(CropAdversary(list(drawn.values()))) as served:
        yield served, drawn, folder


def read(served: ServedAdversary, image: Path, out: Path, **options: object) -> dict:
    result = llm_ocr.extract([str(image)], output=str(out), endpoint=served.base_url, model=MODEL, workers=0,
                             progress="off", **options)
    assert result.exit_code == 0, result
    (row,) = read_stage(out, "extract")
    return row


def test_the_pages_are_as_wide_as_the_issue_says(wide) -> None:
    _, drawn, _ = wide
    aspects = sorted(p.size[0] / p.size[1] for p in drawn.values())
    assert 3 < aspects[0] < 3.5 and aspects[-1] >= 10, aspects


@pytest.mark.parametrize("name", ["fox-5to1", "fox-10to1", "statement-3to1", "ledger-10to1"])
def test_a_wide_page_reads_as_it_does_whole(wide, tmp_path: Path, name: str) -> None:
    served, drawn, folder = wide
    page = drawn[name]
    row = read(served, folder / f"{name}.png", tmp_path / "out")
    # A page the path read whole (no segments) was read as --max-page-aspect 0 reads it: once.
    whole = row if row["segments"] is None else read(served, folder / f"{name}.png", tmp_path / "whole",
                                                     max_page_aspect=0)
    assert whole["markdown"].split() == page.text.split()  # the page read whole: the truth
    assert row["markdown"].split() == page.text.split(), row["markdown"]
    assert row["status"] == "ok", row["error"]


def test_a_wide_page_with_gutters_is_read_in_its_columns(wide, tmp_path: Path) -> None:
    """Cut it is, but only between columns: every request shows whole lines."""
    served, drawn, folder = wide
    page = drawn["ledger-10to1"]
    before = len(served.server.requests_for(page.name))
    row = read(served, folder / "ledger-10to1.png", tmp_path / "out")
    seen = served.server.requests_for(page.name)[before:]
    assert row["segments"] == len(seen) >= 2, seen  # read in pieces: it is 10 times wider than tall
    for request in seen:
        region = request.region
        assert region is not None
        for line in page.lines:  # no line is cut across its length by any piece
            inside = min(line.right, region.x2) - max(line.left, region.x1)
            assert inside <= 0 or (line.left >= region.x1 - 2 and line.right <= region.x2 + 2), (line, region)


@pytest.mark.parametrize("behaviour", ["header", "header_lower"])
def test_a_line_written_atop_every_column_is_flagged_not_ok(wide, tmp_path: Path, behaviour: str) -> None:
    """A model that writes the page's first line atop every crop's answer (a running header),
    or as its second block after a stray line (``header_lower``), puts it near the top of each
    column of a wide page read in its columns. Joined by boxes, the copies overlap nothing and
    were kept, the row ``ok`` with the line three times; no box can tell such a copy from a
    column that starts so, so the row says the join could not be verified (issue 47: never
    silently ``ok``), and keeps every word of the page."""
    served, drawn, folder = wide
    page = drawn["ledger-10to1"]
    served.server.behaviour = behaviour
    try:
        row = read(served, folder / "ledger-10to1.png", tmp_path / "out")
    finally:
        served.server.behaviour = "honest"
    assert row["segments"] >= 2 and set(page.text.split()) <= set(row["markdown"].split()), row["markdown"]
    if row["markdown"].split() != page.text.split():
        assert row["status"] == "truncated", (row["status"], row["markdown"])
        assert "could not be verified" in row["error"], row["error"]


def test_columns_whose_sections_start_alike_are_read_ok(wide, tmp_path: Path) -> None:
    """Sections that start alike below each column's first line (a ledger's "Balance carried
    forward ...") are the page's own: only a block that starts as an earlier piece's first
    block is taken for a running header, so the row is ``ok`` with every line once."""
    served, drawn, folder = wide
    page = drawn["ledger-alike"]
    row = read(served, folder / "ledger-alike.png", tmp_path / "out")
    assert row["segments"] >= 2, row["segments"]  # read in its columns
    assert row["markdown"].split() == page.text.split(), row["markdown"]
    assert row["status"] == "ok", row["error"]
