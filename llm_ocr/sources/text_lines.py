"""A PDF page's text layer as positioned lines, and whether it is sound enough to stand for the page.

The ``text-layer`` route (docs/routes.md) gives a born-digital page its Markdown from its own text
layer, laid out by the CPU engine, instead of sending it to the model. That is only right when the
layer holds the page's text, all of it, as text. A layer is **sound** when:

- it reads as English (:func:`~llm_ocr.sources.text_layer.judge_text_layer`: enough words, almost
  no replacement, private-use or control characters, at least half of its longer words in the
  English word list, which rejects the Caesar-shifted layers of broken ``ToUnicode`` maps);
- its text is visible: text drawn in render mode 3 (invisible) is an OCR layer someone put over a
  scanned image, of unknown quality, not the PDF's own text;
- no image covers most of the page: a scan with a few words of real text on it (a repository's
  "Downloaded from ..." line) would otherwise be read as those words alone;
- the page's ink does not promise much more text than the layer holds: text drawn as outlines or
  inside images is not in the layer (the ink estimate runs 0.75 to 1.35 times the true count,
  :mod:`.density`, so a layer under half of it is missing text);
- it holds no formulas (mathematical symbols, Greek or mathematical alphanumerics beyond a
  trace): a text layer cannot write LaTeX, a model can;
- most of its text stands upright on the rendered page (PDFium's character angle plus the
  page's ``/Rotate``): the CPU engine's layout reads horizontal lines.

Lines come from PDFium's text rectangles (a run of characters on one line, split at large gaps,
so table cells and columns stay apart), in the pixels of the page as it was rendered (``/Rotate``
applied), which is what the CPU engine's layout works in. Runs in a worker process (pypdfium2
is not thread-safe).
"""

from __future__ import annotations

import io
import unicodedata
from dataclasses import dataclass, field
from typing import Any

from llm_ocr.pdf_space import PageFrame, object_bounds, page_objects
from llm_ocr.sources.text_layer import clean_text, judge_text_layer

#: An image covering at least this share of the page makes it a scan (or a poster): not sound.
MAX_IMAGE_SHARE = 0.5
#: Share of the text objects drawn invisible (render mode 3) that makes the layer someone's OCR.
MAX_INVISIBLE_SHARE = 0.5
#: The layer must hold at least this share of the characters the page's ink suggests.
MIN_INK_SHARE = 0.5
#: Mathematical characters (beyond ASCII operators) allowed before a page counts as holding formulas:
#: a share of the non-space characters, and a count (a stray "±" or "×" is not a formula).
MAX_MATH_SHARE = 0.01
MIN_MATH_CHARS = 5

#: Degrees a character may lean and still count as upright on the rendered page.
MAX_TILT = 10.0
#: A line's box height in font sizes (see :func:`_lines`): type is set with about this leading.
LINE_HEIGHT = 1.2
#: Share of a line's glyph-box height added above and below it when the font size is not known.
LINE_PAD = 0.25

_REJECTED = "PDF text layer rejected: "

#: A positioned line: ``(x1, y1, x2, y2, text)`` in pixels of the rendered page.
LayerLine = tuple[float, float, float, float, str]


@dataclass(frozen=True)
class LayerPage:
    """The verdict on one PDF page's text layer for the text-layer route."""

    sound: bool
    note: str
    lines: tuple[LayerLine, ...] = field(default=(), repr=False)
    #: The layer's text when it reads as English (usable for the no-truth signals), else None.
    text: str | None = field(default=None, repr=False)

    @property
    def characters(self) -> int:
        """Characters of the layer's lines."""
        return sum(len(line[4]) for line in self.lines)


class _Frame(PageFrame):
    """The displayed page in pixels of its render, ``width`` x ``height``."""

    def __init__(self, page: Any, width: int, height: int) -> None:
        super().__init__(page)
        self.width, self.height = width, height

    def pixels(self, left: float, bottom: float, right: float, top: float) -> tuple[float, float, float, float]:
        """A user-space rectangle as ``(x1, y1, x2, y2)`` in pixels of the render, clamped to it."""
        x1, y1, x2, y2 = self.box(left, bottom, right, top)
        return x1 * self.width, y1 * self.height, x2 * self.width, y2 * self.height


def _char_at(textpage: Any, left: float, bottom: float, right: float, top: float) -> int:
    """The index of a character in the middle of a text rectangle (-1: none found)."""
    import pypdfium2.raw as pdfium_c

    tolerance = max(1.0, min(top - bottom, right - left) / 2)
    return int(pdfium_c.FPDFText_GetCharIndexAtPos(textpage.raw, (left + right) / 2, (top + bottom) / 2,
                                                   tolerance, tolerance))


