"""Extract on the page shapes real-world PDFs have: rotated, tiny, huge, scanned, figure-dense.

Every PDF is generated here (reportlab + pypdfium2 + Pillow), then ``llm-ocr extract`` runs on
them against the simulated DeepSeek-OCR server, which answers from each page's own text layer and
image positions (``llm_ocr/engines/sim/corpus.py``). The acceptance check for Extract is pinned page
by page:

* the model's words survive: >99% of the words of ``raw`` (grounding tags removed) are in
  ``markdown``, and >99% of the words drawn on the page are too (so the simulated model read the
  right page, the right way up);
* every box of every ``image`` block in ``raw`` is a figure whose ``bbox`` is exactly
  ``int(v / 999 * size)`` of the image that was sent (row ``width``/``height``), whose crop has
  the bbox's size, and whose pixels are the figure that was drawn there: every figure is a solid
  colour, unique on its page, and the crop must be that colour and must cover the place where a
  fresh render of the page at the sent size shows that colour;
* each page's row holds that page's content (page order), huge pages respect
  ``--max-page-pixels``, tiny pages still give usable rows;
* every request the server received follows the DeepSeek-OCR recipe, and every page was
  recognised by the server (no synthetic answers).

Rotation is exercised the way real files do it: landscape pages stored portrait with /Rotate
90/270 and their content counter-rotated (so they read upright on screen), an upside-down
/Rotate 180 page, a landscape MediaBox, a MediaBox with a non-zero origin, a CropBox inset on a
rotated page, and a page whose /Rotate turns its text sideways.
"""

from __future__ import annotations

import io
import random
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pypdfium2 as pdfium
import pytest
from PIL import Image, ImageDraw, ImageFont
from reportlab.lib.pagesizes import A0, letter
from reportlab.lib.utils import ImageReader
from reportlab.pdfgen import canvas

from llm_ocr.testing import SimulatedServer
from tests.conftest import assert_deepseek_request, read_stage, run_cli
from tests.docs import paragraph

# --------------------------------------------------------------------------------------------
# Generators

#: Figure colours: every mix of 0/85/170/255 per channel except near-white (paper) and
#: near-black (text) ones: 48 colours at least 85 apart, easy to tell apart after JPEG.
PALETTE = [
    (r, g, b)
    for r in (0, 85, 170, 255)
    for g in (0, 85, 170, 255)
    for b in (0, 85, 170, 255)
    if not min(r, g, b) >= 170 and not max(r, g, b) <= 85
]


@dataclass
class PageSpec:
    """What was drawn on one page: its words and the colours of its figures."""

    words: list[str] = field(default_factory=list)
    colours: list[tuple[int, int, int]] = field(default_factory=list)


# Maps display coordinates (origin bottom-left of the page as shown, y up) to PDF user space for
# a page shown with /Rotate R, whose MediaBox is W x H: drawing through this matrix makes content
# read upright on screen, as landscape pages stored portrait do. pdfium turns a page clockwise by
# /Rotate for display.
def _display_to_user(rotation: int, w: float, h: float) -> tuple[float, ...]:
    return {
        0: (1, 0, 0, 1, 0, 0),
        90: (0, 1, -1, 0, w, 0),
        180: (-1, 0, 0, -1, w, h),
        270: (0, -1, 1, 0, 0, h),
    }[rotation]


def _solid(colour: tuple[int, int, int]) -> ImageReader:
    """A small solid-colour raster image (a figure is an image object, as in real PDFs)."""
    return ImageReader(Image.new("RGB", (8, 8), colour))


