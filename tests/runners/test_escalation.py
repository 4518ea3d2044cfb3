"""Which first readings are escalated, and which of two readings a page keeps (docs/routes.md)."""

from __future__ import annotations

from llm_ocr.options import DEFAULT_ESCALATE_ON, EscalateOptions
from llm_ocr.runners.escalation import EscalationRule, dictionary_share, keep_second, reading_flags

RULE = EscalationRule.of(EscalateOptions.model_validate({}))
PROSE = (
    "The committee met on Tuesday to review the annual report. Members discussed the budget for the coming "
    "year and agreed that the library should extend its opening hours during the examination period."
)
SHIFTED = "".join(chr(ord(c) + 1) if c.isalpha() and c.lower() not in "z" else c for c in PROSE)


def _row(markdown: str, **fields: object) -> dict[str, object]:
    return {"doc_id": "a.pdf", "page": 1, "status": "ok", "markdown": markdown, **fields}


def test_the_default_signals_are_the_documented_ones() -> None:
    assert RULE.signals == tuple(DEFAULT_ESCALATE_ON.split(","))
    assert "verifier" not in RULE.signals  # it needs a verifier to be named


def test_a_reading_whose_words_are_not_words_is_garbled_and_prose_is_not() -> None:
    assert reading_flags(_row(PROSE), None, RULE) == {}
    flags = reading_flags(_row(SHIFTED), None, RULE)
    assert list(flags) == ["garbled"] and "English dictionary words" in flags["garbled"]
    # Too few words to judge, or mostly words that are not plain ASCII: not judged at all.
    assert dictionary_share("Qwx zzt") is None
    assert reading_flags(_row("東京都の人口は約千四百万人です。 " * 5), None, RULE) == {}


def test_a_reading_that_holds_under_half_of_what_the_page_showed_is_short() -> None:
    assert reading_flags(_row(PROSE[:40]), None, RULE) == {}  # no estimate (rows written before it): not judged
    assert reading_flags(_row(PROSE, text_estimate=len(PROSE)), None, RULE) == {}
    flags = reading_flags(_row(PROSE, text_estimate=3 * len(PROSE)), None, RULE)
    assert list(flags) == ["short"]
    # Figure links and markup are not text: a page of markup alone holds nothing.
    assert "short" in reading_flags(_row("![](figure:p1-f1)\n\n<table><tr><td>1</td></tr></table>",
                                         text_estimate=400), None, RULE)


def test_the_text_layer_decides_missing_text_at_the_chosen_recall() -> None:
    layer = "\n".join(f"line {i}: " + PROSE[i * 10: i * 10 + 60] for i in range(8))
    half = "\n".join(layer.splitlines()[:4])
    assert "missing-text" in reading_flags(_row(half), layer, RULE)
    lenient = EscalationRule.of(EscalateOptions.model_validate({"escalate_min_recall": 0.4}))
    assert "missing-text" not in reading_flags(_row(half), layer, lenient)


def test_only_the_chosen_signals_escalate() -> None:
    looped = _row(PROSE, cut_reason="attempt 1 (temperature 0) repeated a 12-character unit")
    assert list(reading_flags(looped, None, RULE)) == ["looped"]
    only_errors = EscalationRule.of(EscalateOptions.model_validate({"escalate_on": "error"}))
    assert reading_flags(looped, None, only_errors) == {}
    assert list(reading_flags(_row("", status="error", error="HTTP 500"), None, only_errors)) == ["error"]


def test_pages_no_model_can_read_are_never_escalated() -> None:
    assert reading_flags(_row("", page=0, status="error", error="encrypted PDF"), None, RULE) == {}
    assert reading_flags(_row("", status="error", quarantined=True), None, RULE) == {}


def test_the_stronger_reading_is_kept_unless_it_is_worse() -> None:
    assert keep_second({"garbled": "..."}, {})
    assert keep_second({"garbled": "..."}, {"stray": "..."})  # 20 < 40
    assert not keep_second({"garbled": "..."}, {"error": "HTTP 500"})  # a failed second reading
    assert not keep_second({"looped": "..."}, {"truncated": "..."})
    assert keep_second({"short": "..."}, {"short": "..."})  # as bad: the stronger model's
