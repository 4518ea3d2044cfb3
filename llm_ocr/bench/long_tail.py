"""A corpus whose pages' text has a long tail: most pages hold a few thousand characters, a few
hold three to five times more (``llm-ocr bench --losses``' long-tail workloads).

A run over such pages ends when its last long page ends: sent late, one page can hold the GPU,
mostly idle, long after the others are done. The pages are born-digital (Helvetica, written
without reportlab), so their text layer says how long each is, and the simulator, given them as
its ``--corpus``, answers each from that text: a page's answer is as long as its text, as with a
real model, and nothing about it is drawn at random.

Three kinds of page, drawn per page:

- **short** (80%): one column of 10 pt text filling 10-100% of the page (up to ~5,000 characters);
- **long** (14%): two columns of 7 pt text, 50-100% full (~5,000-10,000 characters);
- **longest** (6%): four columns of 5 pt text, 80-100% full (~13,000-16,000 characters, some
  4,800 tokens at the simulator's 0.3 tokens a character).

500 pages of seed 0: 3,300 characters a page on average, a median of 2,500, 26 pages over 12,000;
the longest pages fall anywhere in the input, the last of them 3 pages from its end.
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass
from pathlib import Path

from llm_ocr.bench.corpus import LETTER_PT, _helvetica_pdf, _paragraph_lines, _pdf_text, document_lengths

#: Bump when the generated pages change, so a cached corpus is never silently reused stale.
LONG_TAIL_VERSION = 1
MARGIN_PT = 54.0
GUTTER_PT = 14.0


@dataclass(frozen=True)
class PageKind:
    """How one kind of page is set: its share of the pages, columns, type size and how full."""

    name: str
    share: float
    columns: int
    font_pt: float
    fill: tuple[float, float]


KINDS = (
    PageKind("short", 0.80, 1, 10.0, (0.10, 1.0)),
    PageKind("long", 0.14, 2, 7.0, (0.50, 1.0)),
    PageKind("longest", 0.06, 4, 5.0, (0.80, 1.0)),
)


def _kind(rng: random.Random) -> PageKind:
    roll, total = rng.random(), 0.0
    for kind in KINDS:
        total += kind.share
        if roll < total:
            return kind
    return KINDS[-1]


def page_stream(rng: random.Random, title: str, kind: PageKind) -> tuple[bytes, int]:
    """The content stream of one page of ``kind`` and the characters of text it draws."""
    width, height = LETTER_PT
    column_width = (width - 2 * MARGIN_PT - (kind.columns - 1) * GUTTER_PT) / kind.columns
    # Helvetica's average glyph is about half an em wide.
    chars_per_line = max(10, int(column_width / (0.5 * kind.font_pt)))
    lead = kind.font_pt * 1.2
    top = height - MARGIN_PT - 30.0
    bottom = top - (top - MARGIN_PT) * rng.uniform(*kind.fill)
    ops = [f"BT /F2 14 Tf {MARGIN_PT} {height - MARGIN_PT - 14:.1f} Td {_pdf_text(title)} Tj ET"]
    chars = len(title)
    for column in range(kind.columns):
        x = MARGIN_PT + column * (column_width + GUTTER_PT)
        y = top
        while y - lead > bottom:
            for line in _paragraph_lines(rng, chars_per_line):
                if y - lead <= bottom:
                    break
                ops.append(f"BT /F1 {kind.font_pt:g} Tf {x:.1f} {y - kind.font_pt:.1f} Td {_pdf_text(line)} Tj ET")
                chars += len(line) + 1
                y -= lead
            y -= lead  # a paragraph gap
    return "\n".join(ops).encode("latin-1"), chars


def make_long_tail_corpus(folder: Path, total_pages: int, seed: int = 0) -> dict[str, list[int]]:
    """Write ``total_pages`` pages in documents of 1-32 pages into ``folder`` (reused when a
    matching corpus is there); returns each document's pages' characters of text, by file name.

    ``FOLDER.json`` beside the folder records what was generated (a folder whose record differs
    is regenerated).
    """
    folder.mkdir(parents=True, exist_ok=True)
    manifest_path = folder.with_name(folder.name + ".json")
    lengths = document_lengths(total_pages, seed)
    names = [f"doc-{i:05d}-{n:03d}p.pdf" for i, n in enumerate(lengths)]
    if manifest_path.exists():
        try:
            manifest = json.loads(manifest_path.read_text())
            if (manifest.get("version") == LONG_TAIL_VERSION and manifest.get("pages") == total_pages
                    and manifest.get("seed") == seed and list(manifest.get("chars", {})) == names
                    and all((folder / n).exists() for n in names)):
                return {k: list(v) for k, v in manifest["chars"].items()}
        except (OSError, ValueError):
            pass
    for old in folder.glob("*.pdf"):
        old.unlink()
    chars: dict[str, list[int]] = {}
    for i, (name, pages) in enumerate(zip(names, lengths)):
        rng = random.Random(hashlib.sha256(f"long-tail|{seed}|{i}".encode()).digest())
        streams, counts = [], []
        for number in range(1, pages + 1):
            stream, count = page_stream(rng, f"Document {i} page {number}", _kind(rng))
            streams.append(stream)
            counts.append(count)
        (folder / name).write_bytes(_helvetica_pdf(streams, LETTER_PT))
        chars[name] = counts
    manifest_path.write_text(json.dumps({"version": LONG_TAIL_VERSION, "pages": total_pages, "seed": seed,
                                         "chars": chars}, indent=1))
    return chars
