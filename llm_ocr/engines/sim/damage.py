"""A weaker model's readings: some pages garbled, some with text dropped, decided per page image.

A small OCR model does not fail at random requests: the same page, sent again, is misread the
same way. So which pages are damaged is a pure function of the image's hash and ``--seed``:

- **garbled** (``--garble-rate``): in most words of the page, letters are swapped for ones that
  look alike to a model that reads at too low a resolution (``rn`` for ``m``, ``c`` for ``e``...):
  the reading looks like text but few of its words are words;
- **dropped** (``--drop-rate``): the reading ends after the first third of the page's blocks,
  with ``finish_reason`` "stop", as a model that skips the rest of a crowded page does;
- **rambling** (``--ramble-rate``): the reading is plausible text that is not the image's
  (English words, none of the benchmark corpus's, never repeating themselves) and runs on until
  ``max_tokens``, finish_reason "length", as a weak model that invents a page does. A crop of
  a page is an image of its own: it rambles, or not, by its own hash.

``--garble-page FILE:PAGE`` and ``--drop-page FILE:PAGE`` damage named ``--corpus`` pages, for
tests that need to know which. Loops are ``--loop-rate``'s (the server's own). Every damage is
counted in ``/sim/stats``.
"""

from __future__ import annotations

import hashlib
import random
import re
from dataclasses import dataclass, replace
from pathlib import Path

from .corpus import LayoutBlock

#: Look-alike letters: what a low-resolution reading confuses each letter with.
CONFUSIONS = {
    "m": "rn", "e": "c", "a": "o", "o": "a", "h": "b", "n": "u", "u": "n", "l": "1", "i": "j", "s": "5", "t": "f",
    "c": "e", "r": "v", "d": "cl", "g": "q", "b": "h", "w": "vv", "y": "v", "k": "lc", "f": "t", "p": "q",
}
#: Share of a garbled page's words of three or more letters that are misread.
GARBLED_WORDS = 0.8
#: Share of a page's blocks a dropped reading keeps.
KEPT_BLOCKS = 1 / 3

_WORD = re.compile(r"[A-Za-z]{3,}")


@dataclass(frozen=True)
class Damage:
    """Which pages a weaker model misreads: shares of all page images, and named corpus pages."""

    garble_rate: float = 0.0
    drop_rate: float = 0.0
    #: ``(file name, 1-based page)`` of ``--corpus`` pages always garbled / dropped (for tests).
    garble_pages: tuple[tuple[str, int], ...] = ()
    drop_pages: tuple[tuple[str, int], ...] = ()
    ramble_rate: float = 0.0

    def of(self, digest: bytes, seed: int, page: tuple[str, int] | None) -> str | None:
        """``"garble"``, ``"drop"``, ``"ramble"`` or None for the image whose sha256 is ``digest``, the known
        corpus ``page`` ``(source, number)`` when it is one."""
        if page is not None:
            source, number = page
            for kind, named in (("garble", self.garble_pages), ("drop", self.drop_pages)):
                if any(n == number and (source == name or Path(source).name == name) for name, n in named):
                    return kind
        return damage_of(digest, seed, self.garble_rate, self.drop_rate, self.ramble_rate)


def damage_of(digest: bytes, seed: int, garble_rate: float, drop_rate: float, ramble_rate: float = 0.0) -> str | None:
    """``"garble"``, ``"drop"``, ``"ramble"`` or None for the page image whose sha256 is ``digest``."""
    # Drawn apart from the others, and first: a rate of 1 rambles on every image, and a rate of
    # 0 leaves the garbled and dropped pages the same.
    if ramble_rate > 0 and _draw(digest, f"{seed}|ramble|") < ramble_rate:
        return "ramble"
    if garble_rate <= 0 and drop_rate <= 0:
        return None
    u = _draw(digest, f"{seed}|damage|")
    if u < garble_rate:
        return "garble"
    if u < garble_rate + drop_rate:
        return "drop"
    return None


def _draw(digest: bytes, salt: str) -> float:
    """A number in [0, 1) fixed by the image and ``salt``."""
    h = hashlib.sha256(salt.encode() + digest).digest()
    return int.from_bytes(h[:8], "big") / 2**64


def garble_text(text: str, rng: random.Random) -> str:
    """``text`` with most of its words misread (letters swapped for look-alikes)."""

    def misread(match: re.Match[str]) -> str:
        word = match.group(0)
        if rng.random() >= GARBLED_WORDS:
            return word
        letters = list(word)
        at = [i for i, c in enumerate(letters) if c.lower() in CONFUSIONS]
        for i in rng.sample(at, k=min(len(at), max(1, len(at) // 2))):
            swap = CONFUSIONS[letters[i].lower()]
            letters[i] = swap.upper() if letters[i].isupper() else swap
        return "".join(letters)

    return _WORD.sub(misread, text)


def damaged(blocks: list[LayoutBlock], digest: bytes, kind: str) -> list[LayoutBlock]:
    """``blocks`` as the damage ``kind`` reads them."""
    if kind == "drop":
        keep = max(1, round(len(blocks) * KEPT_BLOCKS))
        if len(blocks) > 1:
            return blocks[:keep]
        return [replace(b, text=b.text[: int(len(b.text) * KEPT_BLOCKS)]) for b in blocks]
    rng = random.Random(hashlib.sha256(b"garble|" + digest).digest())
    return [replace(b, text=garble_text(b.text, rng)) if b.text else b for b in blocks]
