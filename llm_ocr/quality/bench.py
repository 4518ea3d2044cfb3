"""Scoring a run against a bench in olmOCR-bench's format.

A bench is a folder of JSONL test files (one category each) beside a ``pdfs/`` folder; the
tests name their PDF by its path under ``pdfs/`` and a 1-based page (olmOCR-bench's
``bench_data/`` is one; the folder above it is accepted too). Runs are matched to tests by
page: a row whose ``doc_id`` or ``source`` ends with the test's PDF path, and the same page.

As upstream (allenai/olmocr ``olmocr/bench/benchmark.py``, commit f7cfe4c): every PDF without
a ``baseline`` test gets one on page 1 (category ``baseline``); a page may have several readings
(olmOCR's ``{pdf}_pg{N}_repeat{M}.md``, :mod:`llm_ocr.quality.markdown_dir`; a run has one per
page): a test passes when it passes on more than half of them (``test_avg > 0.5``); the overall
score is the mean of the categories' pass rates of those verdicts, with a bootstrap interval
(:mod:`llm_ocr.quality.stats`); per test type, the mean over its tests of the share of readings
that pass (upstream's ``test_type_breakdown``), which is the plain pass rate with one reading.

Unlike upstream, which refuses a candidate that lacks any page, tests whose PDF is not in the
run are left out and counted (a run of a sample of the bench scores that sample); a page that
is in the run with an ``error`` row is scored on its empty Markdown, so failures count. A test
that raises on a reading (HTML that Python's parser rejects, such as ``<![``) fails on that
reading and says why, where upstream marks the whole candidate as failed. A test that cannot be
scored here (math without a browser) is left out of the scores and counted with its reason. A
test file line that olmOCR-bench would refuse is reported with its file and line and left out;
the other tests are still scored.
"""

from __future__ import annotations

import logging
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llm_ocr.quality.checks import BaselineTest, BenchTest, BenchTestError, MathTest, Verdict, load_test
from llm_ocr.quality.katex import EquationRenderer
from llm_ocr.quality.stats import bootstrap_ci, category_mean

log = logging.getLogger(__name__)

BASELINE_CATEGORY = "baseline"


class BenchError(Exception):
    """The bench folder cannot be used (the message says why)."""


@dataclass
class Bench:
    """A bench: its tests (each with the category it came from), PDFs, and refused lines."""

    root: Path
    tests: list[BenchTest]
    category: dict[str, str]  # test id -> category (JSONL file stem, or "baseline")
    pdfs: list[str]  # paths under pdfs/, posix
    invalid: list[str] = field(default_factory=list)  # "file:line: why"

    @property
    def pdf_dir(self) -> Path:
        return self.root / "pdfs"


def bench_root(path: str | Path) -> Path:
    """The folder holding the JSONL files and ``pdfs/``: ``path``, or its ``bench_data/``."""
    root = Path(path)
    if not root.is_dir():
        raise BenchError(f"bench folder {root} does not exist")
    if not list(root.glob("*.jsonl")) and (root / "bench_data").is_dir():
        root = root / "bench_data"
    if not list(root.glob("*.jsonl")):
        raise BenchError(f"no .jsonl test files in {root} (olmOCR-bench's layout: bench_data/*.jsonl and "
                         "bench_data/pdfs/)")
    return root


def load_bench(path: str | Path) -> Bench:
    """Read a bench folder: every ``*.jsonl`` beside ``pdfs/`` (refused lines are listed, not fatal)."""
    root = bench_root(path)
    pdf_dir = root / "pdfs"
    pdfs = sorted(p.relative_to(pdf_dir).as_posix() for p in pdf_dir.rglob("*.pdf")) if pdf_dir.is_dir() else []
    tests: list[BenchTest] = []
    category: dict[str, str] = {}
    invalid: list[str] = []
    for jsonl in sorted(root.glob("*.jsonl")):
        with jsonl.open(encoding="utf-8") as handle:
            for number, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                try:
                    test = load_test(line)
                except BenchTestError as exc:
                    invalid.append(f"{jsonl.name}:{number}: {exc}")
                    continue
                if test.id in category:
                    invalid.append(f"{jsonl.name}:{number}: duplicate test id {test.id!r}")
                    continue
                tests.append(test)
                category[test.id] = jsonl.stem
    with_baseline = {t.pdf for t in tests if t.type == "baseline"}
    for pdf in sorted(set(pdfs) | {t.pdf for t in tests}):
        if pdf not in with_baseline:
            test = BaselineTest(id=f"{pdf}_baseline", pdf=pdf, page=1, type="baseline")
            tests.append(test)
            category[test.id] = BASELINE_CATEGORY
    if not tests:
        raise BenchError(f"no valid tests in {root}: " + "; ".join(invalid[:5]))
    return Bench(root=root, tests=tests, category=category, pdfs=pdfs, invalid=invalid)


