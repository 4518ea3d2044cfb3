"""Fields: a document's Markdown (or page images) → JSON validated against a user's schema, after
rule-then-model classification. One ``OUT/fields`` row per document.

- :mod:`.schema`    the schema: JSON Schema file, inline JSON or pydantic model; llm-ocr's keywords
- :mod:`.classes`   the classes file and the classification rules
- :mod:`.chunks`    a document split by page into requests that fit the context
- :mod:`.prompts`   the requests (structured outputs, JSON mode, instruction) and answer parsing
- :mod:`.validate`  schema (pattern, format, enum), pydantic validators, cross-field checks
- :mod:`.merge`     the answers for a long document's parts, merged
- :mod:`.evidence`  values found nowhere in the document's text; the page each value is on
- :mod:`.columns`   the Arrow schema of ``OUT/fields``: fixed and typed columns
- :mod:`.document`  one document's row: the per-document transform
"""

from llm_ocr.stages.fields.classes import OTHER, Classes, load_classes, single_class
from llm_ocr.stages.fields.columns import fields_arrow_schema, run_fingerprint, typed_columns
from llm_ocr.stages.fields.document import FieldsContext, FieldsResult, document_fields
from llm_ocr.stages.fields.schema import FieldsSchema, SchemaError, load_fields_schema

__all__ = [
    "OTHER",
    "Classes",
    "FieldsContext",
    "FieldsResult",
    "FieldsSchema",
    "SchemaError",
    "document_fields",
    "fields_arrow_schema",
    "load_classes",
    "load_fields_schema",
    "run_fingerprint",
    "single_class",
    "typed_columns",
]