class Doc:
    """A PDF under construction: pages drawn in display space, rotations applied at the end."""

    def __init__(self, path: Path, seed: int) -> None:
        self.path = path
        self.rng = random.Random(seed)
        self.canvas = canvas.Canvas(str(path))
        self.specs: list[PageSpec] = []
        self.rotations: list[int] = []
        self.cropboxes: dict[int, tuple[float, float, float, float]] = {}
        self.mediaboxes: dict[int, tuple[float, float, float, float]] = {}
        self._colours = iter(self.rng.sample(PALETTE, len(PALETTE)))

    def page(
        self,
        display: tuple[float, float],
        *,
        rotation: int = 0,
        upright: bool = True,
        font: float = 11,
        lines: int = 4,
        words: int = 10,
        margin: float | None = None,
        figures: Sequence[tuple[float, float, float, float]] = (),
        captions: bool = False,
    ) -> PageSpec:
        """Draw one page of ``display`` size (points, as shown on screen).

        Text lines start at the top-left margin; ``figures`` are boxes as fractions of the
        display page ``(x0, y0, x1, y1)``, origin top-left, each filled with its own colour.
        ``upright=False`` draws in the unrotated MediaBox instead, so /Rotate turns the content
        sideways (a page scanned the wrong way round).
        """
        dw, dh = display
        if not upright and rotation in (90, 270):
            dw, dh = dh, dw  # content laid out on the MediaBox itself
        w, h = (dw, dh) if (rotation in (0, 180) or not upright) else (dh, dw)
        c = self.canvas
        c.setPageSize((w, h))
        c.saveState()
        if upright:
            c.transform(*_display_to_user(rotation, w, h))
        spec = PageSpec()
        margin = font * 3 if margin is None else margin
        c.setFont("Helvetica", font)
        for i in range(lines):
            line = paragraph(self.rng, words)
            c.drawString(margin, dh - margin - font * (1 + 1.5 * i), line)
            spec.words += line.split()
        for k, (x0, y0, x1, y1) in enumerate(figures):
            colour = next(self._colours)
            c.drawImage(_solid(colour), x0 * dw, (1 - y1) * dh, (x1 - x0) * dw, (y1 - y0) * dh)
            spec.colours.append(colour)
            if captions:
                caption = f"Figure {len(self.specs) + 1}.{k + 1}"
                c.setFont("Helvetica", font * 0.8)
                c.drawString(x0 * dw, (1 - y1) * dh - font, caption)
                spec.words += caption.split()
        c.restoreState()
        c.showPage()
        self.specs.append(spec)
        self.rotations.append(rotation)
        return spec

    def save(self) -> list[PageSpec]:
        self.canvas.save()
        pdf = pdfium.PdfDocument(str(self.path))
        for i, page in enumerate(pdf):
            if self.rotations[i]:
                page.set_rotation(self.rotations[i])
            if i in self.mediaboxes:
                page.set_mediabox(*self.mediaboxes[i])
            if i in self.cropboxes:
                page.set_cropbox(*self.cropboxes[i])
        buffer = io.BytesIO()
        pdf.save(buffer)
        pdf.close()
        self.path.write_bytes(buffer.getvalue())
        return self.specs


def grid(columns: int, rows: int, top: float = 0.2, bottom: float = 0.95, left: float = 0.08, right: float = 0.92):
    """Figure boxes in a ``columns`` x ``rows`` grid filling the given band of the page."""
    cw, rh = (right - left) / columns, (bottom - top) / rows
    return [
        (left + i * cw + 0.1 * cw, top + j * rh + 0.15 * rh, left + (i + 1) * cw - 0.1 * cw, top + (j + 1) * rh - 0.1 * rh)
        for j in range(rows)
        for i in range(columns)
    ]


TWO = [(0.1, 0.4, 0.45, 0.7), (0.55, 0.45, 0.9, 0.85)]  # two figures, side by side, staggered


def make_rotated(path: Path) -> list[PageSpec]:
    doc = Doc(path, seed=1)
    landscape = (letter[1], letter[0])
    doc.page(landscape, rotation=90, figures=TWO)  # stored portrait, shown landscape, upright
    doc.page(letter, rotation=180, figures=TWO)  # upside down in the file, upright on screen
    doc.page(landscape, rotation=270, figures=TWO)
    doc.page(landscape, figures=TWO)  # landscape MediaBox, no /Rotate
    doc.page(letter, rotation=90, figures=TWO)  # landscape MediaBox turned portrait by /Rotate 90
    doc.page(letter, rotation=90, upright=False, figures=TWO)  # /Rotate 90 turns the text sideways
    # MediaBox with a negative origin: the page shows 60 pt more on the left and bottom.
    doc.page(letter, figures=TWO, margin=90)
    doc.mediaboxes[6] = (-60, -60, letter[0], letter[1])
    # A CropBox inset on a /Rotate 270 page: only the inner part is shown (and rendered).
    doc.page(landscape, rotation=270, figures=[(0.2, 0.35, 0.45, 0.6), (0.55, 0.4, 0.8, 0.75)], margin=110)
    doc.cropboxes[7] = (50, 40, letter[0] - 30, letter[1] - 60)
    return doc.save()


