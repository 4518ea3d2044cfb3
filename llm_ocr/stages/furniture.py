"""Page furniture: the running headers, footers and page numbers of a document's pages.

Two ways a block is found to be furniture:

* **by its label**, on the families that label furniture in their answer (dots.ocr's
  ``Page-header``/``Page-footer``, Chandra's ``Page-Header``/``Page-Footer``, LightOnOCR-3's and
  PaddleOCR-VL's ``header``/``footer``/``page_number``/``number``, Infinity-Parser2's
  ``header``/``footer``, granite-docling's ``page_header``/``page_footer``, Nanonets-OCR2's
  ``<page_number>``): :func:`labelled`,
  marked on the page rows as Extract writes them;
* **by repetition**, for the others, over a whole document (Assemble and the Docling export see
  every page): :func:`find`. A block is furniture when it sits in the top or bottom
  :data:`BAND` of its page (by its box; a page without boxes offers its first and last
  paragraphs), holds at most :data:`MAX_WORDS` words, and the same text, with its digits made
  alike (``Page 3 of 9`` and ``Page 4 of 9`` are one text), stands at the same edge of at least
  :data:`MIN_PAGES` pages and :data:`MIN_SHARE` of the document's pages. A text made only of
  digits and page words after that is a ``page_number`` (two pages suffice for one: ``Page 1 of
  2`` and ``Page 2 of 2`` at a page's edge are nothing else), one at the top a ``page_header``,
  one at the bottom a ``page_footer``.

Why so: a running header or footer is short, at an edge, and on most pages; a title or a first
paragraph is at the top of one page only; a table's repeated header row is not at the page's
edge. A share rather than "every page" keeps books' alternating headers (the book's title on
even pages, the chapter's on odd ones: each on half of them) and a first page without a header.
A document of one page gives no evidence, and gets only labelled furniture.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass
from typing import Literal

from llm_ocr.records import PageResult

FurnitureKind = Literal["page_header", "page_footer", "page_number"]
#: What ``--page-furniture`` does with furniture in the assembled Markdown.
FurnitureMode = Literal["keep", "drop", "tag"]

#: Family label (lower case, ``-`` as ``_``) -> the furniture it names.
LABELS: dict[str, FurnitureKind] = {
    "page_header": "page_header", "header": "page_header", "header_image": "page_header",
    "page_footer": "page_footer", "footer": "page_footer", "footer_image": "page_footer",
    "page_number": "page_number", "number": "page_number",
}  # fmt: skip

#: Share of the page's height at its top and at its bottom where running heads and feet sit.
BAND = 0.12
#: Longest text taken for furniture, in words.
MAX_WORDS = 15
#: Pages the same text must stand on, at least, and at least this share of the document's pages.
MIN_PAGES = 3
MIN_SHARE = 0.4

_DIGITS = re.compile(r"\d+")
_ROMAN = re.compile(r"^[ivxlcdm]+$")
_NUMBER_WORDS = {"page", "p", "pg", "of", "#", "-", "–", "—", "/", "|"}


def labelled(label: str) -> FurnitureKind | None:
    """The furniture a family's block label names (None: not furniture)."""
    return LABELS.get(label.strip().lower().replace("-", "_"))


def mark_labelled(row: PageResult) -> PageResult:
    """``row`` with each block its family labelled furniture marked (changed in place, returned)."""
    for block in row.blocks:
        block.furniture = labelled(block.label) or block.furniture
    return row


@dataclass(frozen=True)
class Piece:
    """A piece of furniture on a page: the block it is (None: a paragraph of a page without
    blocks), its text, what it is, and how it was found (``label`` or ``repetition``)."""

    page: int
    block: int | None
    text: str
    kind: FurnitureKind
    found: Literal["label", "repetition"]


def _plain(text: str) -> str:
    return " ".join(re.sub(r"<[^>]+>|[#*_`>]", " ", text).split())


def _key(text: str) -> str:
    """The text with its digits made alike, lower case: the same running line on every page."""
    return _DIGITS.sub("#", _plain(text).lower())


