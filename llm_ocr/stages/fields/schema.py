"""The schema a document's fields must follow: from a JSON Schema file, inline JSON or a pydantic
model, checked before any request is sent.

Beyond JSON Schema, a schema may carry llm-ocr's own keywords (every one starts with
``x-llm-ocr-``; JSON Schema validators ignore unknown keywords, and they are stripped from the
schema sent to the model):

* ``x-llm-ocr-checks`` (at the root): cross-field checks, e.g. line items that must sum to the
  subtotal (see :class:`Check`);
* ``x-llm-ocr-merge`` (on a top-level property): how the answers for the parts of a long
  document are merged: ``first`` or ``last`` non-null value (scalars and objects; default
  ``first``), ``concat`` (arrays; the default for them), ``first``/``last`` array;
* ``x-llm-ocr-derived: true`` (on any property): the value is computed, not copied from the
  document, so it is not looked for in the document's text.
"""

from __future__ import annotations

import copy
import hashlib
import importlib
import json
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import fsspec

from llm_ocr.storage.stores import store_options

EXTENSION_PREFIX = "x-llm-ocr-"
CHECKS_KEY = "x-llm-ocr-checks"
MERGE_KEY = "x-llm-ocr-merge"
DERIVED_KEY = "x-llm-ocr-derived"
MERGE_POLICIES = ("first", "last", "concat")
#: ``package.module:ClassName`` (a pydantic model), as uvicorn and gunicorn name an app.
_PYDANTIC_PATH = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
_PATH_TOKEN = re.compile(r"([^.\[\]]+)|\[\*\]")


class SchemaError(Exception):
    """A schema (or a classes file) that cannot be used; the message says where and why."""


@dataclass(frozen=True)
class Check:
    """A cross-field check: the ``sum`` (or ``product``) of some values must equal another value.

    Paths are dotted property names, ``[*]`` standing for every item of an array
    (``line_items[*].amount``). With ``each`` (an array path), the check is applied to every
    item of that array, the other paths being relative to the item (``quantity`` × ``unit_price``
    = ``amount`` on each line). A check whose values are all missing is not applicable; a value
    that is not a number is left to the schema's own validation.
    """

    op: str  # "sum" or "product"
    operands: tuple[str, ...]
    equals: str
    tolerance: float = 0.01
    each: str | None = None
    name: str | None = None

    def describe(self) -> str:
        """How the check reads in an error message."""
        if self.name:
            return self.name
        joiner = " + " if self.op == "sum" else " × "
        left = joiner.join(self.operands) if len(self.operands) > 1 else f"{self.op} of {self.operands[0]}"
        where = f" (each {self.each})" if self.each else ""
        return f"{left} = {self.equals}{where}"