# ============================================================================================
# Matching the run's pages to the tests


def _tails(path: str) -> Iterable[str]:
    parts = [p for p in path.replace("\\", "/").split("/") if p]
    for i in range(len(parts)):
        yield "/".join(parts[i:])


def match_pages(rows: Iterable[Mapping[str, Any]], pdfs: set[str]) -> dict[tuple[str, int], dict[str, Any]]:
    """Rows keyed by (bench PDF path, page): a row belongs to the PDF its ``doc_id`` or
    ``source`` ends with (the longest such path wins)."""
    found: dict[tuple[str, int], dict[str, Any]] = {}
    for row in rows:
        names = [*_tails(str(row.get("doc_id") or "")), *_tails(str(row.get("source") or ""))]
        hits = [n for n in names if n in pdfs]
        if hits:
            found[(max(hits, key=len), int(row.get("page") or 0))] = dict(row)
    return found


# ============================================================================================
# Scoring


@dataclass
class TestResult:
    """One test's verdict on the run, over the readings of its page."""

    test: BenchTest
    category: str
    verdict: Verdict
    doc_id: str | None  # the run's document (None: the PDF is not in the run)
    readings: int = 1
    passed_readings: int | None = None  # None: as the verdict (one reading, or not scored)

    @property
    def ratio(self) -> float:
        """The share of readings it passed on (olmOCR's ``test_avg``)."""
        if self.passed_readings is not None and self.readings:
            return self.passed_readings / self.readings
        return 1.0 if self.verdict.passed else 0.0

    def to_json(self, with_test: bool) -> dict[str, Any]:
        record = {
            "id": self.test.id, "pdf": self.test.pdf, "page": self.test.page, "type": self.test.type,
            "category": self.category, "passed": self.verdict.passed, "explanation": self.verdict.explanation,
            "doc_id": self.doc_id,
        }  # fmt: skip
        if self.readings > 1 and self.passed_readings is not None:
            record.update(readings=self.readings, passed_readings=self.passed_readings)
        if with_test:
            record["test"] = self.test.to_json()
        return record


def _score(passed: list[bool]) -> dict[str, Any]:
    return {"tests": len(passed), "passed": sum(passed), "score": (sum(passed) / len(passed)) if passed else None}


def _run_one(test: BenchTest, row: Mapping[str, Any], renderer: EquationRenderer | None) -> tuple[Verdict, bool]:
    """The test on one reading, and whether it raised (a raise fails the reading, with why)."""
    if row.get("unreadable"):
        return Verdict(False, str(row["unreadable"])), False
    try:
        return test.run(str(row.get("markdown") or ""), renderer), False
    except Exception as exc:  # noqa: BLE001 - one broken test must not sink the score; upstream counts it failed
        return Verdict(False, f"the test raised {type(exc).__name__}: {exc}"), True


def run_test(
    test: BenchTest, readings: Sequence[Mapping[str, Any]], renderer: EquationRenderer | None = None
) -> tuple[Verdict, int | None, list[str]]:
    """A test over its page's readings: the verdict (passed on more than half of them, as
    upstream), how many passed (None when not scored), and what raised, per reading."""
    verdicts: list[Verdict] = []
    raised: list[str] = []
    for row in readings:
        verdict, broke = _run_one(test, row, renderer)
        verdicts.append(verdict)
        if broke:
            raised.append(f"{test.id} on {row.get('source') or row.get('doc_id')}: {verdict.explanation}")
    unscored = next((v for v in verdicts if v.passed is None), None)
    if unscored is not None:  # math without a browser, a formula KaTeX refuses: not the reading's fault
        return unscored, None, raised
    passed = sum(bool(v.passed) for v in verdicts)
    failures = [(row, v) for row, v in zip(readings, verdicts, strict=True) if not v.passed]
    if not failures:
        return Verdict(True), passed, raised
    row, first = failures[0]
    why = first.explanation
    if len(verdicts) > 1:
        why = f"failed on {len(failures)} of {len(verdicts)} readings; {row.get('source') or 'a reading'}: {why}"
    return Verdict(passed / len(verdicts) > 0.5, why), passed, raised


