"""Boxes in a stated space: a known block's box in page pixels and in PDF points, every family.

A PDF made here with reportlab has three pages, each with one line of text and one blue
rectangle (a figure) at known places in user space: a plain Letter page, a page with
``/Rotate 90`` and a page whose CropBox is offset from its MediaBox. Each page is rendered by
llm-ocr's renderer; where the text and the rectangle are in the image is found from the image's
own ink, and where they are in the PDF from the PDF itself (PDFium's character boxes of the text,
the rectangle's drawing coordinates). Every family then reads the page in this process (its
requests answered by its own writer, ``tests/vlm/family_pages.py``, as in ``tests/vlm/test_family_round_trip.py``), and the row
it makes must hold the text's (or, for the families that box figures only, the figure's) box in
the image's pixels and, mapped by the row's ``pdf_page``, in the PDF's points.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pypdfium2 as pdfium
import pytest
from PIL import Image

from llm_ocr.options import RenderOptions
from llm_ocr.records import Figure, PageResult
from llm_ocr.sources.base import DocumentRef, PageImage
from llm_ocr.sources.render import render_pages
from llm_ocr.stages.space import displayed_points, place
from llm_ocr.vlm.box import Box
from llm_ocr.vlm.families import FAMILIES, Family
from llm_ocr.vlm.view import Element
from tests.vlm.family_pages import FIGURE_BOXES_ONLY, read, tolerance

LINE = "Harbour dues rose by nine percent"
RECT = (300.0, 180.0, 460.0, 300.0)  # left, bottom, right, top in user space
#: (name, /Rotate, CropBox or None): the three pages (the text is at 90, 520 on each).
PAGES = [("plain", 0, None), ("rotated", 90, None), ("cropped", 0, (40.0, 60.0, 560.0, 740.0))]


def make_pdf(path: Path) -> None:
    from reportlab.lib.pagesizes import letter
    from reportlab.pdfgen import canvas

    c = canvas.Canvas(str(path), pagesize=letter)
    for _name, rotation, crop in PAGES:
        c.setFont("Helvetica", 14)
        c.drawString(90, 520, LINE)
        c.setFillColorRGB(0, 0, 1)
        c.rect(RECT[0], RECT[1], RECT[2] - RECT[0], RECT[3] - RECT[1], stroke=0, fill=1)
        c.setFillColorRGB(0, 0, 0)
        c.setPageRotation(rotation)  # reportlab keeps both for the pages after: set on every page
        c.setCropBox(crop)
        c.showPage()
    c.save()


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[PageImage, tuple[float, ...]]]:
    """Each page as rendered, with its text's box in user space as PDFium reads it."""
    path = tmp_path_factory.mktemp("spaces") / "spaces.pdf"
    make_pdf(path)
    ref = DocumentRef("spaces.pdf", 0, str(path), "pdf", location=str(path))
    rendered = render_pages(ref, RenderOptions(), 1, len(PAGES))
    pdf = pdfium.PdfDocument(str(path))
    out = []
    for index, item in enumerate(rendered):
        assert isinstance(item, PageImage)
        text = pdf[index].get_textpage()
        chars = [text.get_charbox(i) for i in range(text.count_chars()) if not text.get_text_range(i, 1).isspace()]
        out.append((item, (min(c[0] for c in chars), min(c[1] for c in chars),
                           max(c[2] for c in chars), max(c[3] for c in chars))))
    pdf.close()
    return out


def ink(image: Image.Image) -> tuple[Box, Box]:
    """Where the text (dark ink) and the rectangle (blue) are in ``image``, in its pixels."""
    rgb = np.asarray(image.convert("RGB")).astype(int)
    dark = (rgb < 110).all(axis=2)
    blue = (rgb[..., 2] > 200) & (rgb[..., 0] < 60) & (rgb[..., 1] < 60)

    def bounds(mask: np.ndarray) -> Box:
        ys, xs = np.nonzero(mask)
        return Box(float(xs.min()), float(ys.min()), float(xs.max() + 1), float(ys.max() + 1))

    return bounds(dark), bounds(blue)


def near(got: list[float] | list[int], want: tuple[float, ...] | Box, within: float) -> bool:
    return all(abs(a - b) <= within for a, b in zip(got, want))


def test_the_renderer_states_each_pdf_page_s_box_and_rotation(pages) -> None:
    (plain, _), (rotated, _), (cropped, _) = pages
    assert plain.pdf_page == (0.0, 0.0, 612.0, 792.0, 0)
    # reportlab writes a turned page's MediaBox turned (792 x 612), so it shows as a Letter page.
    assert rotated.pdf_page == (0.0, 0.0, 792.0, 612.0, 90) and rotated.width < rotated.height
    assert cropped.pdf_page == (40.0, 60.0, 560.0, 740.0, 0)
    assert cropped.width / cropped.height == pytest.approx(520 / 680, abs=0.01)