def make_tiny(path: Path) -> list[PageSpec]:
    doc = Doc(path, seed=2)
    doc.page((72, 72), font=5, lines=2, words=4, margin=6, figures=[(0.55, 0.5, 0.9, 0.9)])  # 1 x 1 inch
    doc.page((252, 144), font=8, lines=3, words=5, margin=14, figures=[(0.7, 0.55, 0.92, 0.9)])  # business card
    # A Letter page whose author used inches as units: MediaBox 8.5 x 11, 0.16-unit (11.5 pt) type.
    doc.page((8.5, 11), font=0.16, lines=4, words=8, margin=0.7, figures=[(0.15, 0.45, 0.5, 0.7), (0.6, 0.5, 0.85, 0.8)])
    return doc.save()


def make_huge(path: Path) -> list[PageSpec]:
    doc = Doc(path, seed=3)
    doc.page(A0, font=40, lines=5, figures=[(0.1, 0.3, 0.45, 0.55), (0.55, 0.35, 0.9, 0.6), (0.2, 0.7, 0.8, 0.9)])
    # 200 x 200 inches (PDF's largest page without /UserUnit): ~830 MP at 144 DPI.
    doc.page((14400, 14400), font=240, lines=5, figures=[(0.1, 0.3, 0.4, 0.6), (0.6, 0.3, 0.9, 0.5), (0.3, 0.7, 0.7, 0.9)])
    return doc.save()


def make_figures(path: Path) -> list[PageSpec]:
    """40 figures over three pages, 24 of them on the first (each with a caption)."""
    doc = Doc(path, seed=4)
    doc.page(letter, lines=2, figures=grid(4, 6), captions=True)
    doc.page(letter, lines=3, figures=grid(2, 5, top=0.15), captions=True)
    doc.page(letter, rotation=90, lines=3, figures=grid(3, 2, top=0.25), captions=True)
    return doc.save()


def _scan_image(lines: list[str], size: tuple[int, int] = (850, 1100)) -> Image.Image:
    """A greyish 100 DPI "scan" of a Letter page: text lines drawn into the raster."""
    rng = np.random.default_rng(5)
    noise = rng.normal(236, 6, (size[1], size[0])).clip(0, 255).astype(np.uint8)
    img = Image.fromarray(noise, "L").convert("RGB")
    draw = ImageDraw.Draw(img)
    font = ImageFont.load_default(size=17)
    for i, line in enumerate(lines):
        draw.text((100, 100 + 27 * i), line, fill=(30, 30, 30), font=font)
    return img


def make_scan(path: Path) -> list[PageSpec]:
    """Page 1: an image-only scan (no text layer). Pages 2 and 3: scans with an invisible OCR
    text layer, as OCRmyPDF and scanners write; page 3 is shown upside down (/Rotate 180)."""
    rng = random.Random(6)
    c = canvas.Canvas(str(path), pagesize=letter)
    specs = []
    for number in range(3):
        lines = [paragraph(rng, 9) for _ in range(6)]
        buffer = io.BytesIO()
        _scan_image(lines).save(buffer, "JPEG", quality=80)
        c.drawImage(ImageReader(buffer), 0, 0, *letter)
        spec = PageSpec()
        if number:
            text = c.beginText()
            text.setTextRenderMode(3)  # invisible: searchable, not drawn
            text.setFont("Helvetica", 12)
            for i, line in enumerate(lines):
                text.setTextOrigin(72, letter[1] - 72 - 19.2 * i - 12)
                text.textLine(line)
            c.drawText(text)
            spec.words = [w for line in lines for w in line.split()]
        c.showPage()
        specs.append(spec)
    c.save()
    pdf = pdfium.PdfDocument(str(path))
    pdf[2].set_rotation(180)
    buffer = io.BytesIO()
    pdf.save(buffer)
    pdf.close()
    path.write_bytes(buffer.getvalue())
    return specs


def make_corpus(folder: Path) -> dict[str, list[PageSpec]]:
    folder.mkdir(parents=True, exist_ok=True)
    makers = {"figures.pdf": make_figures, "huge.pdf": make_huge, "rotated.pdf": make_rotated, "scan.pdf": make_scan, "tiny.pdf": make_tiny}
    return {name: make(folder / name) for name, make in makers.items()}


# --------------------------------------------------------------------------------------------
# Checks

