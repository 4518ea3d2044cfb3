"""From detected text lines to DeepSeek-OCR-style blocks: reading order, paragraphs, tables,
and the grounding markup that :func:`llm_ocr.vlm.grounding.parse_layout` reads.

The OCR engine returns one box per text line (sometimes a line split in pieces) and no layout.
Reading order comes from a recursive XY-cut over the line boxes:

- a region is split at *vertical* whitespace channels (columns) when it has one that runs its
  full height, else at *horizontal* whitespace bands taller than about half a line (paragraph
  gaps); each part is ordered recursively, columns left to right, bands top to bottom;
- before a region is cut into bands, neighbouring bands with the same column structure are
  merged again, so that two columns whose paragraph breaks happen to line up are still read
  column by column (the classic XY-cut failure), and table rows stay one table;
- a region whose columns hold short, row-aligned cells is a table (HTML, as DeepSeek-OCR
  writes tables); a leaf region is split further into paragraphs where the text size changes
  or a line ends well short of the column's right edge.

Figures (found by :mod:`.figures`) take part in the cut as single boxes, "atoms" (an ``image``
box and its ``image_caption``): they block whitespace channels like any line, so a figure in
one column stays in that column, and they always come out as blocks of their own.

Everything here is pure Python on plain numbers, so it is testable without any OCR model.
"""

from __future__ import annotations

import html
import math
import re
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .figures import PageFigure

#: A horizontal gap at least this many (median) line heights separates paragraphs / bands.
#: Detected line boxes of ordinary single-spaced text are ~0.05-0.2 line heights apart.
Y_GAP = 0.6
#: A vertical channel at least this many line heights wide separates columns. Word spaces
#: never make one (a channel must cross every line of the region), so this can be small;
#: in practice the detector itself joins lines across gutters narrower than about 8 pt at
#: 144 DPI, and those columns cannot be separated here.
X_GAP = 0.5
#: A short block whose lines are this much taller than the page's body text is a heading.
#: Detected box heights vary by +-15% with the letters (descenders, capitals), so smaller
#: steps (11 pt body, 13 pt bold heading) cannot be told from noise.
HEADING_RATIO = 1.25
#: A heading has at most this many rows and words; a larger-type paragraph is still text.
HEADING_MAX_ROWS = 2
HEADING_MAX_WORDS = 20
#: Consecutive rows whose heights differ this much start a new paragraph even without a gap.
SIZE_SPLIT = 1.45
#: Table cells are short: the median cell of a table region has at most this many words.
TABLE_MAX_WORDS = 4
#: ... and this fraction of its cells share a row with a cell of another column.
TABLE_MIN_ALIGNED = 0.6
#: A line ending before this fraction of its column's width ends its paragraph.
SHORT_LINE = 0.7
_RECURSION_LIMIT = 64  # every cut shrinks the region, but a bound keeps odd input cheap
#: A letter or digit in any script.
_WORDY = re.compile(r"[^\W_]")


#: The kinds of :class:`Line`: a recognised text line, or a figure / figure caption "atom"
#: that the reading order places as one piece.
TEXT, IMAGE, IMAGE_CAPTION = "text", "image", "image_caption"


@dataclass(frozen=True)
class Line:
    """One recognised text line: axis-aligned box in image pixels and its text.

    ``kind`` is :data:`TEXT` for OCR lines; :data:`IMAGE` and :data:`IMAGE_CAPTION` mark the
    atoms a figure and its caption become in the reading order."""

    x1: float
    y1: float
    x2: float
    y2: float
    text: str
    score: float = 1.0
    kind: str = TEXT

    @property
    def height(self) -> float:
        """Box height in pixels (at least 1)."""
        return max(1.0, self.y2 - self.y1)

    @property
    def cy(self) -> float:
        """Vertical centre."""
        return (self.y1 + self.y2) / 2


@dataclass
class LayoutBlock:
    """One output block: DeepSeek-OCR label, box in image pixels, text (Markdown/HTML)."""

    label: str
    box: tuple[float, float, float, float]
    text: str
    lines: list[Line] = field(default_factory=list, repr=False)
    #: The figure an ``image`` / ``image_caption`` block stands for.
    figure: PageFigure | None = field(default=None, repr=False)


def has_word(line: Line) -> bool:
    """Whether a line holds a letter or digit: the recogniser reads bars, rules and markers
    as "_", "|" or "■", which are not text."""
    return bool(_WORDY.search(line.text))


