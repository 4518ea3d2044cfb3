"""Scoring Markdown another tool wrote (`bench-quality --bench DIR --markdown MD`): olmOCR's
``{pdf}_pg{N}_repeat{M}.md`` with repeated readings scored as olmOCR's scorer scores them, one
file per page or per document, names that fit no layout said so with the names expected."""

from __future__ import annotations

import json
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from reportlab.pdfgen import canvas

from llm_ocr.quality import score_output
from tests.conftest import run_cli
from tests.quality.candidates import CANDIDATES, UNPARSABLE, write_candidate
from tests.quality.cases import BENCH
from tests.quality.conftest import write_run

DATA = Path(__file__).parent / "data" / "olmocr_repeats.jsonl"
RECORDS = [json.loads(line) for line in DATA.read_text(encoding="utf-8").splitlines() if line.strip()]
HEADER, RECORDED = RECORDS[0], {r["candidate"]: r for r in RECORDS[1:]}


def test_the_recorded_scores_come_from_olmocr_and_cover_every_repeat_outcome() -> None:
    assert len(HEADER["olmocr_commit"]) == 40 and set(RECORDED) == set(CANDIDATES)
    averages = {round(t["average"], 3) for r in RECORDED.values() for t in r["tests"].values()}
    assert {0.0, 0.333, 0.5, 0.667, 1.0} <= averages  # none, few, half, most and all readings pass
    half = RECORDED["one_of_two"]["tests"]["letter_heading"]
    assert (half["passed"], half["average"]) == (False, 0.5)  # one reading of two is not enough
    assert RECORDED["unparsable"]["failed"] and not RECORDED["two_of_three"]["failed"]


@pytest.mark.parametrize("name", sorted(CANDIDATES))
def test_same_scores_as_olmocr(name: str, tmp_path: Path, bench_dir: Path, renderer) -> None:
    """Every test's verdict and share of readings passed, the pass rate per test type and the
    score are olmOCR's, on pages read once, twice or three times with good and bad readings mixed."""
    folder = write_candidate(tmp_path / name, CANDIDATES[name])
    result = score_output(str(tmp_path / "out"), bench_dir, markdown=folder)
    recorded = RECORDED[name]
    verdicts = {r["id"]: r for r in result["results"]}
    assert set(verdicts) == set(recorded["tests"])
    for test_id, upstream in recorded["tests"].items():
        mine = verdicts[test_id]
        assert mine["passed"] is upstream["passed"], (test_id, mine, upstream)
        share = mine["passed_readings"] / mine["readings"] if "readings" in mine else float(mine["passed"])
        assert share == pytest.approx(upstream["average"]), test_id
    assert {k: v["score"] for k, v in result["by_type"].items()} == pytest.approx(recorded["types"])
    if recorded["failed"]:  # olmOCR refuses the whole candidate; here the tests that raised fail, and it is said
        assert result["raised"] and all("the test raised" in line for line in result["raised"])
    else:
        assert round(result["overall"]["score"] * 100, 1) == recorded["score"]
        assert result["raised"] == []


def test_a_test_that_raises_fails_on_that_reading_and_says_why(tmp_path: Path, bench_dir: Path) -> None:
    folder = write_candidate(tmp_path / "md", CANDIDATES["unparsable"])
    out = tmp_path / "out"
    args = ("--bench", str(bench_dir), "--markdown", str(folder), "--katex", str(tmp_path))  # math not scored
    done = run_cli("bench-quality", str(out), *args)
    assert done.returncode == 0, done.stderr
    assert "3 reading(s) made a test raise, counted as failed; olmOCR's scorer fails the whole run there" in done.stdout
    rejects = _html_parser_rejects(UNPARSABLE)  # Python's own parser decides; 3.11 rejects it
    saved = {r["id"]: r for r in json.loads((out / "quality" / "bench.json").read_text())["results"]}
    table = saved["table_south_value"]
    assert rejects and table["passed"] is False and (table["readings"], table["passed_readings"]) == (2, 1)
    assert table["explanation"].startswith("failed on 1 of 2 readings; tables/growth_pg1_repeat1.md: the test raised")
    assert saved["tables/growth.pdf_baseline"]["passed"] is True  # the same readings, another test: scored
    assert not (out / "report.html").exists()  # Markdown files have no page rows to show


def _html_parser_rejects(markup: str) -> bool:
    try:
        HTMLParser().feed(markup)
    except AssertionError:
        return True
    return False


def _layout(folder: Path, name: str) -> Path:
    """The good reading of every PDF, one file per document or page, named as ``name`` says."""
    for pdf, spec in BENCH.items():
        stem = pdf[: -len(".pdf")]
        path = folder / name.format(stem=stem, pdf=pdf)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(spec["good"], encoding="utf-8")
    return folder


@pytest.mark.parametrize("layout", ["{stem}.md", "{pdf}.md", "{stem}_pg1.md"])
def test_one_file_per_document_or_page_reads_as_olmocrs_layout(layout: str, tmp_path: Path, bench_dir: Path) -> None:
    no_katex = str(tmp_path)  # math is not scored: the layouts are what is compared
    olmocr = _layout(tmp_path / "olmocr", "{stem}_pg1_repeat1.md")
    olmocr = score_output(str(tmp_path / "a"), bench_dir, markdown=olmocr, katex=no_katex)
    other = score_output(str(tmp_path / "b"), bench_dir, markdown=_layout(tmp_path / "other", layout), katex=no_katex)
    assert other["markdown_files"] == len(BENCH) and other["unmatched_files"] == []
    assert [(r["id"], r["passed"]) for r in other["results"]] == [(r["id"], r["passed"]) for r in olmocr["results"]]
    assert other["overall"]["passed"] == other["overall"]["tests"] == 19  # all but the 2 math tests (no KaTeX there)