@dataclass(frozen=True)
class FieldsSchema:
    """A checked schema: what the model is asked for and what its answer is validated against."""

    name: str  # the class it extracts (a classes-file key, or the schema's file stem / model name)
    schema: dict[str, Any]  # as given, llm-ocr keywords included
    origin: str  # where it came from, for messages
    checks: tuple[Check, ...] = ()
    model: Any = field(default=None, compare=False)  # the pydantic model class, if one was given

    @property
    def wire(self) -> dict[str, Any]:
        """The schema sent to the model: llm-ocr's own keywords removed."""
        return strip_extensions(self.schema)

    @property
    def fingerprint(self) -> str:
        """A short hash of the schema (the output records it: a rerun with another schema is refused)."""
        canonical = json.dumps(self.schema, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return hashlib.sha256(canonical.encode()).hexdigest()[:16]

    def top_properties(self) -> dict[str, dict[str, Any]]:
        """The root object's properties, ``$ref``s resolved."""
        return {name: resolve(self.schema, sub) for name,
                sub in resolve(self.schema, self.schema).get("properties", {}).items()}

    def merge_policy(self, name: str) -> str:
        """How answers for parts of a long document are merged for top-level property ``name``."""
        prop = self.top_properties().get(name, {})
        policy = prop.get(MERGE_KEY)
        if policy is None:
            return "concat" if value_type(self.schema, prop) == "array" else "first"
        return str(policy)


# ---------------------------------------------------------------------------------------------
# JSON Schema helpers


def resolve(root: dict[str, Any], node: Any, depth: int = 0) -> dict[str, Any]:
    """``node`` with a local ``$ref`` (``#/$defs/Name``) followed; anything else as it is."""
    while isinstance(node, dict) and "$ref" in node and depth < 32:
        ref = node["$ref"]
        if not isinstance(ref, str) or not ref.startswith("#"):
            return {k: v for k, v in node.items() if k != "$ref"}
        target: Any = root
        for part in ref.lstrip("#").strip("/").split("/"):
            if part:
                part = part.replace("~1", "/").replace("~0", "~")
                target = target.get(part) if isinstance(target, dict) else None
        rest = {k: v for k, v in node.items() if k != "$ref"}
        node = {**(target if isinstance(target, dict) else {}), **rest}
        depth += 1
    return node if isinstance(node, dict) else {}


def non_null(root: dict[str, Any], node: Any) -> dict[str, Any]:
    """The non-null alternative of an optional value (``anyOf [X, null]``, ``type [X, "null"]``)."""
    node = resolve(root, node)
    for key in ("anyOf", "oneOf"):
        options = node.get(key)
        if isinstance(options, list):
            real = [resolve(root, o) for o in options if resolve(root, o).get("type") != "null"]
            if len(real) == 1:
                merged = {k: v for k, v in node.items() if k != key}
                return {**real[0], **merged}
    typ = node.get("type")
    if isinstance(typ, list):
        real_types = [t for t in typ if t != "null"]
        if len(real_types) == 1:
            return {**node, "type": real_types[0]}
    return node


def value_type(root: dict[str, Any], node: Any) -> str | None:
    """The JSON type a schema node describes (``string``, ``number``... or None when it is open)."""
    node = non_null(root, node)
    typ = node.get("type")
    if isinstance(typ, str):
        return typ
    if "properties" in node:
        return "object"
    if "items" in node:
        return "array"
    enum = node.get("enum") or ([node["const"]] if "const" in node else None)
    if enum:
        kinds = {_json_kind(v) for v in enum}
        if len(kinds) == 1:
            return kinds.pop()
    return None


def _json_kind(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if value is None:
        return "null"
    names: dict[type, str] = {str: "string", list: "array", dict: "object"}
    return names.get(type(value), "string")


def allows_null(root: dict[str, Any], node: Any) -> bool:
    """Whether ``null`` is a valid value for this schema node."""
    node = resolve(root, node)
    typ = node.get("type")
    if typ == "null" or (isinstance(typ, list) and "null" in typ):
        return True
    for key in ("anyOf", "oneOf"):
        if any(allows_null(root, o) for o in node.get(key) or []):
            return True
    return None in (node.get("enum") or [])


def strip_extensions(node: Any) -> Any:
    """A deep copy of a schema without llm-ocr's ``x-llm-ocr-*`` keywords."""
    if isinstance(node, dict):
        return {k: strip_extensions(v) for k,
                v in node.items() if not (isinstance(k, str) and k.startswith(EXTENSION_PREFIX))}
    if isinstance(node, list):
        return [strip_extensions(v) for v in node]
    return node


def partial_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """The schema for one part of a long document: no top-level property is required and each
    may be null (the part may not show it); items and nested objects keep their own rules."""
    wire = strip_extensions(schema)
    root = resolve(wire, wire)
    partial = copy.deepcopy(wire)
    if partial is not root and "$ref" in partial:  # a root that is a $ref: inline it
        partial = {**{k: v for k, v in wire.items() if k != "$ref"}, **copy.deepcopy(root)}
    partial.pop("required", None)
    props = partial.get("properties", {})
    for name, sub in list(props.items()):
        if not allows_null(wire, sub):
            props[name] = {"anyOf": [sub, {"type": "null"}]}
    return partial


# ---------------------------------------------------------------------------------------------
# Loading


def looks_like_pydantic_path(value: str) -> bool:
    """Whether ``value`` names a pydantic model (``pkg.module:Class``) rather than a file."""
    return bool(_PYDANTIC_PATH.match(value.strip())) and not os.path.exists(value)


def load_fields_schema(
    value: str,
    *,
    option: str = "--schema",
    name: str | None = None,
    base: str | None = None,
    storage_options: dict[str, Any] | None = None,
) -> FieldsSchema:
    """The schema named by ``value``: a JSON Schema file (path or URL, JSON or YAML), inline JSON
    (``{...}``) or a pydantic model (``package.module:Model``, imported with the current folder on
    ``sys.path``, as uvicorn does). ``base`` is the folder relative paths start from (a classes
    file's own folder). Raises :class:`SchemaError` naming ``option`` for anything unusable."""
    text = value.strip()
    model = None
    if looks_like_pydantic_path(text):
        model = import_model(text, option)
        try:
            schema = model.model_json_schema()
        except Exception as exc:  # pydantic raises several kinds for unsupported types
            raise SchemaError(f"{option} {value!r}: pydantic cannot make a JSON schema of it: {exc}") from exc
        origin, default_name = text, text.rsplit(":", 1)[1].lower()
    elif text.startswith("{"):
        schema = _parse(text, f"{option} (inline JSON)", yaml_ok=False)
        origin, default_name = "inline JSON", str(_title(schema) or "document")
    else:
        location = text if base is None or "://" in text or os.path.isabs(text) else _join(base, text)
        schema = _parse(_read_text(location, option, value, storage_options), f"{option} {value!r}",
                        yaml_ok=location.lower().endswith((".yaml", ".yml")))
        stem = location.rstrip("/").rsplit("/", 1)[-1]
        origin, default_name = location, re.sub(r"(\.schema)?\.(json|ya?ml)$", "", stem, flags=re.IGNORECASE)
    checked = check_schema(schema, f"{option} {value!r}")
    return FieldsSchema(name=name or default_name, schema=checked, origin=origin,
                        checks=parse_checks(checked, f"{option} {value!r}"), model=model)


def _title(schema: Any) -> str | None:
    return schema.get("title") if isinstance(schema, dict) and isinstance(schema.get("title"), str) else None


def _join(base: str, relative: str) -> str:
    if "://" in base:
        return base.rstrip("/") + "/" + relative
    return str(Path(base) / relative)


def _read_text(location: str, option: str, value: str, storage_options: dict[str, Any] | None) -> str:
    try:
        with fsspec.open(location, "rt", encoding="utf-8", **store_options(location, storage_options)) as handle:
            return handle.read()
    except (OSError, ValueError) as exc:
        raise SchemaError(f"{option}: cannot read {value!r} ({location}): {exc}") from exc


def _parse(text: str, what: str, *, yaml_ok: bool) -> Any:
    if yaml_ok:
        import yaml

        try:
            return yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise SchemaError(f"{what} is not valid YAML: {exc}") from exc
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise SchemaError(f"{what} is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from exc


def import_model(path: str, option: str = "--schema") -> Any:
    """The pydantic model class ``package.module:Class`` names (the current folder importable)."""
    module_name, _, attr = path.strip().partition(":")
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        # As uvicorn's --app-dir ".": a model in the user's own folder imports without installing it.
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # an import runs arbitrary code: any error is the user's to see
        raise SchemaError(f"{option} {path!r}: cannot import module {module_name!r}: {type(exc).__name__}: "
                          f"{exc}") from exc
    model = getattr(module, attr, None)
    if model is None:
        raise SchemaError(f"{option} {path!r}: module {module_name!r} has no attribute {attr!r}")
    if not (isinstance(model, type) and hasattr(model, "model_json_schema") and hasattr(model, "model_validate")):
        raise SchemaError(f"{option} {path!r}: {attr} is not a pydantic model class (a subclass of pydantic.BaseModel)")
    return model


def check_schema(schema: Any, what: str) -> dict[str, Any]:
    """``schema`` if it is a valid JSON Schema whose root is an object with properties."""
    from jsonschema.exceptions import SchemaError as MetaSchemaError
    from jsonschema.validators import validator_for

    if not isinstance(schema, dict):
        raise SchemaError(f"{what} must be a JSON object (a JSON Schema), not {type(schema).__name__}")
    try:
        validator_for(schema).check_schema(schema)
    except MetaSchemaError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "(root)"
        raise SchemaError(f"{what} is not a valid JSON Schema at {where}: {exc.message}") from exc
    root = resolve(schema, schema)
    if value_type(schema, root) != "object" or not isinstance(root.get("properties"), dict) or not root["properties"]:
        raise SchemaError(f"{what}: the root must be an object with properties (the fields to extract)")
    for prop_name, prop in root["properties"].items():
        policy = resolve(schema, prop).get(MERGE_KEY)
        if policy is not None and policy not in MERGE_POLICIES:
            raise SchemaError(f"{what}: {prop_name}.{MERGE_KEY} must be one of {', '.join(MERGE_POLICIES)}, not "
                              f"{policy!r}")
        if policy == "concat" and value_type(schema, prop) != "array":
            raise SchemaError(f"{what}: {prop_name}.{MERGE_KEY} 'concat' applies to arrays only")
    return schema


# ---------------------------------------------------------------------------------------------
# Cross-field checks


def parse_path(path: str) -> list[str]:
    """``line_items[*].amount`` → ``["line_items", "*", "amount"]``."""
    tokens = []
    pos = 0
    text = path.strip()
    while pos < len(text):
        if text[pos] == ".":
            pos += 1
            continue
        match = _PATH_TOKEN.match(text, pos)
        if match is None:
            raise ValueError(f"cannot read the path {path!r} at character {pos}")
        tokens.append(match.group(1) or "*")
        pos = match.end()
    if not tokens:
        raise ValueError("empty path")
    return tokens


def schema_at(schema: dict[str, Any], tokens: list[str]) -> dict[str, Any] | None:
    """The schema node a parsed path leads to, or None when it names no property."""
    node = non_null(schema, schema)
    for token in tokens:
        if token == "*":  # noqa: S105 - a path token, not a password
            if value_type(schema, node) != "array":
                return None
            node = non_null(schema, node.get("items", {}))
        else:
            props = node.get("properties")
            if not isinstance(props, dict) or token not in props:
                return None
            node = non_null(schema, props[token])
    return node


def parse_checks(schema: dict[str, Any], what: str) -> tuple[Check, ...]:
    """The root's ``x-llm-ocr-checks``, each one's paths checked against the schema."""
    raw = resolve(schema, schema).get(CHECKS_KEY, schema.get(CHECKS_KEY))
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise SchemaError(f"{what}: {CHECKS_KEY} must be a list of checks")
    checks = []
    for i, item in enumerate(raw):
        where = f"{what}: {CHECKS_KEY}[{i}]"
        if not isinstance(item, dict):
            raise SchemaError(f"{where} must be an object")
        unknown = set(item) - {"sum", "product", "equals", "tolerance", "each", "name"}
        if unknown:
            raise SchemaError(f"{where} has unknown keys: {', '.join(sorted(unknown))}")
        ops = [k for k in ("sum", "product") if k in item]
        if len(ops) != 1 or "equals" not in item:
            raise SchemaError(f"{where} needs exactly one of 'sum' or 'product', and 'equals'")
        op = ops[0]
        operands = item[op] if isinstance(item[op], list) else [item[op]]
        tolerance = item.get("tolerance", 0.01)
        if not isinstance(tolerance, (int, float)) or isinstance(tolerance, bool) or tolerance < 0:
            raise SchemaError(f"{where}: tolerance must be a non-negative number")
        each = item.get("each")
        scope: list[str] = []
        if each is not None:
            scope = _checked_path(schema, str(each), [], where) + ["*"]
            if schema_at(schema, scope) is None:
                raise SchemaError(f"{where}: each {each!r} is not an array of objects")
        for path in [*operands, item["equals"]]:
            target = schema_at(schema, scope + _checked_path(schema, str(path), scope, where))
            if value_type(schema, target) not in ("number", "integer", "array", None):
                raise SchemaError(f"{where}: {path!r} is not a number")
        checks.append(Check(op, tuple(str(o) for o in operands), str(item["equals"]), float(tolerance),
                            str(each) if each is not None else None, item.get("name")))
    return tuple(checks)


def _checked_path(schema: dict[str, Any], path: str, scope: list[str], where: str) -> list[str]:
    try:
        tokens = parse_path(path)
    except ValueError as exc:
        raise SchemaError(f"{where}: {exc}") from exc
    if schema_at(schema, scope + tokens) is None:
        parent = schema_at(schema, scope + tokens[:-1]) or {}
        if parent.get("type") == "array" or "items" in parent:
            parent = non_null(schema, parent.get("items", {}))
        known = ", ".join(sorted((parent.get("properties") or {}).keys())) or "none"
        raise SchemaError(f"{where}: {path!r} names no property of the schema (properties there: {known})")
    return tokens
