"""Scoring runs against a bench in olmOCR-bench's format: each check catches its own defect,
scores add up as olmOCR-bench adds them, and what cannot be scored is said, not hidden."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from llm_ocr.quality import score_output
from llm_ocr.quality.bench import BenchError, load_bench
from llm_ocr.quality.stats import bootstrap_ci, category_mean
from tests.quality.cases import BAD_FAILS, BENCH
from tests.quality.conftest import write_run


def reading_run(tmp: Path, bench: Path, reading: str, **changes: dict) -> Path:
    """A run whose page of each bench PDF reads as ``reading`` ("good" or "bad")."""
    pages = []
    for pdf, spec in BENCH.items():
        page = {"doc_id": pdf, "source": str(bench / "pdfs" / pdf), "markdown": spec[reading]}
        page.update(changes.get(pdf, {}))
        pages.append(page)
    return write_run(tmp / reading, pages)


def failing(result: dict) -> set[str]:
    return {r["id"] for r in result["results"] if r["passed"] is False}


def test_a_good_reading_passes_every_test(tmp_path: Path, bench_dir: Path, renderer) -> None:
    result = score_output(str(reading_run(tmp_path, bench_dir, "good")), bench_dir)
    assert failing(result) == set()
    assert result["overall"]["score"] == 1.0 and result["overall"]["ci"] == [1.0, 1.0]
    # Every test of the bench ran: the JSONL tests plus one baseline per PDF without one.
    assert result["overall"]["tests"] == sum(len(s["tests"]) for s in BENCH.values()) + 4
    assert result["not_scored"]["tests"] == 0 and result["not_in_run"]["tests"] == 0
    assert result["math_renderer"]["fonts"] == "bundled KaTeX fonts 0.16.21 (20 woff2)"  # what laid formulas out


def test_each_defect_of_a_bad_reading_fails_its_own_check(tmp_path: Path, bench_dir: Path, renderer) -> None:
    """Missing lines, a kept header, columns out of order, a broken table, wrong formulas, no
    heading, no footnote marker, a repetition tail, text on a blank page: exactly the tests
    aimed at each defect fail, and the others still pass on the same bad pages."""
    result = score_output(str(reading_run(tmp_path, bench_dir, "bad")), bench_dir)
    assert failing(result) == BAD_FAILS
    failed_types = {r["type"] for r in result["results"] if r["passed"] is False}
    assert failed_types == {"present", "absent", "order", "table", "math", "format", "footnote", "baseline"}
    by_id = {r["id"]: r for r in result["results"]}
    assert "repeating 4-grams" in by_id["text/letter.pdf_baseline"]["explanation"]
    assert "appears before" in by_id["columns_ab"]["explanation"]
    assert by_id["letter_order"]["test"]["after"] == "library roof must be repaired"  # failing cases carry their test


def test_scores_are_the_mean_of_category_pass_rates(tmp_path: Path, bench_dir: Path, renderer) -> None:
    result = score_output(str(reading_run(tmp_path, bench_dir, "bad")), bench_dir)
    categories = result["by_category"]
    assert set(categories) == {"text", "columns", "tables", "math", "baseline"}
    by_category: dict[str, list[bool]] = {}
    for r in result["results"]:
        by_category.setdefault(r["category"], []).append(bool(r["passed"]))
    for name, verdicts in by_category.items():
        assert categories[name] == {"tests": len(verdicts), "passed": sum(verdicts), "score": sum(verdicts) / len(verdicts)}
    expected = sum(sum(v) / len(v) for v in by_category.values()) / len(by_category)
    assert result["overall"]["score"] == pytest.approx(expected)
    low, high = result["overall"]["ci"]
    assert low < expected < high
    types = result["by_type"]
    assert types["math"] == {"tests": 2, "passed": 0, "score": 0.0}
    assert types["table"]["passed"] == 1 and types["table"]["tests"] == 3


def test_bootstrap_interval_resamples_within_categories() -> None:
    groups = {"a": [1.0] * 10, "b": [0.0] * 10}
    assert category_mean(groups) == 0.5
    assert bootstrap_ci(groups) == (0.5, 0.5)  # no spread inside a category: none in the mean
    low, high = bootstrap_ci({"a": [1.0, 0.0] * 50})
    assert 0.38 < low < 0.5 < high < 0.62
    assert bootstrap_ci({"a": [1.0, 0.0] * 50}) == (low, high)  # seeded: the same verdicts, the same interval


def test_a_partial_run_scores_its_pdfs_and_counts_the_rest(tmp_path: Path, bench_dir: Path) -> None:
    pages = [{"doc_id": "text/letter.pdf", "source": "x/text/letter.pdf", "markdown": BENCH["text/letter.pdf"]["good"]}]
    result = score_output(str(write_run(tmp_path / "part", pages)), bench_dir)
    assert {r["pdf"] for r in result["results"]} == {"text/letter.pdf"}
    assert result["overall"]["score"] == 1.0
    assert result["not_in_run"] == {"tests": 12, "pdfs": 4, "of_pdfs": 5}


def test_an_error_row_fails_its_tests(tmp_path: Path, bench_dir: Path) -> None:
    run = reading_run(tmp_path, bench_dir, "good", **{"columns/two_columns.pdf": {"status": "error", "markdown": "", "error": "boom"}})
    result = score_output(str(run), bench_dir, katex=str(tmp_path))  # an empty folder: math not scored
    assert failing(result) == {"columns_a", "columns_ab", "columns_b", "columns/two_columns.pdf_baseline"}
    assert result["not_scored"] == {"tests": 2, "reasons": {f"not scored: no katex.min.js in {tmp_path}": 2}}
    assert "math" not in result["by_type"]


def test_refused_lines_are_reported_and_the_rest_scored(tmp_path: Path, bench_dir: Path) -> None:
    bench = tmp_path / "bench_data"
    shutil.copytree(bench_dir, bench)
    with (bench / "text.jsonl").open("a", encoding="utf-8") as f:
        f.write(json.dumps({"pdf": "text/letter.pdf", "page": 1, "id": "bad_order", "type": "order", "before": "ab", "after": "cd", "max_diffs": 2}) + "\n")
        f.write(json.dumps({"pdf": "text/letter.pdf", "page": 1, "id": "letter_order", "type": "present", "text": "dup"}) + "\n")
        f.write('{"pdf": "text/letter.pdf", "page": 1, "id": "typo", "type": "present", "txt": "x"}\n')
        f.write("not json\n")
    loaded = load_bench(tmp_path)  # the folder above bench_data/ is accepted
    lines = len((bench / "text.jsonl").read_text().splitlines())
    assert loaded.invalid == [
        f"text.jsonl:{lines - 3}: Max diffs is too large for this test, greater than 50% of the search string",
        f"text.jsonl:{lines - 2}: duplicate test id 'letter_order'",
        f"text.jsonl:{lines - 1}: unknown field(s) for a present test: txt",
        f"text.jsonl:{lines}: not JSON: Expecting value: line 1 column 1 (char 0)",
    ]
    assert len(loaded.tests) == sum(len(s["tests"]) for s in BENCH.values()) + 4


def test_a_folder_without_tests_is_refused(tmp_path: Path) -> None:
    with pytest.raises(BenchError, match=re.escape("no .jsonl test files")):
        load_bench(tmp_path)