MAX_PAGE_PIXELS = 3_000_000  # far below A0 at 144 DPI (~32 MP), above Letter (~1.9 MP)
#: The shortest long side a PDF page is rendered at (the default of RenderOptions.min_page_side).
MIN_LONG_SIDE = 640
EOS = "<｜end▁of▁sentence｜>"
GROUNDING = re.compile(r"<\|ref\|>(.*?)<\|/ref\|><\|det\|>(.*?)<\|/det\|>", re.S)
BOX = re.compile(r"\[\s*(-?\d+)\s*,\s*(-?\d+)\s*,\s*(-?\d+)\s*,\s*(-?\d+)\s*\]")


def tokens(text: str) -> Counter[str]:
    return Counter(re.findall(r"\w+", text))


def survival(words: Counter[str], markdown: str) -> float:
    """Share of ``words`` (with multiplicity) found in ``markdown``."""
    total = sum(words.values())
    return sum((words & tokens(markdown)).values()) / total if total else 1.0


def image_boxes(raw: str) -> list[list[int]]:
    """The 0..999 boxes of every ``image`` block of a grounding answer, in order."""
    return [
        [int(v) for v in box.groups()]
        for label, det in GROUNDING.findall(raw)
        if label.strip() == "image"
        for box in BOX.finditer(det)
    ]


def render_like_sent(pdf_path: Path, index: int, width: int, height: int) -> np.ndarray:
    """The page rendered afresh at the size of the image that was sent (no JPEG)."""
    pdf = pdfium.PdfDocument(str(pdf_path))
    try:
        page = pdf[index]
        w_pt, h_pt = page.get_size()
        img = page.render(scale=width / w_pt).to_pil().convert("RGB")
        # The pixel cap shaves the sent image's scale a little (llm_ocr.sources.render._pdf_scale):
        # a pixel or two of difference on the other side is expected, more is a wrong page shape.
        assert abs(img.width - width) <= 1 and abs(img.height - height) <= 3, (img.size, width, height, h_pt)
        if img.size != (width, height):
            img = img.resize((width, height), Image.Resampling.NEAREST)
        return np.asarray(img, dtype=np.int16)
    finally:
        pdf.close()


def colour_box(page: np.ndarray, colour: tuple[int, int, int], near: list[int]) -> list[int]:
    """Pixel bbox ``[x1, y1, x2, y2]`` (exclusive ends) of where ``colour`` shows on a render,
    looked for within a margin around the box ``near`` (a figure's colour is unique on its page;
    a blob reaching the margin makes a box that fails the comparison, as it should)."""
    height, width = page.shape[:2]
    mx, my = 8 + width // 20, 8 + height // 20
    x0, y0 = max(0, near[0] - mx), max(0, near[1] - my)
    window = page[y0 : near[3] + my, x0 : near[2] + mx]
    ys, xs = np.nonzero((np.abs(window - np.array(colour, dtype=np.int16)) <= 8).all(axis=2))
    assert len(xs), f"colour {colour} not found near {near}"
    return [x0 + int(xs.min()), y0 + int(ys.min()), x0 + int(xs.max()) + 1, y0 + int(ys.max()) + 1]


def crop_offset(crop: np.ndarray, render: np.ndarray, bbox: list[int], reach: int = 5) -> tuple[int, int]:
    """The shift ``(dx, dy)`` (each within ``reach`` px, one axis at a time) of the window of
    ``render`` that ``crop`` matches best, snapped to 0 within 1 px (JPEG blurs colour edges by
    about a pixel); also checks the best match is close (mean abs difference under 6)."""
    x1, y1, x2, y2 = bbox
    height, width = render.shape[:2]
    scores = {}
    for dx, dy in [(d, 0) for d in range(-reach, reach + 1)] + [(0, d) for d in range(-reach, reach + 1)]:
        if 0 <= x1 + dx and x2 + dx <= width and 0 <= y1 + dy and y2 + dy <= height:
            scores[dx, dy] = float(np.abs(crop - render[y1 + dy : y2 + dy, x1 + dx : x2 + dx]).mean())
    (dx, dy), best = min(scores.items(), key=lambda kv: kv[1])
    assert best < 6, best
    return (0 if abs(dx) <= 1 else dx, 0 if abs(dy) <= 1 else dy)


