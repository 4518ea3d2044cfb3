"""The columns of ``OUT/fields``: fixed ones, plus each top-level scalar of the schema(s) as a typed
column whose Arrow type comes from the schema.

=================================  ==================================
JSON Schema of a top-level field   column type
=================================  ==================================
``string``                         ``string``
``string`` with ``format: date``   ``date32`` (``datetime.date`` in Python)
``string``, ``format: date-time``  ``timestamp[us, tz=UTC]``
``integer``                        ``int64``
``number``                         ``float64``
``boolean``                        ``bool``
an ``enum`` of strings             ``string``
object, array, or anything else    no column (it is in ``fields``)
=================================  ==================================

Optional fields (``anyOf [X, null]``, ``type [X, "null"]``) get X's column. With several classes,
the columns are the union of their schemas' fields; a name typed ``integer`` in one and
``number`` in another is ``float64``, any other disagreement ``string``. A field named like a fixed
column (``status``, ``class``...) gets its typed column as ``field_NAME``. A value that does not
convert (a string where a number belongs, in an ``invalid`` row) leaves the column null; ``fields``
always holds the answer as given.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from llm_ocr.stages.fields.schema import FieldsSchema, non_null, value_type

log = logging.getLogger("llm_ocr")

#: Parquet key-value metadata: the fingerprint of the schema(s) the rows were extracted with.
SCHEMA_METADATA_KEY = b"llm_ocr_fields_schema"


def _value(dtype: str) -> dict[str, Any]:
    return {"dtype": dtype, "_type": "Value"}


def _struct_list(fields: list[tuple[str, pa.DataType, dict[str, Any]]]) -> tuple[pa.DataType, dict[str, Any]]:
    arrow = pa.list_(pa.struct([(n, t) for n, t, _ in fields]))
    feature = {"feature": {n: f for n, _, f in fields}, "_type": "List"}
    return arrow, feature


_PAGES_LIST = (pa.list_(pa.int32()), {"feature": _value("int32"), "_type": "List"})
_STRINGS_LIST = (pa.list_(pa.string()), {"feature": _value("string"), "_type": "List"})

#: The columns every fields row has, in order; the typed columns go right after ``fields``.
FIXED_BEFORE: list[tuple[str, pa.DataType, dict[str, Any]]] = [
    ("doc_id", pa.string(), _value("string")),
    ("doc_index", pa.int64(), _value("int64")),
    ("source", pa.string(), _value("string")),
    ("num_pages", pa.int32(), _value("int32")),
    ("class", pa.string(), _value("string")),
    ("class_by", pa.string(), _value("string")),
    ("fields", pa.string(), _value("string")),
]
FIXED_AFTER: list[tuple[str, pa.DataType, dict[str, Any]]] = [
    ("status", pa.string(), _value("string")),
    ("error", pa.string(), _value("string")),
    ("validation_errors",
     *_struct_list([("path", pa.string(), _value("string")), ("message", pa.string(), _value("string"))])),
    ("unsupported_values",
     *_struct_list([("path", pa.string(), _value("string")), ("value", pa.string(), _value("string"))])),
    ("value_pages", *_struct_list([("path", pa.string(), _value("string")), ("page", pa.int32(), _value("int32"))])),
    ("conflicts",
     *_struct_list([("path", pa.string(), _value("string")), ("values", *_STRINGS_LIST), ("pages", *_PAGES_LIST)])),
    ("document_status", pa.string(), _value("string")),
    ("requests", pa.int32(), _value("int32")),
    ("repaired", pa.bool_(), _value("bool")),
    ("structured", pa.string(), _value("string")),
    ("prompt_tokens", pa.int64(), _value("int64")),
    ("completion_tokens", pa.int64(), _value("int64")),
    ("latency_s", pa.float64(), _value("float64")),
    ("model", pa.string(), _value("string")),
]
FIXED_NAMES = {name for name, _, _ in FIXED_BEFORE + FIXED_AFTER}


@dataclass(frozen=True)
class TypedColumn:
    """One top-level scalar field as its own column."""

    field: str  # the property name in the answer
    column: str  # the column name (``field_`` + name when it would shadow a fixed column)
    kind: str  # "string", "date", "date-time", "integer", "number", "boolean"

    @property
    def arrow(self) -> pa.DataType:
        """The column's Arrow type."""
        return {
            "string": pa.string(), "date": pa.date32(), "date-time": pa.timestamp("us", tz="UTC"),
            "integer": pa.int64(), "number": pa.float64(), "boolean": pa.bool_(),
        }[self.kind]  # fmt: skip

    @property
    def feature(self) -> dict[str, Any]:
        """The column's ``datasets`` feature."""
        return _value({"string": "string", "date": "date32", "date-time": "timestamp[us, tz=UTC]", "integer": "int64",
                       "number": "float64", "boolean": "bool"}[self.kind])

    def convert(self, value: Any) -> Any:
        """``value`` as this column holds it, or None when it does not convert."""
        if value is None:
            return None
        try:
            if self.kind == "string":
                return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
            if self.kind == "boolean":
                return value if isinstance(value, bool) else None
            if self.kind in ("integer", "number"):
                if isinstance(value, bool) or not isinstance(value, (int, float)):
                    return None
                if self.kind == "integer":
                    return int(value) if float(value).is_integer() else None
                return float(value)
            if not isinstance(value, str):
                return None
            if self.kind == "date":
                return dt.date.fromisoformat(value[:10]) if len(value) == 10 else None
            parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
            return parsed.astimezone(dt.timezone.utc) if parsed.tzinfo else None
        except (ValueError, OverflowError):
            return None


