"""Formulas render with olmOCR-bench's KaTeX (0.16.21, shipped with the package), not whatever
KaTeX the machine has: older ones refuse macros olmOCR-bench's formulas use."""

from __future__ import annotations

import pytest

from llm_ocr.quality.checks import load_test
from llm_ocr.quality.katex import EquationRenderer

#: Each is refused by KaTeX 0.16.4 (Debian 12's libjs-katex: "Undefined control sequence") and
#: rendered by 0.16.21, the version olmOCR-bench bundles (allenai/olmocr olmocr/bench/katex/).
NEWER_MACROS = [r"\dddot{x}", r"\ddddot{y}", r"\emph{word}", r"\mathsfit{A}"]


def test_macros_older_katex_refuses_render(renderer: EquationRenderer) -> None:
    renderer.prefetch(NEWER_MACROS)
    for latex in NEWER_MACROS:
        rendered = renderer.render(latex)
        assert rendered is not None and rendered.error is None, (latex, rendered)
        assert rendered.glyphs and rendered.mathml, latex


@pytest.mark.parametrize(
    ("reference", "page"),
    [(r"\dddot{x}", r"$$\dddot x$$"), (r"\mathsfit{A}+1", r"\[\mathsfit A + 1\]")],
)
def test_a_math_test_on_them_is_scored(renderer: EquationRenderer, reference: str, page: str) -> None:
    """The page spells the formula differently, so only rendering can match it: with a KaTeX
    that refuses the macro the test is not scored at all."""
    test = load_test({"pdf": "a.pdf", "page": 1, "id": "m", "type": "math", "math": reference})
    assert test.run(page, renderer).passed is True
    assert test.run(r"$$\ddot x + \mathsf{B}$$", renderer).passed is False
