"""What the simulated DeepSeek-OCR says: grounding markup, plain text, descriptions, JSON.

Everything here is a pure function of its inputs (image hash, known page layout, schema), so
the same request always gets the same answer, as from a real model at temperature 0.
"""

from __future__ import annotations

import collections
import hashlib
import math
import random
import re
from collections.abc import Callable
from typing import Any

from llm_ocr.vlm.grounding import write_grounding, write_plain

from .corpus import LayoutBlock

_WORDS = (
    "lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor incididunt ut "
    "labore et dolore magna aliqua enim ad minim veniam quis nostrud exercitation ullamco laboris "
    "nisi aliquip ex ea commodo consequat duis aute irure in reprehenderit voluptate velit esse "
    "cillum fugiat nulla pariatur excepteur sint occaecat cupidatat non proident sunt culpa qui "
    "officia deserunt mollit anim id est laborum"
).split()

_WORD_RE = re.compile(r"\w+")

_PALETTE: dict[str, tuple[int, int, int]] = {
    "white": (245, 245, 245),
    "black": (15, 15, 15),
    "grey": (128, 128, 128),
    "red": (200, 30, 30),
    "green": (40, 160, 60),
    "blue": (30, 60, 200),
    "yellow": (230, 210, 40),
    "orange": (240, 140, 20),
    "purple": (130, 50, 160),
    "brown": (120, 80, 40),
    "pink": (240, 150, 190),
    "cyan": (40, 200, 210),
}


def render_grounding(blocks: list[LayoutBlock], markdown: bool = True) -> str:
    """Blocks as DeepSeek-OCR's grounding markup (its writer, :func:`llm_ocr.vlm.grounding.write_grounding`);
    ``markdown``: ``#`` before titles, as the "Convert the document to markdown." prompt does."""
    return write_grounding([b.element() for b in blocks], markdown=markdown)


def render_plain(blocks: list[LayoutBlock]) -> str:
    """Blocks as plain text (the "Free OCR." answer): text blocks only, blank-line separated."""
    return write_plain([b.element() for b in blocks])


def _rng(digest: bytes, salt: str = "") -> random.Random:
    return random.Random(hashlib.sha256(digest + salt.encode()).digest())


def _sentence(rng: random.Random, n: int) -> str:
    words = [rng.choice(_WORDS) for _ in range(n)]
    return " ".join(words).capitalize() + "."


