"""The data model: what a page, a figure and a document look like in every stage's output.

Rows are plain dicts at the Parquet boundary; these dataclasses are the typed view the stages
work with, and the one declaration of the output columns: the Arrow schemas are derived from
their fields (:func:`schema_of`), and so is the ``datasets`` feature metadata the schemas carry,
so that ``datasets.load_dataset("parquet", data_files=...)`` decodes the figure images.
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from dataclasses import asdict, dataclass, field
from functools import cache
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    import pyarrow as pa

PageStatus = Literal["ok", "truncated", "error"]
DocumentStatus = Literal["ok", "partial", "error"]

#: ``page`` value of a row that stands for a whole document that could not be split into
#: pages (a corrupt PDF, a dataset row without images). Real pages are numbered from 1.
DOCUMENT_LEVEL_PAGE = 0


#: The Arrow type of a column whose Python type alone does not say it (``field(metadata={ARROW: f})``,
#: ``f`` a function that returns it). A function, so that importing the row types does not import
#: pyarrow: a process that never writes a row (the simulated server) is spared its 0.3 CPU-seconds
#: of import at every start.
ARROW = "arrow"


@cache
def image_type() -> pa.DataType:
    """How ``datasets`` stores an image: its encoded bytes (``path`` unused here)."""
    import pyarrow as pa

    return pa.struct([("bytes", pa.binary()), ("path", pa.string())])


@cache
def _scalars() -> dict[type, pa.DataType]:
    import pyarrow as pa

    return {str: pa.string(), int: pa.int32(), float: pa.float64(), bool: pa.bool_(), bytes: image_type()}


def _int64() -> pa.DataType:
    import pyarrow as pa

    return pa.int64()


def arrow_type(annotation: Any) -> pa.DataType:
    """The Arrow type of a column of Python type ``annotation``: ``int`` is int32, ``bytes`` an
    image, a ``Literal`` of strings a string, a list a list, a dataclass a struct of its fields."""
    import pyarrow as pa

    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        (annotation,) = [a for a in args if a is not type(None)]  # X | None: nullable X
        return arrow_type(annotation)
    if origin is typing.Literal:
        return _scalars()[type(args[0])]
    if origin is list:
        return pa.list_(arrow_type(args[0]))
    if dataclasses.is_dataclass(annotation):
        return pa.struct(arrow_fields(annotation))  # type: ignore[arg-type]
    return _scalars()[annotation]


def arrow_fields(cls: type) -> list[pa.Field]:
    """The Arrow fields of dataclass ``cls``, in declaration order: the columns of its rows."""
    import pyarrow as pa

    hints = typing.get_type_hints(cls)
    return [
        pa.field(f.name, f.metadata[ARROW]() if ARROW in f.metadata else arrow_type(hints[f.name]))
        for f in dataclasses.fields(cls)
    ]


def features_of(dtype: pa.DataType) -> dict[str, Any]:
    """The ``datasets`` feature of an Arrow type (an image struct is an ``Image``)."""
    import pyarrow as pa

    if dtype.equals(image_type()):
        return {"_type": "Image"}
    if pa.types.is_list(dtype):
        return {"feature": features_of(dtype.value_type), "_type": "List"}
    if pa.types.is_struct(dtype):
        return {dtype.field(i).name: features_of(dtype.field(i).type) for i in range(dtype.num_fields)}
    return {"dtype": {"double": "float64"}.get(str(dtype), str(dtype)), "_type": "Value"}


def schema_of(cls: type) -> pa.Schema:
    """The Arrow schema of dataclass ``cls``'s rows, with the ``datasets`` features that let
    ``datasets.load_dataset("parquet", ...)`` decode its images (it reads the ``huggingface``
    key when it loads Parquet files it did not write itself)."""
    import pyarrow as pa

    fields = arrow_fields(cls)
    features = {f.name: features_of(f.type) for f in fields}
    return pa.schema(fields, metadata={b"huggingface": json.dumps({"info": {"features": features}}).encode()})


@dataclass
class Block:
    """One layout block of the model's answer, boxes in page pixels (``[x1, y1, x2, y2]``, origin
    top left, in the row's ``width`` x ``height`` image)."""

    label: str
    boxes: list[list[int]]
    text: str
    #: Each box in PDF points, ``[left, bottom, right, top]`` in the page's user space (origin
    #: bottom left, the coordinates of its text and annotations): a PDF page's only, else None.
    pdf_boxes: list[list[float]] | None = None
    #: Page furniture (``page_header``, ``page_footer``, ``page_number``): found by the family's
    #: label or by repetition across the document's pages (docs/stages.md); None: body text.
    furniture: str | None = None


