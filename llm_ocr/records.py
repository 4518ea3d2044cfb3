"""The data model: what a page, a figure and a document look like in every stage's output.

Rows are plain dicts at the Parquet boundary; these dataclasses are the typed view the stages
work with. The Arrow schemas carry ``datasets`` feature metadata so that
``datasets.load_dataset("parquet", data_files=...)`` decodes the figure images.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from typing import Any, Literal

import pyarrow as pa

PageStatus = Literal["ok", "truncated", "error"]
DocumentStatus = Literal["ok", "partial", "error"]

#: ``page`` value of a row that stands for a whole document that could not be split into
#: pages (a corrupt PDF, a dataset row without images). Real pages are numbered from 1.
DOCUMENT_LEVEL_PAGE = 0


@dataclass
class Block:
    """One layout block of DeepSeek-OCR's grounding output, boxes in page pixels."""

    label: str
    boxes: list[list[int]]
    text: str


@dataclass
class Figure:
    """A figure cropped from a page. ``bbox`` is ``[x1, y1, x2, y2]`` in page pixels."""

    id: str
    bbox: list[int]
    image: bytes | None = None
    description: str | None = None
    description_json: str | None = None
    error: str | None = None

    def to_row(self) -> dict[str, Any]:
        """The Parquet row of this figure (image as a ``datasets`` image struct)."""
        return {
            "id": self.id,
            "bbox": list(self.bbox),
            "image": {"bytes": self.image, "path": None} if self.image is not None else None,
            "description": self.description,
            "description_json": self.description_json,
            "error": self.error,
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
        )


@dataclass
class PageResult:
    """One output row of Extract and Describe: a page, its Markdown and its figures."""

    doc_id: str
    doc_index: int
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
        data = {k: row.get(k) for k in cls.__dataclass_fields__ if k in row}
        data["figures"] = [Figure.from_row(f) for f in row.get("figures") or []]
        data["blocks"] = [Block(**b) for b in row.get("blocks") or []]
        data["attempts"] = data.get("attempts") or 0
        data["quarantined"] = bool(data.get("quarantined"))  # null in parts written before the column
        return cls(**data)


@dataclass
class DocumentResult:
    """One output row of Assemble: a whole document."""

    doc_id: str
    doc_index: int
    source: str
    num_pages: int
    markdown: str
    figures: list[dict[str, Any]]
    status: DocumentStatus
    failed_pages: list[int]
    error: str | None = None
    #: Character offset in ``markdown`` where each page's text begins (page 1 at 0); None in
    #: rows written before the column existed.
    page_starts: list[int] | None = None

    def to_row(self) -> dict[str, Any]:
        """The Parquet row of this document."""
        # Shallow: the figures are row dicts already, and asdict's deep copy of every figure
        # (image bytes included) was most of Assemble's CPU time.
        row = {name: getattr(self, name) for name in self.__dataclass_fields__}
        row["figures"] = [dict(f) for f in self.figures]
        row["failed_pages"] = list(self.failed_pages)
        row["page_starts"] = list(self.page_starts) if self.page_starts is not None else None
        return row


def _image_struct() -> pa.DataType:
    return pa.struct([("bytes", pa.binary()), ("path", pa.string())])


def _figure_fields(with_page: bool) -> list[tuple[str, pa.DataType]]:
    fields: list[tuple[str, pa.DataType]] = [("id", pa.string())]
    if with_page:
        fields.append(("page", pa.int32()))
    fields += [
        ("bbox", pa.list_(pa.int32())),
        ("image", _image_struct()),
        ("description", pa.string()),
        ("description_json", pa.string()),
        ("error", pa.string()),
    ]
    return fields


def _features_metadata(features: dict[str, Any]) -> dict[bytes, bytes]:
    # ``datasets`` reads this key to restore feature types (and so decode images) when it
    # loads Parquet files it did not write itself.
    return {b"huggingface": json.dumps({"info": {"features": features}}).encode()}


def _value(dtype: str) -> dict[str, Any]:
    return {"dtype": dtype, "_type": "Value"}


