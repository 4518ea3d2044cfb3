"""The page a family's parser produces, whatever the family: blocks, figures, Markdown, warnings.

Every parser maps its family's coordinate space to pixels of the image that was sent with
:func:`to_pixels` (a :class:`~llm_ocr.vlm.box.Box`), and assembles the page's Markdown the same
way (:class:`LayoutBuilder`): each block's Markdown in reading order, a figure as
``![](figure:ID)`` (or ``![alt](figure:ID)`` when the model described it), blocks separated by
a blank line.

Conventions of the Markdown every family produces (docs/models.md, "One Markdown"):

- tables are HTML ``<table>`` elements (never Markdown pipes: merged cells survive);
- display math is ``\\[ ... \\]``, inline math ``\\( ... \\)``;
- headings are ATX (``#``), figures are links to their crops.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from llm_ocr.records import Block, Figure
from llm_ocr.vlm.box import Box

#: A figure reference in page Markdown; group 1 is the figure id.
FIGURE_LINK = re.compile(r"!\[[^\[\]\n]{0,200}\]\(figure:([^()\s]{1,200})\)")
_NEWLINES = re.compile(r"\n{3,}")
#: A line of nothing but whitespace: what is left where markup was removed (an image tag's line).
_BLANK_LINE = re.compile(r"^[^\S\n]+$", re.MULTILINE)
MAX_WARNINGS = 50  # one garbage page must not produce a megabyte of warnings


@dataclass
class PageBlock:
    """One block of a parsed page: the family's label, its boxes in pixels of the image the
    layout refers to, its Markdown."""

    label: str
    boxes: list[Box]
    text: str

    def record(self) -> Block:
        """The block as an output row stores it (boxes as lists of four ints)."""
        return Block(label=self.label, boxes=[box.row() for box in self.boxes], text=self.text)


@dataclass
class FigureBox:
    """One figure on a page, in pixels of the image the layout refers to."""

    id: str  # "p{page}-f{k}", k counts figures on the page from 1 in reading order
    bbox: Box  # x1 < x2, y1 < y2, within the image
    #: The index in ``PageLayout.blocks`` of the block this figure belongs to.
    block: int = -1
    #: What the OCR model itself said the figure shows (olmOCR-2's alt text, Chandra's alt).
    description: str | None = None

    def record(self, image: bytes | None = None, error: str | None = None) -> Figure:
        """The figure as an output row stores it, with its crop (or why there is none)."""
        return Figure(id=self.id, bbox=self.bbox.row(), image=image, description=self.description, error=error)


@dataclass
class PageLayout:
    """Everything recovered from one page's answer."""

    blocks: list[PageBlock]  # boxes in pixels; text is the block's Markdown
    figures: list[FigureBox]
    markdown: str  # the page's Markdown, figures referenced as ![](figure:ID)
    warnings: list[str] = field(default_factory=list)  # what was malformed and skipped/fixed
    #: What the family reported about the page beyond its text (olmOCR-2's front matter...).
    metadata: dict[str, object] = field(default_factory=dict)


class Warnings:
    """A capped list of warnings (a garbage page must not produce megabytes of them)."""

    def __init__(self) -> None:
        self.items: list[str] = []
        self.dropped = 0

    def __call__(self, msg: str) -> None:
        if len(self.items) < MAX_WARNINGS:
            self.items.append(msg)
        else:
            self.dropped += 1

    def result(self) -> list[str]:
        """The warnings, with a count of those dropped past the cap."""
        extra = [f"... and {self.dropped} more warnings"] if self.dropped else []
        return self.items + extra


def finite_box(box: Sequence[object], width: int, height: int) -> Box | None:
    """``box`` as a :class:`Box` of four finite numbers, or None when it is not that or the
    image has no size (the check every family's box mapping starts with)."""
    return Box.of(box) if width > 0 and height > 0 else None


def to_pixels(box: Sequence[object], sx: float, sy: float, width: int, height: int) -> Box | None:
    """``box`` (x1, y1, x2, y2 in a family's space) times ``(sx, sy)``, as int pixels of the
    ``width`` x ``height`` image (clamped to it, corners in order); None when the box is not
    four finite numbers or has no area in pixels."""
    vals = finite_box(box, width, height)
    return None if vals is None else vals.scaled(sx, sy).pixels(width, height)