@pytest.mark.parametrize("family", FAMILIES, ids=[f.name for f in FAMILIES])
def test_a_known_block_s_box_in_pixels_and_in_pdf_points(family: Family, pages) -> None:
    for (name, _, _), (item, text_points) in zip(PAGES, pages):
        image = Image.open(io.BytesIO(item.image))
        text_px, rect_px = ink(image)
        w, h = item.width, item.height
        shown = (Element("text", Box(text_px.x1 / w, text_px.y1 / h, text_px.x2 / w, text_px.y2 / h), LINE),
                 Element("image", Box(rect_px.x1 / w, rect_px.y1 / h, rect_px.x2 / w, rect_px.y2 / h), ""))
        layout, _ = read(family, w, h, shown)
        row = PageResult("spaces.pdf", 0, 1, "spaces.pdf", blocks=[b.record() for b in layout.blocks],
                         figures=[Figure(f.id, f.bbox.row()) for f in layout.figures], width=w, height=h)
        place(row, item.pdf_page)
        assert row.pdf_page is not None and row.dpi == pytest.approx(144, abs=0.5), name
        px = tolerance(max(w, h)) + 1  # the family's coordinate grid, and the ink's edge pixels
        pt = px * 72 / 144 + 1.5  # the same in points, and the glyph boxes' margin against the ink
        if family.outputs.boxes and family.name not in FIGURE_BOXES_ONLY:
            (block,) = [b for b in row.blocks if "Harbour" in b.text]
            assert near(block.boxes[0], text_px, px), (name, block.boxes, text_px)
            assert block.pdf_boxes is not None and near(block.pdf_boxes[0], text_points, pt), (name, block.pdf_boxes)
        if family.outputs.figure_crops:
            (figure,) = row.figures
            assert near(figure.bbox, rect_px, px), (name, figure.bbox, rect_px)
            assert figure.pdf_bbox is not None and near(figure.pdf_bbox, RECT, pt), (name, figure.pdf_bbox)
        if not family.outputs.boxes:  # nothing boxed: nothing to place, but the page's space is stated
            assert all(b.pdf_boxes == [] for b in row.blocks)


def test_a_page_the_family_turned_maps_back_to_the_pdf(pages) -> None:
    """olmOCR-2 turns a page it says is not upright and reads it again: the boxes are in the
    turned image's pixels, and ``turned`` maps them back to the page's points."""
    item, text_points = pages[1]  # the /Rotate 90 page, shown sideways
    turned = Image.open(io.BytesIO(item.image)).transpose(Image.Transpose.ROTATE_90)
    text_px, rect_px = ink(turned)
    row = PageResult("spaces.pdf", 0, 2, "spaces.pdf", width=turned.width, height=turned.height, turned=90,
                     figures=[Figure("p2-f1", [round(v) for v in rect_px])])
    from llm_ocr.records import Block

    row.blocks = [Block("text", [[round(v) for v in text_px]], LINE)]
    place(row, item.pdf_page)
    assert near(row.blocks[0].pdf_boxes[0], text_points, 2.0), row.blocks[0].pdf_boxes
    assert near(row.figures[0].pdf_bbox, RECT, 2.0), row.figures[0].pdf_bbox


def test_docling_provenance_is_in_points_of_the_displayed_page(pages) -> None:
    """In the DoclingDocument a PDF page is sized in points, and each box is in points of the page
    as displayed, origin bottom left (docling's own convention): the CropBox's corner is 0, 0."""
    pytest.importorskip("docling_core")
    from docling_core.types.doc import CoordOrigin

    from llm_ocr.records import Block
    from llm_ocr.stages.docling_export import build_document

    item, text_points = pages[2]  # the cropped page
    image = Image.open(io.BytesIO(item.image))
    text_px, _ = ink(image)
    row = PageResult("spaces.pdf", 0, 1, "spaces.pdf", status="ok", width=item.width, height=item.height,
                     blocks=[Block("text", [[round(v) for v in text_px]], LINE)])
    place(row, item.pdf_page)
    doc = build_document("spaces.pdf", [row]).document
    assert doc.pages[1].size.width == pytest.approx(520) and doc.pages[1].size.height == pytest.approx(680)
    (text,) = doc.texts
    bbox = text.prov[0].bbox
    assert bbox.coord_origin is CoordOrigin.BOTTOMLEFT
    left, bottom, right, top = text_points
    assert near([bbox.l, bbox.b, bbox.r, bbox.t], (left - 40, bottom - 60, right - 40, top - 60), 2.0), bbox
    assert displayed_points(row, [round(v) for v in text_px]) == (bbox.l, bbox.t, bbox.r, bbox.b)


def test_a_page_rendered_again_for_escalation_keeps_its_pdf_space(tmp_path: Path) -> None:
    """Escalate renders a row's page again from its source: the image keeps the page's box and
    /Rotate, so the escalated row's boxes are placed in PDF points too."""
    from llm_ocr.runners.workers import rerender_page

    make_pdf(tmp_path / "spaces.pdf")
    again = rerender_page("spaces.pdf", str(tmp_path / "spaces.pdf"), RenderOptions(), {}, None, 2)
    assert isinstance(again, PageImage) and again.pdf_page == (0.0, 0.0, 792.0, 612.0, 90)
