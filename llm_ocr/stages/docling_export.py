"""A document's page rows as a docling-core ``DoclingDocument``, and its chunks with provenance.

Built only with docling-core's own types and methods (``add_page``, ``add_title``,
``add_heading``, ``add_text``, ``add_list_item``, ``add_table``, ``add_picture``,
``add_formula``), so the JSON it writes is what docling, docling-serve and their loaders read.

* A PDF page is sized in points as displayed (its CropBox, turned by its ``/Rotate``), and every
  item's :class:`ProvenanceItem` (one per box of its block) holds the box in those points,
  ``coord_origin`` BOTTOMLEFT: what docling's own PDF conversion writes (its page size is
  pypdfium2's ``get_width``/``get_height``, its boxes ``to_bottom_left_origin`` of the page's
  height: docling's ``pypdfium2_backend.py`` and ``readingorder_model.py``). An image page is
  sized in pixels, and its boxes are in them, TOPLEFT, as the rows store them
  (:mod:`llm_ocr.stages.space`).
* Block labels are the families' own (DeepSeek-OCR's ``title``/``sub_title``/``image_caption``,
  dots.ocr's ``Section-header``/``Page-footer``, PaddleOCR's ``paragraph_title``...); they are
  mapped to docling's :class:`DocItemLabel` by :data:`LABELS` after lower-casing and turning
  ``-`` into ``_``. An unknown label is text (nothing is dropped).
* Page headers, footers and page numbers go to the ``furniture`` content layer, as docling
  does with them: those the family labelled, and the running lines
  :func:`llm_ocr.stages.furniture.find` finds by repetition over the document's pages.
* A caption block right after (or right before) a picture or table becomes that item's caption.
* Pictures carry their crop (a PNG/JPEG data URI) when Extract cut one.

docling-core is an optional dependency (``pip install 'llm-ocr[docling]'``); it is imported by
the functions that need it, never at import time.
"""

from __future__ import annotations

import base64
import io
import re
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import TYPE_CHECKING, Any

from llm_ocr.records import Block, Figure, PageResult
from llm_ocr.stages import furniture
from llm_ocr.stages.space import displayed_points, frame_of

if TYPE_CHECKING:
    from docling_core.transforms.chunker.base import BaseChunker
    from docling_core.types.doc import DoclingDocument, FloatingItem, TableData, TextItem

#: Family label (lower case, ``-`` as ``_``) -> docling's DocItemLabel value.
LABELS = {
    "title": "title", "doc_title": "title",
    "sub_title": "section_header", "section_header": "section_header", "section": "section_header",
    "paragraph_title": "section_header", "header_title": "section_header",
    "text": "text", "paragraph": "text", "plain_text": "text", "abstract": "text", "aside_text": "text",
    "reference": "text", "content": "text", "block": "text", "vision_footnote": "footnote",
    "list_item": "list_item", "list": "list_item", "list_group": "list_item",
    "table": "table", "chart": "picture", "otsl": "table",
    "image": "picture", "figure": "picture", "picture": "picture", "diagram": "picture", "complex_block": "picture",
    "chem": "picture",
    "equation": "formula", "formula": "formula", "equation_block": "formula", "display_formula": "formula",
    "interline_equation": "formula",
    "caption": "caption", "image_caption": "caption", "table_caption": "caption", "figure_caption": "caption",
    "figure_title": "caption", "formula_caption": "caption", "chart_title": "caption",
    "footnote": "footnote", "table_footnote": "footnote", "figure_footnote": "footnote", "page_footnote": "footnote",
    "page_header": "page_header", "header": "page_header", "header_image": "page_header",
    "page_footer": "page_footer", "footer": "page_footer", "footer_image": "page_footer",
    "page_number": "page_footer", "number": "page_footer",
    "code": "code", "code_block": "code", "algorithm": "code",
    "form": "form", "table_of_contents": "document_index",
}  # fmt: skip

_HEADING_MARKS = re.compile(r"^\s*#{1,6}\s+")
_LIST_MARK = re.compile(r"^\s*(?:[-*+•]|\d{1,3}[.)])\s+")
_MATH = re.compile(r"^\s*(?:\\\[|\$\$)\s*|\s*(?:\\\]|\$\$)\s*$")
_TAGS = re.compile(r"<[^>]+>")
_FIGURE_LINKS = re.compile(r"!\[[^\]]*\]\(figure:[^)]*\)")


