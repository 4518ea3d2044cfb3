"""Validating an answer: its schema (``pattern``, ``format`` and ``enum`` included), the pydantic
model's own validators when the schema came from one, and the schema's cross-field checks.

Every problem is a :class:`Problem` ``(path, message)``, the path a JSON pointer into the answer
(``/line_items/2/amount``; ``""`` for the whole answer). A row is ``ok`` only if there is none.
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from llm_ocr.stages.fields.schema import Check, FieldsSchema, parse_path

#: Problems listed per answer at most (a wildly wrong answer would otherwise list hundreds).
MAX_PROBLEMS = 50


@dataclass(frozen=True)
class Problem:
    """One reason an answer is not valid."""

    path: str
    message: str

    def as_row(self) -> dict[str, str]:
        """The ``validation_errors`` entry of this problem."""
        return {"path": self.path, "message": self.message}

    def __str__(self) -> str:
        return f"{self.path or '(root)'}: {self.message}"


def pointer(parts: list[Any] | tuple[Any, ...]) -> str:
    """A JSON pointer (RFC 6901) from path parts."""
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)


def _format_checker() -> Any:
    """jsonschema's format checker, plus ``date-time`` and ``time`` from the standard library
    (jsonschema checks them only when optional packages are installed)."""
    from jsonschema import FormatChecker

    checker = FormatChecker()
    if "date-time" not in checker.checkers:

        @checker.checks("date-time", raises=ValueError)
        def _date_time(value: object) -> bool:
            if not isinstance(value, str):
                return True
            # RFC 3339 needs a time zone and a "T" (or space) between date and time.
            parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
            return parsed.tzinfo is not None and len(value) >= 20

    if "time" not in checker.checkers:

        @checker.checks("time", raises=ValueError)
        def _time(value: object) -> bool:
            if not isinstance(value, str):
                return True
            return dt.time.fromisoformat(value.replace("Z", "+00:00")).tzinfo is not None

    return checker


@lru_cache(maxsize=64)
def _validator_for(schema_json: str) -> Any:
    import json

    from jsonschema.validators import validator_for

    schema = json.loads(schema_json)
    return validator_for(schema)(schema, format_checker=_format_checker())


def schema_problems(value: Any, schema: dict[str, Any]) -> list[Problem]:
    """Where ``value`` breaks ``schema`` (types, required, pattern, format, enum, bounds...)."""
    import json

    validator = _validator_for(json.dumps(schema, sort_keys=True))
    errors = sorted(validator.iter_errors(value), key=lambda e: (list(map(str, e.absolute_path)), e.message))
    return [Problem(pointer(list(e.absolute_path)), _short(e.message)) for e in errors[:MAX_PROBLEMS]]


def _short(message: str, limit: int = 300) -> str:
    message = " ".join(message.split())
    return message if len(message) <= limit else message[: limit - 1] + "…"


def model_problems(value: Any, model: Any) -> list[Problem]:
    """Where ``value`` fails the pydantic model's own validation (custom validators included)."""
    from pydantic import ValidationError

    try:
        model.model_validate(value)
    except ValidationError as exc:
        return [Problem(pointer(list(err["loc"])), _short(err["msg"])) for err in exc.errors()[:MAX_PROBLEMS]]
    return []


def values_at(value: Any, tokens: list[str], prefix: tuple[Any, ...] = ()) -> list[tuple[tuple[Any, ...], Any]]:
    """``(path parts, value)`` of every value a parsed path reaches (``*`` fans out over arrays);
    missing properties are left out."""
    if not tokens:
        return [(prefix, value)]
    head, rest = tokens[0], tokens[1:]
    if head == "*":
        if not isinstance(value, list):
            return []
        return [hit for i, item in enumerate(value) for hit in values_at(item, rest, (*prefix, i))]
    if not isinstance(value, dict) or head not in value:
        return []
    return values_at(value[head], rest, (*prefix, head))


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def check_problems(value: Any, checks: tuple[Check, ...]) -> list[Problem]:
    """The cross-field checks ``value`` fails (see :class:`~llm_ocr.stages.fields.schema.Check`)."""
    problems: list[Problem] = []
    for check in checks:
        scopes: list[tuple[tuple[Any, ...], Any]] = [((), value)]
        if check.each:
            scopes = values_at(value, [*parse_path(check.each), "*"])
        for prefix, scope in scopes:
            problem = _apply_check(check, scope, prefix)
            if problem is not None:
                problems.append(problem)
    return problems


def _apply_check(check: Check, scope: Any, prefix: tuple[Any, ...]) -> Problem | None:
    expected_hits = values_at(scope, parse_path(check.equals))
    if not expected_hits or _number(expected_hits[0][1]) is None:
        return None  # nothing to compare with (missing, null, or a type error the schema reports)
    target_path, expected = expected_hits[0][0], float(expected_hits[0][1])
    operands = [v for path in check.operands for _, v in values_at(scope, parse_path(path))]
    numbers = [_number(v) for v in operands]
    if any(n is None for n, v in zip(numbers, operands) if v is not None):
        return None  # a non-number: the schema's own validation says so
    present = [n for n in numbers if n is not None]
    if check.op == "product" and not present:
        return None
    actual = math.fsum(present) if check.op == "sum" else math.prod(present)
    if abs(actual - expected) <= check.tolerance + 1e-9:
        return None
    return Problem(
        pointer([*prefix, *target_path]),
        f"check failed: {check.describe()}: {check.op} is {_fmt(actual)}, {check.equals} is {_fmt(expected)} "
        f"(differs by {_fmt(abs(actual - expected))}, tolerance {_fmt(check.tolerance)})",
    )


def _fmt(number: float) -> str:
    text = f"{number:.6f}".rstrip("0").rstrip(".")
    return text or "0"


def validate_answer(value: Any, schema: FieldsSchema, *, json_schema: dict[str, Any] | None = None) -> list[Problem]:
    """Every problem of ``value`` against ``schema``: JSON Schema (``json_schema`` overrides the
    one validated against, e.g. the relaxed schema of one part of a long document), then the
    pydantic model and the cross-field checks (those only for a whole document's answer)."""
    whole = json_schema is None
    problems = schema_problems(value, schema.wire if whole else json_schema)  # type: ignore[arg-type]
    if whole and schema.model is not None:
        seen = {(p.path, p.message) for p in problems}
        # Pydantic repeats most schema errors in its own words; keep only what it adds (validators).
        known_paths = {p.path for p in problems}
        problems += [p for p in model_problems(value, schema.model) if (p.path,
            p.message) not in seen and p.path not in known_paths]
    if whole:
        problems += check_problems(value, schema.checks)
    return problems[:MAX_PROBLEMS]
