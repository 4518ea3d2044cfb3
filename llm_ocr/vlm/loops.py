"""Spot a repetition loop in a model's answer while it streams, cheaply.

DeepSeek-OCR sometimes repeats one unit (a line, a table row, a whole block) until ``max_tokens``.
vLLM's n-gram logits processor (``ngram_size`` 30, ``window_size`` 90: docs/facts.md#deepseek-ocr)
only blocks repeats that fit in its 90-token window, so a 150-token table row repeated forever
passes it and costs a full ``max_tokens`` answer (plus its retry). :class:`LoopWatch` is fed the
text as it arrives and says when the tail has become *exactly* periodic: the same unit, one copy
after another, over a stretch long enough that a real page would not contain it.

What counts as a loop (see :class:`LoopPolicy`):

- the tail of the answer repeats a unit of 1 to ``max_unit_chars`` characters exactly, at
  least ``min_repeats`` times, over at least ``min_span_chars`` characters (``markup_span_chars``
  when the unit has no letter or digit: a blank form's empty table rows are legitimately alike);
- box coordinates inside ``<|det|>...<|/det|>`` are ignored, so a block repeated with drifting
  boxes is still a repeat (a box list longer than :data:`MAX_DET_CHARS` is watched, so boxes
  repeated forever are a loop too); everything else, numbers included, must match. Rows that
  differ only in their numbers (price lists, timetables) are therefore never a loop.

Cost: the text is appended to a list; every ``check_every`` characters the last few thousand
characters are searched (``str.rfind`` and slice comparisons, all in C) for an earlier copy of
their last ``probe_chars`` characters. That is a few microseconds per check.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass

DET_OPEN, DET_CLOSE = "<|det|>", "<|/det|>"
#: A box list longer than this (~60 boxes) is not skipped any more: it may be a loop of boxes.
MAX_DET_CHARS = 1500


@dataclass(frozen=True)
class LoopPolicy:
    """When the tail of an answer counts as a repetition loop."""

    #: Periodic characters needed before a unit with letters or digits counts as looping.
    min_span_chars: int = 1200
    #: The same for units of markup, punctuation and spaces only (empty table cells, rules).
    markup_span_chars: int = 4000
    #: Copies of the unit needed in that stretch (a long unit needs this many, whatever the span).
    min_repeats: int = 3
    #: The longest unit looked for: ~600 tokens, far past vLLM's 90-token n-gram window.
    max_unit_chars: int = 2000
    #: New characters between two checks (the detection delay is at most this).
    check_every: int = 128
    #: Characters of the tail searched for earlier copies.
    probe_chars: int = 24
    #: Earlier copies of the probe tried as the start of a unit, nearest first.
    max_candidates: int = 128


@dataclass(frozen=True)
class Loop:
    """A repetition found in an answer; offsets are in the answer's characters."""

    unit_chars: int  # length of the repeated unit
    start: int  # where the first copy of the unit begins
    seen_chars: int  # characters of answer seen when it was found
    keep_chars: int  # the answer up to the end of the unit's first copy: what is worth keeping
    repeats: float  # copies of the unit seen (the last one may be partial)

    def describe(self) -> str:
        """A short human description, for rows and logs."""
        return f"a {self.unit_chars}-character unit repeated {self.repeats:.1f} times from character {self.start}"


