"""Merging the answers for the parts of a document too long for one request.

A long document is sent in parts of consecutive pages (:mod:`.chunks`); each part's answer
follows the relaxed schema (every top-level field optional and nullable), and the answers are
merged into one object, which is then validated against the full schema:

* **arrays** (line items, transactions...) are concatenated in page order: a table that runs
  over three pages gives one list. Identical items are kept (two equal lines can both be real).
  A top-level array with ``x-llm-ocr-merge: first`` (or ``last``) takes the first (last) part's
  non-empty list instead.
* **scalars** (invoice number, total...): the first part that gives a value wins (``first``,
  the default: headers are on the first page), or the last (``x-llm-ocr-merge: last``: totals
  are on the last page). Null, ``""``, ``[]`` and ``{}`` count as "not given".
* **objects** (a seller with a name and an address) are merged key by key with the same rule,
  so a name from page 1 and a VAT number from page 3 end up together.
* when parts give **different values** for a scalar, the rule above chooses, and the row's
  ``conflicts`` lists every value given with the first page of the part that gave it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from llm_ocr.stages.fields.schema import FieldsSchema
from llm_ocr.stages.fields.validate import pointer


@dataclass
class PartAnswer:
    """One request's answer and the pages it covered."""

    pages: list[int]
    value: dict[str, Any]


@dataclass
class Merged:
    """The merged answer, where each top-level value (or array item) came from, and conflicts."""

    value: dict[str, Any]
    origins: dict[str, list[int]] = field(default_factory=dict)
    conflicts: list[dict[str, Any]] = field(default_factory=list)


def _missing(value: Any) -> bool:
    return value is None or value == "" or value == [] or value == {}


def _canon(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def merge_answers(parts: list[PartAnswer], schema: FieldsSchema) -> Merged:
    """One answer from the answers of a document's parts (in page order)."""
    if len(parts) == 1:
        only = parts[0]
        origins = {pointer([k]): list(only.pages) for k in only.value}
        return Merged(dict(only.value), origins)
    names = list(schema.top_properties())
    for part in parts:
        names += [k for k in part.value if k not in names]
    merged = Merged({})
    for name in names:
        present = [p for p in parts if name in p.value]
        if not present:
            continue
        policy = schema.merge_policy(name)
        values = [(p, p.value[name]) for p in present]
        if policy == "concat" and any(isinstance(v, list) for _, v in values):
            items: list[Any] = []
            for part, value in values:
                for item in value if isinstance(value, list) else []:
                    merged.origins[pointer([name, len(items)])] = list(part.pages)
                    items.append(item)
            merged.value[name] = items
            continue
        merged.value[name] = _pick(values, "last" if policy == "last" else "first", (name,), merged)
    return merged


def _pick(values: list[tuple[PartAnswer, Any]], policy: str, path: tuple[Any, ...], merged: Merged) -> Any:
    given = [(p, v) for p, v in values if not _missing(v)]
    if not given:
        return values[0][1] if values else None
    if all(isinstance(v, dict) for _, v in given):
        keys: list[str] = []
        for _, v in given:
            keys += [k for k in v if k not in keys]
        return {k: _pick([(p, v[k]) for p, v in given if k in v], policy, (*path, k), merged) for k in keys}
    ordered = given if policy == "first" else list(reversed(given))
    chosen_part, chosen = ordered[0]
    merged.origins[pointer(list(path))] = list(chosen_part.pages)
    distinct: dict[str, tuple[Any, int]] = {}
    for part, value in given:
        distinct.setdefault(_canon(value), (value, part.pages[0] if part.pages else 0))
    if len(distinct) > 1:
        merged.conflicts.append({
            "path": pointer(list(path)),
            "values": [v if isinstance(v, str) else _canon(v) for v, _ in distinct.values()],
            "pages": [page for _, page in distinct.values()],
        })
    return chosen