def _kind(key: str, edge: str) -> FurnitureKind:
    words = [w for w in re.split(r"[\s.,:;()\[\]]+", key) if w]
    if words and all(w in _NUMBER_WORDS or w == "#" or _ROMAN.match(w) for w in words) and "#" in words:
        return "page_number"
    return "page_header" if edge == "top" else "page_footer"


def _candidates(page: PageResult) -> list[tuple[str, int | None, str]]:
    """``(edge, block index or None, text)`` of the page's short pieces at its top or bottom."""
    found: list[tuple[str, int | None, str]] = []
    boxed = [(i, b) for i, b in enumerate(page.blocks) if b.boxes and len(b.boxes[0]) == 4 and b.text.strip()]
    if boxed and page.height:
        for index, block in boxed:
            top = min(box[1] for box in block.boxes)
            bottom = max(box[3] for box in block.boxes)
            if bottom <= BAND * page.height:
                found.append(("top", index, block.text))
            elif top >= (1 - BAND) * page.height:
                found.append(("bottom", index, block.text))
    else:
        paragraphs = [p for p in re.split(r"\n\s*\n", page.markdown or "") if p.strip()]
        if len(paragraphs) >= 2:
            found += [("top", None, paragraphs[0]), ("bottom", None, paragraphs[-1])]
    return [(edge, index, text) for edge, index, text in found if len(_plain(text).split()) <= MAX_WORDS]


def find(pages: list[PageResult]) -> list[Piece]:
    """Every piece of furniture of a document's pages (its rows, read ones only count): the
    blocks their family labelled, and the running lines found by repetition (module docstring)."""
    read = sorted((p for p in pages if p.page >= 1 and p.status != "error"), key=lambda p: p.page)
    pieces: list[Piece] = []
    taken: set[tuple[int, int | None]] = set()
    for page in read:
        for number, block in enumerate(page.blocks):
            kind = labelled(block.furniture or block.label)  # a marked row's kind is a label too
            if kind is not None:
                pieces.append(Piece(page.page, number, block.text, kind, "label"))
                taken.add((page.page, number))
    if len(read) < 2:
        return pieces
    seen: dict[tuple[str, str], list[tuple[int, int | None, str]]] = defaultdict(list)
    for page in read:
        for edge, index, text in _candidates(page):
            if (page.page, index) not in taken and _key(text):
                seen[(edge, _key(text))].append((page.page, index, text))
    share = MIN_SHARE * len(read)
    for (edge, key), where in seen.items():
        # A page number (only digits and page words) needs two pages; any other line three.
        needed = max(2 if _kind(key, edge) == "page_number" else MIN_PAGES, share)
        if len({number for number, _, _ in where}) >= needed:
            pieces += [Piece(number, index, text, _kind(key, edge), "repetition") for number, index, text in where]
    return sorted(pieces, key=lambda p: (p.page, -1 if p.block is None else p.block))


def shown(markdown: str, pieces: list[Piece], mode: FurnitureMode) -> str:
    """A page's Markdown with its furniture ``pieces`` as ``mode`` says: kept as it is, dropped,
    or tagged (an HTML comment ``<!-- furniture: KIND -->`` on the line before it). A piece
    whose text the Markdown does not hold as whole lines is left alone."""
    if mode == "keep":
        return markdown
    start = 0  # pieces come in reading order: each is looked for after the one before
    for piece in pieces:
        text = piece.text.strip()
        # Whole lines only: a page number "7" must not be taken out of "2017" in the body.
        match = re.compile(r"(?m)^[ \t]*" + re.escape(text) + r"[ \t]*$").search(markdown, start) if text else None
        if match is None:
            continue
        at = match.start() + match.group(0).index(text)
        if mode == "drop":
            markdown = markdown[:at] + markdown[at + len(text):]
            start = at
        else:
            tag = f"<!-- furniture: {piece.kind} -->\n"
            markdown = markdown[:at] + tag + markdown[at:]
            start = at + len(tag) + len(text)
    return re.sub(r"\n{3,}", "\n\n", markdown).strip("\n")
