"""The checks that need no ground truth: each page defect is flagged by its own check only."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from reportlab.lib.pagesizes import letter
from reportlab.pdfgen import canvas

from llm_ocr.quality import check_output
from llm_ocr.quality.signals import page_signals, repeated_lines, stray_characters
from tests.conftest import run_cli
from tests.quality.conftest import write_run

LINES = [
    "Harbour Records of the Northern Coast",
    "Volume three, chapter eleven",
    "The fishing fleet returned early in the spring of that year.",
    "Storms had damaged the northern pier and two of the boats.",
    "Repairs were paid for by a collection among the families.",
    "By summer the harbour master reported a record catch of herring.",
    "Merchants from the south travelled north to buy the salted fish.",
    "The price of salt rose sharply as demand grew across the region.",
    "A new warehouse was built beside the customs house in August.",
    "Several young sailors joined the crews from inland villages.",
    "The autumn markets were the busiest anyone could remember.",
    "Winter arrived late and the boats kept working until December.",
    "page 11",
]
TEXT = "\n".join(LINES[:-1])


def pdf(path: Path) -> Path:
    page = canvas.Canvas(str(path), pagesize=letter)
    for i, line in enumerate(LINES):
        page.setFont("Times-Roman", 12)
        page.drawString(72, 720 - i * 20, line)
    page.showPage()
    page.save()
    return path


#: Each document's one page, and the flags it must get (and no other).
PAGES = {
    "good": ({"markdown": TEXT}, set()),
    "empty": ({"markdown": "  \n"}, {"empty"}),
    "loop": ({"markdown": TEXT + "\n" + "\n".join(["| 0.0 | 0.0 |"] * 14)}, {"repetition"}),
    "ngram": ({"markdown": TEXT + " " + "ha" * 40}, {"repetition"}),
    "stray": ({"markdown": TEXT + " \ufffd \ue000 \u4e2d"}, {"stray"}),
    "truncated": ({"markdown": TEXT, "status": "truncated", "finish_reason": "length"}, {"truncated"}),
    "error": ({"markdown": "", "status": "error", "error": "the model server crashed on this page"}, {"error"}),
    "missing": ({"markdown": "\n".join(LINES[:4])}, {"missing text"}),
    "looped": ({"markdown": TEXT, "cut_reason": "attempt 1: repetition loop cut after 900 tokens"}, {"looped"}),
}


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("signals")
    source = pdf(tmp / "harbour.pdf")
    pages = [{"doc_id": f"{name}.pdf", "source": str(source), **fields} for name, (fields, _) in PAGES.items()]
    # A page in Chinese (no PDF): its characters are not stray.
    pages.append({"doc_id": "chinese.png", "source": str(tmp / "chinese.png"), "markdown": "渔船在春天提前返回港口。" * 5})
    return write_run(tmp / "out", pages)


def test_each_defect_gets_its_own_flag(run: Path) -> None:
    result = check_output(str(run))
    flags = {p["doc_id"]: set(p["flags"]) for p in result["flagged"]}
    for name, (_, expected) in PAGES.items():
        assert flags.get(f"{name}.pdf", set()) == expected, name
    assert "chinese.png" not in flags
    assert result["pages"] == len(PAGES) + 1
    # The text layer was read for every PDF page that is not an error: 8 lines sampled on each.
    good = next(d for d in result["documents"] if d["doc_id"] == "good.pdf")
    assert good["snippets"] == 8 and good["recall"] == 1.0
    worst = [p["doc_id"] for p in result["worst_pages"]]
    assert worst[:2] == ["error.pdf", "empty.pdf"]  # worst first
    assert json.loads((run / "quality" / "checks.json").read_text())["flagged_pages"] == len(PAGES) - 1


def test_without_the_text_layer_missing_lines_go_unseen(run: Path) -> None:
    result = check_output(str(run), text_layer=False, write=False)
    flagged = {p["doc_id"] for p in result["flagged"]}
    assert "missing.pdf" not in flagged and "loop.pdf" in flagged
    assert result["text_layer"]["snippets"] == 0


def test_a_line_is_found_despite_markup_and_a_typo_and_missed_when_dropped() -> None:
    rest = "\n".join(line for line in LINES[:-1] if not line.startswith("The fishing fleet"))
    table = "<table><tr><td>The fishing fleet returned</td><td>early in the spring of that yeer.</td></tr></table>"
    signals = page_signals({"doc_id": "d", "page": 1, "status": "ok", "markdown": table + "\n" + rest}, TEXT)
    assert signals.found == signals.snippets == 8
    signals = page_signals({"doc_id": "d", "page": 1, "status": "ok", "markdown": rest}, TEXT)
    assert (signals.found, signals.snippets) == (7, 8)
    assert "missing text" not in signals.flags  # 7 of 8 is above the 80% line


def test_helpers() -> None:
    assert repeated_lines("a\nb\nx\ny\nx\ny\nx\ny") == (3, 2)
    assert repeated_lines("one\ntwo") == (1, 1)
    assert stray_characters("plain text \u4e2d", allowed="\u4e2d") == []
    assert stray_characters("plain text on a page \u4e2d") == ["\u4e2d"]
    assert stray_characters("\u4e2d\u6587\u9875") == []  # mostly CJK: a page in Chinese


def test_cli_prints_a_table_per_document_and_the_worst_pages(run: Path) -> None:
    done = run_cli("bench-quality", str(run), timeout=300)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split()[:3] == ["document", "pages", "ok"]
    table = lines[2 : next(i for i, line in enumerate(lines) if line.startswith("10 pages, 8 flagged"))]
    rows = {line.split()[0]: line.split() for line in table}
    assert set(rows) == {f"{name}.pdf" for name in PAGES} | {"chinese.png"}
    assert rows["missing.pdf"][-2] == "25.0%"  # 2 of the 8 sampled lines found
    assert rows["empty.pdf"][-2] == "0.0%"
    assert rows["error.pdf"][4] == "1"  # the error column
    assert "worst pages:" in lines
    assert lines[lines.index("worst pages:") + 1].startswith("  error.pdf p1  error: the model server crashed")
    report = (run / "report.html").read_text()
    assert "Checks without ground truth" in report and "the model server crashed on this page" in report
    flagged = run_cli("bench-quality", str(run), "--fail-under", "50", "--no-report")
    assert flagged.returncode == 1  # 8 of 10 pages flagged, more than 50%


def test_a_remote_pdf_is_copied_once_for_all_its_pages(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import fsspec

    memory = fsspec.filesystem("memory")  # one instance per process: the one Storage opens too
    memory.pipe_file("/quality-test/harbour.pdf", pdf(tmp_path / "harbour.pdf").read_bytes())
    copies: list[str] = []
    original = memory.get_file
    monkeypatch.setattr(memory, "get_file", lambda path, *a, **k: (copies.append(path), original(path, *a, **k))[1])
    source = "memory://quality-test/harbour.pdf"
    pages = [
        {"doc_id": "whole.pdf", "source": source, "markdown": TEXT},
        {"doc_id": "part.pdf", "source": source, "markdown": "\n".join(LINES[:4])},
    ]
    result = check_output(str(write_run(tmp_path / "out", pages)), write=False)
    assert {p["doc_id"]: set(p["flags"]) for p in result["flagged"]} == {"part.pdf": {"missing text"}}
    assert result["text_layer"]["snippets"] == 16
    assert len(copies) == 1
