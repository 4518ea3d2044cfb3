"""Which first readings a stronger model reads again, and which of a page's two readings is kept.

A reading is escalated when it trips one of the chosen signals (``--escalate-on``, docs/routes.md):
the no-ground-truth checks of :mod:`llm_ocr.quality.signals` (error, empty, truncated, looped,
repetition, missing text, stray characters), which ``llm-ocr bench-quality`` also reports, and
three more that need no text layer, so that scans are covered too:

- **garbled**: under ``min_dictionary`` (50 %) of the reading's words of three or more ASCII
  letters are English dictionary words. The bar is the one text layers are held to
  (:mod:`llm_ocr.sources.text_layer`): English prose scores 73-83 %, letter-shifted text 0-5 %.
  A reading of mostly non-ASCII words is not judged; one in another Latin-script language is
  (German scores ~15 %): leave ``garbled`` out of ``--escalate-on`` for such documents.
- **short**: the reading holds under ``min_length`` (half) of the characters the page seemed to
  hold when it was rendered (``text_estimate``: its text layer's count, else its ink's, which
  runs 0.75-1.35 times the true count, :mod:`llm_ocr.sources.density`): text was dropped.
- **verifier**: a verifier model scored the reading under a threshold (computed by the caller).

Of two readings of a page, the stronger model's is kept unless its signals weigh more than the
first's (the weights of :data:`llm_ocr.quality.signals.WEIGHTS`): a stronger reading that failed
or looped does not replace a first reading that was merely suspicious.

The Escalate stage (:mod:`.escalate`) is the one user of these rules, so they sit beside it;
``quality/`` keeps what evaluates a run after the fact.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from llm_ocr.options import EscalateOptions
from llm_ocr.quality.signals import WEIGHTS as FLAG_WEIGHTS
from llm_ocr.quality.signals import page_signals
from llm_ocr.sources.text_layer import english_words

#: The escalation signal of each flag of :func:`llm_ocr.quality.signals.page_signals`.
SIGNAL_OF_FLAG = {
    "error": "error", "empty": "empty", "repetition": "repetition", "stray": "stray", "truncated": "truncated",
    "looped": "looped", "missing text": "missing-text",
}
#: Weight of each signal when two readings of one page are compared.
WEIGHTS = {**{SIGNAL_OF_FLAG[k]: v for k, v in FLAG_WEIGHTS.items()}, "garbled": 40, "short": 40, "verifier": 40}
#: Fewer checkable words than this say nothing about a reading's words (a figure's label, a form).
MIN_CHECKED_WORDS = 10

_MARKUP = re.compile(r"<[^>]{0,200}>|!\[[^\]]*\]\([^)]*\)|[|#*_`>]")
_WORD = re.compile(r"[^\W\d_]{2,}")


@dataclass(frozen=True)
class EscalationRule:
    """The signals that escalate a reading, and their thresholds."""

    signals: tuple[str, ...]
    min_recall: float = 0.8
    min_dictionary: float = 0.5
    min_length: float = 0.5
    verifier_threshold: float = 0.5

    @classmethod
    def of(cls, options: EscalateOptions) -> EscalationRule:
        """The rule ``--escalate-on`` and its thresholds describe."""
        return cls(options.signals, options.escalate_min_recall, options.escalate_min_dictionary,
                   options.escalate_min_length, options.escalate_verifier_threshold)


def plain_text(markdown: str) -> str:
    """A reading's words without Markdown and HTML markup or figure links, whitespace collapsed."""
    return " ".join(_MARKUP.sub(" ", markdown).split())


def dictionary_share(markdown: str) -> tuple[int, float] | None:
    """``(checked words, share in the English word list)`` of a reading's words of 3+ ASCII
    letters; None when they are too few, or most words are not plain ASCII (not checkable)."""
    words = _WORD.findall(plain_text(markdown))
    checkable = [w.lower() for w in words if len(w) >= 3 and w.isascii()]
    if len(checkable) < MIN_CHECKED_WORDS or len(checkable) * 2 < len(words):
        return None
    known = english_words()
    return len(checkable), sum(1 for w in checkable if w in known) / len(checkable)


def reading_flags(
    row: Mapping[str, Any], layer: str | None, rule: EscalationRule, verifier: float | None = None
) -> dict[str, str]:
    """The signals of ``rule`` a page's reading trips, each with what was seen; ``layer`` is the
    page's usable PDF text layer, ``verifier`` a verifier's probability that the reading is right.
    A document-level row and a quarantined page trip nothing (no model can read them)."""
    if not int(row.get("page") or 0) or row.get("quarantined"):
        return {}
    signals = page_signals(row, layer, min_recall=rule.min_recall)
    flags = {SIGNAL_OF_FLAG[flag]: detail for flag, detail in signals.flags.items()}
    markdown = str(row.get("markdown") or "")
    if row.get("status") != "error":
        words = dictionary_share(markdown)
        if words is not None and words[1] < rule.min_dictionary:
            flags["garbled"] = f"only {words[1]:.0%} of its {words[0]} words are English dictionary words"
        estimate = row.get("text_estimate")
        held = len(plain_text(markdown))
        if estimate and held < rule.min_length * estimate and "empty" not in flags:
            flags["short"] = f"{held:,} characters where the page seemed to hold ~{int(estimate):,}"
    if verifier is not None and verifier < rule.verifier_threshold:
        flags["verifier"] = f"the verifier gave it {verifier:.2f}, under {rule.verifier_threshold:.2f}"
    return {name: flags[name] for name in rule.signals if name in flags}


def badness(flags: Mapping[str, str]) -> int:
    """How bad a reading with these signals is (the sum of their weights)."""
    return sum(WEIGHTS[name] for name in flags)


def describe(flags: Mapping[str, str]) -> str:
    """``truncated (the answer was cut off ...); garbled (only 12% ...)``."""
    return "; ".join(f"{name} ({detail})" for name, detail in flags.items())


def keep_second(first: Mapping[str, str], second: Mapping[str, str]) -> bool:
    """Whether the stronger model's reading (signals ``second``) replaces the first (``first``)."""
    return badness(second) <= badness(first)
