"""Generated pages that test what is text and what is a figure (``llm-ocr bench-accuracy --corpus``).

Two sets of born-digital PDFs, made with reportlab, each page tagged with what it holds:

- ``layout``: a 180 x 300 pt book page of plain text; a 234 x 14,295 pt strip (a well log: a
  column of depths and notes beside three line plots); text pages in other fonts, sizes and
  columns; pages with bar, line and pie charts (reportlab graphics, labels drawn as PDF text)
  beside paragraphs, with and without captions.
- ``held-out``: pages of the same kinds made differently (other sizes, fonts, seeds, chart types
  and places), kept out of the choice of the engine's rules and measured separately.

Every page is ``text`` (all its words are body text: word recall should be near 1) or
``figures`` (it holds charts whose boxes are known; the labels inside a chart are in the PDF's
text layer but belong to the figure, so its recall is lower by design). The figure boxes are in
points from the page's top-left corner: the bounds of what the chart drew.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llm_ocr.bench.sample_text import paragraph, sentence

#: The sets :func:`make_corpus` writes.
CORPORA = ("layout", "held-out")

Box = tuple[float, float, float, float]


@dataclass
class CorpusPage:
    """One generated PDF page: its file, page number, kind and the figures drawn on it."""

    path: Path
    page: int
    kind: str  # "text" or "figures"
    figures: list[Box] = field(default_factory=list)  # points, (x1, y1, x2, y2) from the top-left
    size: tuple[float, float] = (0.0, 0.0)  # page width, height in points


class _Pdf:
    """A canvas with a cursor: paragraphs wrapped into a column, charts placed at the cursor."""

    def __init__(self, path: Path, size: tuple[float, float]) -> None:
        from reportlab.pdfgen import canvas

        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.size = size
        self.canvas = canvas.Canvas(str(path), pagesize=size, invariant=1)
        self.pages: list[CorpusPage] = []
        self.figures: list[Box] = []

    def wrap(self, text: str, x: float, y: float, width: float, font: str, size: float, lead: float,
             justify: bool = False, indent: float = 0.0) -> float:
        """Draw ``text`` wrapped to ``width`` from the baseline ``y`` (points from the top);
        return the baseline after it."""
        from reportlab.lib.utils import simpleSplit

        height = self.size[1]
        lines = simpleSplit(text, font, size, width - indent)
        self.canvas.setFont(font, size)
        for i, line in enumerate(lines):
            dx = indent if i == 0 else 0.0
            if justify and i < len(lines) - 1 and " " in line:
                text_obj = self.canvas.beginText(x + dx, height - y)
                text_obj.setFont(font, size)
                spare = width - dx - self.canvas.stringWidth(line, font, size)
                text_obj.setWordSpace(spare / line.count(" "))
                text_obj.textLine(line)
                self.canvas.drawText(text_obj)
            else:
                self.canvas.drawString(x + dx, height - y, line)
            y += lead
        return y

    def line(self, text: str, x: float, y: float, font: str, size: float) -> None:
        self.canvas.setFont(font, size)
        self.canvas.drawString(x, self.size[1] - y, text)

    def drawing(self, drawing: Any, x: float, y: float) -> None:
        """Place a reportlab ``Drawing`` with its top-left corner at (x, y) from the top."""
        from reportlab.graphics import renderPDF

        renderPDF.draw(drawing, self.canvas, x, self.size[1] - y - drawing.height)
        # The figure's box is what the drawing holds (its bounds), not the frame it was given.
        x1, y1, x2, y2 = drawing.getBounds()
        self.figures.append((x + x1, y + drawing.height - y2, x + x2, y + drawing.height - y1))

    def end_page(self, kind: str) -> None:
        self.pages.append(CorpusPage(self.path, len(self.pages) + 1, kind, list(self.figures), self.size))
        self.figures = []
        self.canvas.showPage()

    def save(self) -> list[CorpusPage]:
        self.canvas.save()
        return self.pages


# ---------------------------------------------------------------------------------------------
# Charts (reportlab graphics: their strings are text in the PDF, as in most born-digital charts)


def bar_chart(rng: random.Random, width: float, height: float, horizontal: bool = False) -> Any:
    """A bar chart with category labels and a value axis, filling ``width`` x ``height`` points."""
    from reportlab.graphics.charts.barcharts import HorizontalBarChart, VerticalBarChart
    from reportlab.graphics.shapes import Drawing
    from reportlab.lib import colors

    drawing = Drawing(width, height)
    chart = HorizontalBarChart() if horizontal else VerticalBarChart()
    chart.x, chart.y = (60, 22) if horizontal else (34, 26)
    chart.width, chart.height = width - chart.x - 8, height - chart.y - 8
    series = rng.randint(1, 2)
    cats = rng.sample(["North", "South", "East", "West", "Inland", "Coast", "Harbour"], rng.randint(4, 6))
    chart.data = [[rng.randint(5, 95) for _ in cats] for _ in range(series)]
    chart.categoryAxis.categoryNames = cats
    chart.categoryAxis.labels.fontSize = 7
    chart.valueAxis.labels.fontSize = 7
    chart.valueAxis.valueMin = 0
    for i, colour in enumerate([colors.HexColor("#4e79a7"), colors.HexColor("#f28e2b")][:series]):
        chart.bars[i].fillColor = colour
    drawing.add(chart)
    return drawing


def line_chart(rng: random.Random, width: float, height: float, points: int = 12, series: int = 2) -> Any:
    """A line plot of ``series`` random walks with numbered axes."""
    from reportlab.graphics.charts.lineplots import LinePlot
    from reportlab.graphics.shapes import Drawing
    from reportlab.lib import colors

    drawing = Drawing(width, height)
    plot = LinePlot()
    plot.x, plot.y = 30, 22
    plot.width, plot.height = width - 38, height - 30
    data = []
    for _ in range(series):
        value, walk = rng.uniform(20, 60), []
        for i in range(points):
            value += rng.uniform(-8, 8)
            walk.append((i, round(value, 1)))
        data.append(walk)
    plot.data = data
    for i, colour in enumerate([colors.HexColor("#e15759"), colors.HexColor("#4e79a7"), colors.HexColor("#59a14f")]):
        if i < series:
            plot.lines[i].strokeColor = colour
            plot.lines[i].strokeWidth = 1.2
    plot.xValueAxis.labels.fontSize = 7
    plot.yValueAxis.labels.fontSize = 7
    drawing.add(plot)
    return drawing


def pie_chart(rng: random.Random, size: float) -> Any:
    """A pie chart with labelled slices."""
    from reportlab.graphics.charts.piecharts import Pie
    from reportlab.graphics.shapes import Drawing

    drawing = Drawing(size * 1.5, size)
    pie = Pie()
    pie.x, pie.y = size * 0.35, size * 0.12
    pie.width = pie.height = size * 0.76
    names = rng.sample(["rail", "road", "ship", "air", "pipe", "cable"], 4)
    pie.data = [rng.randint(10, 40) for _ in names]
    pie.labels = names
    pie.slices.fontSize = 7
    drawing.add(pie)
    return drawing


def log_track(rng: random.Random, width: float, height: float) -> Any:
    """One track of a well log: a curve wandering down a framed track, with a scale on top."""
    from reportlab.graphics.shapes import Drawing, Line, PolyLine, Rect, String
    from reportlab.lib import colors

    drawing = Drawing(width, height)
    drawing.add(Rect(0, 0, width, height - 12, strokeColor=colors.black, fillColor=None, strokeWidth=0.6))
    for i in range(1, 4):
        x = width * i / 4
        drawing.add(Line(x, 0, x, height - 12, strokeColor=colors.HexColor("#bbbbbb"), strokeWidth=0.4))
    drawing.add(String(2, height - 9, "0", fontSize=6))
    drawing.add(String(width - 14, height - 9, "150", fontSize=6))
    value, points = width / 2, []
    steps = int((height - 12) / 3)
    for i in range(steps + 1):
        value = min(width - 2, max(2, value + rng.uniform(-6, 6)))
        points += [value, height - 12 - i * 3]
    drawing.add(PolyLine(points, strokeColor=colors.HexColor("#2a7f3f"), strokeWidth=1.0))
    return drawing


# ---------------------------------------------------------------------------------------------
# Pages


def book_page(folder: Path, name: str, size: tuple[float, float], font: str, font_size: float, seed: int, *,
              lead: float = 1.25, margin: float = 0.1, running_head: str | None = None) -> list[CorpusPage]:
    """A small book page of plain text (a novel's page): justified paragraphs of three
    sentences, first lines indented, ``lead`` times the type size apart, margins ``margin`` of
    the page's width; optionally a running head and a page number."""
    rng = random.Random(seed)
    pdf = _Pdf(folder / name, size)
    width, height = size
    m = margin * width
    step = font_size * lead
    y = m + font_size
    if running_head:
        pdf.line(running_head, m, y, font + "-Oblique" if font == "Helvetica" else font, font_size - 1)
        y += 2 * step
    while y < height - m - 2 * step:
        text = paragraph(rng, 3)
        y = pdf.wrap(text, m, y, width - 2 * m, font, font_size, step, justify=True, indent=font_size * 1.2)
    if running_head:
        pdf.line(str(rng.randint(11, 240)), width / 2 - 6, height - m / 2, font, font_size - 1)
    pdf.end_page("text")
    return pdf.save()


def strip(folder: Path, name: str, size: tuple[float, float], seed: int, plots: int,
          notes_left: bool = True) -> list[CorpusPage]:
    """A long narrow strip like a well log: a header, a depth column with lithology notes running
    its whole length, and ``plots`` curve tracks at evenly spaced depths beside it."""
    rng = random.Random(seed)
    pdf = _Pdf(folder / name, size)
    width, height = size
    pdf.line("WELL KESTREL-4  LOG STRIP", 8, 20, "Helvetica-Bold", 9)
    pdf.line("Depth (m)   Lithology and notes", 8, 34, "Helvetica", 7)
    text_w = width * 0.5
    text_x = 8.0 if notes_left else width - text_w - 8
    track_x = width - width * 0.4 - 8 if notes_left else 8.0
    track_w = width * 0.4
    rocks = ["sandstone, fine grained", "shale, grey", "siltstone with mica", "limestone, oolitic", "coal seam",
             "claystone, red", "conglomerate", "dolomite, vuggy"]
    spans = []
    for i in range(plots):
        top = 120 + (height - 400) * (i + 0.5) / plots
        spans.append((top, top + rng.uniform(220, 320)))
    y, depth = 56.0, rng.randint(800, 1500)
    while y < height - 30:
        pdf.line(f"{depth:.1f}", text_x, y, "Courier", 7)
        if rng.random() < 0.45:
            pdf.wrap(f"{rng.choice(rocks).capitalize()}; {sentence(rng, rng.randint(3, 6)).lower()}",
                     text_x + 34, y, text_w - 34, "Helvetica", 6.5, 8.5)
        y += 36
        depth += 5
    for top, bottom in spans:
        pdf.drawing(log_track(rng, track_w, bottom - top), track_x, top)
    pdf.end_page("figures")
    return pdf.save()


Chart = Callable[[random.Random, float], Any]


def columns_page(folder: Path, name: str, size: tuple[float, float], columns: int, font: str, font_size: float,
                 seed: int, title: str, chart: Chart | None = None, chart_column: int = 0,
                 caption: str | None = None, caption_above: bool = False) -> list[CorpusPage]:
    """A page of ``columns`` text columns under a title; ``chart(rng, column_width)`` (a
    Drawing), when given, is placed a quarter of the way down column ``chart_column``, with its
    ``caption`` below it (or above)."""
    rng = random.Random(seed)
    pdf = _Pdf(folder / name, size)
    width, height = size
    margin, gutter = 54.0, 18.0
    col_w = (width - 2 * margin - gutter * (columns - 1)) / columns
    lead = font_size * 1.3
    pdf.line(title, margin, margin + 16, "Helvetica-Bold" if "Times" not in font else "Times-Bold", 16)
    top = margin + 40
    for c in range(columns):
        x = margin + c * (col_w + gutter)
        y = top
        placed = chart is None or c != chart_column
        while y < height - margin - 3 * lead:
            if chart is not None and not placed and y > top + (height - top) * 0.25:
                drawing = chart(rng, col_w)
                if caption and caption_above:
                    y = pdf.wrap(caption, x, y + lead, col_w, "Helvetica-Oblique", font_size - 1, lead) - lead * 0.3
                pdf.drawing(drawing, x, y)
                y += drawing.height + lead
                if caption and not caption_above:
                    y = pdf.wrap(caption, x, y, col_w, "Helvetica-Oblique", font_size - 1, lead)
                y += lead
                placed = True
                continue
            y = pdf.wrap(paragraph(rng, rng.randint(2, 4)), x, y, col_w, font, font_size, lead, justify=columns > 1)
            y += lead * 0.6
    pdf.end_page("text" if chart is None else "figures")
    return pdf.save()


def _layout(folder: Path) -> list[CorpusPage]:
    """The set the engine's rules were looked at on."""
    from reportlab.lib.pagesizes import A5, letter

    pages: list[CorpusPage] = []
    # Tight leading and wide margins: the layout model calls most of this page a figure.
    pages += book_page(folder, "book-page-180x300.pdf", (180, 300), "Helvetica", 8.5, 79, lead=1.1, margin=0.14)
    pages += book_page(folder, "book-page-times.pdf", (180, 300), "Times-Roman", 8.5, 34)
    pages += strip(folder, "well-log-234x14295.pdf", (234, 14295), 34, plots=3)
    pages += columns_page(folder, "three-columns-helvetica.pdf", letter, 3, "Helvetica", 8, 35,
                          "Notes from the Estuary Stations")
    pages += columns_page(folder, "a5-courier.pdf", A5, 1, "Courier", 9, 36, "Maintenance Log")
    pages += columns_page(folder, "large-times.pdf", letter, 1, "Times-Roman", 14, 37, "A Letter to Members")
    pages += columns_page(folder, "bar-chart-captioned.pdf", letter, 1, "Helvetica", 10, 38, "Survey of Landings",
                          chart=lambda rng, w: bar_chart(rng, w * 0.7, 190),
                          caption="Figure 1: Tonnes landed at each quay in the first quarter.")
    pages += columns_page(folder, "line-chart-two-columns.pdf", letter, 2, "Times-Roman", 9.5, 39,
                          "River Levels Through the Year", chart=lambda rng, w: line_chart(rng, w, 150))
    pages += columns_page(folder, "pie-chart-captioned.pdf", letter, 2, "Helvetica", 9, 40, "How Freight Moves",
                          chart=lambda rng, w: pie_chart(rng, w * 0.6), chart_column=1,
                          caption="Fig. 2. Share of freight by mode, by weight.")
    return pages


def _held_out(folder: Path) -> list[CorpusPage]:
    """Pages of the same kinds, made differently, never looked at while choosing the rules."""
    from reportlab.lib.pagesizes import A4, letter

    pages: list[CorpusPage] = []
    pages += book_page(folder, "pocket-page-216x360.pdf", (216, 360), "Helvetica", 8, 4034, running_head="The Keeper")
    pages += book_page(folder, "book-page-courier.pdf", (180, 300), "Courier", 7.5, 4035, lead=1.15, margin=0.08)
    pages += strip(folder, "strip-300x9000.pdf", (300, 9000), 4036, plots=2, notes_left=False)
    pages += columns_page(folder, "two-columns-times.pdf", A4, 2, "Times-Roman", 10, 4037, "Proceedings of the Guild")
    pages += columns_page(folder, "letter-helvetica-12.pdf", letter, 1, "Helvetica", 12, 4038, "Notice to Residents")
    pages += columns_page(folder, "hbar-chart-captioned.pdf", A4, 1, "Times-Roman", 11, 4039, "Annual Figures",
                          chart=lambda rng, w: bar_chart(rng, w * 0.8, 200, horizontal=True),
                          caption="Chart 3: Visitors by region, thousands.", caption_above=True)
    pages += columns_page(folder, "line-chart-right-column.pdf", letter, 2, "Helvetica", 9, 4040,
                          "Temperatures at the Weir", chart=lambda rng, w: line_chart(rng, w, 170, series=3),
                          chart_column=1, caption="Figure 4: Daily mean water temperature, three gauges.")
    pages += columns_page(folder, "bar-chart-no-caption.pdf", A4, 2, "Times-Roman", 9, 4041, "Market Report",
                          chart=lambda rng, w: bar_chart(rng, w, 160))
    pages += columns_page(folder, "pie-and-text.pdf", A4, 1, "Helvetica", 10, 4042, "Where the Water Goes",
                          chart=lambda rng, w: pie_chart(rng, 150))
    return pages


def make_corpus(name: str, folder: Path) -> list[CorpusPage]:
    """Write the PDFs of the set ``name`` (one of :data:`CORPORA`) into ``folder``; its pages."""
    folder.mkdir(parents=True, exist_ok=True)
    if name == "layout":
        return _layout(folder)
    if name == "held-out":
        return _held_out(folder)
    raise ValueError(f"unknown corpus {name!r}: one of {', '.join(CORPORA)}")


def iou(a: Box, b: Box) -> float:
    """Intersection over union of two boxes."""
    ix = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    iy = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = ix * iy
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


#: A drawn figure counts as found when an output figure overlaps it this much (IoU).
FOUND_IOU = 0.5


def match_figures(truth: list[Box], found: list[Box]) -> tuple[int, int]:
    """(drawn figures found, output figures that match no drawn figure), boxes in one unit."""
    unmatched = list(found)
    hits = 0
    for box in truth:
        best = max(unmatched, key=lambda f: iou(box, f), default=None)
        if best is not None and iou(box, best) >= FOUND_IOU:
            hits += 1
            unmatched.remove(best)
    return hits, len(unmatched)

