"""DeepSeek-OCR's grounding output: parsed into layout blocks, figure boxes and clean Markdown,
and written from a view of an image (what the simulated server answers).

The model writes blocks ``<|ref|>LABEL<|/ref|><|det|>[[x1, y1, x2, y2], ...]<|/det|>`` each
followed by its content, coordinates 0..999 relative to the image sent (docs/facts.md#deepseek-ocr).
The Markdown follows the official post-processing of ``run_dpsk_ocr_pdf.py`` except that every
box of an ``image`` block becomes its own figure, linked as ``![](figure:ID)``.

Model output is untrusted and sometimes broken (truncation, repetition loops), so the parser
never evaluates it, never raises on malformed text, caps what it keeps and runs in linear time:
it scans with ``str.find`` instead of lazy ``.*?`` regexes, which go quadratic on unclosed tags.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from itertools import islice

from llm_ocr.vlm import layout
from llm_ocr.vlm.box import Box
from llm_ocr.vlm.layout import FIGURE_LINK, FigureBox, PageBlock, PageLayout, Warnings, finite_box
from llm_ocr.vlm.view import Element

__all__ = [
    "EOS", "FIGURE_LINK", "IMAGE_LABEL", "FigureBox", "PageLayout", "clean_markdown", "parse_layout", "scale_box",
    "write_grounding", "write_plain",
]  # fmt: skip

REF_OPEN, REF_CLOSE, DET_OPEN, DET_CLOSE = "<|ref|>", "<|/ref|>", "<|det|>", "<|/det|>"
TAGS = (REF_OPEN, REF_CLOSE, DET_OPEN, DET_CLOSE)
#: End-of-sentence token; it appears in the text because requests set skip_special_tokens=False.
EOS = "<\uff5cend\u2581of\u2581sentence\uff5c>"
IMAGE_LABEL = "image"

# Bounded number pattern: a run of digits can never make the regex backtrack far.
_NUMBER = re.compile(r"-?\d{1,12}(?:\.\d{1,12})?")
_SEGMENT = re.compile(r"[^\[\]]+")  # text between brackets: one box, or separators
_BOX_CHARS = re.compile(r"[\s\d\[\],.+-]*")  # what an unclosed box list may consist of
_SPACES = re.compile(r"\s*")
_MAX_LABEL = 64  # real labels are short words; a longer "label" means a missing <|/ref|>


class _Finder:
    """``str.find`` that remembers each token's last hit.

    Searches for a token start at non-decreasing offsets, so a remembered hit (or miss) at or
    after the new offset is still the answer: no stretch of text is scanned twice per token.
    """

    def __init__(self, text: str) -> None:
        self.text = text
        self.hits: dict[str, int] = {}

    def find(self, token: str, start: int) -> int:
        hit = self.hits.get(token)
        if hit is None or (hit != -1 and hit < start):
            hit = self.hits[token] = self.text.find(token, start)
        return hit


def scale_box(box: Sequence[float], width: int, height: int) -> Box | None:
    """Convert a model box (0..999 coordinates) to a :class:`Box` in pixels of the image.

    Coordinates are clamped to 0..999 and swapped into order first, so the result lies within
    ``[0, width] x [0, height]``. Returns ``None`` if the box is not four finite numbers, the
    image size is not positive, or the box has zero width or height in pixels.
    """
    vals = finite_box(box, width, height)
    if vals is None:
        return None
    # Clamped to 0..999 first, so the pixels cannot leave [0, width] x [0, height].
    x1, y1, x2, y2 = vals.clamped(999.0, 999.0).ordered()
    # Same formula as DeepSeek-OCR's run_dpsk_ocr_pdf.py (docs/facts.md#deepseek-ocr): x_px = int(x
    # / 999 * width).
    px = Box(int(x1 / 999 * width), int(y1 / 999 * height), int(x2 / 999 * width), int(y2 / 999 * height))
    if px.x1 >= px.x2 or px.y1 >= px.y2:
        return None
    return px


def clean_markdown(text: str) -> str:
    """Apply the official substitutions (``\\coloneqq`` to ``:=``, ``\\eqqcolon`` to ``=:``),
    collapse runs of 3+ newlines to two and strip surrounding whitespace."""
    return layout.clean_markdown(text.replace("\\coloneqq", ":=").replace("\\eqqcolon", "=:"))


def _strip_tags(text: str) -> str:
    # Deleting a tag can join its neighbours into a new one ("<|re<|/det|>f|>"), so repeat.
    # Nesting deep enough to outlast a few passes is adversarial: then break every "<|" (all
    # tags start with it, and "< |" cannot recombine into one) to stay linear.
    for _ in range(4):
        if "<|" not in text or not any(t in text for t in TAGS):
            return text
        for tag in TAGS:
            text = text.replace(tag, "")
    return text.replace("<|", "< |") if any(t in text for t in TAGS) else text


def _match_end(pattern: re.Pattern[str], text: str, pos: int, end: int) -> int:
    """Where ``pattern`` (one that also matches the empty string) stops matching from ``pos``."""
    found = pattern.match(text, pos, end)
    return found.end() if found else pos


def _parse_header(text: str, finder: _Finder, start: int, end: int, warn: Warnings) -> tuple[str | None, str | None,
                                                                                             int]:
    """Read ``LABEL<|/ref|><|det|>BOXES<|/det|>`` from ``start`` (just after ``<|ref|>``).

    Returns (label or None if the ref is unclosed, box text or None, offset of the content).
    """
    close = finder.find(REF_CLOSE, start)
    if close == -1 or close >= end or close - start > _MAX_LABEL or "<|" in text[start:close]:
        warn(f"unclosed {REF_OPEN} at offset {start}: kept as text")
        return None, None, start
    label = text[start:close].strip()
    if not label:
        warn(f"empty label at offset {start}: treated as text")
        label = "text"
    after = close + len(REF_CLOSE)
    det = _match_end(_SPACES, text, after, end)
    if not text.startswith(DET_OPEN, det, end):
        warn(f"{label} block at offset {start} has no {DET_OPEN}: no boxes")
        return label, None, after
    body = det + len(DET_OPEN)
    det_close = finder.find(DET_CLOSE, body)
    if det_close != -1 and det_close < end:
        return label, text[body:det_close], det_close + len(DET_CLOSE)
    warn(f"unclosed {DET_OPEN} in {label} block at offset {start}")
    # Take the box list up to its closing "]]", else as far as it looks like numbers.
    stop = text.find("]]", body, end)
    stop = stop + 2 if stop != -1 else _match_end(_BOX_CHARS, text, body, end)
    return label, text[body:stop], stop


def _parse_boxes(body: str, cap: int, where: str, warn: Warnings) -> list[list[float]]:
    """Numbers of each bracketed group, taken four at a time (never ``eval``: untrusted text)."""
    boxes: list[list[float]] = []
    # A well-formed list has at most two segments per box (the box and a separator).
    for n, seg in enumerate(_SEGMENT.finditer(body)):
        if n > 2 * cap + 8:
            warn(f"{where}: box list too long, rest ignored")
            break
        nums = [float(m.group()) for m in islice(_NUMBER.finditer(body, seg.start(), seg.end()), 4 * (cap + 1))]
        if len(nums) % 4:
            warn(f"{where}: incomplete box {seg.group()[:40]!r} ignored")
        for i in range(0, len(nums) - 3, 4):
            if len(boxes) >= cap:
                warn(f"{where}: more than {cap} boxes, rest ignored")
                return boxes
            boxes.append(nums[i : i + 4])
    if not boxes and body.strip():
        warn(f"{where}: no numeric box in {body[:40]!r}")
    return boxes


def _pixel_boxes(raw_boxes: list[list[float]], width: int, height: int, where: str, warn: Warnings) -> list[Box]:
    out = []
    for box in raw_boxes:
        if any(v < 0 or v > 999 for v in box):
            warn(f"{where}: box {box} outside 0..999, clamped")
        if box[0] > box[2] or box[1] > box[3]:
            warn(f"{where}: box {box} inverted, swapped")
        px = scale_box(box, width, height)
        if px is None:
            warn(f"{where}: box {box} has no area at {width}x{height}, dropped")
        else:
            out.append(px)
    return out


def parse_layout(
    raw: str,
    *,
    width: int,
    height: int,
    page: int,
    max_blocks: int = 4000,
    max_boxes_per_block: int = 64,
    max_chars: int = 2_000_000,
    max_figures: int = 256,
    max_figure_area: float = 4.0,
) -> PageLayout:
    """Parse one page of DeepSeek-OCR output (grounding or plain) sent as a ``width`` x
    ``height`` image. Never raises on malformed text: problems are fixed or skipped and noted
    in ``warnings``. Text without tags becomes a single ``text`` block without boxes.

    Every figure becomes a crop stored in the row, so figures are capped per page: at most
    ``max_figures``, and at most ``max_figure_area`` page areas of pixels in all (a real page's
    figures barely overlap; hundreds of full-page boxes would make a gigabyte row). Boxes past
    a cap stay in their block's ``boxes`` but get no figure."""
    warn = Warnings()
    text = raw or ""
    # Cut before anything copies the text: memory stays bounded by max_chars, not by the input.
    if len(text) > max_chars:
        warn(f"output of {len(text)} characters truncated to {max_chars}")
        text = text[:max_chars]
    text = text.replace(EOS, "")
    figure_pixels, pixel_budget = 0.0, max_figure_area * max(width, 0) * max(height, 0)
    finder = _Finder(text)
    blocks: list[PageBlock] = []
    figures: list[FigureBox] = []
    pieces: list[str] = []

    def add_text(chunk: str, label: str) -> str:
        clean = _strip_tags(chunk)
        if clean != chunk:
            warn(f"stray tag fragments removed from {label} block {len(blocks) + 1}")
        pieces.append(clean)
        return clean.strip()

    pos = finder.find(REF_OPEN, 0)
    head = add_text(text if pos == -1 else text[:pos], "text")
    if head:  # untagged output, or text before the first tag
        blocks.append(PageBlock(label="text", boxes=[], text=head))
    while pos != -1:
        if len(blocks) >= max_blocks:
            warn(f"more than {max_blocks} blocks: last {len(text) - pos} characters dropped")
            break
        start = pos + len(REF_OPEN)
        pos = finder.find(REF_OPEN, start)
        end = len(text) if pos == -1 else pos
        label, body, content = _parse_header(text, finder, start, end, warn)
        where = f"{label or 'text'} block {len(blocks) + 1}"
        raw_boxes = _parse_boxes(body, max_boxes_per_block, where, warn) if body is not None else []
        boxes = _pixel_boxes(raw_boxes, width, height, where, warn)
        if label == IMAGE_LABEL:
            if not boxes:
                warn(f"{where}: no usable box, no figure")
            # Official form: the tag becomes an image link plus "\n"; here one link per box.
            for box in boxes:
                area = box.area
                if len(figures) >= max_figures or figure_pixels + area > pixel_budget:
                    warn(f"{where}: over {max_figures} figures or {max_figure_area:g} page areas of figures, "
                         f"box {list(box)} not cropped")
                    continue
                figure_pixels += area
                figures.append(FigureBox(id=f"p{page}-f{len(figures) + 1}", bbox=box, block=len(blocks)))
                pieces.append(f"![](figure:{figures[-1].id})\n")
        block_text = add_text(text[content:end], label or "text")
        if label is not None or block_text:  # an unclosed ref with nothing after it is noise
            blocks.append(PageBlock(label=label or "text", boxes=boxes, text=block_text))

    # Joining pieces can recombine tag fragments across block boundaries: strip once more.
    markdown = clean_markdown(_strip_tags("".join(pieces)))
    return PageLayout(blocks=blocks, figures=figures, markdown=markdown, warnings=warn.result())