def synthetic_blocks(digest: bytes) -> list[LayoutBlock]:
    """A plausible page layout determined by an image's sha256: a title, 2-5 paragraphs, and
    sometimes a figure with caption, a table or an equation, stacked top to bottom."""
    rng = _rng(digest, "layout")
    blocks: list[LayoutBlock] = []
    y = rng.uniform(0.05, 0.09)
    x0, x1 = rng.uniform(0.08, 0.12), rng.uniform(0.86, 0.92)

    def add(label: str, height: float, text: str, left: float = x0, right: float = x1) -> None:
        nonlocal y
        blocks.append(LayoutBlock(label, (left, y, right, min(0.98, y + height)), text))
        y = min(0.97, y + height + rng.uniform(0.01, 0.025))

    title = " ".join(w.capitalize() for w in (rng.choice(_WORDS) for _ in range(rng.randint(3, 7))))
    add("title", 0.03, title, x0, x0 + min(0.8, 0.04 * len(title.split()) + 0.1))
    extras = []
    if rng.random() < 0.5:
        extras.append("figure")
    if rng.random() < 0.35:
        extras.append("table")
    if rng.random() < 0.3:
        extras.append("equation")
    n_para = rng.randint(2, 5)
    slots = sorted(rng.sample(range(n_para + len(extras)), len(extras)))
    order: list[str] = ["text"] * n_para
    for pos, kind in zip(slots, extras):
        order.insert(pos, kind)
    for kind in order:
        if kind == "text":
            n = rng.randint(25, 70)
            text = " ".join(_sentence(rng, rng.randint(6, 14)) for _ in range(max(1, n // 10)))
            add("text", 0.012 * math.ceil(n / 12) + 0.01, text)
        elif kind == "figure":
            add("image", rng.uniform(0.15, 0.25), "", x0 + 0.1, x1 - 0.1)
            cap = f"<center>Figure {len(blocks)}: {_sentence(rng, rng.randint(5, 10))}</center>"
            add("image_caption", 0.02, cap, x0 + 0.15, x1 - 0.15)
        elif kind == "table":
            rows, cols = rng.randint(2, 4), rng.randint(2, 4)
            head = "".join(f"<td>{rng.choice(_WORDS)}</td>" for _ in range(cols))
            body = "".join(
                "<tr>" + "".join(f"<td>{rng.randint(0, 999) / 10}</td>" for _ in range(cols)) + "</tr>"
                for _ in range(rows)
            )
            add("table", 0.03 * (rows + 1), f"<table><tr>{head}</tr>{body}</table>")
        else:
            a, b, c = (rng.choice("abcxyz") for _ in range(3))
            add("equation", 0.03, f"\\[ {a} \\coloneqq {b} + {c}^{{2}} \\]", x0 + 0.25, x1 - 0.25)
    return blocks


def lognormal_tokens(digest: bytes, seed: int, mean: float, sigma: float) -> int:
    """A long-tailed answer length in tokens, fixed by the image and the seed.

    Lognormal with the given *mean* (not median): ``mu = ln(mean) - sigma**2 / 2``. Real pages
    range from a caption to a dense two-column page, and a few are many times the typical one.
    """
    rng = _rng(digest, f"length|{seed}")
    mu = math.log(max(mean, 1.0)) - sigma * sigma / 2
    return max(1, round(rng.lognormvariate(mu, sigma)))


def sized_blocks(digest: bytes, target_chars: int, render: Callable[[list[LayoutBlock]], str]) -> list[LayoutBlock]:
    """The image's synthetic layout resized so that ``render(blocks)`` is ``target_chars`` long
    (or a few characters short): trailing blocks are dropped, paragraphs added, and the last
    added paragraph trimmed.

    Only ``text`` blocks are added or cut (never a table's HTML), each with a valid box, so the
    answer stays well-formed grounding markup whatever its length.
    """
    blocks = synthetic_blocks(digest)
    while blocks and len(render(blocks)) > target_chars:
        blocks.pop()
    rng = _rng(digest, "more")
    added = 0
    while len(render(blocks)) < target_chars:
        # Bands down the page: valid, non-empty boxes however many paragraphs are added.
        top = 0.05 + (added % 45) * 0.02
        text = " ".join(_sentence(rng, rng.randint(6, 14)) for _ in range(rng.randint(3, 8)))
        blocks.append(LayoutBlock("text", (0.1, top, 0.9, top + 0.015), text))
        added += 1
    excess = len(render(blocks)) - target_chars
    if excess > 0:  # only when a paragraph was added: cut it to fit
        last = blocks[-1]
        if len(last.text) > excess:
            blocks[-1] = LayoutBlock(last.label, last.box, last.text[: len(last.text) - excess].rstrip(" ") or "x")
        else:
            blocks.pop()  # its markup alone would overshoot: a little short is fine
    return blocks


#: What a rambling weak model writes (:mod:`.damage`): English dictionary words, so that no
#: dictionary check calls it garbled, none of them in the benchmark corpus's vocabulary
#: (:mod:`llm_ocr.bench.corpus`), so that none is the page's.
_RAMBLE_WORDS = (
    "house water river garden morning evening winter summer village market letter window street mountain "
    "children family friend doctor teacher student kitchen bridge station island forest meadow orchard castle "
    "church ribbon pocket basket candle blanket saddle kettle carpet ladder lantern pepper butter cheese bread "
    "apple cherry lemon onion potato carrot rabbit horse sheep goose eagle falcon tiger zebra camel donkey "
    "violin guitar piano trumpet painter sailor farmer baker miller hunter soldier captain merchant cousin uncle "
    "quiet gentle bright yellow purple golden silver wooden narrow broad rapid silent warm cold sweet bitter "
    "ancient modern quickly slowly softly gladly often rarely always seldom walked carried painted gathered "
    "whispered laughed travelled borrowed opened closed"
).split()


def ramble_blocks(digest: bytes, target_chars: int) -> list[LayoutBlock]:
    """Paragraphs of English sentences that are not the image's text, at least ``target_chars``
    characters of them, never repeating a sentence: what a weak model writes when it invents a
    page and runs on until ``max_tokens``."""
    rng = _rng(digest, "ramble")
    blocks: list[LayoutBlock] = []
    chars = 0
    while chars < target_chars:
        top = 0.05 + (len(blocks) % 45) * 0.02  # valid boxes however many paragraphs
        text = " ".join(
            " ".join(rng.choice(_RAMBLE_WORDS) for _ in range(rng.randint(6, 16))).capitalize() + "."
            for _ in range(rng.randint(3, 8))
        )
        blocks.append(LayoutBlock("text", (0.1, top, 0.9, top + 0.015), text))
        chars += len(text) + 2
    return blocks


def dominant_colour(img: Any) -> str:
    """The palette name nearest to the most common colour of a small thumbnail of ``img``."""
    import numpy as np
    from PIL import Image

    rgb = img if img.mode == "RGB" else img.convert("RGB")  # (convert would copy an RGB image)
    small = np.asarray(rgb.resize((16, 16), Image.Resampling.BOX), dtype=np.int64).reshape(-1, 1, 3)
    names = list(_PALETTE)
    # Each pixel's nearest palette colour (the first named on a tie), counted: one array
    # operation instead of 256 x 12 Python loops (a tenth of the server's CPU on a strip's pieces).
    nearest = ((small - np.array([_PALETTE[k] for k in names])) ** 2).sum(axis=2).argmin(axis=1)
    counts = {names[i]: int(n) for i, n in enumerate(np.bincount(nearest, minlength=len(names))) if n}
    return max(sorted(counts), key=lambda k: counts[k])


def describe(digest: bytes, width: int, height: int, colour: str) -> str:
    """A deterministic "description" naming the image's size and dominant colour."""
    rng = _rng(digest, "describe")
    shape = "portrait" if height > width else "landscape" if width > height else "square"
    body = " ".join(_sentence(rng, rng.randint(8, 14)) for _ in range(rng.randint(2, 3)))
    return (
        f"The image is a {shape} picture of {width}x{height} pixels whose dominant colour is "
        f"{colour}. {body}"
    )


def loop_text(start: str, digest: bytes, max_chars: int, min_unit_chars: int = 0) -> str:
    """A degenerate answer: a valid start, then one unit repeated up to ``max_chars``.

    The unit is a short phrase, or, when ``min_unit_chars`` is given, a table row at least
    1.2 and at most 2.5 times that long (the loops that escape vLLM's n-gram processor).
    """
    rng = _rng(digest, "loop")
    phrase = f"{rng.choice(_WORDS)} {rng.choice(_WORDS)} {rng.choice(_WORDS)}. "
    if min_unit_chars > 0:
        target = int(min_unit_chars * rng.uniform(1.2, 2.5))
        cells: list[str] = []
        while sum(len(c) for c in cells) < target:
            cells.append(f"<td>{rng.choice(_WORDS)} {rng.choice(_WORDS)} {rng.randint(0, 9999) / 100}</td>")
        phrase = "<tr>" + "".join(cells) + "</tr>"
    text = start
    if len(text) < max_chars:
        text += phrase * ((max_chars - len(text)) // len(phrase) + 1)
    return text[:max_chars]


def bad_boxes_text(digest: bytes) -> str:
    """Grounding markup a robust parser must survive: boxes out of range, inverted,
    non-numeric, unbalanced, one block with a thousand boxes, then (last, so a small max_tokens
    cuts them off) degenerate boxes without area and absurdly many figures: 3 full-page ones,
    5 image blocks of 64 small ones, 3 more full-page ones (about 7,800 tokens in all)."""
    many = ", ".join(f"[{i % 999}, {i % 7}, {i % 999 + 1}, {i % 7 + 1}]" for i in range(1000))
    small = ", ".join(f"[{i * 15}, 900, {i * 15 + 10}, 910]" for i in range(64))
    full_page = "<|ref|>image<|/ref|><|det|>[[0, 0, 999, 999]]<|/det|>\n\n"
    return (
        "<|ref|>title<|/ref|><|det|>[[120, -40, 5000, 99999]]<|/det|>\n# Out of range\n\n"
        "<|ref|>text<|/ref|><|det|>[[800, 900, 100, 50]]<|/det|>\nInverted box.\n\n"
        "<|ref|>image<|/ref|><|det|>[[a, b, c, d]]<|/det|>\n\n\n"
        "<|ref|>text<|/ref|><|det|>[[1.5e3, nan, inf, 3]]<|/det|>\nNot integers.\n\n"
        "<|ref|>text<|/ref|><|det|>[[10, 20, 30]]<|/det|>\nThree numbers.\n\n"
        "<|ref|>table<|/ref|><|det|>[[10, 20, 30, 40]\n<table><tr><td>unclosed det</td></tr></table>\n\n"
        f"<|ref|>text<|/ref|><|det|>[{many}]<|/det|>\nA thousand boxes.\n\n"
        "<|ref|>image<|/ref|><|det|>[[500, 500, 500, 700], [10, 10, 300, 10]]<|/det|>\n\n"
        + full_page * 3
        + f"<|ref|>image<|/ref|><|det|>[{small}]<|/det|>\n\n" * 5
        + full_page * 3
    )


def word_recall(truth: str, text: str) -> float:
    """Share of ``truth``'s words (case-folded, counted with repeats) that ``text`` holds."""
    want = collections.Counter(w.lower() for w in _WORD_RE.findall(truth))
    have = collections.Counter(w.lower() for w in _WORD_RE.findall(text))
    total = sum(want.values())
    return round(sum(min(n, have[w]) for w, n in want.items()) / total, 4) if total else 1.0