class LoopWatch:
    """Feed it an answer's text as it streams; :meth:`feed` returns a :class:`Loop` once the
    tail is a loop (and keeps returning it)."""

    def __init__(self, policy: LoopPolicy | None = None) -> None:
        self.policy = policy or LoopPolicy()
        p = self.policy
        #: Characters of the (det-stripped) text kept for the search: the longest stretch that
        #: must be compared plus one unit.
        self._window = max(p.min_span_chars, p.markup_span_chars, p.min_repeats * p.max_unit_chars) + p.max_unit_chars
        self._pending: list[str] = []  # stripped text since the last check
        self._pending_len = 0
        self._tail = ""  # the last _window characters of stripped text before _pending
        self._stripped_len = 0  # stripped characters absorbed into _tail so far
        self._raw_seen = 0  # characters of answer fed
        self._raw_done = 0  # characters of answer stripped (the carry is not yet)
        self._in_det = False
        self._det_chars = 0  # characters of the current box list so far
        self._carry = ""  # a possible tag prefix cut by a chunk boundary
        # (stripped offset, raw offset) after each removed <|det|> body: maps offsets back.
        self._marks_stripped: list[int] = [0]
        self._marks_raw: list[int] = [0]
        self.loop: Loop | None = None

    # -- feeding ---------------------------------------------------------------------------------

    def feed(self, delta: str) -> Loop | None:
        """Add the next piece of the answer; the loop, once there is one."""
        if self.loop is not None or not delta:
            return self.loop
        self._raw_seen += len(delta)
        text = self._carry + delta
        self._carry = ""
        self._strip(text, self._raw_done)
        self._raw_done = self._raw_seen - len(self._carry)
        if self._pending_len >= self.policy.check_every:
            self._absorb()
            self.loop = self._check()
        return self.loop

    def finish(self) -> Loop | None:
        """Check what is left after the last piece (the answer ended)."""
        if self.loop is None and (self._pending_len or self._carry):
            self._add(self._carry)
            self._carry = ""
            self._absorb()
            self.loop = self._check()
        return self.loop

    def _strip(self, text: str, base: int) -> None:
        """Append ``text`` (whose first character is answer offset ``base``) without the
        contents of det tags; a possible tag prefix at its end is left in ``_carry``."""
        pos, n = 0, len(text)
        while pos < n:
            if self._in_det:
                end = text.find(DET_CLOSE, pos)
                if end == -1 and self._det_chars + (n - pos) > MAX_DET_CHARS:
                    # A box list that never closes is itself a loop of boxes: from here on
                    # its text is watched like any other.
                    self._in_det = False
                    self._marks_stripped.append(self._stripped_len + self._pending_len)
                    self._marks_raw.append(base + pos)
                    continue
                if end == -1:
                    self._det_chars += n - pos
                    self._carry = _tag_prefix_suffix(text, DET_CLOSE, pos)
                    return
                pos = end + len(DET_CLOSE)
                self._in_det = False
                self._det_chars = 0
                self._add(DET_CLOSE)
                # From here on, stripped and answer offsets advance together again.
                self._marks_stripped.append(self._stripped_len + self._pending_len)
                self._marks_raw.append(base + pos)
                continue
            start = text.find(DET_OPEN, pos)
            if start == -1:
                self._carry = _tag_prefix_suffix(text, DET_OPEN, pos)
                self._add(text[pos : n - len(self._carry)])
                return
            self._add(text[pos : start + len(DET_OPEN)])
            pos = start + len(DET_OPEN)
            self._in_det = True

    def _add(self, piece: str) -> None:
        if piece:
            self._pending.append(piece)
            self._pending_len += len(piece)

    def _absorb(self) -> None:
        pending = "".join(self._pending)
        self._pending.clear()
        self._stripped_len += self._pending_len
        self._pending_len = 0
        tail = self._tail + pending
        self._tail = tail[-self._window :] if len(tail) > self._window else tail

    # -- searching -------------------------------------------------------------------------------

    def _check(self) -> Loop | None:
        p = self.policy
        t = self._tail
        n = len(t)
        probe_len = p.probe_chars
        if n < probe_len + 1:
            return None
        probe = t[n - probe_len :]
        limit = n - 1  # earlier copies only: they must start before the probe itself
        for _ in range(p.max_candidates):
            pos = t.rfind(probe, 0, limit)
            if pos == -1:
                return None
            unit = (n - probe_len) - pos
            if unit > p.max_unit_chars:
                return None
            limit = pos + probe_len - 1  # next time, copies starting before this one
            span = max(p.min_span_chars, p.min_repeats * unit)
            if not _periodic(t, n, unit, span):
                continue
            if _markup_only(t, n, unit):
                span = max(span, p.markup_span_chars)
                if not _periodic(t, n, unit, span):
                    continue
            return self._found(t, unit, span)
        return None

    def _found(self, t: str, unit: int, span: int) -> Loop:
        n = len(t)
        # How far back does the repetition go? Whole units first, then character by character.
        length = span + unit  # t[n-length:] is unit-periodic
        while length + unit <= n and t[n - length - unit : n - length] == t[n - length : n - length + unit]:
            length += unit
        while length < n and t[n - length - 1] == t[n - length - 1 + unit]:
            length += 1
        first = n - length  # where the repetition starts in t
        # Any rotation of the unit repeats; a loop most likely began at a line or tag boundary,
        # so the copy kept ends at one (not mid-line, a few characters short).
        aligned = first
        for boundary in ("\n", ">"):
            hit = t.find(boundary, max(0, first - 1), first - 1 + unit)
            if hit != -1:
                aligned = hit + 1
                break
        offset = self._stripped_len - n  # stripped offset of t[0]
        start = self._to_raw(offset + first)
        keep = self._to_raw(offset + aligned + unit)
        return Loop(unit_chars=unit, start=start, seen_chars=self._raw_seen, keep_chars=keep, repeats=length / unit)

    def _to_raw(self, stripped: int) -> int:
        i = bisect.bisect_right(self._marks_stripped, stripped) - 1
        return self._marks_raw[i] + (stripped - self._marks_stripped[i])


_TAG = re.compile(r"<[^<>]{0,40}>")
_CUT_TAGS = re.compile(r"^[^<>]{0,40}>|<[^<>]{0,40}$")  # tags cut off at either end


def _periodic(t: str, n: int, unit: int, span: int) -> bool:
    """Whether the last ``span`` characters of ``t[:n]`` repeat the ``unit`` characters before them."""
    if span + unit > n:
        return False  # not enough text yet for this unit
    start = n - span
    # A cheap look at the far end first: most candidates fail there, without copying the span.
    if not t.startswith(t[start : start + 32], start - unit):
        return False
    return t.startswith(t[start:n], start - unit)


def _markup_only(t: str, n: int, unit: int) -> bool:
    """Whether the unit ending at ``n`` has no letter or digit outside its tags
    (``<tr><td></td></tr>`` has none). Two copies are looked at, so that every rotation of
    the unit is whole once."""
    text = t[max(0, n - 2 * unit) : n]
    return not any(c.isalnum() for c in _CUT_TAGS.sub("", _TAG.sub("", text)))


def _tag_prefix_suffix(text: str, tag: str, start: int) -> str:
    """The end of ``text[start:]`` that is a proper prefix of ``tag`` (to carry to the next
    piece, so a tag split across two stream chunks is still seen)."""
    # The tags have one "<", their first character: such a suffix starts at the last "<".
    lt = text.rfind(tag[0], max(start, len(text) - len(tag) + 1))
    if lt == -1:
        return ""
    tail = text[lt:]
    return tail if tag.startswith(tail) else ""