def docling_label(label: str) -> str:
    """The DocItemLabel value of a family's block label (text when unknown)."""
    return LABELS.get(label.strip().lower().replace("-", "_"), "text")


def _plain(text: str) -> str:
    """A block's Markdown as the plain text a docling item holds."""
    text = _FIGURE_LINKS.sub("", text)
    return _TAGS.sub("", text).strip()


class _TableCells(HTMLParser):
    """The cells of an HTML ``<table>``: (row, col, rowspan, colspan, text, header) each."""

    def __init__(self) -> None:
        super().__init__()
        self.cells: list[tuple[int, int, int, int, str, bool]] = []
        self.taken: set[tuple[int, int]] = set()
        self.row = -1
        self.col = 0
        self.cell: dict[str, Any] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "tr":
            self.row += 1
            self.col = 0
        elif tag in ("td", "th"):
            if self.row < 0:
                self.row = 0
            values = dict(attrs)
            self.cell = {"header": tag == "th", "text": [],
                         "rowspan": _span(values.get("rowspan")), "colspan": _span(values.get("colspan"))}

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self.cell is not None:
            while (self.row, self.col) in self.taken:  # a cell spanning down from a row above
                self.col += 1
            rows, cols = self.cell["rowspan"], self.cell["colspan"]
            for r in range(self.row, self.row + rows):
                for c in range(self.col, self.col + cols):
                    self.taken.add((r, c))
            text = " ".join("".join(self.cell["text"]).split())
            self.cells.append((self.row, self.col, rows, cols, text, self.cell["header"]))
            self.col += cols
            self.cell = None

    def handle_data(self, data: str) -> None:
        if self.cell is not None:
            self.cell["text"].append(data)


def _span(value: str | None) -> int:
    try:
        return max(1, min(int(value or 1), 1000))
    except ValueError:
        return 1


def table_data(html: str) -> TableData:
    """docling's TableData of an HTML table (the form every family's tables take in the rows).

    Header cells are ``<th>`` cells, and the first row when the table has no ``<th>`` and more
    than one row (DeepSeek-OCR and most families write header rows as ``<td>``)."""
    from docling_core.types.doc import TableCell, TableData

    parser = _TableCells()
    parser.feed(html)
    parser.close()
    cells = parser.cells
    first_row_header = bool(cells) and not any(c[5] for c in cells) and any(c[0] > 0 for c in cells)
    num_rows = max((r + rs for r, _, rs, _, _, _ in cells), default=0)
    num_cols = max((c + cs for _, c, _, cs, _, _ in cells), default=0)
    return TableData(
        num_rows=num_rows,
        num_cols=num_cols,
        table_cells=[
            TableCell(
                start_row_offset_idx=r, end_row_offset_idx=r + rs, start_col_offset_idx=c, end_col_offset_idx=c + cs,
                row_span=rs, col_span=cs, text=text, column_header=header or (first_row_header and r == 0),
            )
            for r, c, rs, cs, text, header in cells
        ],
    )


@dataclass
class DoclingExport:
    """A DoclingDocument and which of its items are which of llm-ocr's figures."""

    document: DoclingDocument
    #: ``self_ref`` of a picture item -> the figure id in the rows (``p{page}-f{k}``).
    figure_ids: dict[str, str] = field(default_factory=dict)
    #: ``self_ref`` of an item -> its boxes as the rows hold them: ``(page, pixel box, PDF-point
    #: box or None)`` each, in the order of its provenance (the chunks' ``boxes`` and ``pdf_boxes``).
    boxes: dict[str, list[tuple[int, list[int], list[float] | None]]] = field(default_factory=dict)


def _overlap(a: list[int], b: list[int]) -> float:
    width = min(a[2], b[2]) - max(a[0], b[0])
    height = min(a[3], b[3]) - max(a[1], b[1])
    return max(0, width) * max(0, height)