@dataclass
class Figure:
    """A figure cropped from a page. ``bbox`` is ``[x1, y1, x2, y2]`` in page pixels."""

    id: str
    bbox: list[int]
    image: bytes | None = None
    description: str | None = None
    description_json: str | None = None
    error: str | None = None
    #: ``bbox`` in PDF points, ``[left, bottom, right, top]`` in the page's user space (as
    #: :attr:`Block.pdf_boxes`); a PDF page's only, else None.
    pdf_bbox: list[float] | None = None

    def to_row(self) -> dict[str, Any]:
        """The Parquet row of this figure (image as a ``datasets`` image struct)."""
        return {
            "id": self.id,
            "bbox": list(self.bbox),
            "image": {"bytes": self.image, "path": None} if self.image is not None else None,
            "description": self.description,
            "description_json": self.description_json,
            "error": self.error,
            "pdf_bbox": list(self.pdf_bbox) if self.pdf_bbox is not None else None,
        }

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Figure:
        """Inverse of :meth:`to_row`; accepts decoded or raw image structs."""
        image = row.get("image")
        if isinstance(image, dict):
            image = image.get("bytes")
        return cls(
            id=row["id"],
            bbox=list(row.get("bbox") or []),
            image=image,
            description=row.get("description"),
            description_json=row.get("description_json"),
            error=row.get("error"),
            pdf_bbox=row.get("pdf_bbox"),
        )


@dataclass
class PdfPage:
    """Where a PDF page's pixels are in its own coordinates: the page's box as PDFium renders it
    (its CropBox clipped to its MediaBox) in user-space points, and its ``/Rotate``."""

    left: float
    bottom: float
    right: float
    top: float
    #: Degrees clockwise (0, 90, 180 or 270): the rendered image shows the page turned so.
    rotation: int


#: How the reading a page row holds was made (``route``): from the PDF's text layer without a model,
#: by the run's model, or by the stronger model a first reading was escalated to.
Route = Literal["text-layer", "model", "escalated"]


@dataclass
class OtherReading:
    """The reading of a page that a row does not use: the first model's when the page was
    escalated, or the stronger model's when it was not better. Kept for comparison and for the
    cost of each model."""

    model: str | None = None
    status: str | None = None
    markdown: str = ""
    error: str | None = None
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    latency_s: float | None = None


@dataclass
class PageResult:
    """One output row of Extract and Describe: a page, its Markdown and its figures."""

    doc_id: str
    doc_index: int = field(metadata={ARROW: _int64})
    page: int
    source: str
    num_pages: int | None = None
    markdown: str = ""
    raw: str = ""
    figures: list[Figure] = field(default_factory=list)
    blocks: list[Block] = field(default_factory=list)
    width: int | None = None
    height: int | None = None
    status: PageStatus = "error"
    error: str | None = None
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    latency_s: float | None = None
    attempts: int = 0
    #: Tokens generated in repetition loops and thrown away (None: no attempt looped or ran out).
    cut_tokens: int | None = None
    cut_reason: str | None = None  # why: one clause per attempt that looped or hit max_tokens
    #: Segments a long page was read in, one request each (None: read whole).
    segments: int | None = None
    model: str | None = None
    #: The model server crashed on this page alone (an ``error`` row kept across reruns).
    quarantined: bool = False
    #: The PDF's own text layer for a page the model failed or cut off (never the model's text).
    fallback_text: str | None = None
    #: Why the text layer was used, or why it was rejected (None: not looked at).
    fallback_note: str | None = None
    #: How the reading this row holds was made (None in rows written before routes: the model).
    route: Route | None = None
    #: Why the page took its route: its text layer's verdict (docs/routes.md).
    route_note: str | None = None
    #: The model whose first reading was escalated (None: the page was not escalated).
    escalated_from: str | None = None
    #: The signals of the first reading that sent the page to the stronger model, and the outcome.
    escalation_reason: str | None = None
    #: The reading not used (see :class:`OtherReading`; None: the page was read once).
    other_reading: OtherReading | None = None
    #: Characters the page seemed to hold when it was rendered (its text layer, else its ink).
    text_estimate: int | None = None
    #: The document whose reading this row copies, without a model request (None: read here):
    #: a byte-identical document read first, or the first of pixel-identical pages (docs/dedup.md).
    duplicate_of: str | None = None
    #: The page of :attr:`duplicate_of` whose reading this row copies.
    duplicate_page: int | None = None
    #: Pixels per inch of the image the boxes are in (a PDF page: its ``width`` over the
    #: displayed page's width in inches); None for an image source, whose pixels are its own.
    dpi: float | None = None
    #: Degrees counter-clockwise the image the boxes are in was turned from the page as
    #: rendered (olmOCR-2 turns a page it says is not upright); 0: as rendered.
    turned: int | None = None
    #: A PDF page's box and /Rotate, which map the pixel boxes to PDF points (None: not a PDF page).
    pdf_page: PdfPage | None = None

    @property
    def key(self) -> tuple[str, int]:
        """The identity of a page across runs and stages."""
        return (self.doc_id, self.page)

    @property
    def tally(self) -> str:
        """The column the accounting line counts this row in: its status, or ``quarantined``."""
        return "quarantined" if self.quarantined else self.status

    def to_row(self) -> dict[str, Any]:
        """The Parquet row of this page."""
        row = asdict(self)
        row["figures"] = [f.to_row() for f in self.figures]
        row["blocks"] = [asdict(b) for b in self.blocks]
        return row

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> PageResult:
        """Rebuild a page from a Parquet row (as read by pyarrow ``to_pylist``)."""
        data: dict[str, Any] = {k: row.get(k) for k in cls.__dataclass_fields__ if k in row}
        data["figures"] = [Figure.from_row(f) for f in row.get("figures") or []]
        data["blocks"] = [Block(**b) for b in row.get("blocks") or []]
        pdf_page = row.get("pdf_page")
        data["pdf_page"] = PdfPage(**pdf_page) if isinstance(pdf_page, dict) else pdf_page
        data["attempts"] = data.get("attempts") or 0
        data["quarantined"] = bool(data.get("quarantined"))  # null in parts written before the column
        other = row.get("other_reading")
        data["other_reading"] = OtherReading(**other) if isinstance(other, dict) else None
        return cls(**data)

    @property
    def used_route(self) -> str:
        """:attr:`route`, with rows written before routes counted as the model's."""
        return self.route or "model"