# -- writing -----------------------------------------------------------------------------------


def det_box(box: Box) -> Box:
    """A box in fractions of the image as DeepSeek-OCR writes it: 0..999 integers
    (``int(x_px / width * 999)``, the inverse of :func:`scale_box`)."""
    return box.scaled(999, 999).truncated().clamped(999, 999)


def write_grounding(elements: Sequence[Element], markdown: bool = True) -> str:
    """Elements as grounding markup: ``<|ref|>LABEL<|/ref|><|det|>[[x1, y1, x2, y2]]<|/det|>``
    then the element's text, blocks separated by a blank line. ``markdown`` writes ``#`` /
    ``##`` before titles, as the "Convert the document to markdown." prompt does (the "OCR this
    image." one does not)."""
    parts = []
    for element in elements:
        text = element.markdown() if markdown else element.text
        det = ", ".join(str(v) for v in det_box(element.box))
        parts.append(f"{REF_OPEN}{element.label}{REF_CLOSE}{DET_OPEN}[[{det}]]{DET_CLOSE}\n{text}\n\n")
    return "".join(parts)


def write_plain(elements: Sequence[Element]) -> str:
    """Elements as plain text (the "Free OCR." answer): those with text, blank-line separated."""
    return "\n\n".join(e.text for e in elements if e.text)
