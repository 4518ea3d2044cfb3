"""Shaping a model server's answer as vLLM would: special tokens, the token budget, and
structured output (a JSON schema instance).

Shared by the simulator and the CPU engine, so that their answers differ only in what they read
from the page, never in how the answer is cut, tagged or fitted to a schema.
"""

from __future__ import annotations

import math
from typing import Any, TypeGuard

# Grounding tags are special tokens of DeepSeek-OCR's tokenizer; vLLM drops them from the
# text unless the request sets ``skip_special_tokens: false`` (which is why the recipe does).
SPECIAL_TOKENS = ("<|ref|>", "<|/ref|>", "<|det|>", "<|/det|>", "<|grounding|>")


def truncate_to_tokens(text: str, max_tokens: int, tokens_per_char: float) -> tuple[str, int, bool]:
    """Cut ``text`` to ``max_tokens`` output tokens, counting ``ceil(len * tokens_per_char)``.

    Returns (text, completion tokens, whether it was cut); a cut answer reports exactly
    ``max_tokens`` tokens, as vLLM does for ``finish_reason == "length"``.
    """
    tokens = math.ceil(len(text) * tokens_per_char)
    if tokens <= max_tokens:
        return text, tokens, False
    chars = int(max_tokens / tokens_per_char)
    while chars > 0 and math.ceil(chars * tokens_per_char) > max_tokens:
        chars -= 1
    return text[:chars], max_tokens, True


def schema_instance(schema: Any, text: str, root: Any = None, depth: int = 0) -> Any:
    """A small deterministic instance of a JSON schema (object, array, string, number,
    integer, boolean, null, enum, const, anyOf/oneOf/allOf and local ``$ref``s).

    Strings are filled from ``text`` (the description the model would give), trimmed or padded
    to ``minLength``/``maxLength``; numbers sit at their lower bound. ``pattern``, ``format``,
    ``uniqueItems`` and remote ``$ref``s are not honoured.
    """
    if root is None:
        root = schema
    if not isinstance(schema, dict) or depth > 20:
        return None
    if "$ref" in schema:
        return schema_instance(_resolve_ref(root, schema["$ref"]), text, root, depth + 1)
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    for key in ("anyOf", "oneOf"):
        if schema.get(key):
            # Prefer a non-null alternative: Optional[X] is anyOf [X, null].
            options = [s for s in schema[key] if not (isinstance(s, dict) and s.get("type") == "null")]
            return schema_instance((options or schema[key])[0], text, root, depth + 1)
    if schema.get("allOf"):
        merged: dict[str, Any] = {}
        for part in schema["allOf"]:
            part = _resolve_ref(root, part["$ref"]) if isinstance(part, dict) and "$ref" in part else part
            for k, v in (part or {}).items():
                if k in ("properties",) and k in merged:
                    merged[k] = {**merged[k], **v}
                elif k == "required" and k in merged:
                    merged[k] = sorted(set(merged[k]) | set(v))
                else:
                    merged[k] = v
        rest = {k: v for k, v in schema.items() if k != "allOf"}
        return schema_instance({**merged, **rest}, text, root, depth + 1)
    typ = schema.get("type")
    if isinstance(typ, list):
        typ = next((t for t in typ if t != "null"), typ[0] if typ else None)
    if typ is None:
        typ = "object" if "properties" in schema else "array" if "items" in schema else "string"
    if typ == "object":
        props = schema.get("properties", {})
        out = {name: schema_instance(sub, text, root, depth + 1) for name, sub in props.items()}
        for name in schema.get("required", []):
            out.setdefault(name, "")
        return out
    if typ == "array":
        n = max(1, int(schema.get("minItems", 1)))
        if "maxItems" in schema:
            n = min(n, int(schema["maxItems"]))
        items = schema.get("items", {})
        if isinstance(items, list):  # tuple validation (draft 4-7)
            return [schema_instance(s, text, root, depth + 1) for s in items]
        return [schema_instance(items, text, root, depth + 1) for _ in range(n)]
    if typ in ("number", "integer"):
        return _number(schema, typ == "integer")
    if typ == "boolean":
        return False
    if typ == "null":
        return None
    value = text
    if "maxLength" in schema:
        value = value[: int(schema["maxLength"])]
    if "minLength" in schema and len(value) < int(schema["minLength"]):
        value = value + "x" * (int(schema["minLength"]) - len(value))
    return value


def _number(schema: dict[str, Any], integer: bool) -> int | float:
    """The first of a few candidate values (0, the bounds and their neighbours, a midpoint)
    that satisfies every numeric constraint; 0 if none does."""

    def num(v: Any) -> TypeGuard[float]:
        return isinstance(v, (int, float)) and not isinstance(v, bool)

    lo, xlo = schema.get("minimum"), schema.get("exclusiveMinimum")
    hi, xhi = schema.get("maximum"), schema.get("exclusiveMaximum")
    mult = schema.get("multipleOf")

    def ok(v: float) -> bool:
        return (
            (not num(lo) or v >= lo)
            and (not num(xlo) or v > xlo)
            and (not num(hi) or v <= hi)
            and (not num(xhi) or v < xhi)
            and (not num(mult) or mult <= 0 or abs(v / mult - round(v / mult)) < 1e-9)
        )

    cands: list[float] = [0]
    bounds = [b for b in (lo, xlo, hi, xhi) if num(b)]
    for b in bounds:
        cands += [b, math.ceil(b), math.floor(b), math.ceil(b) + 1, math.floor(b) - 1, b + 0.5, b - 0.5]
    lows = [b for b in (lo, xlo) if num(b)]
    highs = [b for b in (hi, xhi) if num(b)]
    if lows and highs:
        cands.append((max(lows) + min(highs)) / 2)
    if num(mult) and mult > 0:
        cands += [math.ceil(c / mult) * mult for c in list(cands)]
    for c in cands:
        if integer:
            if not float(c).is_integer():
                continue
            c = int(c)
        if ok(c):
            return c
    return 0


def _resolve_ref(root: Any, ref: str) -> Any:
    """A local JSON pointer (``#/$defs/Name``); anything else resolves to an empty schema."""
    if not ref.startswith("#"):
        return {}
    node = root
    for part in ref.lstrip("#").strip("/").split("/"):
        if not part:
            continue
        part = part.replace("~1", "/").replace("~0", "~")
        if not isinstance(node, dict) or part not in node:
            return {}
        node = node[part]
    return node
