"""Pages the simulated server "knows": PDF layout extracted with pypdfium2 plus a thumbnail
fingerprint to recognise a rendered page when a client sends it.

The simulated model answers a known page from the PDF's own text layer and image objects, so
tests can check word recall and figure boxes against ground truth without a GPU.

Coordinates inside this module are fractions of the displayed page (0..1, origin top-left,
after the page's ``/Rotate``); each family's writer turns them into its own coordinate space.
"""

from __future__ import annotations

import io
import statistics
import sys
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llm_ocr import pdf_space
from llm_ocr.pdf_space import PageFrame, object_bounds, page_objects
from llm_ocr.vlm.box import Box
from llm_ocr.vlm.view import Element

if TYPE_CHECKING:  # numpy and PIL are imported lazily: importing this module stays cheap
    import numpy as np
    from PIL import Image

#: Fingerprint thumbnail size (width, height). Every page is stretched into this box whatever
#: its aspect ratio; the aspect ratio is compared separately.
FP_SIZE = (48, 64)
#: Corpus pages are rendered so that their longer side has about this many pixels before
#: being reduced to the fingerprint: enough that anti-aliasing differences average out.
RENDER_LONG_SIDE = 384
#: How many analysed images' places a corpus remembers (:attr:`CorpusIndex.found`).
FOUND_KEPT = 4096
#: The grey page a crop is looked for in (:mod:`.crops`) has this many pixels on its longer
#: side (a 7 pt text line is then 2.5 px tall on a 17 in page) ...
LOCATE_LONG_SIDE = 768
#: ... and at least this many on its shorter side (up to :data:`LOCATE_MAX_SIDE` on the longer):
#: a 1:60 strip at 768 px would be 12 px wide, too narrow to tell one segment from the next.
LOCATE_SHORT_SIDE = 96
LOCATE_MAX_SIDE = 8192
#: ... and is rendered this many times larger, then reduced with a box filter, as the crops
#: are: two box-filtered views of one page correlate far better than a small render does.
LOCATE_SUPERSAMPLE = 2
#: A received image matches a known page when the mean absolute grey-level difference of the
#: fingerprints is below this (0..255) ...
MAX_MEAN_ABS_DIFF = 12.0
#: ... their normalised correlation is at least this (so a blank image cannot match a mostly
#: white page on brightness alone) ...
MIN_CORRELATION = 0.85
#: ... and the aspect ratios agree within this relative tolerance.
MAX_ASPECT_DIFF = 0.02
#: Image objects smaller than this fraction of the page are ignored (bullets, logos, rules);
#: larger than ``MAX_IMAGE_AREA`` they are page backgrounds (scans), not figures.
MIN_IMAGE_AREA = 0.0005
MAX_IMAGE_AREA = 0.8


@dataclass(frozen=True)
class LayoutBlock:
    """One block of a known page: label, box as page fractions ``(x0, y0, x1, y1)``, text, and
    (for text from a text layer) its lines, each ``(box, text)``: what a crop of the page shows
    of the block (:mod:`.crops`)."""

    label: str
    box: tuple[float, float, float, float]
    text: str
    lines: tuple[tuple[tuple[float, float, float, float], str], ...] = ()

    def element(self, description: str = "") -> Element:
        """The block as a family's writer gets it (:mod:`llm_ocr.vlm.view`)."""
        return Element(self.label, Box(*self.box), self.text, description)


@dataclass
class KnownPage:
    """A page of a corpus PDF: where it came from, its shape, fingerprint and layout."""

    source: str
    index: int  # 0-based page index in the PDF
    aspect: float  # width / height as displayed
    fingerprint: Any  # numpy float32 vector of FP_SIZE[0] * FP_SIZE[1] grey levels
    blocks: list[LayoutBlock] = field(default_factory=list)
    size_pt: tuple[float, float] = (0.0, 0.0)  # width, height in points, as displayed
    #: The page in grey (uint8, LOCATE_LONG_SIDE px on its longer side, softened): where a crop
    #: of it lies is found in this (:mod:`.crops`).
    grey: Any = None
    #: The page's /Rotate (degrees clockwise): its text is upright only when this is 0.
    rotation: int = 0


def fingerprint_image(img: Image.Image) -> np.ndarray:
    """The fingerprint of an image: grey levels of a ``FP_SIZE`` thumbnail as a float vector.

    A box filter is used because it averages ink coverage the same way whatever the source
    resolution, so a 144 DPI JPEG and a low-resolution render of the same page agree.
    """
    import numpy as np
    from PIL import Image

    grey = img.convert("L").resize(FP_SIZE, Image.Resampling.BOX)
    return np.asarray(grey, dtype=np.float32).ravel()