def bbox(lines: Sequence[Line]) -> tuple[float, float, float, float]:
    """The box around ``lines``."""
    return (min(l.x1 for l in lines), min(l.y1 for l in lines), max(l.x2 for l in lines), max(l.y2 for l in lines))


def _gaps(intervals: list[tuple[float, float]], min_gap: float) -> list[float]:
    """Cut positions (gap middles) between merged intervals where the gap is >= ``min_gap``."""
    if not intervals:
        return []
    intervals = sorted(intervals)
    cuts = []
    end = intervals[0][1]
    for start, stop in intervals[1:]:
        if start - end >= min_gap:
            cuts.append((start + end) / 2)
        end = max(end, stop)
    return cuts


def _x_cuts(lines: Sequence[Line], h: float) -> list[float]:
    return _gaps([(l.x1, l.x2) for l in lines], X_GAP * h)


def _y_cuts(lines: Sequence[Line], h: float) -> list[float]:
    # Shrink each box a little vertically: the detector pads boxes (unclip), and neighbouring
    # lines' padded boxes touch or overlap even when a visible gap separates them. Figure
    # boxes are not padded: a cut must not pass through a figure's top or bottom.
    pad = 0.1
    return _gaps([(l.y1 + pad * l.height, l.y2 - pad * l.height) if l.kind == TEXT else (l.y1, l.y2) for l in lines],
                 Y_GAP * h)


def _split(lines: Sequence[Line], cuts: list[float], key: str) -> list[list[Line]]:
    parts: list[list[Line]] = [[] for _ in range(len(cuts) + 1)]
    for line in lines:
        centre = (line.x1 + line.x2) / 2 if key == "x" else line.cy
        index = sum(centre > c for c in cuts)
        parts[index].append(line)
    return [p for p in parts if p]


def rows(lines: Sequence[Line]) -> list[list[Line]]:
    """Group boxes into visual rows (vertical overlap of at least half the smaller box), top
    to bottom, each row left to right."""
    out: list[list[Line]] = []
    for line in sorted(lines, key=lambda l: (l.cy, l.x1)):
        if out:
            row = out[-1]
            top, bottom = min(l.y1 for l in row), max(l.y2 for l in row)
            overlap = min(bottom, line.y2) - max(top, line.y1)
            if overlap >= 0.5 * min(line.height, statistics.median(l.height for l in row)):
                row.append(line)
                continue
        out.append([line])
    return [sorted(r, key=lambda l: l.x1) for r in out]


def _same_row(a: Line, b: Line) -> bool:
    return min(a.y2, b.y2) - max(a.y1, b.y1) >= 0.5 * min(a.height, b.height)


def _aligned(parts: list[list[Line]], i: int) -> int:
    """How many lines of ``parts[i]`` share a row with a line of another part."""
    others = [l for j, p in enumerate(parts) if j != i for l in p]
    return sum(1 for line in parts[i] if any(_same_row(line, o) for o in others))


def _short_cells(lines: Sequence[Line]) -> bool:
    if any(l.kind != TEXT for l in lines):
        return False
    return statistics.median(len(l.text.split()) for l in lines) <= TABLE_MAX_WORDS


def _is_table(parts: list[list[Line]]) -> bool:
    """Whether columns ``parts`` (from one x-cut) hold table cells rather than text columns."""
    cells = [l for p in parts for l in p]
    if len(parts) < 2 or len(cells) < 4 or not _short_cells(cells):
        return False  # text columns carry many words per line
    return sum(_aligned(parts, i) for i in range(len(parts))) / len(cells) >= TABLE_MIN_ALIGNED


def _cell_column(parts: list[list[Line]], i: int) -> bool:
    """Whether ``parts[i]`` is a column of table cells (short, most on a row of the other
    parts: an Amount column) rather than a column of text that flows on its own."""
    part = parts[i]
    return len(part) >= 2 and _short_cells(part) and _aligned(parts, i) >= TABLE_MIN_ALIGNED * len(part)


def _table_inside(lines: list[Line], parts: list[list[Line]], h: float) -> list[list[Line]] | None:
    """The bands to read ``lines`` in when its columns are a table's inside a taller region.

    An x-cut is a column boundary only when the columns flow on their own. A column of cells
    beside the rest (an invoice's Amount column, whose rows continue the other columns' rows)
    is part of a table that lies between other blocks: cutting the region into columns would
    read the Amount column after everything else. Then the region is cut into bands instead
    (the table's rows merge back into one band, :func:`_merge_bands`), so the table comes out
    whole with every column. ``None`` when the columns stand, or the region is one band."""
    if not any(_cell_column(parts, i) for i in range(len(parts))):
        return None
    y_cuts = _y_cuts(lines, h)
    if not y_cuts:
        return None
    bands = _merge_bands(_split(lines, y_cuts, "y"), h)
    return bands if len(bands) > 1 else None