def _figure_for(block: Block, figures: list[Figure]) -> Figure | None:
    """The page's figure cropped from ``block`` (the one its box overlaps most), if any."""
    if not block.boxes or not figures:
        return figures[0] if figures else None
    best = max(figures, key=lambda f: _overlap(block.boxes[0], list(f.bbox)) if len(f.bbox) == 4 else 0)
    return best if len(best.bbox) == 4 and _overlap(block.boxes[0], list(best.bbox)) > 0 else None


def _image_ref(figure: Figure) -> Any:
    from docling_core.types.doc import ImageRef, Size

    if figure.image is None:
        return None
    from PIL import Image

    with Image.open(io.BytesIO(figure.image)) as image:
        width, height = image.size
    mimetype = "image/jpeg" if figure.image.startswith(b"\xff\xd8") else "image/png"
    uri = f"data:{mimetype};base64,{base64.b64encode(figure.image).decode('ascii')}"
    # dpi: the rows keep the crop in page pixels, not the render's DPI; 72 says "one pixel a unit".
    return ImageRef(mimetype=mimetype, dpi=72, size=Size(width=width, height=height), uri=uri)


def build_document(doc_id: str, pages: list[PageResult]) -> DoclingExport:
    """The DoclingDocument of one document's page rows (any order; error rows add no items)."""
    from docling_core.types.doc import ContentLayer, DocItemLabel, DoclingDocument, ProvenanceItem, Size
    from docling_core.types.doc.document import DocumentOrigin

    doc = DoclingDocument(name=doc_id)
    source = next((p.source for p in pages if p.source), "")
    doc.origin = DocumentOrigin(filename=doc_id, mimetype=_mimetype(source), binary_hash=_hash(doc_id))
    export = DoclingExport(doc)
    # Page furniture, by label and by repetition over the document (llm_ocr.stages.furniture).
    found = {(p.page, p.block): p.kind for p in furniture.find(pages) if p.block is not None}
    open_table: tuple[int, Any] | None = None  # (page, table item) of a table that ended its page
    for page in sorted(pages, key=lambda p: p.page):
        if page.page < 1:
            continue  # a document-level error row: no page to add
        # A table that ended the page before may go on at the top of this one (llm_ocr.stages.tables).
        continuing = open_table[1] if open_table is not None and open_table[0] == page.page - 1 else None
        open_table, tail, first = None, None, True
        if page.pdf_page is not None:
            shown = frame_of(page.pdf_page).displayed_size
            doc.add_page(page_no=page.page, size=Size(width=shown[0], height=shown[1]))
        elif page.width and page.height:
            doc.add_page(page_no=page.page, size=Size(width=page.width, height=page.height))
        unused = list(page.figures)
        last: FloatingItem | None = None  # the last picture or table, which a caption below belongs to
        pending_caption: TextItem | None = None  # a caption above the picture or table it names
        for index, block in enumerate(page.blocks):
            boxes = [b for b in block.boxes if len(b) == 4]
            provs = [ProvenanceItem(page_no=page.page, charspan=(0, len(_plain(block.text))), bbox=_bbox(page, b))
                     for b in boxes]
            label = DocItemLabel(docling_label(block.label))
            if label is DocItemLabel.TEXT and _HEADING_MARKS.match(block.text):
                label = DocItemLabel.SECTION_HEADER  # a family that marks headings in Markdown only
            kind = found.get((page.page, index))
            if kind is not None:  # a running line found by repetition, or labelled so
                label = DocItemLabel.PAGE_HEADER if kind == "page_header" else DocItemLabel.PAGE_FOOTER
            layer = ContentLayer.FURNITURE if label in (DocItemLabel.PAGE_HEADER, DocItemLabel.PAGE_FOOTER) else None
            text = _plain(block.text)
            item: Any
            if layer is None:  # body text: what stands between two pages' tables
                if first and continuing is not None and label is DocItemLabel.TABLE \
                        and _continue(continuing, block.text):
                    continuing.prov.extend(provs)
                    _keep_boxes(export, continuing.self_ref, page, boxes, block.pdf_boxes)
                    first, tail, last, pending_caption = False, continuing, continuing, None
                    continue
                first = False
                tail = None
            if label is DocItemLabel.TABLE:
                item = doc.add_table(data=table_data(block.text), prov=provs[0] if provs else None)
                tail = item
            elif label is DocItemLabel.PICTURE:
                figure = _figure_for(block, unused)
                image = None
                if figure is not None:
                    unused.remove(figure)
                    image = _image_ref(figure)
                item = doc.add_picture(image=image, prov=provs[0] if provs else None)
                if figure is not None:
                    export.figure_ids[item.self_ref] = figure.id
            elif label is DocItemLabel.TITLE:
                item = doc.add_title(text=_HEADING_MARKS.sub("", text), prov=provs[0] if provs else None)
            elif label is DocItemLabel.SECTION_HEADER:
                level = _heading_level(block)
                item = doc.add_heading(text=_HEADING_MARKS.sub("", text), level=level,
                                       prov=provs[0] if provs else None)
            elif label is DocItemLabel.LIST_ITEM:
                group = doc.add_list_group()
                for line in [ln for ln in text.splitlines() if ln.strip()] or [text]:
                    item = doc.add_list_item(text=_LIST_MARK.sub("", line), parent=group,
                                             prov=provs[0] if provs else None)
            elif label is DocItemLabel.FORMULA:
                item = doc.add_formula(text=_MATH.sub("", block.text.strip()), prov=provs[0] if provs else None)
            elif label is DocItemLabel.CODE:
                item = doc.add_code(text=block.text.strip().strip("`").strip(), prov=provs[0] if provs else None)
            elif label is DocItemLabel.CAPTION and (last is not None or pending_caption is None):
                # Below its picture or table: a child of it, as docling's own conversion makes it.
                item = doc.add_text(label=label, text=text, prov=provs[0] if provs else None, parent=last)
                _keep_boxes(export, item.self_ref, page, boxes, block.pdf_boxes)
                if last is not None and not last.captions:
                    last.captions.append(item.get_ref())
                    last = None
                else:
                    pending_caption = item
                continue
            else:
                item = doc.add_text(label=label, text=text, prov=provs[0] if provs else None, content_layer=layer)
            for prov in provs[1:]:  # a block split over columns: one provenance per box
                item.prov.append(prov)
            _keep_boxes(export, item.self_ref, page, boxes, block.pdf_boxes)
            if label in (DocItemLabel.PICTURE, DocItemLabel.TABLE):
                if pending_caption is not None:
                    item.captions.append(pending_caption.get_ref())
                    pending_caption = None
                    last = None
                else:
                    last = item
            else:
                last = None
                pending_caption = None
        open_table = (page.page, tail) if tail is not None else None
        for figure in unused:  # a figure no block names (a row without blocks): still a picture
            box = list(figure.bbox)
            where = ProvenanceItem(page_no=page.page, charspan=(0, 0), bbox=_bbox(page, box)) if len(box) == 4 else None
            item = doc.add_picture(image=_image_ref(figure), prov=where)
            export.figure_ids[item.self_ref] = figure.id
            if len(box) == 4:
                _keep_boxes(export, item.self_ref, page, [box], [figure.pdf_bbox] if figure.pdf_bbox else None)
    return export


