"""llm-ocr's scorer gives olmOCR's own verdicts.

``data/olmocr_verdicts.jsonl`` holds the verdicts of olmOCR's scorer (allenai/olmocr main, the
commit in its first line) on the cases of :mod:`tests.quality.cases`: the generated bench's
good and bad readings and cases on the edges of every test type. They were recorded by
``make_olmocr_verdicts.py`` (see there why olmOCR is not installed in the suite). Every case
must get the same verdict here; math cases render with KaTeX in Chromium.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from llm_ocr.quality.checks import equations_in, load_test
from llm_ocr.quality.katex import EquationRenderer

DATA = Path(__file__).parent / "data" / "olmocr_verdicts.jsonl"
RECORDS = [json.loads(line) for line in DATA.read_text(encoding="utf-8").splitlines() if line.strip()]
HEADER, CASES = RECORDS[0], RECORDS[1:]


def test_the_recorded_verdicts_come_from_olmocr_and_both_outcomes_occur() -> None:
    assert len(HEADER["olmocr_commit"]) == 40
    types = {c["test"]["type"] for c in CASES}
    assert types == {"present", "absent", "order", "table", "math", "baseline", "format", "footnote"}
    for kind in types:  # every type is seen passing and failing, so a constant verdict cannot match
        outcomes = {c["passed"] for c in CASES if c["test"]["type"] == kind}
        assert outcomes == {True, False}, kind


@pytest.mark.parametrize("case", [c for c in CASES if c["test"]["type"] != "math"], ids=lambda c: c["case"])
def test_same_verdict_as_olmocr(case: dict[str, Any]) -> None:
    verdict = load_test(case["test"]).run(case["markdown"])
    assert verdict.passed == case["passed"], (verdict.explanation, case["explanation"])
    if not case["passed"]:
        assert verdict.explanation == case["explanation"]


MATH = [c for c in CASES if c["test"]["type"] == "math"]


@pytest.fixture(scope="module")
def math_renderer(renderer: EquationRenderer) -> EquationRenderer:
    """The renderer with every formula of the math cases rendered in one browser run."""
    renderer.prefetch([c["test"]["math"] for c in MATH] + [e for c in MATH for e in equations_in(c["markdown"])])
    return renderer


@pytest.mark.parametrize("case", MATH, ids=lambda c: c["case"])
def test_same_math_verdict_as_olmocr(case: dict[str, Any], math_renderer: EquationRenderer) -> None:
    verdict = load_test(case["test"]).run(case["markdown"], math_renderer)
    assert verdict.passed == case["passed"], (verdict.explanation, case["explanation"])