def check_figures(row: dict, spec: PageSpec, pdf_path: Path) -> None:
    """Figures match the answer's boxes, their crops match their bboxes and the drawn figures."""
    width, height = row["width"], row["height"]
    where = f"{row['doc_id']} page {row['page']}"
    boxes = image_boxes(row["raw"])
    expected = [[int(x1 / 999 * width), int(y1 / 999 * height), int(x2 / 999 * width), int(y2 / 999 * height)] for x1, y1, x2, y2 in boxes]
    figures = row["figures"]
    assert [f["bbox"] for f in figures] == expected, where
    assert [f["id"] for f in figures] == [f"p{row['page']}-f{k}" for k in range(1, len(figures) + 1)], where
    # Every drawn figure was located exactly once (none lost, none invented).
    assert len(figures) == len(spec.colours), where
    render = render_like_sent(pdf_path, row["page"] - 1, width, height) if figures else None
    # One 0..999 step is size/999 pixels; the server rounds down once and the client once more.
    tol_x, tol_y = 2 + 2 * width / 999, 2 + 2 * height / 999
    found = []
    for figure in figures:
        assert f"![](figure:{figure['id']})" in row["markdown"], where
        assert figure["error"] is None, (where, figure["error"])
        x1, y1, x2, y2 = figure["bbox"]
        crop = Image.open(io.BytesIO(figure["image"]["bytes"])).convert("RGB")
        assert crop.size == (x2 - x1, y2 - y1), where
        # Its pixels are the page's at that bbox (JPEG q95 noise aside), and no shifted window
        # of the page matches them better: cut from the right place, to the pixel.
        assert crop_offset(np.asarray(crop, dtype=np.int16), render, figure["bbox"]) == (0, 0), (where, figure["id"])
        # The crop shows one drawn figure: uniform, in that figure's colour (inner part: the
        # crop edge may catch a pixel of paper, and JPEG blurs edges).
        pixels = np.asarray(crop, dtype=float)
        dy, dx = max(1, pixels.shape[0] // 6), max(1, pixels.shape[1] // 6)
        inner = pixels[dy : pixels.shape[0] - dy or None, dx : pixels.shape[1] - dx or None].reshape(-1, 3)
        mean = inner.mean(axis=0)
        colour = min(spec.colours, key=lambda c: float(((np.array(c) - mean) ** 2).sum()))
        assert np.abs(mean - colour).max() < 25 and inner.std(axis=0).max() < 15, (where, figure["id"], mean, colour)
        found.append(colour)
        # ... and it covers that figure: its bbox is where a fresh render shows the colour.
        truth = colour_box(render, colour, figure["bbox"])
        diffs = [abs(a - b) for a, b in zip(figure["bbox"], truth)]
        assert max(diffs[0], diffs[2]) <= tol_x and max(diffs[1], diffs[3]) <= tol_y, (where, figure["id"], figure["bbox"], truth)
    assert sorted(found) == sorted(spec.colours), where


@pytest.fixture(scope="module")
def extracted(tmp_path_factory):
    """Generate the corpus, extract it once against the simulated server; rows, requests, specs."""
    root = tmp_path_factory.mktemp("shapes")
    specs = make_corpus(root / "docs")
    with SimulatedServer("--instant", corpus=root / "docs") as server:
        result = run_cli(
            "extract", str(root / "docs"), "--output", str(root / "out"), "--endpoint", server.base_url,
            "--workers", "0", "--progress", "log", "--max-page-pixels", str(MAX_PAGE_PIXELS), timeout=120,
        )
        requests = server.requests()
    assert result.returncode == 0, result.stderr
    rows = read_stage(root / "out", "extract")
    return root / "docs", specs, rows, requests


def test_every_page_has_one_row_with_its_own_content(extracted) -> None:
    _, specs, rows, _ = extracted
    assert sorted((r["doc_id"], r["page"]) for r in rows) == [
        (name, p) for name in sorted(specs) for p in range(1, len(specs[name]) + 1)
    ]
    for row in rows:
        spec = specs[row["doc_id"]][row["page"] - 1]
        where = f"{row['doc_id']} page {row['page']}"
        assert row["num_pages"] == len(specs[row["doc_id"]]) and row["doc_index"] == sorted(specs).index(row["doc_id"])
        assert row["status"] == "ok", (where, row["error"])
        # Page order: this row carries this page's words (pages share a vocabulary, so a row
        # with another page's content would miss many of them).
        assert survival(tokens(" ".join(spec.words)), row["markdown"]) > 0.99, (where, row["raw"][:300])
        if not spec.words and not spec.colours:  # the image-only scan: nothing the server can read
            assert row["raw"] == "" and row["markdown"] == "" and row["error"] == "model returned no text"
        else:
            assert row["error"] is None, (where, row["error"])


def test_model_words_survive_into_markdown(extracted) -> None:
    _, _, rows, _ = extracted
    for row in rows:
        raw = GROUNDING.sub(" ", row["raw"].replace(EOS, " "))
        assert "<|" not in raw
        assert survival(tokens(raw), row["markdown"]) > 0.99, (row["doc_id"], row["page"])


def test_figures_match_boxes_and_drawn_figures(extracted) -> None:
    docs, specs, rows, _ = extracted
    assert sum(len(r["figures"]) for r in rows if r["doc_id"] == "figures.pdf") == 40
    for row in rows:
        check_figures(row, specs[row["doc_id"]][row["page"] - 1], docs / row["doc_id"])


def test_every_request_follows_the_recipe_and_every_page_was_recognised(extracted) -> None:
    _, _, rows, requests = extracted
    assert len(requests) == len(rows)  # no retries, nothing sent twice
    for entry in requests:
        assert_deepseek_request(entry, max_model_len=8192)
    # The server answered every page from that page's own layout: no page went unrecognised
    # (a synthetic answer) or was mistaken for another.
    recognised = sorted((Path(e["known_page"]["source"]).name, e["known_page"]["page"]) for e in requests if e.get("known_page"))
    assert recognised == sorted((r["doc_id"], r["page"]) for r in rows)


def rows_with_page_size(extracted, doc_id: str) -> list[tuple[dict, float, float]]:
    """The rows of one generated PDF, each with its page's size in points."""
    docs, _, rows, _ = extracted
    pdf = pdfium.PdfDocument(str(docs / doc_id))
    try:
        return [(r, *pdf[r["page"] - 1].get_size()) for r in rows if r["doc_id"] == doc_id]
    finally:
        pdf.close()


def test_huge_pages_are_scaled_down_to_the_pixel_cap(extracted) -> None:
    huge = rows_with_page_size(extracted, "huge.pdf")
    assert len(huge) == 2
    for row, w_pt, h_pt in huge:
        assert (2 * w_pt) * (2 * h_pt) > 4 * MAX_PAGE_PIXELS  # at 144 DPI (2 px/pt): far over the cap
        assert 0.97 * MAX_PAGE_PIXELS < row["width"] * row["height"] <= MAX_PAGE_PIXELS
        assert abs(row["width"] / row["height"] - w_pt / h_pt) < 0.01


def test_tiny_pages_are_rendered_big_enough_to_read(extracted) -> None:
    """Small pages are rendered with their long side at least 640 px.

    At 144 DPI a 1-inch page is 144 x 144 px and a Letter page drawn in inch units (MediaBox
    8.5 x 11) is 17 x 22 px. vLLM's DeepSeek-OCR processor pads and resizes any image of at most
    640 x 640 px to its 1024 px global view (``ImageOps.pad``, no local tiles), so a 144 px page
    reaches the model as a 7x bicubic blow-up of blurred glyphs, and a 17 px one is unreadable;
    at 17 px wide every box narrower than ~59/999 of the page also collapses to zero pixels, so
    figures are silently dropped. Rendering the vector page at 640 px instead costs nothing
    (still only the global view: the same ~273 image tokens) and gives the model 4-40x the
    linear resolution. The floor is 640 and not 1024 because above 640 px the processor switches
    to 640 px tiles, adding hundreds of prompt tokens to every small page (``--dpi`` still raises
    the resolution for those who want that). Only PDFs get the floor: upscaling a raster image
    adds nothing the model's own resize would not.
    """
    tiny = rows_with_page_size(extracted, "tiny.pdf")
    assert len(tiny) == 3
    for row, w_pt, h_pt in tiny:
        assert max(w_pt, h_pt) * 2 < MIN_LONG_SIDE  # 144 DPI alone would give less
        assert max(row["width"], row["height"]) == MIN_LONG_SIDE, (row["width"], row["height"])
        assert abs(row["width"] / row["height"] - w_pt / h_pt) < 0.01
        assert len(row["figures"]) >= 1 and row["error"] is None