def _continue(table: Any, html: str) -> bool:
    """Join the table ``html`` (at the top of a page) to ``table`` (which ended the page before)
    when they have as many columns, less its first row when that repeats ``table``'s first; False
    (nothing joined) otherwise. Assemble's rule (:mod:`llm_ocr.stages.tables`)."""
    data = table_data(html)
    if data.num_cols != table.data.num_cols or not data.table_cells:
        return False

    def first_row(cells: Any) -> list[str]:
        return [c.text for c in sorted(cells, key=lambda c: c.start_col_offset_idx) if c.start_row_offset_idx == 0]

    skip = 1 if first_row(data.table_cells) == first_row(table.data.table_cells) else 0
    shift = table.data.num_rows - skip
    for cell in data.table_cells:
        if cell.start_row_offset_idx < skip:
            continue
        cell.start_row_offset_idx += shift
        cell.end_row_offset_idx += shift
        cell.column_header = False  # a continuation's first row is a body row
        table.data.table_cells.append(cell)
    table.data.num_rows += data.num_rows - skip
    return True


def _bbox(page: PageResult, box: list[int]) -> Any:
    """docling's BoundingBox of a pixel box of ``page``: in points of the displayed page, origin
    bottom left, for a PDF page; in the image's pixels, origin top left, for an image."""
    from docling_core.types.doc import BoundingBox, CoordOrigin

    points = displayed_points(page, box)
    if points is not None:
        left, top, right, bottom = points
        return BoundingBox(l=left, t=top, r=right, b=bottom, coord_origin=CoordOrigin.BOTTOMLEFT)
    return BoundingBox(l=box[0], t=box[1], r=box[2], b=box[3], coord_origin=CoordOrigin.TOPLEFT)


