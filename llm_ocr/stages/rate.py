"""What the server's answers say about a page's answer tokens: the run's observed tokens per
character, and whether an answer that ran out read its page (long) or wrote something else.

The dense-page planner (:mod:`llm_ocr.stages.tiled`) needs a page's answer tokens before it is
read. It has the page's text estimate (:mod:`llm_ocr.sources.density`: characters) and a tokens
per character figure. :data:`TOKENS_PER_CHAR` is **a first guess**, fitted to the project's
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

from llm_ocr.sources.density import TextEstimate

#: The first guess of answer tokens per character of a page's text (markup included), for
#: every family: 0.35 is DeepSeek-OCR's grounding output as the project's *simulator* writes it
#: for its 7-column page (29,274 characters of markup for 24,883 of text layer, at 0.3 tokens a
#: character). It is no fact about any model: the run's answers correct it (:class:`RateBook`).
TOKENS_PER_CHAR = 0.35
#: The share of observations the run's rate is above (a high quantile: planning a page for fewer
#: tokens than it needs costs an answer that runs out, more a few smaller pieces) ...
RATE_QUANTILE = 0.9
#: ... where a piece that runs out is cut in halves and read again (bands: their answers have
#: no boxes). Where it keeps its complete blocks and only the rest is read again (tiles,
#: :func:`~llm_ocr.stages.split.complete_part`), a run-out costs little and more pieces cost
#: their overlaps and markup: the median.
KEEPS_COMPLETE_QUANTILE = 0.5
#: A page whose estimate holds fewer characters says little about the rate (a caption page whose
#: figure the model describes at length): not an observation.
MIN_OBSERVED_CHARS = 1000
#: The rate is never taken above this many times the first guess (a page whose estimate missed
#: most of its text, a scan's partial OCR layer): such a rate would cut every page in crumbs.
MAX_RATE_FACTOR = 8.0
#: Share of an answer's words (each counted no more often than the page's text layer holds it)
#: that must be the layer's for an answer that ran out to be reading its page. Markup words
#: (``ref``, ``det``, ``table``) and misreadings are the rest; a loop that counts, or that reads
#: the page again from the top, falls under it.
PAGE_WORDS_SHARE = 0.8
#: Fewest words an answer that ran out must hold to be reading its page's text.
MIN_ANSWER_WORDS = 20
#: Without a text layer: an answer reads its page while its letters are at most this many times
#: the ink estimate's characters (the ink estimate is 0.65 to 1.35 times the truth) ...
INK_SLACK = 1.0 / 0.65
#: ... and make at least this share of its visible characters (a loop that counts is digits).
MIN_LETTER_SHARE = 0.5

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

    first_guess: float = TOKENS_PER_CHAR
    _seen: dict[str, list[float]] = field(default_factory=dict)

    def record(self, tokens: int, chars: int, source: str) -> None:
        """An answer of ``tokens`` that wrote ``chars`` characters of a page's estimated text
        (``source``: the estimate's, "text layer" or "ink")."""
        if chars < MIN_OBSERVED_CHARS or tokens <= 0:
            return
        self._seen.setdefault(source, []).append(tokens / chars)

    def rate(self, estimate: TextEstimate | None, quantile: float = RATE_QUANTILE) -> float:
        """The tokens per character to plan a page of ``estimate`` with: the ``quantile`` of
        the observations of its kind of estimate, never under the first guess nor over
        :data:`MAX_RATE_FACTOR` times it."""
        seen = sorted(self._seen.get(estimate.source, [])) if estimate is not None else []
        if not seen:
            return self.first_guess
        at = seen[min(len(seen) - 1, int(quantile * len(seen)))]
        return min(MAX_RATE_FACTOR * self.first_guess, max(self.first_guess, at))

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
        if len(said) < MIN_ANSWER_WORDS or not total:
            return Coverage(False, None, f"the answer holds {len(said)} words")
        matched = sum((Counter(said) & page).values())
        share = matched / len(said)
        if share < PAGE_WORDS_SHARE:
            return Coverage(False, None, f"{share:.0%} of the answer's words are the text layer's")
        return Coverage(True, min(1.0, matched / total),
                        f"{share:.0%} of the answer's words are the text layer's, {matched / total:.0%} of it")
    bare = _TAG.sub(" ", text)
    letters = sum(c.isalpha() for c in bare)
    visible = sum(not c.isspace() for c in bare)
    if not visible or letters < MIN_LETTER_SHARE * visible:
        return Coverage(False, None, f"{letters:,} of the answer's {visible:,} characters are letters")
    if letters > INK_SLACK * estimate.chars:
        return Coverage(False, None, f"the answer's {letters:,} letters are more than its ink holds")
    # How far it got is not known: the ink estimate is too rough to divide by.
    return Coverage(True, None, f"the answer's {letters:,} letters fit its ink")
