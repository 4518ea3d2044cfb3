"""Generated pages unlike a report's: a long well-log strip, an encyclopedia article printed from
a browser, a tiny label (``llm-ocr bench-accuracy --corpus sheets|strip-sweep``).

Born-digital PDFs made with reportlab, every word in the PDF's text layer, so word recall is
measured against what the page really says:

- :func:`well_log`: a wireline log as a logging company prints it, on a strip as long as asked
  (``aspect`` times its width). A header block (company, well, field, the run's parameters in a
  ruled grid, remarks), a row of track headers (curve names and scales), then the log: a gamma
  ray and caliper track, a depth track with the depth every 50 ft at 1:240 (5 in per 100 ft),
  a resistivity track on a four-decade log grid and a density-neutron track, each curve a
  polyline over a grid of thin lines every 10 ft; formation tops and remarks written across
  the tracks along the strip; the track headers again at the foot, and a tail line. Every word
  is in type of ``font_size`` points (the title larger), as small as real logs print.
- :func:`encyclopedia_print`: a US-Letter page as a browser prints a Wikipedia article: the
  print's date line and address, the title over a rule, an infobox floated right with the lead
  beside it, headings over rules, small sans-serif body text, a numbered reference list in
  smaller type.
- :func:`label`: a 2 x 1 in sample label in 6-8 pt type.

``sheets`` is one of each (the strip 8.5 in wide at 1:61); ``strip-sweep`` is well logs of
aspect 1:20, 1:40, 1:61 and 1:100 in 5.5 and 7 pt type, 4.25 in wide (half the paper, so the
sweep reads in minutes, not an hour: the engine's cost grows with the area).
"""

from __future__ import annotations

import math
import random
from pathlib import Path

from llm_ocr.bench.layout_pages import CorpusPage, _Pdf
from llm_ocr.bench.sample_text import paragraph, sentence

#: The sets :func:`make_sheets` writes.
SHEET_CORPORA = ("sheets", "strip-sweep")

#: The shapes and type sizes of ``strip-sweep``.
SWEEP_ASPECTS = (20, 40, 61, 100)
SWEEP_FONT_SIZES = (5.5, 7.0)
SWEEP_WIDTH = 306.0  # 4.25 in

#: Points of strip per foot of hole at 1:240 (5 inches of paper per 100 ft).
PT_PER_FT = 72 * 5 / 100

_FORMATIONS = ["Austin Chalk", "Eagle Ford Shale", "Buda Limestone", "Del Rio Clay", "Georgetown",
               "Edwards Limestone", "Glen Rose", "Pearsall Shale", "Sligo", "Hosston Sand", "Cotton Valley",
               "Bossier Shale", "Haynesville", "Smackover", "Norphlet", "Louann Salt", "Frio Sand",
               "Vicksburg", "Jackson Shale", "Yegua", "Cook Mountain", "Sparta Sand", "Wilcox", "Midway"]
_REMARKS = ["Gas show {n} units on mud log", "Tool pulled tight, logged up at {n} ft/min",
            "Washout, caliper reads {n} in", "Casing shoe 9 5/8 in at {d} ft", "Repeat section {d} to {e} ft",
            "Possible fracture zone, check image log", "Hole deviation {n} degrees", "Sidewall core taken at {d} ft",
            "Lost circulation {n} bbl", "Oil stain on cuttings, fluorescence {n} percent"]


def _header_fields(rng: random.Random, top: int, bottom: int) -> list[tuple[str, str]]:
    """The run's parameters as a logging company's header lists them (label, value)."""
    return [
        ("COMPANY", "Kestrel Petroleum Operating LLC"),
        ("WELL", f"Kestrel Ranch {rng.randint(1, 40)}-{rng.randint(1, 9)}H"),
        ("FIELD", "Giddings (Austin Chalk)"), ("COUNTY", "Lee"), ("STATE", "Texas"),
        ("API NO", f"42-287-{rng.randint(30000, 39999)}"),
        ("LOCATION", f"Sec {rng.randint(1, 36)} Blk A-{rng.randint(1, 9)}"),
        ("ELEVATION KB", f"{rng.randint(380, 520)} ft"),
        ("DATE", f"2019-0{rng.randint(1, 9)}-{rng.randint(10, 28)}"),
        ("RUN NO", str(rng.randint(1, 3))), ("DEPTH DRILLER", f"{bottom + 12} ft"),
        ("DEPTH LOGGER", f"{bottom + 4} ft"), ("BTM LOG INTERVAL", f"{bottom} ft"), ("TOP LOG INTERVAL", f"{top} ft"),
        ("CASING DRILLER", f"9 5/8 in @ {top - 20} ft"), ("BIT SIZE", "8 3/4 in"), ("FLUID IN HOLE", "Water based mud"),
        ("DENSITY", f"{rng.uniform(9, 11):.1f} lb/gal"), ("VISCOSITY", f"{rng.randint(38, 52)} s"),
        ("RM AT MEAS TEMP", f"{rng.uniform(0.3, 1.5):.2f} ohmm @ 78 F"),
        ("RMF AT MEAS TEMP", f"{rng.uniform(0.2, 1.2):.2f} ohmm @ 78 F"),
        ("MAX REC TEMP", f"{rng.randint(160, 260)} F"),
        ("RECORDED BY", "J. Okafor"), ("WITNESSED BY", "R. Lindqvist"),
    ]