def _keep_boxes(export: DoclingExport, ref: str, page: PageResult, boxes: list[list[int]],
                pdf_boxes: list[list[float]] | None) -> None:
    """Note an item's boxes in the rows' spaces (the chunks state both)."""
    pdf = list(pdf_boxes or [])
    export.boxes.setdefault(ref, []).extend(
        (page.page, list(b), pdf[i] if i < len(pdf) else None) for i, b in enumerate(boxes))


def _heading_level(block: Block) -> int:
    """A section header's level: its Markdown ``#`` count less one (``##`` is level 1), else 1."""
    marks = re.match(r"^\s*(#{1,6})\s", block.text)
    return max(1, len(marks.group(1)) - 1) if marks else 1


def _mimetype(source: str) -> str:
    return "application/pdf" if source.lower().endswith(".pdf") else "image/png"


def _hash(doc_id: str) -> int:
    import hashlib

    # docling's origin wants a 64-bit hash of the file; the id's is stable and needs no bytes.
    return int.from_bytes(hashlib.sha256(doc_id.encode("utf-8", "surrogatepass")).digest()[:8], "big") >> 1


def chunk_rows(doc_id: str, export: DoclingExport, chunker: BaseChunker | None = None) -> list[dict[str, Any]]:
    """One row per chunk of ``chunker`` (default docling-core's HierarchicalChunker; see
    :mod:`llm_ocr.stages.docling_chunkers`): text, headings, pages, boxes (in page pixels, and for
    a PDF page in PDF points of its user space too, as the rows hold them)."""
    from docling_core.transforms.chunker.doc_chunk import DocChunk
    from docling_core.transforms.chunker.hierarchical_chunker import HierarchicalChunker

    rows = []
    for index, base in enumerate((chunker or HierarchicalChunker()).chunk(export.document)):
        chunk = DocChunk.model_validate(base)  # what the chunker yields, typed as such (docling's own idiom)
        boxes, pdf_boxes, pages, figure_ids, seen = [], [], [], [], set()
        items = list(chunk.meta.doc_items)
        for item in chunk.meta.doc_items:
            # The chunker serializes a picture through its caption, whose item alone it names:
            # the picture (its figure id and box) is the caption's parent.
            parent = item.parent.resolve(export.document) if item.parent is not None else None
            if parent is not None and (parent.self_ref in export.figure_ids
                                       or getattr(parent, "label", None) == "table"):
                items.append(parent)
        for item in items:
            if item.self_ref in seen:
                continue
            seen.add(item.self_ref)
            if item.self_ref in export.figure_ids:
                figure_ids.append(export.figure_ids[item.self_ref])
            for prov in getattr(item, "prov", []):
                if prov.page_no not in pages:
                    pages.append(prov.page_no)
            for page_no, box, pdf in export.boxes.get(item.self_ref, []):
                boxes.append({"page": page_no, "x1": box[0], "y1": box[1], "x2": box[2], "y2": box[3]})
                if pdf is not None:
                    pdf_boxes.append({"page": page_no, "left": pdf[0], "bottom": pdf[1], "right": pdf[2],
                                      "top": pdf[3]})
        rows.append({
            "doc_id": doc_id,
            "chunk_id": f"{doc_id}#{index}",
            "chunk_index": index,
            "text": chunk.text,
            "headings": list(chunk.meta.headings or []),
            "pages": sorted(pages),
            "boxes": boxes,
            "figure_ids": figure_ids,
            "pdf_boxes": pdf_boxes,
        })
    return rows
