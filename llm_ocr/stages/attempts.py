"""Asking the model for one image until the answer is whole: cut loops, hotter retries, the best kept.

An answer that loops is cut as it streams (:mod:`llm_ocr.vlm.loops`) or runs to ``max_tokens``
(``finish_reason == "length"``); either way the image is asked again at once at the next
temperature step. If every attempt loops, the best answer is kept: the one with the most text
before its loop began, the greedy (first) one on a tie.

With ``stop_when_long``, an answer that ran to ``max_tokens`` without repeating itself (the
stream's loop watch saw no loop; an answer that was not streamed is watched once it is whole)
is not retried: its page is long, not looping, and a hotter retry would only write the same
text to ``max_tokens`` again. The caller reads such a page in tiles (:mod:`llm_ocr.stages.pieces.plan`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from llm_ocr.vlm.client import ChatResult, VlmClient
from llm_ocr.vlm.families.base import BodyFor, Family, Retries
from llm_ocr.vlm.loops import LoopPolicy, LoopWatch

#: Finish reasons of an answer that did not end by itself.
UNFINISHED = ("length", "loop")


@dataclass
class Answer:
    """The answer kept for an image, and what getting it cost."""

    result: ChatResult
    attempts: int  # HTTP attempts, all model attempts included
    #: Tokens generated in repetition and thrown away: for each attempt that looped, from the
    #: end of the unit's first copy to where generation stopped.
    cut_tokens: int = 0
    notes: list[str] = field(default_factory=list)  # one line per attempt that looped
    #: The kept answer ran to max_tokens without repeating itself (with ``stop_when_long``).
    long: bool = False

    @property
    def text(self) -> str:
        """The answer's text worth parsing: up to the end of a loop's first copy, if it looped."""
        loop = self.result.loop
        return self.result.text[: loop.keep_chars] if loop is not None else self.result.text

    @property
    def cut_reason(self) -> str | None:
        """Why tokens were cut, one clause per looping attempt (None: nothing was cut)."""
        return "; ".join(self.notes) if self.notes else None


def useful_chars(result: ChatResult) -> int:
    """Characters of an answer worth keeping (before its loop, if it was cut at one)."""
    return result.loop.keep_chars if result.loop is not None else len(result.text)


def better(first: ChatResult, second: ChatResult) -> ChatResult:
    """The answer to keep of two attempts at the same image."""
    # One that finished beats one that looped; between two loops keep the one with more text
    # before its loop, the first (greedy) one on a tie: a hotter sample is not more faithful.
    if first.finish_reason in UNFINISHED and second.finish_reason not in UNFINISHED:
        return second
    if first.finish_reason in UNFINISHED and useful_chars(second) > useful_chars(first):
        return second
    return first


def cut_note(result: ChatResult, attempt: int, temperature: float) -> tuple[int, str | None]:
    """``(tokens cut, why)`` for one attempt's answer (``(0, None)`` when it did not loop)."""
    loop = result.loop
    if loop is not None:
        tokens = result.completion_tokens or 0
        cut = round(tokens * (len(result.text) - loop.keep_chars) / max(1, len(result.text)))
        about = "~" if result.tokens_estimated else ""
        return cut, (
            f"attempt {attempt} (temperature {temperature:g}) repeated {loop.describe()}; "
            f"stream closed after {about}{tokens} tokens"
        )
    if result.finish_reason == "length":
        return 0, f"attempt {attempt} (temperature {temperature:g}) ran to max_tokens ({result.completion_tokens} tokens)"  # noqa: E501 - not wrapped yet
    return 0, None


async def ask_until_whole(
    client: VlmClient,
    recipe: Family,
    request: BodyFor,
    *,
    retries: int | None = None,
    temperature_step: float | None = None,
    cut_loops: bool,
    policy: LoopPolicy | None = None,
    schedule: Retries | None = None,
    stop_when_long: bool = False,
    long_if: Callable[[ChatResult], bool] | None = None,
) -> Answer:
    """Ask with ``request(temperature, attempt)`` at the family's first temperature, then, while
    the answer looped, up to ``retries`` more times (default: the family's count) at its next
    retry temperatures (``temperature_step``: evenly spaced instead); the best answer is kept.

    With ``cut_loops`` every request streams and is closed as soon as it repeats itself. With
    ``stop_when_long`` an answer that ran to ``max_tokens`` without repeating itself ends the
    asking (:attr:`Answer.long`; see the module docstring), provided ``long_if`` (if given) says
    the answer read its page: one that did not is a loop the watch cannot see, retried hotter.
    """
    policy = policy or LoopPolicy()
    schedule = schedule or recipe.retries
    retries = schedule.count if retries is None else retries
    kept: ChatResult | None = None
    attempts = cut_tokens = 0
    notes: list[str] = []
    for number in range(retries + 1):
        if temperature_step is None:
            temperature = schedule.temperature(number)
        else:
            temperature = min(1.0, schedule.temperatures[0] + number * temperature_step)
        body = request(temperature, number)
        if cut_loops:
            result = await client.chat(recipe.streamed(body), stream=True, loops=policy)
        else:
            result = await client.chat(body)
        attempts += result.attempts
        cut, note = cut_note(result, number + 1, temperature)
        cut_tokens += cut
        if note:
            notes.append(note)
        kept = result if kept is None else better(kept, result)
        if result.finish_reason not in UNFINISHED:
            break
        if stop_when_long and is_long(result, policy) and (long_if is None or long_if(result)):
            return Answer(result, attempts, cut_tokens, notes, long=True)
    assert kept is not None
    return Answer(kept, attempts, cut_tokens, notes)


def is_long(result: ChatResult, policy: LoopPolicy) -> bool:
    """Whether an answer ran to ``max_tokens`` without repeating itself: a streamed one was
    watched as it came (a loop would have been cut: ``finish_reason`` "loop"); a whole one is
    watched now."""
    if result.finish_reason != "length" or result.loop is not None:
        return False
    watch = LoopWatch(policy)
    watch.feed(result.text)
    return watch.finish() is None
