"""Document classes: which schema a document gets. Rules decide first; the model only where they
do not (see :mod:`.prompts` for its request); a document of no known class is ``other``.

A classes file (YAML or JSON)::

    classes:
      invoice:
        schema: invoice.schema.json        # relative to this file; or pkg.module:Model
        description: A bill asking the buyer to pay for goods or services.
        files: ["invoice*", "*_inv_*"]     # file-name patterns (shell style, any case)
        keywords: ["invoice number", "bill to", "invoice"]
        min_keywords: 1                    # keywords that must appear (default 1)
      receipt:
        schema: receipt.schema.json
        files: ["receipt*"]
        keywords: ["receipt", "paid by"]

The rules, in order:

1. **file name**: the patterns are matched against the document's file name (the last part of
   its ``doc_id``) and its whole ``doc_id``. One class matching decides; several matching leave
   the choice to the keywords, among those classes.
2. **keywords**: each class counts the distinct keywords its document text contains (whole
   words, any case). The class with the most decides if it has at least ``min_keywords`` and
   strictly more than every other class.
3. **the model**, asked to answer one of the class names or ``other``, decides the rest (unless
   ``--fields-classify rules``: then the rest is ``other``).
"""

from __future__ import annotations

import fnmatch
import json
import os
from dataclasses import dataclass, field
from typing import Any

from llm_ocr.stages.fields.evidence import normalize_text
from llm_ocr.stages.fields.schema import FieldsSchema, SchemaError, _parse, _read_text, load_fields_schema

OTHER = "other"
_CLASS_KEYS = {"schema", "description", "files", "keywords", "min_keywords"}


@dataclass(frozen=True)
class DocumentClass:
    """One class of a classes file, its schema loaded."""

    name: str
    schema: FieldsSchema
    description: str = ""
    files: tuple[str, ...] = ()
    keywords: tuple[str, ...] = ()
    min_keywords: int = 1


@dataclass(frozen=True)
class Decision:
    """A class, and what decided it (``file name``, ``keywords``, ``model``, ``schema``)."""

    name: str
    by: str
    detail: str = ""


@dataclass(frozen=True)
class Classes:
    """The classes a run extracts, in the order the file lists them."""

    classes: tuple[DocumentClass, ...]
    origin: str = ""
    _by_name: dict[str, DocumentClass] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_name", {c.name: c for c in self.classes})

    @property
    def names(self) -> list[str]:
        """The class names, in file order."""
        return [c.name for c in self.classes]

    def get(self, name: str) -> DocumentClass | None:
        """The class called ``name``, if any."""
        return self._by_name.get(name)

    @property
    def schemas(self) -> list[FieldsSchema]:
        """Every class's schema."""
        return [c.schema for c in self.classes]

    def by_rules(self, doc_id: str, text: str) -> Decision | None:
        """The class the rules give a document, or None when they do not decide."""
        name = doc_id.replace("\\", "/").rstrip("/").rsplit("/", 1)[-1].lower()
        by_file = [c for c in self.classes if any(_matches(p, name, doc_id) for p in c.files)]
        if len(by_file) == 1:
            pattern = next(p for p in by_file[0].files if _matches(p, name, doc_id))
            return Decision(by_file[0].name, "file name", f"matches {pattern!r}")
        candidates = by_file or list(self.classes)
        words = normalize_text(text)
        scores = []
        for c in candidates:
            found = [k for k in c.keywords if normalize_text(k) != "  " and normalize_text(k) in words]
            scores.append((len(found), c, found))
        scores.sort(key=lambda s: -s[0])
        if not scores or scores[0][0] == 0:
            return None
        best, runner_up = scores[0], scores[1] if len(scores) > 1 else None
        if best[0] < best[1].min_keywords or (runner_up is not None and runner_up[0] == best[0]):
            return None
        return Decision(best[1].name, "keywords", ", ".join(best[2]))


