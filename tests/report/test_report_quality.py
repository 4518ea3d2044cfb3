"""The report after `llm-ocr bench-quality`: every document is still shown, the flagged ones first
and marked, each with its flagged pages among those shown."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.quality.conftest import write_run

LOOP = "\n".join(["| 0.0 | 0.0 |"] * 14)
#: (document, page) -> Markdown that the checks flag; every other page reads well.
FLAGGED = {("d5.png", 3): "  \n", ("d2.png", 2): "marker-d2-p2 The table goes on.\n" + LOOP}
DOCUMENTS = [f"d{i}.png" for i in range(7)]


@pytest.fixture(scope="module")
def checked(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Seven three-page documents, two of them with a flagged page, checked by bench-quality."""
    out = tmp_path_factory.mktemp("report-quality") / "out"
    pages = [
        {
            "doc_id": doc, "doc_index": i, "page": page, "num_pages": 3, "source": f"/nowhere/{doc}",
            "markdown": FLAGGED.get((doc, page), f"marker-d{i}-p{page} Words read well on this page."),
        }
        for i, doc in enumerate(DOCUMENTS)
        for page in (1, 2, 3)
    ]  # fmt: skip
    write_run(out, pages)
    done = run_cli("bench-quality", str(out), "--no-text-layer", "--no-report")
    assert done.returncode == 0, done.stderr
    assert "21 pages, 2 flagged" in done.stdout
    return out


def shown(report: str) -> list[tuple[str, bool]]:
    """The documents of the report in order, and whether each is marked as flagged."""
    found = re.findall(r'<section class="llmocr-doc" id="[^"]*"><h2>([^<]*)</h2>(<span class="llmocr-flag">)?', report)
    return [(doc, bool(mark)) for doc, mark in found]


def test_every_document_is_shown_flagged_ones_first_and_marked(checked: Path, tmp_path: Path) -> None:
    html = tmp_path / "all.html"
    done = run_cli("report", str(checked), "--html", str(html))
    assert done.returncode == 0, done.stderr
    report = html.read_text()
    # The worst first (an empty page outweighs a loop), then the rest in input order.
    rest = [(d, False) for d in DOCUMENTS if d not in ("d5.png", "d2.png")]
    assert shown(report) == [("d5.png", True), ("d2.png", True), *rest]
    assert all(f"marker-d{i}-p{p}" in report for i in range(7) for p in (1, 2, 3) if (f"d{i}.png", p) not in FLAGGED)
    assert "Checks without ground truth" in report  # the quality section is still on top
    nav = report[report.index("<nav>") : report.index("</nav>")]
    assert nav.count('class="llmocr-flag">flagged') == 2


def test_the_limits_keep_flagged_documents_and_pages(checked: Path, tmp_path: Path) -> None:
    html = tmp_path / "capped.html"
    done = run_cli("report", str(checked), "--html", str(html), "--max-documents", "4", "--max-pages-per-document", "2")
    assert done.returncode == 0, done.stderr
    report = html.read_text()
    assert shown(report) == [("d5.png", True), ("d2.png", True), ("d0.png", False), ("d1.png", False)]
    # d5's flagged page 3 is shown, with its first page; page 2 makes way for it.
    d5 = report[report.index("<h2>d5.png</h2>") : report.index("<h2>d2.png</h2>")]
    assert "Page 1 of 3" in d5 and "Page 3 of 3" in d5 and "Page 2 of 3" not in d5
    assert 'llmocr-flag">empty' in d5[d5.index("Page 3 of 3") :]
    assert "marker-d5-p1" in report and "marker-d5-p2" not in report
    assert "marker-d0-p1" in report and "marker-d0-p2" in report and "marker-d0-p3" not in report