def open_for_fingerprint(data: bytes) -> tuple[Image.Image, tuple[int, int]]:
    """Open encoded image bytes cheaply for fingerprinting; returns the image and its size.

    For JPEG the decoder's draft mode decodes at 1/2..1/8 scale, which makes fingerprinting a
    full page ~10x cheaper; the original size is read before that.
    """
    from PIL import Image

    img = Image.open(io.BytesIO(data))
    size = img.size
    if img.format == "JPEG":
        img.draft("L", (FP_SIZE[0] * 4, FP_SIZE[1] * 4))
    return img, size


class CorpusIndex:
    """Fingerprints and layouts of every page of the corpus PDFs, with nearest-page lookup."""

    def __init__(self, pages: list[KnownPage]) -> None:
        import numpy as np

        self.pages = pages
        #: Where each image analysed lately was found (:func:`~.images.analyse_image`), by its
        #: digest and what it was looked for as: a crop search takes tens of correlations, and
        #: one image comes again (a retry; families that render a piece alike, several tests
        #: of one server). The newest :data:`FOUND_KEPT` last.
        self.found: OrderedDict[tuple[Any, ...], tuple[KnownPage | None, int, Any]] = OrderedDict()
        self.found_lock = threading.Lock()
        # One matrix so that matching a request is a few vectorised numpy operations even for
        # thousands of known pages.
        if pages:
            self._fps = np.stack([p.fingerprint for p in pages])
            self._aspects = np.array([p.aspect for p in pages], dtype=np.float64)
        else:
            self._fps = np.zeros((0, FP_SIZE[0] * FP_SIZE[1]), dtype=np.float32)
            self._aspects = np.zeros((0,), dtype=np.float64)

    def __len__(self) -> int:
        return len(self.pages)

    def match(self, fp: np.ndarray, aspect: float | None) -> KnownPage | None:
        """The known page nearest to a fingerprint, or None when nothing is close enough
        (``aspect`` None: any aspect ratio, for pages resized to another shape)."""
        import numpy as np

        if not self.pages:
            return None
        if aspect is None:
            ok = np.ones(len(self.pages), dtype=bool)
        else:
            ok = np.abs(self._aspects - aspect) <= MAX_ASPECT_DIFF * aspect
        if not ok.any():
            return None
        idx = np.flatnonzero(ok)
        cand = self._fps[idx]
        mad = np.abs(cand - fp[None, :]).mean(axis=1)
        best = int(np.argmin(mad))
        if mad[best] > MAX_MEAN_ABS_DIFF:
            return None
        a = cand[best] - cand[best].mean()
        b = fp - fp.mean()
        denom = float(np.sqrt((a * a).sum() * (b * b).sum()))
        if denom == 0.0 or float((a * b).sum()) / denom < MIN_CORRELATION:
            return None
        return self.pages[int(idx[best])]


def find_pdfs(path: str | Path) -> list[Path]:
    """PDF files at ``path``: the file itself, or every ``*.pdf`` below a folder, sorted."""
    p = Path(path)
    if p.is_dir():
        return sorted(q for q in p.rglob("*") if q.is_file() and q.suffix.lower() == ".pdf")
    return [p]


def build_corpus(paths: list[str | Path]) -> CorpusIndex:
    """Index every page of every PDF under ``paths``. Unreadable PDFs are reported and skipped.
    With ``LLM_OCR_SIM_CORPUS_CACHE`` set, a PDF indexed before (by its bytes) is loaded from
    there instead (:mod:`.corpus_cache`).

    Runs pypdfium2 sequentially: it is not thread-safe, and the server calls this from a
    single worker thread at startup.
    """
    from . import corpus_cache

    folder = corpus_cache.cache_folder()
    code = [__file__, pdf_space.__file__]  # what renders, fingerprints and reads a page
    pages: list[KnownPage] = []
    for root in paths:
        for pdf_path in find_pdfs(root):
            path = corpus_cache.entry_path(folder, pdf_path, code) if folder is not None else None
            entry = corpus_cache.load(path) if path is not None else None
            found = _from_entry(entry, str(pdf_path)) if entry is not None else None
            if found is None:
                found = _index_pdf(pdf_path)
                if path is not None and found:
                    corpus_cache.store(path, _to_entry(found))
            pages.extend(found)
    return CorpusIndex(pages)