#: The tracks of the log as fractions of the strip's inner width, with their curves: (mnemonic,
#: name, unit, left scale value, right scale value, colour).
_TRACKS: tuple[tuple[str, float, list[tuple[str, str, str, str, str, str]]], ...] = (
    ("gr", 0.30, [("GR", "GAMMA RAY", "GAPI", "0", "150", "#2a7f3f"), ("CALI", "CALIPER", "IN", "6", "16", "#555555")]),
    ("depth", 0.10, []),
    ("res", 0.30, [("ILD", "DEEP INDUCTION", "OHMM", "0.2", "2000", "#c0392b"),
                   ("SFLU", "SHALLOW", "OHMM", "0.2", "2000", "#2c3e91")]),
    ("den", 0.30, [("RHOB", "BULK DENSITY", "G/CC", "1.95", "2.95", "#c0392b"),
                   ("NPHI", "NEUTRON", "V/V", "0.45", "-0.15", "#2c3e91")]),
)


def well_log(folder: Path, name: str, width: float, aspect: float, font_size: float, seed: int) -> list[CorpusPage]:
    """A wireline log on a ``width`` x ``aspect * width`` pt strip, its text in ``font_size`` pt
    (module docstring); one ``text`` page (its depths, tops and remarks are body text that
    recall counts)."""
    from reportlab.lib import colors

    rng = random.Random(seed)
    height = width * aspect
    pdf = _Pdf(folder / name, (width, height))
    c = pdf.canvas
    f = font_size
    lead = f * 1.35
    margin = 0.04 * width
    inner = width - 2 * margin

    def y_of(top: float) -> float:  # points from the top -> reportlab's from the bottom
        return height - top

    # -- header block: title, the run's parameters in a ruled two-column grid, remarks
    y = margin + 2.2 * f
    pdf.line("KESTREL WIRELINE SERVICES", margin, y, "Helvetica-Bold", f * 1.6)
    y += 1.8 * f
    pdf.line("DUAL INDUCTION  GAMMA RAY  COMPENSATED DENSITY NEUTRON", margin, y, "Helvetica-Bold", f * 1.15)
    y += 0.8 * f
    top_ft = rng.randint(40, 90) * 100
    fields = _header_fields(rng, top_ft, top_ft + int((height - 0.05 * height) / PT_PER_FT))
    # The grid in two columns of label | value when they fit side by side, else in one.
    label_w = max(c.stringWidth(label, "Helvetica", f) for label, _ in fields) + 8
    value_w = max(c.stringWidth(value, "Helvetica-Bold", f) for _, value in fields) + 8
    columns = 2 if 2 * (label_w + value_w) <= inner else 1
    rows = math.ceil(len(fields) / columns)
    grid_top = y + lead * 0.6
    c.setLineWidth(0.5)
    c.setStrokeColor(colors.black)
    c.rect(margin, y_of(grid_top + rows * lead), inner, rows * lead, stroke=1, fill=0)
    for r in range(1, rows):
        c.line(margin, y_of(grid_top + r * lead), margin + inner, y_of(grid_top + r * lead))
    if columns == 2:
        c.line(margin + inner / 2, y_of(grid_top), margin + inner / 2, y_of(grid_top + rows * lead))
    for i, (label, value) in enumerate(fields):
        x = margin + (inner / 2 if i >= rows else 0) + 3
        ty = grid_top + (i % rows + 1) * lead - 0.35 * f
        pdf.line(label, x, ty, "Helvetica", f)
        pdf.line(value, x + label_w, ty, "Helvetica-Bold", f)
    y = grid_top + rows * lead + 1.6 * lead
    pdf.line("REMARKS", margin, y, "Helvetica-Bold", f)
    y = pdf.wrap(f"{sentence(rng, 12)} {sentence(rng, 10)} All depths are driller's depths corrected to the "
                 f"logger's tally. {sentence(rng, 9)}", margin, y + lead, inner, "Helvetica", f, lead)

    # -- tracks
    xs, x = [], margin
    for kind, share, curves in _TRACKS:
        xs.append((kind, x, inner * share, curves))
        x += inner * share
    log_bottom = height - margin - 6 * lead

    def track_headers(top: float) -> float:
        """The curve names and scales over each track, from ``top``; the bottom of the band."""
        band = 2 * lead * 2 + 0.6 * lead
        c.setStrokeColor(colors.black)
        c.rect(margin, y_of(top + band), inner, band, stroke=1, fill=0)
        for kind, tx, tw, curves in xs:
            c.line(tx, y_of(top), tx, y_of(top + band))
            if kind == "depth":
                pdf.line("DEPTH", tx + 2, top + lead, "Helvetica-Bold", f)
                pdf.line("FT", tx + 2, top + 2 * lead, "Helvetica", f)
                continue
            for i, (mnemonic, curve, unit, left, right, colour) in enumerate(curves):
                cy = top + (2 * i + 1) * lead
                name = f"{mnemonic} {curve} ({unit})"
                if c.stringWidth(name, "Helvetica", f) > tw - 6:  # a narrow track: the mnemonic alone
                    name = f"{mnemonic} ({unit})"
                pdf.line(name, tx + 3, cy, "Helvetica", f)
                c.setStrokeColor(colors.HexColor(colour))
                c.line(tx + 2, y_of(cy + 0.45 * lead), tx + tw - 2, y_of(cy + 0.45 * lead))
                c.setStrokeColor(colors.black)
                pdf.line(left, tx + 3, cy + lead, "Helvetica", f)
                c.setFont("Helvetica", f)
                c.drawRightString(tx + tw - 3, y_of(cy + lead), right)
        return top + band

    body_top = track_headers(y + lead)
    body_bottom = log_bottom - (2 * lead * 2 + 0.6 * lead)
    feet = (body_bottom - body_top) / PT_PER_FT

    # Grid: thin lines every 10 ft, heavier every 50 ft, four log decades in the resistivity track.
    c.setLineWidth(0.6)
    c.rect(margin, y_of(body_bottom), inner, body_bottom - body_top, stroke=1, fill=0)
    for _, tx, _, _ in xs[1:]:
        c.line(tx, y_of(body_top), tx, y_of(body_bottom))
    for ft in range(0, int(feet) + 1, 10):
        gy = body_top + ft * PT_PER_FT
        c.setStrokeColor(colors.HexColor("#888888" if ft % 50 == 0 else "#cccccc"))
        c.setLineWidth(0.5 if ft % 50 == 0 else 0.25)
        for kind, tx, tw, _ in xs:
            if kind != "depth":
                c.line(tx, y_of(gy), tx + tw, y_of(gy))
    c.setStrokeColor(colors.HexColor("#cccccc"))
    c.setLineWidth(0.25)
    for kind, tx, tw, _ in xs:
        if kind == "res":
            for decade in range(4):
                for k in range(1, 10):
                    gx = tx + tw * (decade + math.log10(k)) / 4
                    c.line(gx, y_of(body_top), gx, y_of(body_bottom))
        elif kind != "depth":
            for k in range(1, 5):
                c.line(tx + tw * k / 5, y_of(body_top), tx + tw * k / 5, y_of(body_bottom))

    # Curves: random walks sampled every 2 ft, kept inside their tracks.
    c.setLineWidth(0.8)
    for _, tx, tw, curves in xs:
        for *_, colour in curves:
            level, points = rng.uniform(0.3, 0.7), []
            for ft in range(0, int(feet) + 1, 2):
                level = min(0.97, max(0.03, level + rng.uniform(-0.06, 0.06)))
                points.append((tx + tw * level, y_of(body_top + ft * PT_PER_FT)))
            c.setStrokeColor(colors.HexColor(colour))
            path = c.beginPath()
            path.moveTo(*points[0])
            for p in points[1:]:
                path.lineTo(*p)
            c.drawPath(path, stroke=1, fill=0)
    c.setStrokeColor(colors.black)

    # Depths every 50 ft in the depth track, centred.
    _, dx, dw, _ = xs[1]
    c.setFillColor(colors.black)
    for ft in range(50 - top_ft % 50, int(feet) - 4, 50):  # top_ft is a multiple of 100: from 50 ft in
        c.setFont("Helvetica", f)
        c.drawCentredString(dx + dw / 2, y_of(body_top + ft * PT_PER_FT + 0.35 * f), str(top_ft + ft))

    # Formation tops (a line across the log and the name) and remarks along the strip, every
    # 150-400 ft, on a white ground so that the grid does not run through the letters.
    at = rng.uniform(60, 200)  # feet below the top of the log
    formations = list(_FORMATIONS)
    rng.shuffle(formations)
    while at < feet - 30:
        ty = body_top + at * PT_PER_FT
        depth = top_ft + round(at)
        if rng.random() < 0.6 and formations:
            text = f"{formations.pop()} top {depth} ft"
            c.setStrokeColor(colors.HexColor("#7a4a00"))
            c.setLineWidth(0.7)
            c.line(margin, y_of(ty), margin + inner, y_of(ty))
            tx = xs[2][1] + 4
        else:
            text = rng.choice(_REMARKS).format(n=rng.randint(2, 60), d=depth, e=depth + rng.randint(100, 300))
            tx = rng.choice([xs[0][1], xs[3][1]]) + 4
        c.setFont("Helvetica-Oblique", f)
        w = c.stringWidth(text, "Helvetica-Oblique", f)
        tx = max(margin + 3, min(tx, margin + inner - w - 3))  # across the next track, not off the strip
        c.setFillColor(colors.white)
        c.rect(tx - 1, y_of(ty - 0.3 * f), w + 2, 1.35 * f, stroke=0, fill=1)
        c.setFillColor(colors.black)
        c.drawString(tx, y_of(ty - 1.05 * f), text)
        c.setStrokeColor(colors.black)
        at += rng.uniform(150, 400)

    # Foot: the track headers again, and the tail.
    track_headers(body_bottom)
    pdf.line(f"{fields[1][1]}  END OF LOG", margin, log_bottom + 2 * lead, "Helvetica", f)
    pdf.line(f"KESTREL WIRELINE SERVICES for {fields[0][1]}", margin, log_bottom + 3 * lead, "Helvetica", f)
    pdf.end_page("text")
    return pdf.save()