def _upright(textpage: Any, index: int, rotation: int) -> bool:
    """Whether character ``index`` stands upright on the rendered page: its angle in the page's
    space (PDFium measures it clockwise) plus the page's /Rotate makes a whole turn."""
    import math

    import pypdfium2.raw as pdfium_c

    angle = float(pdfium_c.FPDFText_GetCharAngle(textpage.raw, index))
    if angle < 0:  # PDFium could not say: take it as written
        return True
    turn = (math.degrees(angle) + rotation) % 360
    return min(turn, 360 - turn) <= MAX_TILT


def _lines(textpage: Any, frame: _Frame) -> tuple[list[LayerLine], int]:
    """The page's text lines in pixels of the rendered page, and the characters of those that do
    not stand upright on it (text turned sideways or upside down)."""
    import pypdfium2.raw as pdfium_c

    lines, turned = [], 0
    # Points to pixels along the rendered page's height: the page's height, or its width when /Rotate turns it.
    extent = (frame.top - frame.bottom) if frame.rotation in (0, 180) else (frame.right - frame.left)
    scale = frame.height / (extent or 1.0)
    for i in range(textpage.count_rects()):
        left, bottom, right, top = textpage.get_rect(i)
        text = " ".join(clean_text(textpage.get_text_bounded(left, bottom, right, top)).split())
        if not text:
            continue
        x1, y1, x2, y2 = frame.pixels(left, bottom, right, top)
        if not (x2 > x1 and y2 > y1):
            continue
        index = _char_at(textpage, left, bottom, right, top)
        upright = index < 0 or _upright(textpage, index, frame.rotation)
        if not upright:
            turned += len(text)
        # PDFium's boxes hug the glyphs, so their heights vary with the letters ("Section 4.1" has
        # no descender) and they leave gaps between the lines of a paragraph. The CPU engine's
        # layout expects a text detector's boxes, a line's height and a little more: a box of
        # LINE_HEIGHT times the font size around the glyphs' middle, so that paragraphs hold
        # together and larger type stands out as a heading. A line whose size PDFium does not
        # know (or that is turned) gets its glyph box with a quarter of its height above and below.
        size = float(pdfium_c.FPDFText_GetFontSize(textpage.raw, index)) if index >= 0 and upright else 0.0
        half = LINE_HEIGHT * size * scale / 2 if size > 0 else (y2 - y1) * (0.5 + LINE_PAD)
        middle = (y1 + y2) / 2
        y1, y2 = max(0.0, middle - half), min(float(frame.height), middle + half)
        lines.append((round(x1, 1), round(y1, 1), round(x2, 1), round(y2, 1), text))
    return lines, turned


def _objects(page: Any) -> tuple[float, int, int]:
    """(largest share of the page one image covers, text objects, invisible text objects),
    descending into form XObjects (:func:`~llm_ocr.pdf_space.page_objects`)."""
    import pypdfium2.raw as pdfium_c

    left, bottom, right, top = page.get_bbox()
    area = max(1.0, (right - left) * (top - bottom))
    largest, texts, invisible = 0.0, 0, 0
    for obj, matrices in page_objects(page):
        if obj.type == pdfium_c.FPDF_PAGEOBJ_IMAGE:
            x1, y1, x2, y2 = object_bounds(obj, matrices)
            w = max(0.0, min(right, x2) - max(left, x1))
            h = max(0.0, min(top, y2) - max(bottom, y1))
            largest = max(largest, w * h / area)
        elif obj.type == pdfium_c.FPDF_PAGEOBJ_TEXT:
            texts += 1
            if pdfium_c.FPDFTextObj_GetTextRenderMode(obj.raw) == pdfium_c.FPDF_TEXTRENDERMODE_INVISIBLE:
                invisible += 1
    return largest, texts, invisible


def math_characters(text: str) -> int:
    """Characters of formulas: mathematical symbols beyond ASCII's operators, Greek letters and
    mathematical alphanumerics (a text layer's trace of typeset math)."""
    count = 0
    for char in text:
        code = ord(char)
        if char.isascii():
            continue
        if unicodedata.category(char) == "Sm" or 0x0370 <= code <= 0x03FF or 0x1D400 <= code <= 0x1D7FF:
            count += 1
    return count


def _ink_chars(image: bytes | None) -> int | None:
    if image is None:
        return None
    from PIL import Image

    from llm_ocr.sources.density import ink_estimate

    try:
        with Image.open(io.BytesIO(image)) as opened:
            estimate = ink_estimate(opened)
    except Exception:  # noqa: BLE001 - an estimate is a hint: a page is never refused for lacking one
        return None
    return estimate.chars if estimate is not None else None