def _matches(pattern: str, name: str, doc_id: str) -> bool:
    pattern = pattern.lower()
    return fnmatch.fnmatchcase(name, pattern) or fnmatch.fnmatchcase(doc_id.lower(), pattern)


def load_classes(location: str, storage_options: dict[str, Any] | None = None) -> Classes:
    """The classes file at ``location`` (or the classes themselves, inline JSON ``{...}``, as
    ``--schema`` takes a schema) with every class's schema loaded and checked.

    Raises :class:`SchemaError` for a file that cannot be read or parsed, a class without a
    schema or with one that cannot be loaded, and unknown keys (a typo would silently do nothing).
    """
    if location.strip().startswith("{"):
        what = "--classes (inline JSON)"
        data = _parse(location, what, yaml_ok=False)
        return _classes_of(data, what, os.getcwd(), "inline JSON", storage_options)
    what = f"--classes {location!r}"
    data = _parse(_read_text(location, "--classes", location, storage_options), what, yaml_ok=True)
    base = location.rsplit("/", 1)[0] if "://" in location else os.path.dirname(os.path.abspath(location))
    return _classes_of(data, what, base, location, storage_options)


def _classes_of(data: Any, what: str, base: str, origin: str, storage_options: dict[str, Any] | None) -> Classes:
    """The classes of a parsed classes file (``base``: where its schemas' relative paths start)."""
    if not isinstance(data, dict) or not isinstance(data.get("classes"), dict) or not data["classes"]:
        raise SchemaError(f"{what}: expected a mapping with a non-empty 'classes' mapping (class name -> schema and "
                          "rules)")
    unknown_top = set(data) - {"classes"}
    if unknown_top:
        raise SchemaError(f"{what}: unknown top-level keys: {', '.join(sorted(map(str, unknown_top)))}")
    classes = []
    for name, spec in data["classes"].items():
        name = str(name)
        where = f"{what}: class {name!r}"
        if name.strip().lower() == OTHER:
            raise SchemaError(f"{where}: 'other' is reserved for documents of no known class")
        if not isinstance(spec, dict):
            raise SchemaError(f"{where} must be a mapping with at least 'schema'")
        unknown = set(spec) - _CLASS_KEYS
        if unknown:
            raise SchemaError(f"{where} has unknown keys: {', '.join(sorted(map(str, unknown)))} (known: "
                              f"{', '.join(sorted(_CLASS_KEYS))})")
        if not spec.get("schema"):
            raise SchemaError(f"{where} names no schema")
        try:
            schema = load_fields_schema(str(spec["schema"]), option=f"{what}: class {name!r} schema", name=name,
                                        base=base, storage_options=storage_options)
        except SchemaError as exc:
            raise SchemaError(str(exc)) from exc
        files = _strings(spec.get("files", []), f"{where}: files")
        keywords = _strings(spec.get("keywords", []), f"{where}: keywords")
        min_keywords = spec.get("min_keywords", 1)
        if not isinstance(min_keywords, int) or isinstance(min_keywords, bool) or min_keywords < 1:
            raise SchemaError(f"{where}: min_keywords must be a positive integer")
        classes.append(DocumentClass(name, schema, str(spec.get("description") or ""), files, keywords, min_keywords))
    return Classes(tuple(classes), origin)


def _strings(value: Any, where: str) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise SchemaError(f"{where} must be a list of non-empty strings")
    return tuple(value)


def inline_classes(classes: Classes) -> str:
    """``classes`` as one inline JSON text :func:`load_classes` reads back, each class's schema
    inline too: what a service's gateway queues with a document, so that a worker on another
    machine needs no copy of the classes file or its schemas."""
    return json.dumps({"classes": {
        c.name: {"schema": json.dumps(c.schema.schema), "description": c.description, "files": list(c.files),
                 "keywords": list(c.keywords), "min_keywords": c.min_keywords}
        for c in classes.classes}})


def single_class(schema: FieldsSchema) -> Classes:
    """The classes of a run given one ``--schema``: every document is of its class."""
    return Classes((DocumentClass(schema.name, schema),), schema.origin)
