"""A reviewer's corrections and approvals, kept beside the model's values (docs/service.md, Review).

A **correction** is one field's value as a reviewer set it, keyed by the field's JSON pointer
(``/total``, ``/lines/0/amount``: the paths the Fields row's ``value_pages`` use); the model's
value is never overwritten: the Fields row stays as the worker wrote it, and the API shows both.
An **approval** is the time a reviewer approved the document.

Both queue backends keep them in two small tables; the SQL here is shared (it is the same in
SQLite and PostgreSQL but for the table names' prefix and the driver's placeholder), so the two
cannot drift apart.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

#: The tables (``{p}``: the backend's prefix). Times are epoch seconds; ``value`` is JSON text.
SCHEMA = """
CREATE TABLE IF NOT EXISTS {p}corrections (
    doc_id TEXT NOT NULL,
    path TEXT NOT NULL,
    value TEXT NOT NULL,
    corrected DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (doc_id, path)
);
CREATE TABLE IF NOT EXISTS {p}approvals (
    doc_id TEXT PRIMARY KEY,
    approved DOUBLE PRECISION NOT NULL
);
"""
#: A field corrected again keeps the latest value (``ON CONFLICT``: SQLite 3.24+ and PostgreSQL 9.5+).
CORRECT = ("INSERT INTO {p}corrections (doc_id, path, value, corrected) VALUES (?, ?, ?, ?) "
           "ON CONFLICT (doc_id, path) DO UPDATE SET value = excluded.value, corrected = excluded.corrected")
CORRECTIONS = "SELECT path, value, corrected FROM {p}corrections WHERE doc_id = ? ORDER BY path"
APPROVE = ("INSERT INTO {p}approvals (doc_id, approved) VALUES (?, ?) "
           "ON CONFLICT (doc_id) DO UPDATE SET approved = excluded.approved")
APPROVED = "SELECT approved FROM {p}approvals WHERE doc_id = ?"
REVIEWED = "SELECT doc_id FROM {p}corrections UNION SELECT doc_id FROM {p}approvals ORDER BY doc_id"


def sql(statement: str, prefix: str = "", placeholder: str = "?") -> str:
    """``statement`` for one backend: its tables' ``prefix`` and its driver's ``placeholder``."""
    return statement.format(p=prefix).replace("?", placeholder)


@dataclass(frozen=True)
class Correction:
    """One field as a reviewer set it."""

    path: str
    value: Any
    corrected: float


class BadCorrection(Exception):
    """A correction that names no field of the document; the message says which."""


def unescape(part: str) -> str:
    """One JSON pointer token (RFC 6901: ``~1`` is ``/``, ``~0`` is ``~``)."""
    return part.replace("~1", "/").replace("~0", "~")


def leaves(value: Any, path: str = "") -> list[tuple[str, Any]]:
    """Every scalar of a fields object, ``(JSON pointer, value)``, in document order."""
    if isinstance(value, dict):
        return [leaf for key, item in value.items()
                for leaf in leaves(item, f"{path}/{str(key).replace('~', '~0').replace('/', '~1')}")]
    if isinstance(value, list):
        return [leaf for index, item in enumerate(value) for leaf in leaves(item, f"{path}/{index}")]
    return [(path, value)]


def typed(model_value: Any, text: str) -> Any:
    """The value a reviewer typed, as a value of the field's kind: text for a text field (or one
    the model left empty), else JSON if it reads as JSON (``12.50``, ``true``, ``null``), else text."""
    if isinstance(model_value, str) or model_value is None:
        return text
    try:
        return json.loads(text)
    except ValueError:
        return text


def check_path(fields: Any, path: str) -> Any:
    """The model's value at ``path``; :class:`BadCorrection` when the fields have no such scalar."""
    found = dict(leaves(fields))
    if path not in found:
        raise BadCorrection(f"the document's fields have no value at {path!r}")
    return found[path]


def corrected(fields: Any, corrections: Sequence[Correction]) -> Any:
    """A copy of ``fields`` with each correction's value put in its place (the model's values,
    ``fields``, are left as they are)."""
    result = copy.deepcopy(fields)
    for correction in corrections:
        parts = [unescape(part) for part in correction.path.split("/")[1:]]
        if not parts:
            continue
        holder = result
        try:
            for part in parts[:-1]:
                holder = holder[int(part)] if isinstance(holder, list) else holder[part]
            if isinstance(holder, list):
                holder[int(parts[-1])] = correction.value
            else:
                holder[parts[-1]] = correction.value
        except (KeyError, IndexError, ValueError, TypeError):
            continue  # a path the fields no longer have (it was checked when stored)
    return result


def fields_view(fields: Any, corrections: Sequence[Correction], approved: float | None) -> dict[str, Any]:
    """What the API adds to a Fields row: each correction with the model's value beside it, the
    fields with corrections applied, and the approval."""
    model = dict(leaves(fields))
    return {
        "corrections": [{"path": c.path, "model": model.get(c.path), "corrected": c.value, "at": c.corrected}
                        for c in corrections],
        "corrected_fields": corrected(fields, corrections),
        "approved": approved is not None,
        "approved_at": approved,
    }
