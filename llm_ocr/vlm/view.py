"""What one image sent to a model shows, in no family's format: the input of a family's writer.

A family's parser turns its answer into a :class:`~llm_ocr.vlm.layout.PageLayout`; its writer
(:meth:`llm_ocr.vlm.families.base.Family.write`) goes the other way: from a :class:`View` of
an image to the answer the family's model gives for it, in its own markup and coordinate
space. The simulated server (``llm_ocr/engines/sim``) answers with the writers, and the
round-trip tests write a view and parse it back.

A view is of the image as sent, whatever part of a page that is: the whole page, a tile or
segment of it, one block cropped from it (MinerU's second pass). Its elements' boxes are
fractions of that image, and their text is written in llm-ocr's own Markdown forms
(docs/models.md, "One Markdown"), which each writer turns into its family's:

============== ==============================================================================
label           text
============== ==============================================================================
title           the heading's text (no ``#``: the label says it is a title)
sub_title       a section heading's text
text            a paragraph (inline Markdown)
image_caption   a figure's caption
table           an HTML ``<table>``
equation        display math, ``\\[ ... \\]``
image           "" (a figure; what it shows is its ``description``)
============== ==============================================================================
"""

from __future__ import annotations

from dataclasses import dataclass

from llm_ocr.vlm.box import Box

#: The labels of a view's elements (see the module docstring).
LABELS = ("title", "sub_title", "text", "image_caption", "table", "equation", "image")


@dataclass(frozen=True)
class Element:
    """One element an image shows: its kind, where it is (fractions of the image), its content."""

    label: str
    box: Box
    text: str
    #: What a figure shows, for the families that describe figures (olmOCR-2's alt text...).
    description: str = ""

    def markdown(self) -> str:
        """The element as Markdown: a title as a ``#`` heading, a sub-title as ``##``."""
        prefix = {"title": "# ", "sub_title": "## "}.get(self.label, "")
        return prefix + self.text

    def latex(self) -> str:
        """An equation's LaTeX without its ``\\[ \\]`` delimiters."""
        return self.text.replace("\\[", "").replace("\\]", "").strip()


@dataclass(frozen=True)
class View:
    """An image as a model is shown it: its size, its elements in reading order, and facts of
    the page it is of."""

    width: int
    height: int
    elements: tuple[Element, ...]
    #: Degrees the image's content is turned clockwise from upright (0: upright); turning the
    #: image as many degrees counter-clockwise makes it upright (olmOCR-2 reports this).
    rotation: int = 0
    #: The number of the page the image is of (1-based), when known (Nanonets-OCR2 writes it).
    page_number: int | None = None

    def caption_of(self, index: int) -> str:
        """The caption of the figure at ``index``: the text of the ``image_caption`` element
        right after it, or ""."""
        after = self.elements[index + 1] if index + 1 < len(self.elements) else None
        return after.text if after is not None and after.label == "image_caption" else ""

    def captioned(self, index: int) -> bool:
        """Whether the element at ``index`` is the caption of the figure before it."""
        element = self.elements[index]
        return element.label == "image_caption" and index > 0 and self.elements[index - 1].label == "image"