def score_bench(
    bench: Bench,
    pages: Mapping[tuple[str, int], Sequence[Mapping[str, Any]]],
    renderer: EquationRenderer | None = None,
    *,
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    """Run every test whose PDF is in ``pages`` (each page's readings) and summarise; the result
    is JSON-ready.

    Keys: ``overall`` (``score``, ``ci``, ``tests``, ``passed``), ``by_category``, ``by_type``,
    ``not_scored`` (reasons), ``not_in_run`` (tests and PDFs), ``invalid_tests``, ``raised``
    (tests that raised on a reading), ``results`` (every verdict; failing ones carry the test's fields).
    """
    started = time.monotonic()
    in_run = {pdf for pdf, _ in pages}
    docs = {pdf: str(rows[0].get("doc_id")) for (pdf, _), rows in pages.items() if rows}
    runnable = [t for t in bench.tests if t.pdf in in_run]
    math = [t for t in runnable if isinstance(t, MathTest)]
    if math and renderer is not None and renderer.available:
        formulas: list[str] = []
        for math_test in math:
            for row in pages.get((math_test.pdf, math_test.page)) or []:
                candidates = math_test.candidates(str(row.get("markdown") or ""))
                if candidates:
                    formulas += [math_test.math, *candidates]
        log.info("rendering %d formula(s) of %d math test(s) with KaTeX", len(set(formulas)), len(math))
        renderer.prefetch(formulas)
    results: list[TestResult] = []
    raised: list[str] = []
    for i, test in enumerate(runnable):
        readings = pages.get((test.pdf, test.page)) or []
        if not readings:  # the PDF is in the run but not this page: failed, as upstream's missing file
            verdict, passed = Verdict(False, f"page {test.page} of {test.pdf} is not in the run"), None
        else:
            verdict, passed, broke = run_test(test, readings, renderer)
            raised += broke
        results.append(TestResult(test, bench.category[test.id], verdict, docs.get(test.pdf), len(readings), passed))
        if progress is not None and (i + 1) % 500 == 0:
            progress(i + 1, len(runnable))
    return summarise(bench, results, in_run, seconds=time.monotonic() - started, raised=raised)


def summarise(
    bench: Bench, results: list[TestResult], in_run: set[str], seconds: float = 0.0, raised: Sequence[str] = ()
) -> dict[str, Any]:
    """Scores per category, per test type and overall from the verdicts."""
    scored = [r for r in results if r.verdict.passed is not None]
    by_category: dict[str, list[bool]] = defaultdict(list)
    by_type: dict[str, list[TestResult]] = defaultdict(list)
    for r in scored:
        by_category[r.category].append(bool(r.verdict.passed))
        by_type[r.test.type].append(r)
    groups = {k: [float(v) for v in vs] for k, vs in by_category.items()}
    low, high = bootstrap_ci(groups)
    not_scored = Counter(r.verdict.explanation for r in results if r.verdict.passed is None)
    skipped = [t for t in bench.tests if t.pdf not in in_run]
    return {
        "bench": str(bench.root),
        "overall": {
            "score": category_mean(groups) if scored else None, "ci": [low, high] if scored else None,
            "tests": len(scored), "passed": sum(bool(r.verdict.passed) for r in scored),
        },
        "by_category": {k: _score(v) for k, v in sorted(by_category.items())},
        "by_type": {k: _type_score(v) for k, v in sorted(by_type.items())},
        "not_scored": {"tests": sum(not_scored.values()), "reasons": dict(not_scored.most_common())},
        "not_in_run": {"tests": len(skipped), "pdfs": len({t.pdf for t in skipped}),
                       "of_pdfs": len({t.pdf for t in bench.tests})},
        "invalid_tests": bench.invalid,
        "raised": list(raised),
        "seconds": round(seconds, 2),
        "results": [r.to_json(with_test=r.verdict.passed is False) for r in results],
    }  # fmt: skip


def _type_score(results: list[TestResult]) -> dict[str, Any]:
    """A test type's pass rate as upstream's ``test_type_breakdown``: the mean share of readings
    passed (the plain pass rate with one reading per page); ``passed`` counts the tests passed."""
    counted = _score([bool(r.verdict.passed) for r in results])
    counted["score"] = sum(r.ratio for r in results) / len(results) if results else None
    return counted


def load_run_pages(rows: Iterable[Mapping[str, Any]], bench: Bench) -> dict[tuple[str, int], list[dict[str, Any]]]:
    """The run's rows that belong to the bench, keyed by (PDF path, page): one reading each."""
    return {key: [row] for key, row in match_pages(rows, {t.pdf for t in bench.tests} | set(bench.pdfs)).items()}