def caption_first(caption: Box, element: Box) -> bool:
    """Whether a caption at ``caption`` is read before the table or figure at ``element`` (both
    in one space): its middle above the element's top edge, or, beside it, left of its left edge.
    For the families whose answer nests a caption in its element wherever it sits (DocTags)."""
    x, y = caption.centre
    return y < element.y1 or (y <= element.y2 and x < element.x1)


def clean_markdown(text: str) -> str:
    """Empty the lines that hold only whitespace, collapse runs of 3+ newlines to two and strip
    surrounding whitespace: no paragraph is left blank (``"![](figure:p1-f1)\\n\\n \\n\\n"`` was a
    figure, then a paragraph of one space)."""
    return _NEWLINES.sub("\n\n", _BLANK_LINE.sub("", text)).strip()


@dataclass
class LayoutBuilder:
    """Collects blocks and figures in reading order and assembles the page (one per parse).

    Figures are capped: at most ``max_figures``, and at most ``max_figure_area`` page areas of
    pixels in all (every figure becomes a crop stored in the row: hundreds of full-page boxes
    would make a gigabyte row). A figure past a cap keeps its block but gets no crop.
    """

    page: int
    width: int
    height: int
    warn: Warnings = field(default_factory=Warnings)
    max_figures: int = 256
    max_figure_area: float = 4.0
    blocks: list[PageBlock] = field(default_factory=list)
    figures: list[FigureBox] = field(default_factory=list)
    _parts: list[str] = field(default_factory=list)
    _pixels: float = 0.0

    def text(self, label: str, boxes: list[Box], markdown: str) -> None:
        """Add a block of text (its Markdown)."""
        markdown = markdown.strip()
        self.blocks.append(PageBlock(label=label, boxes=boxes, text=markdown))
        if markdown:
            self._parts.append(markdown)

    def continued(self, label: str, boxes: list[Box], markdown: str) -> None:
        """Add a block that continues the one before it (a paragraph running on into the next
        column): a block of its own, its Markdown joined to the previous block's paragraph."""
        markdown = markdown.strip()
        self.blocks.append(PageBlock(label=label, boxes=boxes, text=markdown))
        if markdown and self._parts:
            self._parts[-1] = f"{self._parts[-1]} {markdown}"
        elif markdown:
            self._parts.append(markdown)

    def figure(self, label: str, box: Box | None, description: str | None = None, markdown: str = "") -> None:
        """Add a figure block: a crop of ``box`` (when it fits the caps), linked from the page.

        ``markdown`` is what the block says besides the picture (Chandra writes a chart's data).
        """
        description = (description or "").strip() or None
        index = len(self.blocks)
        self.blocks.append(PageBlock(label=label, boxes=[box] if box else [], text=markdown.strip()))
        link = None
        if box is None:
            self.warn(f"{label} block {index + 1}: no usable box, no figure")
        else:
            area = box.area
            budget = self.max_figure_area * self.width * self.height
            if len(self.figures) >= self.max_figures or self._pixels + area > budget:
                self.warn(f"{label} block {index + 1}: over {self.max_figures} figures or "
                          f"{self.max_figure_area:g} page areas of figures, box {list(box)} not cropped")
            else:
                self._pixels += area
                figure = FigureBox(f"p{self.page}-f{len(self.figures) + 1}", box, index, description)
                self.figures.append(figure)
                link = f"![{alt_text(description)}](figure:{figure.id})"
        pieces = [p for p in (link, markdown.strip()) if p]
        if pieces:
            self._parts.append("\n".join(pieces))

    def build(self, metadata: dict[str, object] | None = None) -> PageLayout:
        """The page layout, Markdown joined in reading order."""
        return PageLayout(
            blocks=self.blocks,
            figures=self.figures,
            markdown=clean_markdown("\n\n".join(self._parts)),
            warnings=self.warn.result(),
            metadata=metadata or {},
        )


def alt_text(description: str | None) -> str:
    """A description fit for a Markdown image's alt text: one line, no brackets, at most 200
    characters (the figure-link pattern's bound)."""
    if not description:
        return ""
    text = " ".join(description.replace("[", "(").replace("]", ")").split())
    return text if len(text) <= 200 else text[:199] + "…"
