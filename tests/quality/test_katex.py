"""Formulas render with olmOCR-bench's KaTeX (0.16.21, shipped with the package), not whatever
KaTeX the machine has: older ones refuse macros olmOCR-bench's formulas use. They are laid out
in the fonts KaTeX ships (also shipped), not whatever fonts the machine has: glyph positions,
and so some verdicts, depend on them."""

from __future__ import annotations

import re
import shutil

import pytest

from llm_ocr.quality.checks import load_test
from llm_ocr.quality.katex import SHIPPED_KATEX, EquationRenderer

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


#: KaTeX's own metrics (katex@0.16.21 ``src/fontMetricsData.js``: advance width in em) of
#: glyphs whose width in any other font differs by far more than a pixel at the test's size:
#: x in KaTeX_Math italic, = in KaTeX_Main, a calligraphic I in KaTeX_Caligraphic.
KATEX_WIDTHS_EM = {"x": ("x", 0.57153), "=": ("=", 0.77778), r"\mathcal{I}": ("I", 0.54452)}
#: The rendered size: 24 px, times the 1.21 em of ``.katex`` in ``katex.min.css``.
FONT_PX = 24 * 1.21


def test_glyph_boxes_have_the_bundled_fonts_metrics(renderer: EquationRenderer) -> None:
    """Boxes are measured in KaTeX's own fonts on every machine: with the machine's fonts
    instead (Liberation Serif's x is 0.444 em, its = 0.564 em) the widths are pixels off."""
    renderer.prefetch(KATEX_WIDTHS_EM)
    for latex, (char, em) in KATEX_WIDTHS_EM.items():
        rendered = renderer.render(latex)
        assert rendered is not None and rendered.error is None, latex
        (glyph,) = [g for g in rendered.glyphs if g.text == char]
        assert glyph.width == pytest.approx(em * FONT_PX, abs=0.05), latex
    described = renderer.describe()
    assert described["fonts"] == "bundled KaTeX fonts 0.16.21 (20 woff2)"
    assert re.match(r"\S.* [0-9]+\.[0-9]+\.[0-9]+\.[0-9]+", described["chromium"] or ""), described


#: olmOCR-bench's sample bench (allenai/olmocr ``olmocr/bench/sample_data/dataset.jsonl``, test
#: ``math_2503_04086_00``) and the formula its olmOCR pipeline reading has on that page
#: (``olmocr_pipeline/math_2503_04086_pg1_repeat1.md``): ``I_i`` where the test has
#: ``\mathcal{I}_{i}``. The MathML differs, so the glyph positions decide: in KaTeX's fonts the
#: calligraphic I is wider and the characters after it do not line up; laid out in Liberation
#: Serif they do, and the test passes (olmOCR's scorer on a machine without Debian's fonts-katex).
SAMPLE_TEST = (r"\lambda_{g}=\sum_{s \in S} \zeta_{n}^{\psi(g s)}=\sum_{i=1}^{k}\left[\sum_{s, R s=\mathcal{I}_{i}} "
               r"\zeta_{n}^{\psi(g s)}\right]")
SAMPLE_READING = (r"$$\lambda_g = \sum_{s \in S} \zeta_n^{\psi(gs)} = \sum_{i=1}^k \left[ \sum_{s, Rs = I_i} "
                  r"\zeta_n^{\psi(gs)} \right].$$")


def test_a_verdict_that_depends_on_the_font_is_the_one_in_katex_fonts(renderer: EquationRenderer) -> None:
    test = load_test({"pdf": "math_2503_04086.pdf", "page": 1, "id": "math_2503_04086_00", "type": "math",
                      "math": SAMPLE_TEST})
    assert test.run(SAMPLE_READING, renderer).passed is False


def test_fonts_that_do_not_load_leave_math_not_scored_and_say_which(tmp_path) -> None:
    for name in ("katex.min.js", "katex.min.css"):
        shutil.copy(SHIPPED_KATEX / name, tmp_path / name)
    (tmp_path / "fonts").mkdir()
    (tmp_path / "fonts" / "KaTeX_Main-Regular.woff2").write_bytes(b"not a font")
    renderer = EquationRenderer(tmp_path)
    if not renderer.available:
        pytest.skip(f"math rendering unavailable: {renderer.unavailable_reason}")
    test = load_test({"pdf": "a.pdf", "page": 1, "id": "m", "type": "math", "math": "x+1"})
    verdict = test.run("$$x + 1.$$", renderer)
    assert verdict.passed is None
    assert "did not load 1 of KaTeX's 1 fonts (KaTeX_Main-Regular.woff2)" in verdict.explanation