@pytest.fixture()
def two_pages(tmp_path: Path) -> Path:
    """A bench of one two-page PDF, with a test on each page."""
    root = tmp_path / "bench_data"
    (root / "pdfs").mkdir(parents=True)
    page = canvas.Canvas(str(root / "pdfs" / "two.pdf"))
    for text in ("First page words", "Second page words"):
        page.drawString(72, 720, text)
        page.showPage()
    page.save()
    tests = [{"pdf": "two.pdf", "page": n, "id": f"p{n}", "type": "present", "text": t}
             for n, t in ((1, "First page words"), (2, "Second page words"))]  # fmt: skip
    (root / "text.jsonl").write_text("".join(json.dumps(t) + "\n" for t in tests), encoding="utf-8")
    return root


def test_pages_of_a_document_and_names_that_fit_no_layout(tmp_path: Path, two_pages: Path) -> None:
    md = tmp_path / "md"
    md.mkdir()
    (md / "two.md").write_text("First page words\n\nSecond page words")  # a whole document: tests are per page
    (md / "two_pg1.md").write_text("First page words")
    (md / "two_pg2.md").write_text("Second page words")
    (md / "notes.md").write_text("not a reading")
    out = tmp_path / "out"
    done = run_cli("bench-quality", str(out), "--bench", str(two_pages), "--markdown", str(md))
    assert done.returncode == 0, done.stderr
    assert "olmOCR-bench score 100.0%" in done.stdout and "3 of 3 tests passed" in done.stdout  # with the baseline
    assert "two.md: one file for the 2-page two.pdf, but the tests are per page: name one file per page" in done.stdout
    assert "notes.md: names no PDF of the bench" in done.stdout
    assert "expected, for a bench PDF pdfs/two.pdf: two_pg{N}_repeat{M}.md" in done.stdout
    saved = json.loads((out / "quality" / "bench.json").read_text())
    assert saved["markdown_files"] == 2 and len(saved["unmatched_files"]) == 2


def test_a_folder_with_no_file_of_the_bench_is_refused_with_the_names_expected(tmp_path: Path, bench_dir: Path) -> None:
    md = tmp_path / "md"
    (md / "text").mkdir(parents=True)
    (md / "text" / "letter_page1.md").write_text("a reading")  # not a name of any layout
    done = run_cli("bench-quality", str(tmp_path / "out"), "--bench", str(bench_dir), "--markdown", str(md))
    assert done.returncode == 2
    assert "no Markdown file in" in done.stderr and "text/letter_page1.md: names no PDF of the bench" in done.stderr
    assert "for a bench PDF pdfs/columns/two_columns.pdf: columns/two_columns_pg{N}_repeat{M}.md" in done.stderr
    assert "columns/two_columns.md or columns/two_columns.pdf.md" in done.stderr
    assert not (tmp_path / "out" / "quality").exists()


def test_markdown_beside_a_run_is_refused(tmp_path: Path, bench_dir: Path) -> None:
    run = write_run(tmp_path / "run", [{"doc_id": "text/letter.pdf", "source": "x/text/letter.pdf", "markdown": "x"}])
    md = _layout(tmp_path / "md", "{stem}_pg1_repeat1.md")
    done = run_cli("bench-quality", str(run), "--bench", str(bench_dir), "--markdown", str(md))
    assert done.returncode == 2 and "holds a run's pages" in done.stderr
    assert "--markdown needs --bench" in run_cli("bench-quality", str(tmp_path / "o"), "--markdown", str(md)).stderr


def _hand_made(out: Path, name: str, rows: list[dict[str, Any]]) -> None:
    (out / "extract").mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(rows), out / "extract" / name)


def test_a_hand_made_part_with_three_columns_is_scored_and_reported(tmp_path: Path, bench_dir: Path) -> None:
    """The Parquet a user writes by hand with pyarrow: only doc_id, page and markdown."""
    rows = [{"doc_id": pdf, "page": 1, "markdown": spec["good"]} for pdf, spec in BENCH.items()]
    out = tmp_path / "out"
    _hand_made(out, "part-00000-of-00001-000000.parquet", rows)
    done = run_cli("bench-quality", str(out), "--bench", str(bench_dir), "--katex", str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert "19 of 19 tests passed" in done.stdout
    report = (out / "report.html").read_text()
    assert all(f"<h2>{pdf}</h2>" in report for pdf in BENCH)


def test_a_part_named_otherwise_gets_the_name_expected(tmp_path: Path, bench_dir: Path) -> None:
    out = tmp_path / "out"
    _hand_made(out, "pages.parquet", [{"doc_id": "text/letter.pdf", "page": 1, "markdown": "x"}])
    done = run_cli("bench-quality", str(out), "--bench", str(bench_dir))
    assert done.returncode == 2
    assert "pages.parquet, but a run's parts are named part-NNNNN-of-NNNNN-NNNNNN.parquet" in done.stderr
    assert "--markdown MD" in done.stderr