def _kind(schema: FieldsSchema, node: Any) -> str | None:
    node = non_null(schema.schema, node)
    typ = value_type(schema.schema, node)
    if typ == "string":
        fmt = node.get("format")
        return fmt if fmt in ("date", "date-time") else "string"
    if typ in ("integer", "number", "boolean"):
        return typ
    return None


def typed_columns(schemas: list[FieldsSchema]) -> list[TypedColumn]:
    """The typed columns of a run's schema(s), in the order their fields first appear."""
    kinds: dict[str, str] = {}
    for schema in schemas:
        for name, node in schema.top_properties().items():
            kind = _kind(schema, node)
            if kind is None:
                continue
            have = kinds.get(name)
            if have is None or have == kind:
                kinds[name] = kind
            elif {have, kind} == {"integer", "number"}:
                kinds[name] = "number"
            else:
                kinds[name] = "string"
    columns = []
    for name, kind in kinds.items():
        column = f"field_{name}" if name in FIXED_NAMES else name
        if column != name:
            log.info("fields: the schema's field %r is also a fixed column; its typed column is %r", name, column)
        columns.append(TypedColumn(name, column, kind))
    return columns


def fields_arrow_schema(columns: list[TypedColumn], fingerprint: str) -> pa.Schema:
    """The Arrow schema of ``OUT/fields`` rows, with the ``datasets`` features and the schema's
    fingerprint in the file metadata."""
    fixed_before = [(n, t) for n, t, _ in FIXED_BEFORE]
    fixed_after = [(n, t) for n, t, _ in FIXED_AFTER]
    typed = [(c.column, c.arrow) for c in columns]
    features = {n: f for n, _, f in FIXED_BEFORE}
    features.update({c.column: c.feature for c in columns})
    features.update({n: f for n, _, f in FIXED_AFTER})
    metadata = {
        # ``datasets`` reads this key to restore feature types when it loads Parquet it did not write.
        b"huggingface": json.dumps({"info": {"features": features}}).encode(),
        SCHEMA_METADATA_KEY: fingerprint.encode(),
    }
    return pa.schema(fixed_before + typed + fixed_after, metadata=metadata)


def run_fingerprint(schemas: list[FieldsSchema]) -> str:
    """One fingerprint for a run's schema(s), in order, with their class names."""
    import hashlib

    joined = "|".join(f"{s.name}={s.fingerprint}" for s in schemas)
    return hashlib.sha256(joined.encode()).hexdigest()[:16]
