"""A newspaper-like dense page made by the tests: ~20,000 characters of text in five columns, a
masthead across them and two figures inside columns (reportlab, a real text layer)."""

from __future__ import annotations

import io
import random
from dataclasses import dataclass, field
from pathlib import Path

from reportlab.lib.utils import ImageReader
from reportlab.pdfbase.pdfmetrics import stringWidth
from reportlab.pdfgen import canvas

from llm_ocr.bench.accuracy import markdown_to_text, words
from tests.docs import chart_png

#: The page, in points (a small broadsheet).
PAGE = (792.0, 1224.0)
COLUMNS = 5
MARGIN, GUTTER = 36.0, 14.0
FONT, SIZE, LEADING = "Helvetica", 6.5, 10.0
_SYLLABLES = ("ka", "lo", "mir", "ten", "sa", "vo", "rin", "da", "pel", "ur", "ost", "ne", "bi", "tar", "qu", "em",
              "fal", "zo", "wen", "ix", "gra", "hol", "ma", "sut")  # fmt: skip


@dataclass
class Newspaper:
    """What the page holds: its text in reading order, its figures' boxes (page fractions), how
    many text lines it has, and each of them (the masthead, then each column top to bottom)."""

    text: str
    figures: list[tuple[float, float, float, float]]
    lines: int
    line_texts: list[str] = field(default_factory=list)


def _word(rng: random.Random) -> str:
    return "".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(1, 4)))


def newspaper_pdf(path: Path, seed: int = 0, columns: int = COLUMNS, figures: bool = True) -> Newspaper:
    """Write the one-page PDF; returns its truth (see :class:`Newspaper`)."""
    rng = random.Random(f"newspaper|{seed}")
    width, height = PAGE
    pdf = canvas.Canvas(str(path), pagesize=PAGE)
    title = f"The {_word(rng).capitalize()} Courier No. {seed + 1}"
    pdf.setFont("Helvetica-Bold", 24)
    pdf.drawString(MARGIN, height - 60, title)
    parts, boxes, count, drawn = [title], [], 0, [title]
    column_width = (width - 2 * MARGIN - (columns - 1) * GUTTER) / columns
    for column in range(columns):
        x = MARGIN + column * (column_width + GUTTER)
        y = height - 90.0
        lines_in_paragraph = 0
        figure_at = height * (0.35 + 0.3 * (column == 1)) if figures and column in (1, 3) else None
        paragraph: list[str] = []
        while y > 40:
            if figure_at is not None and y < figure_at:
                top, bottom = y - 4, y - 4 - 110
                pdf.drawImage(ImageReader(io.BytesIO(chart_png(seed * 10 + column))), x, bottom, width=column_width,
                              height=110)
                boxes.append((x / width, (height - top) / height, (x + column_width) / width, (height - bottom) / height))
                y = bottom - 10
                figure_at = None
                continue
            line = _word(rng)
            while stringWidth(f"{line} ", FONT, SIZE) + stringWidth(_peek := _word(rng), FONT, SIZE) < column_width:
                line = f"{line} {_peek}"
            pdf.setFont(FONT, SIZE)
            pdf.drawString(x, y, line)
            paragraph.append(line)
            drawn.append(line)
            count += 1
            y -= LEADING
            lines_in_paragraph += 1
            if lines_in_paragraph >= rng.randint(8, 14):
                parts.append(" ".join(paragraph))
                paragraph, lines_in_paragraph = [], 0
                y -= LEADING / 2
        if paragraph:
            parts.append(" ".join(paragraph))
    pdf.showPage()
    pdf.save()
    return Newspaper("\n\n".join(parts), boxes, count, drawn)


def order_kept(lines: list[str], markdown: str) -> float:
    """The share of the page's text ``lines`` (in reading order) that ``markdown`` holds in that
    order: the longest run of them, not necessarily adjacent, found at increasing places (the
    longest increasing subsequence of where each is found; a line not found is not kept).

    A five-column page read band by band (the top of every column, then the next part of every
    column) keeps about one column's share in order and a little more; read column by column, all."""
    import bisect

    text = f" {' '.join(words(markdown_to_text(markdown)))} "
    places = []
    for line in lines:
        at = text.find(f" {' '.join(words(line))} ")
        if at >= 0:
            places.append(at)
    tails: list[int] = []  # tails[k]: the least place an increasing run of k + 1 lines ends at
    for place in places:
        k = bisect.bisect_left(tails, place)
        tails[k:k + 1] = [place]
    return len(tails) / max(1, len(lines))