def _figure_features(with_page: bool) -> dict[str, Any]:
    features: dict[str, Any] = {"id": _value("string")}
    if with_page:
        features["page"] = _value("int32")
    features.update(
        {
            "bbox": {"feature": _value("int32"), "_type": "List"},
            "image": {"_type": "Image"},
            "description": _value("string"),
            "description_json": _value("string"),
            "error": _value("string"),
        }
    )
    return features


@lru_cache(maxsize=None)
def page_schema() -> pa.Schema:
    """Arrow schema of Extract and Describe rows (one row per page)."""
    fields = [
        ("doc_id", pa.string()),
        ("doc_index", pa.int64()),
        ("page", pa.int32()),
        ("source", pa.string()),
        ("num_pages", pa.int32()),
        ("markdown", pa.string()),
        ("raw", pa.string()),
        ("figures", pa.list_(pa.struct(_figure_fields(with_page=False)))),
        (
            "blocks",
            pa.list_(
                pa.struct(
                    [
                        ("label", pa.string()),
                        ("boxes", pa.list_(pa.list_(pa.int32()))),
                        ("text", pa.string()),
                    ]
                )
            ),
        ),
        ("width", pa.int32()),
        ("height", pa.int32()),
        ("status", pa.string()),
        ("error", pa.string()),
        ("finish_reason", pa.string()),
        ("prompt_tokens", pa.int32()),
        ("completion_tokens", pa.int32()),
        ("latency_s", pa.float64()),
        ("attempts", pa.int32()),
        ("cut_tokens", pa.int32()),
        ("cut_reason", pa.string()),
        ("segments", pa.int32()),
        ("model", pa.string()),
        ("quarantined", pa.bool_()),
        ("fallback_text", pa.string()),
        ("fallback_note", pa.string()),
    ]
    features = {
        "doc_id": _value("string"),
        "doc_index": _value("int64"),
        "page": _value("int32"),
        "source": _value("string"),
        "num_pages": _value("int32"),
        "markdown": _value("string"),
        "raw": _value("string"),
        "figures": {"feature": _figure_features(with_page=False), "_type": "List"},
        "blocks": {
            "feature": {
                "label": _value("string"),
                "boxes": {"feature": {"feature": _value("int32"), "_type": "List"}, "_type": "List"},
                "text": _value("string"),
            },
            "_type": "List",
        },
        "width": _value("int32"),
        "height": _value("int32"),
        "status": _value("string"),
        "error": _value("string"),
        "finish_reason": _value("string"),
        "prompt_tokens": _value("int32"),
        "completion_tokens": _value("int32"),
        "latency_s": _value("float64"),
        "attempts": _value("int32"),
        "cut_tokens": _value("int32"),
        "cut_reason": _value("string"),
        "segments": _value("int32"),
        "model": _value("string"),
        "quarantined": _value("bool"),
        "fallback_text": _value("string"),
        "fallback_note": _value("string"),
    }
    return pa.schema(fields, metadata=_features_metadata(features))


@lru_cache(maxsize=None)
def document_schema() -> pa.Schema:
    """Arrow schema of Assemble rows (one row per document)."""
    fields = [
        ("doc_id", pa.string()),
        ("doc_index", pa.int64()),
        ("source", pa.string()),
        ("num_pages", pa.int32()),
        ("markdown", pa.string()),
        ("figures", pa.list_(pa.struct(_figure_fields(with_page=True)))),
        ("status", pa.string()),
        ("failed_pages", pa.list_(pa.int32())),
        ("error", pa.string()),
        ("page_starts", pa.list_(pa.int64())),
    ]
    features = {
        "doc_id": _value("string"),
        "doc_index": _value("int64"),
        "source": _value("string"),
        "num_pages": _value("int32"),
        "markdown": _value("string"),
        "figures": {"feature": _figure_features(with_page=True), "_type": "List"},
        "status": _value("string"),
        "failed_pages": {"feature": _value("int32"), "_type": "List"},
        "error": _value("string"),
        "page_starts": {"feature": _value("int64"), "_type": "List"},
    }
    return pa.schema(fields, metadata=_features_metadata(features))