def _table_block(lines: Sequence[Line], parts: list[list[Line]]) -> LayoutBlock:
    column_of = {id(l): i for i, p in enumerate(parts) for l in p}
    body = []
    for row in rows(lines):
        cells = [""] * len(parts)
        for line in row:
            i = column_of[id(line)]
            cells[i] = f"{cells[i]} {line.text}".strip()
        body.append("<tr>" + "".join(f"<td>{html.escape(c, quote=False)}</td>" for c in cells) + "</tr>")
    return LayoutBlock("table", bbox(lines), "<table>" + "".join(body) + "</table>", list(lines))


def _paragraphs(lines: Sequence[Line], h: float) -> list[list[Line]]:
    """Split a leaf region (no whitespace cut left) into paragraphs. A paragraph gap (as
    :func:`_y_cuts` measures it) between two rows also ends one: a leaf has none unless a
    figure atom spans it (a drawing that fills the page, with its words read as text)."""
    x1, _, x2, _ = bbox(lines)
    width = max(1.0, x2 - x1)
    out: list[list[Line]] = []
    prev: list[Line] | None = None
    for row in rows(lines):
        height = statistics.median(l.height for l in row)
        if out and prev is not None:
            para_h = statistics.median(l.height for l in out[-1])
            size_change = max(height, para_h) / min(height, para_h) >= SIZE_SPLIT
            short_prev = max(l.x2 for l in prev) < x1 + SHORT_LINE * width
            gap = min(l.y1 + 0.1 * l.height for l in row) - max(l.y2 - 0.1 * l.height for l in prev)
            if not size_change and not short_prev and gap < Y_GAP * h:
                out[-1].extend(row)
                prev = row
                continue
        out.append(list(row))
        prev = row
    return out


def order_blocks(lines: Sequence[Line], line_height: float | None = None) -> list[LayoutBlock]:
    """Blocks (labelled ``text`` or ``table``, or ``image``/``image_caption`` for atoms) in
    reading order, from line boxes."""
    lines = [l for l in lines if l.text.strip() or l.kind != TEXT]
    if not lines:
        return []
    if line_height is None:
        heights = [l.height for l in lines if l.kind == TEXT] or [l.height for l in lines]
        line_height = statistics.median(heights)
    h = line_height
    blocks: list[LayoutBlock] = []
    _order(lines, h, blocks, 0)
    return blocks


def _merge_bands(bands: list[list[Line]], h: float) -> list[list[Line]]:
    """Re-join neighbouring bands that have the same, non-zero number of column cuts when
    joined: a horizontal gap across all columns is not the end of the columns."""
    merged: list[list[Line]] = []
    cuts_of: list[int] = []
    for band in bands:
        n = len(_x_cuts(band, h))
        if merged and n and cuts_of[-1] == n and len(_x_cuts(merged[-1] + band, h)) == n:
            merged[-1] = merged[-1] + band
            continue
        merged.append(band)
        cuts_of.append(n)
    return merged


def _order(lines: list[Line], h: float, out: list[LayoutBlock], depth: int) -> None:
    if depth < _RECURSION_LIMIT and len(lines) > 1:
        x_cuts = _x_cuts(lines, h)
        if x_cuts:
            parts = _split(lines, x_cuts, "x")
            bands = _table_inside(lines, parts, h)
            if bands is not None:
                for band in bands:
                    _order(band, h, out, depth + 1)
                return
            if _is_table(parts):
                out.append(_table_block(lines, parts))
                return
            for part in parts:
                _order(part, h, out, depth + 1)
            return
        y_cuts = _y_cuts(lines, h)
        if y_cuts:
            # (Bands cannot all merge back into one: this region has no column cut.)
            for band in _merge_bands(_split(lines, y_cuts, "y"), h):
                _order(band, h, out, depth + 1)
            return
    text_lines = [l for l in lines if l.kind == TEXT]
    leaf: list[LayoutBlock] = [LayoutBlock(a.kind, bbox([a]), a.text, [a]) for a in lines if a.kind != TEXT]
    for para in _paragraphs(text_lines, h) if text_lines else []:
        # One paragraph is one line of Markdown, as DeepSeek-OCR writes it.
        text = " ".join(l.text.strip() for row in rows(para) for l in row)
        leaf.append(LayoutBlock("text", bbox(para), text, para))
    # A leaf holds atoms and text only when nothing separates them (a figure with text
    # running beside it without a gap): top to bottom is the best order left.
    out.extend(sorted(leaf, key=lambda b: b.box[1]) if len(text_lines) != len(lines) else leaf)


