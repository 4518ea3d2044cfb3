"""Candidate folders in olmOCR's layout (``{pdf}_pg{N}_repeat{M}.md``) for the bench of
:mod:`tests.quality.cases`: each page read several times, the good and bad readings mixed, so a
test passes on all, most, half, few or none of its readings; and one candidate whose table page
holds HTML Python's parser rejects. ``make_olmocr_repeats.py`` records olmOCR's scorer on them."""

from __future__ import annotations

from pathlib import Path

from tests.quality.cases import BENCH

#: Markup ``html.parser`` rejects (``AssertionError: expected name token``), in Python's
#: parser and so in BeautifulSoup's, which olmOCR's table tests use.
UNPARSABLE = "\n\n<![ this is not a declaration"


def _readings(pattern: str) -> dict[str, list[str]]:
    """Every PDF read once per letter of ``pattern``: g the good reading, b the bad one."""
    return {pdf: [spec["good" if r == "g" else "bad"] for r in pattern] for pdf, spec in BENCH.items()}


CANDIDATES: dict[str, dict[str, list[str]]] = {
    "once_bad": _readings("b"),
    "two_of_three": _readings("gbg"),
    "one_of_two": _readings("gb"),
    "one_of_three": _readings("bgb"),
    "unparsable": {
        **_readings("g"),
        "tables/growth.pdf": [BENCH["tables/growth.pdf"]["good"] + UNPARSABLE, BENCH["tables/growth.pdf"]["good"]],
    },
}


def write_candidate(folder: Path, readings: dict[str, list[str]]) -> Path:
    """``folder/{pdf}_pg1_repeat{M}.md`` for each PDF's readings (the bench's PDFs are one page)."""
    for pdf, texts in readings.items():
        for repeat, text in enumerate(texts, start=1):
            path = folder / f"{pdf[: -len('.pdf')]}_pg1_repeat{repeat}.md"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
    return folder