def _to_entry(pages: list[KnownPage]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """``pages`` as a cache entry (:mod:`.corpus_cache`): plain fields, and arrays by name."""
    arrays: dict[str, Any] = {}
    meta = []
    for i, page in enumerate(pages):
        arrays[f"fingerprint_{i}"] = page.fingerprint
        if page.grey is not None:
            arrays[f"grey_{i}"] = page.grey
        meta.append({
            "index": page.index, "aspect": page.aspect, "size_pt": list(page.size_pt), "rotation": page.rotation,
            "grey": page.grey is not None,
            "blocks": [[b.label, list(b.box), b.text, [[list(box), text] for box, text in b.lines]]
                       for b in page.blocks],
        })  # fmt: skip
    return meta, arrays


def _from_entry(entry: tuple[list[dict[str, Any]], dict[str, Any]], source: str) -> list[KnownPage] | None:
    """The pages of a cache entry, their ``source`` set to ``source``; None when it is not whole."""
    meta, arrays = entry
    try:
        return [
            KnownPage(
                source=source, index=page["index"], aspect=page["aspect"], fingerprint=arrays[f"fingerprint_{i}"],
                blocks=[LayoutBlock(label, tuple(box), text, tuple((tuple(b), t) for b, t in lines))
                        for label, box, text, lines in page["blocks"]],
                size_pt=tuple(page["size_pt"]), grey=arrays[f"grey_{i}"] if page["grey"] else None,
                rotation=page["rotation"],
            )
            for i, page in enumerate(meta)
        ]  # fmt: skip
    except (KeyError, TypeError, ValueError):
        return None


def _index_pdf(pdf_path: Path) -> list[KnownPage]:
    """Every page of one PDF, indexed; none when it cannot be opened (reported)."""
    import pypdfium2 as pdfium

    try:
        pdf = pdfium.PdfDocument(str(pdf_path))
    except pdfium.PdfiumError as exc:
        print(f"simulated server: skipping corpus file {pdf_path}: {exc}", file=sys.stderr)
        return []
    pages = []
    try:
        for i in range(len(pdf)):
            page = pdf[i]
            try:
                pages.append(_index_page(page, str(pdf_path), i))
            finally:
                page.close()
    finally:
        pdf.close()
    return pages


def _index_page(page: Any, source: str, index: int) -> KnownPage:
    """Fingerprint and layout of one pypdfium2 page."""
    w_pt, h_pt = page.get_size()
    scale = RENDER_LONG_SIDE / max(w_pt, h_pt, 1.0)
    img = page.render(scale=scale, grayscale=True).to_pil()
    aspect = img.width / img.height
    return KnownPage(
        source=source,
        index=index,
        aspect=aspect,
        fingerprint=fingerprint_image(img),
        blocks=extract_layout(page),
        size_pt=(w_pt, h_pt),
        grey=_locate_grey(page, w_pt, h_pt),
        rotation=page.get_rotation() % 360,
    )


def soften(image: Any) -> Any:
    """A grey PIL image blurred over 3 x 3 pixels: two views of one page whose pixels do not
    line up (a crop's edge between two pixels of the other) then still correlate closely."""
    from PIL import ImageFilter

    return image.filter(ImageFilter.BoxBlur(1))


def _locate_grey(page: Any, w_pt: float, h_pt: float) -> np.ndarray:
    """The page as the grey image crops are looked for in (see :data:`LOCATE_LONG_SIDE`)."""
    import numpy as np
    from PIL import Image

    long, short = max(w_pt, h_pt, 1.0), max(min(w_pt, h_pt), 1.0)
    scale = max(LOCATE_LONG_SIDE / long, min(LOCATE_SHORT_SIDE / short, LOCATE_MAX_SIDE / long))
    big = page.render(scale=scale * LOCATE_SUPERSAMPLE, grayscale=True).to_pil().convert("L")
    size = (max(1, round(big.width / LOCATE_SUPERSAMPLE)), max(1, round(big.height / LOCATE_SUPERSAMPLE)))
    return np.asarray(soften(big.resize(size, Image.Resampling.BOX)), dtype=np.uint8).copy()


# ---------------------------------------------------------------------------------------------
# Layout extraction


@dataclass
class _Line:
    box: tuple[float, float, float, float]
    pieces: list[tuple[float, str]]  # (left x, text) of the rectangles on this line

    @property
    def height(self) -> float:
        return self.box[3] - self.box[1]

    @property
    def text(self) -> str:
        return " ".join(t for _, t in sorted(self.pieces))


def _text_lines(page: Any, frame: PageFrame) -> list[_Line]:
    """Text lines of a page: pdfium's text rectangles merged when they share a line."""
    textpage = page.get_textpage()
    try:
        rects = []
        for i in range(textpage.count_rects()):
            l, b, r, t = textpage.get_rect(i)
            text = " ".join(textpage.get_text_bounded(l, b, r, t).split())
            if text:
                box = frame.box(l, b, r, t)
                rects.append(_Line(box, [(box[0], text)]))
    finally:
        textpage.close()
    rects.sort(key=lambda ln: (ln.box[1], ln.box[0]))
    lines: list[_Line] = []
    for rect in rects:
        for line in lines[-4:]:  # a rectangle continues one of the last few lines, if any
            if _same_line(line, rect):
                line.box = _union(line.box, rect.box)
                line.pieces += rect.pieces  # joined in x order by _Line.text
                break
        else:
            lines.append(rect)
    return lines


def _same_line(a: _Line, b: _Line) -> bool:
    """Whether two rectangles sit on one text line (vertical overlap, small horizontal gap)."""
    overlap = min(a.box[3], b.box[3]) - max(a.box[1], b.box[1])
    h = min(a.height, b.height) or 1e-6
    gap = max(a.box[0], b.box[0]) - min(a.box[2], b.box[2])
    # Two columns of a page share y but are far apart: a gap over ~2 line heights keeps them
    # apart.
    return overlap > 0.5 * h and gap < 2.0 * max(a.height, b.height)


def _union(a: tuple[float, ...], b: tuple[float, ...]) -> tuple[float, float, float, float]:
    return (min(a[0], b[0]), min(a[1], b[1]), max(a[2], b[2]), max(a[3], b[3]))


def _group_paragraphs(lines: list[_Line]) -> list[list[_Line]]:
    """Lines joined into paragraph blocks: a line continues a block when it starts just below
    the block's last line, overlaps it horizontally and has a similar height."""
    if not lines:
        return []
    med = statistics.median(ln.height for ln in lines) or 1e-6
    blocks: list[list[_Line]] = []
    for line in lines:
        target = None
        # Every column of a page keeps a block open at one height: look far enough back for a
        # seven-column newspaper page (lines are sorted by height, so the columns interleave).
        for block in reversed(blocks[-32:]):
            last = block[-1]
            gap = line.box[1] - last.box[3]
            overlaps = min(line.box[2], last.box[2]) > max(line.box[0], last.box[0])
            similar = max(line.height, last.height) <= 1.3 * min(line.height, last.height)
            if -0.3 * med <= gap <= 0.9 * med and overlaps and similar:
                target = block
                break
        if target is None:
            blocks.append([line])
        else:
            target.append(line)
    return blocks


def _image_boxes(page: Any, frame: PageFrame) -> list[tuple[float, float, float, float]]:
    """Boxes of image objects, descending into Form XObjects (:func:`~llm_ocr.pdf_space.page_objects`)."""
    import pypdfium2.raw as pdfium_c

    out = [frame.box(*object_bounds(obj, matrices)) for obj, matrices in page_objects(page)
           if obj.type == pdfium_c.FPDF_PAGEOBJ_IMAGE]
    keep = []
    for box in out:
        area = (box[2] - box[0]) * (box[3] - box[1])
        if MIN_IMAGE_AREA <= area <= MAX_IMAGE_AREA:
            keep.append(box)
    return keep


def extract_layout(page: Any) -> list[LayoutBlock]:
    """Layout blocks of a page in reading order (top to bottom, then left to right).

    Text comes from the text layer, grouped into paragraphs; a block whose lines are clearly
    taller than the page's median line is a ``title`` (the first such block) or ``sub_title``;
    every image object of a sensible size is an ``image`` block with empty text.
    """
    frame = PageFrame(page)
    lines = _text_lines(page, frame)
    blocks: list[LayoutBlock] = []
    if lines:
        med = statistics.median(ln.height for ln in lines)
        have_title = False
        for group in _group_paragraphs(lines):
            box = group[0].box
            for ln in group[1:]:
                box = _union(box, ln.box)
            text = " ".join(ln.text for ln in group)
            label = "text"
            if statistics.median(ln.height for ln in group) > 1.3 * med:
                label = "sub_title" if have_title else "title"
                have_title = True
            blocks.append(LayoutBlock(label, box, text, tuple((ln.box, ln.text) for ln in group)))
    blocks.extend(LayoutBlock("image", box, "") for box in _image_boxes(page, frame))
    blocks.sort(key=lambda b: (round(b.box[1], 3), b.box[0]))
    # The title decision above went by extraction order; after sorting, keep "title" only for
    # the first tall block so the page reads title, then sub_titles.
    seen_title = False
    fixed = []
    for b in blocks:
        if b.label in ("title", "sub_title"):
            b = LayoutBlock("sub_title" if seen_title else "title", b.box, b.text, b.lines)
            seen_title = True
        fixed.append(b)
    return fixed