def label_headings(blocks: list[LayoutBlock], body_height: float) -> None:
    """Label text blocks set in clearly larger type than the body: the first one, if it is the
    first block of the page, ``title``; the others ``sub_title`` (DeepSeek-OCR's labels)."""
    for i, block in enumerate(blocks):
        if block.label != "text" or not block.lines:
            continue
        if len(rows(block.lines)) > HEADING_MAX_ROWS or len(block.text.split()) > HEADING_MAX_WORDS:
            continue
        if statistics.median(l.height for l in block.lines) >= HEADING_RATIO * body_height:
            block.label = "title" if i == 0 else "sub_title"


def body_line_height(lines: Sequence[Line]) -> float:
    """The typical line height of body text: the median height weighted by characters, so a
    few large headings do not move it."""
    weighted = sorted((l.height, max(1, len(l.text))) for l in lines)
    total = sum(w for _, w in weighted)
    acc = 0
    for height, w in weighted:
        acc += w
        if acc * 2 >= total:
            return height
    return weighted[-1][0] if weighted else 1.0


def page_blocks(lines: Sequence[Line], figures: Sequence[PageFigure] = ()) -> list[LayoutBlock]:
    """Reading-ordered, labelled blocks of one page.

    ``lines`` are the body lines; each of ``figures`` (from :func:`.figures.find_figures`, whose
    own lines are not in ``lines``) becomes an ``image`` block and, with a caption, an
    ``image_caption`` block, placed in the reading order by their boxes."""
    lines = [l for l in lines if l.text.strip()]
    atoms: list[Line] = []
    owner: dict[int, PageFigure] = {}
    for figure in figures:
        atoms.append(Line(*figure.box, text="", kind=IMAGE))
        owner[id(atoms[-1])] = figure
        if figure.caption:
            atoms.append(Line(*bbox(figure.caption), text=figure.caption_text, kind=IMAGE_CAPTION))
            owner[id(atoms[-1])] = figure
    if not lines and not atoms:
        return []
    h = (body_line_height(lines) if lines
         else body_line_height([l for f in figures for l in f.caption + f.inside] or atoms))
    blocks = order_blocks(lines + atoms, h)
    for block in blocks:
        if block.label != TEXT and block.lines:
            block.figure = owner.get(id(block.lines[0]))
    label_headings(blocks, h)
    return blocks


def to_det(box: tuple[float, float, float, float], width: int, height: int) -> list[int]:
    """A pixel box as DeepSeek-OCR's 0..999 integers (``x_px / width * 999``).

    The top-left corner is rounded down and the bottom-right up, so that the box our client
    scales back (``int(v / 999 * width)``, docs/facts.md#deepseek-ocr) still contains every
    detected pixel.
    """
    x1, y1, x2, y2 = box
    vals = [
        math.floor(x1 / width * 999),
        math.floor(y1 / height * 999),
        math.ceil(x2 / width * 999),
        math.ceil(y2 / height * 999),
    ]
    return [min(999, max(0, v)) for v in vals]


def render_grounding(blocks: Sequence[LayoutBlock], width: int, height: int, markdown: bool = True) -> str:
    """Blocks as grounding markup, ``<|ref|>LABEL<|/ref|><|det|>[[x1, y1, x2, y2]]<|/det|>``
    followed by the text, blocks separated by a blank line. ``markdown`` (the "Convert the
    document to markdown." prompt) writes headings with ``#`` / ``##``."""
    parts = []
    for b in blocks:
        text = b.text  # an image block has none: the client crops the box
        if markdown and b.label == "title":
            text = f"# {text}"
        elif markdown and b.label == "sub_title":
            text = f"## {text}"
        det = ", ".join(str(v) for v in to_det(b.box, width, height))
        parts.append(f"<|ref|>{b.label}<|/ref|><|det|>[[{det}]]<|/det|>\n{text}\n\n")
    return "".join(parts)


def render_plain(blocks: Sequence[LayoutBlock]) -> str:
    """Blocks as plain text (the "Free OCR." answer): tables as one line per row, cells
    separated by spaces; blocks separated by a blank line."""
    out = []
    for b in blocks:
        if b.label == IMAGE:
            continue
        if b.label == "table":
            out.append("\n".join(" ".join(l.text for l in row) for row in rows(b.lines)))
        else:
            out.append(b.text)
    return "\n\n".join(t for t in out if t)