def encyclopedia_print(folder: Path, name: str, seed: int) -> list[CorpusPage]:
    """A US-Letter page like a browser's print of a Wikipedia article (module docstring)."""
    from reportlab.lib import colors
    from reportlab.lib.pagesizes import letter
    from reportlab.lib.utils import simpleSplit

    rng = random.Random(seed)
    pdf = _Pdf(folder / name, letter)
    c = pdf.canvas
    width, height = letter
    m = 36.0
    # The browser's own header and footer lines.
    pdf.line("3/14/24, 10:52 AM", m - 18, 18, "Helvetica", 7)
    pdf.line("Kestrel Basin - Wikipedia", width / 2 - 40, 18, "Helvetica", 7)
    pdf.line("https://en.wikipedia.org/wiki/Kestrel_Basin", m - 18, height - 14, "Helvetica", 7)
    pdf.line("1/1", width - m, height - 14, "Helvetica", 7)
    pdf.line("Kestrel Basin", m, m + 24, "Times-Roman", 22)
    c.setStrokeColor(colors.HexColor("#a2a9b1"))
    c.setLineWidth(0.5)
    c.line(m, height - (m + 30), width - m, height - (m + 30))
    pdf.line("From Wikipedia, the free encyclopedia", m, m + 42, "Helvetica", 8)

    # Infobox, floated right.
    box_w, box_x, box_top = 168.0, width - m - 168.0, m + 54
    rows = [("Country", "United States"), ("State", "Texas"),
            ("Area", f"{rng.randint(9, 40)},{rng.randint(100, 999)} km2"), ("Age", "Late Cretaceous"),
            ("Basin type", "Foreland"), ("Discovered", str(rng.randint(1911, 1960))),
            ("Wells drilled", f"{rng.randint(1, 9)},{rng.randint(100, 999)}"),
            ("Operators", "Kestrel, Merlin, Harrier"),
            ("Main reservoir", "Austin Chalk"), ("Seal", "Anacacho Limestone")]
    lead_i = 11.0
    box_h = 30 + 14 + len(rows) * lead_i + 8
    c.setFillColor(colors.HexColor("#f8f9fa"))
    c.rect(box_x, height - box_top - box_h, box_w, box_h, stroke=1, fill=1)
    c.setFillColor(colors.black)
    pdf.line("Kestrel Basin", box_x + box_w / 2 - 34, box_top + 16, "Helvetica-Bold", 11)
    pdf.line("Sedimentary basin", box_x + box_w / 2 - 34, box_top + 30, "Helvetica-Oblique", 8)
    ry = box_top + 30 + 14
    for label, value in rows:
        pdf.line(label, box_x + 5, ry, "Helvetica-Bold", 8)
        pdf.line(value, box_x + 70, ry, "Helvetica", 8)
        ry += lead_i

    # Lead beside the infobox, then sections over the full width.
    body, size, lead = "Helvetica", 9.0, 12.0
    y = box_top + 10
    narrow = box_x - m - 14

    def para(text: str, y: float) -> float:
        """Wrap ``text`` from the baseline ``y``: beside the infobox while it lasts, then across."""
        words = text.split()
        while words:
            avail = narrow if y < box_top + box_h + 6 else width - 2 * m
            line = words.pop(0)
            while words and c.stringWidth(f"{line} {words[0]}", body, size) <= avail:
                line += " " + words.pop(0)
            pdf.line(line, m, y, body, size)
            y += lead
        return y + 5

    for _ in range(3):
        y = para(paragraph(rng, 3), y)
    for heading in ("Geology", "History"):
        y = max(y, box_top + box_h) + 10
        pdf.line(heading, m, y, "Times-Roman", 15)
        c.setStrokeColor(colors.HexColor("#a2a9b1"))
        c.line(m, height - (y + 4), width - m, height - (y + 4))
        y += 18
        for _ in range(2):
            y = para(paragraph(rng, 3), y)
    y += 6
    pdf.line("References", m, y, "Times-Roman", 15)
    c.line(m, height - (y + 4), width - m, height - (y + 4))
    y += 18
    n = 1
    while y < height - m - 20:
        said = sentence(rng, rng.randint(6, 12))
        text = f"{n}. {said} Retrieved {rng.randint(1, 28)} March {rng.randint(2015, 2023)}."
        for line in simpleSplit(text, body, 7.5, width - 2 * m - 10):
            if y >= height - m - 10:
                break
            pdf.line(line, m + 6, y, body, 7.5)
            y += 9.5
        n += 1
    pdf.end_page("text")
    return pdf.save()