def _figure_with_page() -> pa.DataType:
    """A figure of a document (Assemble's rows): a page's figure and the page it is on."""
    import pyarrow as pa

    fields = arrow_fields(Figure)
    return pa.struct([fields[0], pa.field("page", pa.int32()), *fields[1:]])


def _figures_with_page() -> pa.DataType:
    import pyarrow as pa

    return pa.list_(_figure_with_page())


@dataclass
class Furniture:
    """A running header, footer or page number of a document (Assemble's rows)."""

    page: int
    #: ``page_header``, ``page_footer`` or ``page_number``.
    kind: str
    text: str
    #: ``label`` (the family labelled it) or ``repetition`` (found on many pages' edges).
    found: str
    #: Its block's index in the page row's ``blocks`` (None: a paragraph of a page without blocks).
    block: int | None = None


@dataclass
class TableSpan:
    """A table Assemble joined across pages (Assemble's rows)."""

    #: The pages it spans, in order: its first page's Markdown holds the whole table.
    pages: list[int]
    columns: int
    #: Its rows once joined (a header row repeated on a later page counted once).
    rows: int


@dataclass
class DocumentResult:
    """One output row of Assemble: a whole document."""

    doc_id: str
    doc_index: int = field(metadata={ARROW: _int64})
    source: str
    num_pages: int
    markdown: str
    #: Figure rows of every page, each with its ``page`` (see :func:`_figure_with_page`).
    figures: list[dict[str, Any]] = field(metadata={ARROW: _figures_with_page})
    status: DocumentStatus
    failed_pages: list[int]
    error: str | None = None
    #: Character offset in ``markdown`` where each page's text begins (page 1 at 0); None in
    #: rows written before the column existed.
    page_starts: list[int] | None = None
    #: The document's page furniture, found or labelled (docs/stages.md, "Page furniture"); None
    #: in rows written before the column existed.
    furniture: list[Furniture] | None = None
    #: The tables joined across pages, with the pages each spans (None: rows written before).
    table_spans: list[TableSpan] | None = None

    def to_row(self) -> dict[str, Any]:
        """The Parquet row of this document."""
        # Shallow: the figures are row dicts already, and asdict's deep copy of every figure
        # (image bytes included) was most of Assemble's CPU time.
        row = {name: getattr(self, name) for name in self.__dataclass_fields__}
        row["figures"] = [dict(f) for f in self.figures]
        row["failed_pages"] = list(self.failed_pages)
        row["page_starts"] = list(self.page_starts) if self.page_starts is not None else None
        row["furniture"] = [asdict(f) for f in self.furniture] if self.furniture is not None else None
        row["table_spans"] = [asdict(t) for t in self.table_spans] if self.table_spans is not None else None
        return row


@cache
def page_schema() -> pa.Schema:
    """Arrow schema of Extract and Describe rows (one row per page): :class:`PageResult`'s fields."""
    return schema_of(PageResult)


@cache
def document_schema() -> pa.Schema:
    """Arrow schema of Assemble rows (one row per document): :class:`DocumentResult`'s fields."""
    return schema_of(DocumentResult)
