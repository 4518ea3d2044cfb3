"""Quality signals that need no ground truth, on every page of any run.

For each page row:

- **error** — the row is an ``error`` (the model failed on it; its ``error`` says why);
- **empty** — the Markdown holds no letter or digit (worse when the PDF's text layer has words);
- **repetition** — the Markdown ends in a loop: a 1-5 character n-gram repeated more than 30
  times (olmOCR-bench's baseline rule) or a unit of 1-3 lines repeated 10 times or more;
- **stray** — characters a page should not produce: U+FFFD, private-use or control characters,
  and CJK/kana/emoji (olmOCR-bench's baseline set) unless the page's text layer has them too;
- **truncated** — the answer was cut off at ``max_tokens`` (``status`` ``truncated`` or
  ``finish_reason`` ``length``); **looped** — an attempt was cut for a loop (``cut_reason``),
  a milder sign, as the kept answer may be whole;
- **missing text** — where the page is of a PDF whose text layer the bad-pages checks judge
  usable (:func:`llm_ocr.sources.text_layer.read_text_layer`), up to ``samples`` lines of that
  layer, away from its first and last lines (running heads and page numbers, which models
  rightly drop), are looked for in the Markdown with olmOCR-bench's fuzzy ``present`` rule
  (case-insensitive, up to one edit in ten characters, after table and HTML markup are
  removed); a page where fewer than 80 % are found is flagged.

Each flag has a weight; a page's *badness* is the sum, and the worst pages are listed first.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from rapidfuzz import fuzz

from llm_ocr.quality.checks import STRAY_CHARACTERS
from llm_ocr.quality.text import normalize_text, tail_repeats

#: Weight of each flag in a page's badness (an error or empty page is worst).
WEIGHTS = {"error": 100, "empty": 80, "repetition": 60, "truncated": 50, "missing text": 40, "stray": 20, "looped": 5}
#: olmOCR-bench's baseline: more repeats than this of a 1-5 character n-gram at the end.
MAX_NGRAM_REPEATS = 30
#: Repeats of a block of 1-3 lines at the end that make a loop.
MIN_LINE_REPEATS = 10
#: Share of sampled text-layer lines that must be found.
MIN_RECALL = 0.8
#: Text-layer lines shorter than this are not sampled (too easy to find by chance).
MIN_SNIPPET_CHARS = 25

_MARKUP = re.compile(r"<[^>]{0,200}>|\|")


@dataclass
class PageSignals:
    """The signals of one page."""

    doc_id: str
    page: int
    status: str
    flags: dict[str, str] = field(default_factory=dict)  # flag -> detail
    snippets: int = 0  # text-layer lines looked for
    found: int = 0
    layer_note: str | None = None

    @property
    def recall(self) -> float | None:
        """Share of the sampled text-layer lines found in the Markdown (None: none sampled)."""
        return self.found / self.snippets if self.snippets else None

    @property
    def badness(self) -> int:
        return sum(WEIGHTS[f] for f in self.flags)

    def to_json(self) -> dict[str, Any]:
        return {
            "doc_id": self.doc_id, "page": self.page, "status": self.status, "flags": self.flags,
            "badness": self.badness, "snippets": self.snippets, "found": self.found, "recall": self.recall,
            "layer_note": self.layer_note,
        }  # fmt: skip


def repeated_lines(markdown: str) -> tuple[int, int]:
    """(repeats, lines per unit) of the longest run of a 1-3 line block repeated at the end."""
    lines = [line.strip() for line in markdown.strip().splitlines() if line.strip()]
    best = (1, 1)
    for size in (1, 2, 3):
        if len(lines) < size * 2:
            continue
        unit = lines[-size:]
        count, end = 1, len(lines) - size
        while end - size >= 0 and lines[end - size : end] == unit:
            count += 1
            end -= size
        if count > best[0]:
            best = (count, size)
    return best


def stray_characters(markdown: str, allowed: str = "") -> list[str]:
    """Characters of ``markdown`` a page should not produce (see the module doc).

    CJK characters, kana and emoji count only when they are not in ``allowed`` (the page's
    text layer) and are a small minority (under a tenth) of the letters: a page in Chinese is
    not full of stray characters.
    """
    found = []
    for char in markdown:
        category = unicodedata.category(char)
        if char == "\ufffd" or category == "Co" or (category == "Cc" and char not in "\n\r\t"):
            found.append(char)
    foreign = [c for c in STRAY_CHARACTERS.findall(markdown) if c not in allowed]
    letters = sum(1 for c in markdown if c.isalpha())
    if foreign and len(foreign) < 0.1 * letters:
        found += foreign
    return found


def sample_lines(layer: str, samples: int) -> list[str]:
    """Up to ``samples`` lines of a text layer, evenly spread, skipping its first and last two
    lines when it has more than eight (running heads, folios)."""
    lines = [" ".join(line.split()) for line in layer.splitlines()]
    lines = [line for line in lines if line]
    if len(lines) > 8:
        lines = lines[2:-2]
    lines = [line for line in lines if len(line) >= MIN_SNIPPET_CHARS and len(line.split()) >= 4]
    if len(lines) <= samples:
        return lines
    step = len(lines) / samples
    return [lines[int(i * step)] for i in range(samples)]


def found_in(snippet: str, content: str) -> bool:
    """olmOCR-bench's ``present`` rule, case-insensitive, one edit allowed per ten characters."""
    query = normalize_text(snippet).lower()
    threshold = 1.0 - (max(1, len(query) // 10) / len(query))
    # partial_ratio slides the shorter string along the longer: on a page shorter than the
    # line, it would find the page in the line. Compare whole strings then.
    similarity = fuzz.partial_ratio(query, content) if len(content) >= len(query) else fuzz.ratio(query, content)
    return similarity / 100.0 >= threshold


def page_signals(
    row: Mapping[str, Any],
    layer: str | None = None,
    layer_note: str | None = None,
    samples: int = 8,
    min_recall: float = MIN_RECALL,
) -> PageSignals:
    """The signals of one page row; ``layer`` is its usable PDF text layer, if any; ``min_recall``
    the share of its sampled lines the Markdown must contain."""
    markdown = str(row.get("markdown") or "")
    status = str(row.get("status") or "unknown")
    signals = PageSignals(str(row.get("doc_id")), int(row.get("page") or 0), status, layer_note=layer_note)
    flags = signals.flags
    if status == "error":
        flags["error"] = str(row.get("error") or "error row")
    letters = sum(1 for c in markdown if c.isalnum())
    if status != "error" and letters == 0:
        flags["empty"] = "no letter or digit" + (" though the PDF's text layer has text" if layer else "")
    ngrams = tail_repeats(markdown, 5)
    worst = max(range(5), key=lambda i: ngrams[i])
    lines, size = repeated_lines(markdown)
    if ngrams[worst] > MAX_NGRAM_REPEATS:
        flags["repetition"] = f"ends with {ngrams[worst]} repeats of a {worst + 1}-character n-gram"
    elif lines >= MIN_LINE_REPEATS:
        flags["repetition"] = f"ends with {lines} repeats of the same {size} line(s)"
    stray = stray_characters(markdown, allowed=layer or "")
    if stray:
        shown = "".join(dict.fromkeys(stray))[:10]
        flags["stray"] = f"{len(stray)} stray character(s): {shown!r}"
    if status == "truncated" or row.get("finish_reason") == "length":
        flags["truncated"] = "the answer was cut off at max_tokens" + (f" ({row['cut_reason']})" if row.get("cut_reason") else "")  # noqa: E501 - not wrapped yet
    elif row.get("cut_reason"):
        flags["looped"] = str(row["cut_reason"])
    if layer and status != "error":
        content = normalize_text(_MARKUP.sub(" ", markdown)).lower()
        snippets = sample_lines(layer, samples)
        missing = [s for s in snippets if not found_in(s, content)]
        signals.snippets, signals.found = len(snippets), len(snippets) - len(missing)
        recall = signals.recall
        if recall is not None and recall < min_recall and "empty" not in flags:  # "empty" says it already
            flags["missing text"] = (
                f"{len(missing)} of {len(snippets)} text-layer lines not found, e.g. {missing[0][:60]!r}"
            )
    return signals


@dataclass
class DocumentSignals:
    """A document's pages' signals, summed."""

    doc_id: str
    pages: int = 0
    status: Counter[str] = field(default_factory=Counter)
    flags: Counter[str] = field(default_factory=Counter)
    snippets: int = 0
    found: int = 0
    worst: PageSignals | None = None

    def add(self, page: PageSignals) -> None:
        self.pages += 1
        self.status[page.status] += 1
        self.flags.update(page.flags.keys())
        self.snippets += page.snippets
        self.found += page.found
        if page.badness and (self.worst is None or page.badness > self.worst.badness):
            self.worst = page

    @property
    def recall(self) -> float | None:
        return self.found / self.snippets if self.snippets else None

    def to_json(self) -> dict[str, Any]:
        return {
            "doc_id": self.doc_id, "pages": self.pages, "status": dict(self.status), "flags": dict(self.flags),
            "snippets": self.snippets, "found": self.found, "recall": self.recall,
            "worst_page": self.worst.page if self.worst else None,
        }  # fmt: skip


def summarise_signals(pages: Iterable[PageSignals], worst: int = 10) -> dict[str, Any]:
    """Per-document sums, run totals and the ``worst`` pages, JSON-ready."""
    documents: dict[str, DocumentSignals] = {}
    flagged: list[PageSignals] = []
    totals: Counter[str] = Counter()
    count = snippets = found = 0
    for page in pages:
        documents.setdefault(page.doc_id, DocumentSignals(page.doc_id)).add(page)
        totals.update(page.flags.keys())
        count += 1
        snippets += page.snippets
        found += page.found
        if page.flags:
            flagged.append(page)
    flagged.sort(key=lambda p: (-p.badness, p.doc_id, p.page))
    by_flag: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for page in flagged:
        for flag in page.flags:
            by_flag[flag].append({"doc_id": page.doc_id, "page": page.page})
    return {
        "pages": count,
        "flagged_pages": len(flagged),
        "flags": dict(totals.most_common()),
        "text_layer": {"snippets": snippets, "found": found, "recall": found / snippets if snippets else None},
        "documents": [d.to_json() for d in documents.values()],
        "worst_pages": [p.to_json() for p in flagged[:worst]],
        "flagged": [p.to_json() for p in flagged],
    }
