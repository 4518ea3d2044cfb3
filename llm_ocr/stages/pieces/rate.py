"""What the server's answers say about a page's answer tokens: the run's observed tokens per
character, and whether an answer that ran out read its page (long) or wrote something else.

The dense-page planner (:mod:`.plan`) needs a page's answer tokens before it is
read. It has the page's text estimate (:mod:`llm_ocr.sources.density`: characters) and a tokens
per character figure. ``tokens_per_char`` is **a first guess**, fitted to the project's
simulator: a model that writes more markup, another script or layout writes more. So:

- **the run's rate** (:class:`RateBook`): every page read whole whose answer finished, and every
  answer that ran out while reading its page's own text, is an observation of the tokens the
  model writes per character of estimate; the planner uses a high quantile of them, never
  below the first guess (a page estimate is never lowered by a terse page). Layer and ink
  estimates are kept apart (ink is 0.65 to 1.35 times the truth).
- **an answer that ran out reads its page** (:func:`reads_page`): an answer that ran to
  ``max_tokens`` without repeating itself (the loop watch saw no loop) is either a page longer
  than one answer or a loop the watch cannot see (one that counts). The page's estimate alone
  cannot tell when the model writes more per character than guessed; the answer can: its words
  are the page's own text (its text layer's words, each no more often than the layer holds it),
  or, without a text layer, its letters are no more than the ink says the page holds.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

from llm_ocr.options import dense
from llm_ocr.sources.density import TextEstimate

_WORD = re.compile(r"[^\W_]{2,}")
#: Markup: tags (HTML, DeepSeek-OCR's ``<|ref|>``), a grounding label and box between them.
_TAG = re.compile(r"<\|(ref|det)\|>.*?<\|/\1\|>|<[^<>\n]{0,80}>", re.DOTALL)


def words(text: str) -> list[str]:
    """The words of ``text`` that the page-text check compares: runs of two or more letters or
    digits, lower-cased, outside markup (tags, grounding boxes). Pass the answer as the family
    parsed it where it can: its Markdown."""
    return [w.lower() for w in _WORD.findall(_TAG.sub(" ", text))]


@dataclass
class RateBook:
    """The answer tokens per character of estimate this run's pages showed (one per server
    model; shared by every page of the run). Pages are read concurrently: the rate a page is
    planned with is what the pages answered before it showed."""

    #: The rate before any observation (None: the ``tokens_per_char`` knob in force).
    first_guess: float | None = None
    _seen: dict[str, list[float]] = field(default_factory=dict)

    def record(self, tokens: int, chars: int, source: str) -> None:
        """An answer of ``tokens`` that wrote ``chars`` characters of a page's estimated text
        (``source``: the estimate's, "text layer" or "ink")."""
        if chars < dense().min_observed_chars or tokens <= 0:
            return
        self._seen.setdefault(source, []).append(tokens / chars)

    def rate(self, estimate: TextEstimate | None, quantile: float | None = None) -> float:
        """The tokens per character to plan a page of ``estimate`` with: the ``quantile`` of
        the observations of its kind of estimate, never under the first guess nor over
        ``max_rate_factor`` times it."""
        knobs = dense()
        first = knobs.tokens_per_char if self.first_guess is None else self.first_guess
        quantile = knobs.rate_quantile if quantile is None else quantile
        seen = sorted(self._seen.get(estimate.source, [])) if estimate is not None else []
        if not seen:
            return first
        at = seen[min(len(seen) - 1, int(quantile * len(seen)))]
        return min(knobs.max_rate_factor * first, max(first, at))

    def observations(self, source: str) -> int:
        """How many answers the rate of ``source`` estimates rests on."""
        return len(self._seen.get(source, []))


@dataclass(frozen=True)
class Coverage:
    """What an answer that ran out says about its page: whether it was reading the page's own
    text, and which share of the page it had written when it ran out (None: unknown)."""

    reads_page: bool
    share: float | None
    why: str


def coverage(text: str, estimate: TextEstimate | None) -> Coverage:
    """Whether ``text`` (an answer that ran to ``max_tokens`` without repeating itself) was
    reading the page of ``estimate`` (see the module docstring), and how far it got."""
    if estimate is None:
        return Coverage(True, None, "no estimate of the page's text")
    said = words(text)
    if estimate.text is not None:
        page = Counter(words(estimate.text))
        total = sum(page.values())
        if len(said) < dense().min_answer_words or not total:
            return Coverage(False, None, f"the answer holds {len(said)} words")
        matched = sum((Counter(said) & page).values())
        share = matched / len(said)
        if share < dense().page_words_share:
            return Coverage(False, None, f"{share:.0%} of the answer's words are the text layer's")
        return Coverage(True, min(1.0, matched / total),
                        f"{share:.0%} of the answer's words are the text layer's, {matched / total:.0%} of it")
    bare = _TAG.sub(" ", text)
    letters = sum(c.isalpha() for c in bare)
    visible = sum(not c.isspace() for c in bare)
    if not visible or letters < dense().min_letter_share * visible:
        return Coverage(False, None, f"{letters:,} of the answer's {visible:,} characters are letters")
    if letters > dense().ink_slack * estimate.chars:
        return Coverage(False, None, f"the answer's {letters:,} letters are more than its ink holds")
    # How far it got is not known: the ink estimate is too rough to divide by.
    return Coverage(True, None, f"the answer's {letters:,} letters fit its ink")