def judge_layer(raw: str, lines: list[LayerLine], image_share: float, texts: int, invisible: int,
                ink: int | None, turned: int = 0) -> LayerPage:
    """The verdict on a page's text layer from what was read of it (see the module docstring);
    ``turned``: characters of ``lines`` not upright on the rendered page."""
    verdict = judge_text_layer(raw)
    if not verdict.usable:
        return LayerPage(False, verdict.note)
    text = verdict.text
    if texts and invisible / texts > MAX_INVISIBLE_SHARE:
        why = (f"its text is invisible ({invisible} of {texts} text objects in render mode 3): an OCR layer over a "
               "scanned image, not the PDF's own text")
        return LayerPage(False, _REJECTED + why, text=text)
    if image_share >= MAX_IMAGE_SHARE:
        why = f"an image covers {image_share:.0%} of the page (a scan?): text in an image is not in the text layer"
        return LayerPage(False, _REJECTED + why, text=text)
    chars = [c for c in text or "" if not c.isspace()]
    maths = math_characters(text or "")
    if maths >= MIN_MATH_CHARS and maths > MAX_MATH_SHARE * len(chars):
        why = f"it holds {maths} mathematical characters: formulas need the model (a text layer cannot write LaTeX)"
        return LayerPage(False, _REJECTED + why, text=text)
    if not lines:
        return LayerPage(False, _REJECTED + "PDFium found no text lines on the page", text=text)
    held = sum(len(line[4]) for line in lines)
    if turned * 2 > held:
        why = f"{turned:,} of its {held:,} characters are not upright on the rendered page: the layout reads lines"
        return LayerPage(False, _REJECTED + why, text=text)
    if ink is not None and held < MIN_INK_SHARE * ink:
        why = (f"its ink looks like ~{ink:,} characters but its text layer holds {held:,}: text drawn as outlines "
               "or in images is missing from it")
        return LayerPage(False, _REJECTED + why, text=text)
    return LayerPage(True, verdict.note.replace("; not read by the model", "") + "; laid out by the CPU engine",
                     tuple(lines), text)


#: The last remote PDF this worker read, as (location, document): a document's pages come one after another.
_REMOTE: list[tuple[str, Any]] = []


def _document(location: str, storage_options: dict[str, Any] | None) -> Any:
    """The PDF at ``location``, open: a local one from the render worker's cache (open already
    when its page was just rendered), a remote one read once with ``storage_options``."""
    import fsspec
    import pypdfium2 as pdfium
    from fsspec.implementations.local import LocalFileSystem

    from llm_ocr.sources.render import _open_pdf
    from llm_ocr.storage.stores import store_options

    fs, path = fsspec.core.url_to_fs(location, **store_options(location, storage_options))
    if isinstance(fs, LocalFileSystem):
        return _open_pdf(path)
    if not _REMOTE or _REMOTE[0][0] != location:
        if _REMOTE:
            _REMOTE.pop()[1].close()
        _REMOTE.append((location, pdfium.PdfDocument(fs.cat_file(path))))
    return _REMOTE[0][1]


def layer_text(location: str, page: int, storage_options: dict[str, Any] | None = None) -> str | None:
    """The text layer of page ``page`` (1-based) of the PDF at ``location`` when it reads as
    English (:func:`~llm_ocr.sources.text_layer.judge_text_layer`), else None: what the no-truth
    signals compare a reading with."""
    import pypdfium2 as pdfium

    from llm_ocr.sources.render import DocumentError

    try:
        handle = _document(location, storage_options)[page - 1]
    except (DocumentError, pdfium.PdfiumError, OSError, IndexError, ValueError):
        return None
    try:
        textpage = handle.get_textpage()
        try:
            return judge_text_layer(str(textpage.get_text_range())).text
        finally:
            textpage.close()
    except pdfium.PdfiumError:
        return None
    finally:
        handle.close()


def layer_page(
    location: str, page: int, width: int, height: int, image: bytes | None = None,
    storage_options: dict[str, Any] | None = None,
) -> LayerPage:
    """The verdict on page ``page`` (1-based) of the PDF at ``location`` rendered as a ``width`` x
    ``height`` image (``image``: its encoded bytes, for the ink check), with its lines in that
    image's pixels when it is sound. An unreadable page is a rejection, not an error."""
    import pypdfium2 as pdfium

    from llm_ocr.sources.render import DocumentError

    try:
        handle = _document(location, storage_options)[page - 1]
    except (DocumentError, pdfium.PdfiumError, OSError, IndexError, ValueError) as exc:
        return LayerPage(False, f"PDF text layer rejected: could not read it ({exc})")
    try:
        textpage = handle.get_textpage()
        try:
            raw = str(textpage.get_text_range())
            lines, turned = _lines(textpage, _Frame(handle, width, height))
        finally:
            textpage.close()
        share, texts, invisible = _objects(handle)
    except pdfium.PdfiumError as exc:
        return LayerPage(False, f"PDF text layer rejected: could not read it ({exc})")
    finally:
        handle.close()
    # The ink of sideways text is not measured as lines of text: only upright pages are checked.
    ink = _ink_chars(image) if turned * 2 <= sum(len(line[4]) for line in lines) else None
    return judge_layer(raw, lines, share, texts, invisible, ink, turned)