def label(folder: Path, name: str, seed: int) -> list[CorpusPage]:
    """A 2 x 1 in sample label: a heading and four lines in 6-8 pt type."""
    rng = random.Random(seed)
    pdf = _Pdf(folder / name, (144, 72))
    pdf.line(f"CORE SAMPLE {rng.randint(1000, 9999)}-B", 6, 13, "Helvetica-Bold", 8)
    pdf.line(f"Box {rng.randint(2, 12)} of 30  Kestrel Ranch 4-2H", 6, 25, "Helvetica", 6)
    depth = rng.uniform(7000, 9000)
    pdf.line(f"Depth {depth:,.1f} to {depth + 5.5:,.1f} ft", 6, 35, "Helvetica", 6)
    pdf.line(f"Collected 2019-03-{rng.randint(10, 28)} by J. Okafor", 6, 45, "Helvetica", 6)
    pdf.line("Keep dry. Do not stack.", 6, 57, "Helvetica-Oblique", 6)
    pdf.end_page("text")
    return pdf.save()


def make_sheets(name: str, folder: Path) -> list[CorpusPage]:
    """Write the PDFs of the set ``name`` (one of :data:`SHEET_CORPORA`) into ``folder``; its pages."""
    folder.mkdir(parents=True, exist_ok=True)
    if name == "sheets":
        return (encyclopedia_print(folder, "encyclopedia-print.pdf", 61)
                + well_log(folder, "well-log-612x37332.pdf", 612, 61, 7.0, 62)
                + label(folder, "label-144x72.pdf", 63))
    if name == "strip-sweep":
        pages: list[CorpusPage] = []
        for aspect in SWEEP_ASPECTS:
            for size in SWEEP_FONT_SIZES:
                pages += well_log(folder, f"well-log-1x{aspect}-{size:g}pt.pdf", SWEEP_WIDTH, aspect, size,
                                  aspect * 10 + round(size * 2))
        return pages
    raise ValueError(f"unknown corpus {name!r}: one of {', '.join(SHEET_CORPORA)}")
