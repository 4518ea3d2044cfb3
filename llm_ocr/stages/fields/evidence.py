"""Is a value written in the document, and on which page? A free check against invented values.

Every string, number and date the model answered is looked for in the text of the document's
pages (the text the model was given: Markdown, figure descriptions included). A value found on no
page is listed in ``unsupported_values``: the model made it up, or read it wrong. A value found is
attributed to the first page it appears on, searching first the pages of the request it came
from (see :mod:`.merge`) and, inside an array item, the page the item's other values were found on.

How values are matched, so that formatting does not count as invention:

* text: case, accents' composed forms, punctuation and spacing are ignored (``ACME Corp.`` is
  found in ``Acme  corp``), whole words only;
* numbers: equal in value to a number printed on the page, whatever its thousands and decimal
  separators (``1234.5`` is found in ``1,234.50``, ``1.234,50`` and ``1 234,50``);
* dates (``format: date``, ``date-time``): ISO ``2024-03-15`` is found as ``15.03.2024``,
  ``03/15/2024``, ``March 15, 2024``, ``15 Mar 2024``...

Not checked: booleans, nulls, empty strings, values constrained by ``enum``/``const`` (a choice
among fixed values, not a transcription), and properties marked ``x-llm-ocr-derived: true``.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import unicodedata
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

from llm_ocr.stages.fields.schema import DERIVED_KEY, non_null, resolve, value_type
from llm_ocr.stages.fields.validate import pointer

_NON_WORD = re.compile(r"[\W_]+", re.UNICODE)
#: Printed numbers: digits with separators inside (``1,234.50``, ``1.234,50``, ``1'234``) ...
_NUMBER = re.compile(r"[-+]?\d[\d,.'\u00a0\u202f]*\d|[-+]?\d")
#: ... every run of digits on its own (the year of "02.03.2024") ...
_DIGITS = re.compile(r"\d+")
#: ... and numbers grouped by spaces (``1 234,50``), read as well as their parts.
_SPACED_NUMBER = re.compile(r"(?<![\d.,])\d{1,3}(?: \d{3})+(?:[.,]\d+)?(?![\d])")
_ISO_DATE = re.compile(r"^(\d{4})-(\d{2})-(\d{2})")
_MONTHS = ("january february march april may june july august september october november december").split()
#: The longest value text (characters) that is looked for; longer ones (whole paragraphs) are
#: left unchecked rather than reported because the model re-flowed them.
MAX_CHECKED_CHARS = 300


def normalize_text(text: str) -> str:
    """Text as values are compared: NFKC, case-folded, every run of non-word characters one space,
    padded with a space at each end (so that a search matches whole words)."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    return " " + _NON_WORD.sub(" ", folded).strip() + " "


def number_readings(token: str) -> set[Decimal]:
    """What a printed number may mean: ``1,234`` is 1234 (thousands) or 1.234 (decimal comma)."""
    sign = "-" if token.startswith("-") else ""
    body = token.lstrip("+-")
    readings: list[str] = []
    seps = [c for c in body if not c.isdigit()]
    if not seps:
        readings.append(body)
    else:
        last = body.rfind(seps[-1])
        groups_ok = re.fullmatch(r"\d{1,3}(?:[,.'\u00a0\u202f ]\d{3})+", body) is not None
        if not groups_ok and len(set(seps)) == 1 and len(seps) > 1:
            return set()  # "1.2.3" (a version, a date): not a number
        if len(set(seps)) > 1 or (len(seps) == 1 and not groups_ok):
            # The last separator is the decimal one, every other a thousands separator.
            readings.append(re.sub(r"\D", "", body[:last]) + "." + body[last + 1 :])
        if groups_ok:
            readings.append(re.sub(r"\D", "", body))  # all thousands separators
            if len(seps) == 1 and seps[0] in ",.":
                readings.append(body.replace(seps[0], "."))  # one decimal separator
    out = set()
    for reading in readings:
        try:
            out.add(Decimal(sign + reading).normalize())
        except InvalidOperation:
            continue
    return out


def date_renderings(value: str) -> list[str]:
    """Normalized ways a document may print the ISO date at the start of ``value``."""
    match = _ISO_DATE.match(value)
    if not match:
        return []
    try:
        day = dt.date(int(match.group(1)), int(match.group(2)), int(match.group(3)))
    except ValueError:
        return []
    y, yy, m, d = str(day.year), f"{day.year % 100:02d}", day.month, day.day
    month = _MONTHS[m - 1]
    suffix = "th" if 11 <= d <= 13 else {1: "st", 2: "nd", 3: "rd"}.get(d % 10, "th")
    numeric = set()
    for dd in {f"{d:02d}", str(d)}:
        for mm in {f"{m:02d}", str(m)}:
            for year in (y, yy):
                numeric |= {f"{dd} {mm} {year}", f"{mm} {dd} {year}"}
            numeric.add(f"{y} {mm} {dd}")
    named = set()
    for name in (month, month[:3], month[:4] if month == "september" else month[:3]):
        for dd in (str(d), f"{d:02d}", f"{d}{suffix}"):
            named |= {f"{name} {dd} {y}", f"{dd} {name} {y}", f"{dd} of {name} {y}"}
    return [f" {r} " for r in sorted(numeric | named)]


@dataclass
class PageText:
    """One page's text, prepared for searching."""

    page: int
    text: str
    words: str = field(init=False)
    numbers: set[Decimal] = field(init=False)

    def __post_init__(self) -> None:
        self.words = normalize_text(self.text)
        self.numbers = set()
        text = unicodedata.normalize("NFKC", self.text)
        for pattern in (_NUMBER, _SPACED_NUMBER, _DIGITS):
            for match in pattern.finditer(text):
                self.numbers |= number_readings(match.group(0).rstrip(".,"))


@dataclass
class ValueCheck:
    """The outcome over one answer: values found nowhere, and where the others were found."""

    unsupported: list[dict[str, str]] = field(default_factory=list)
    pages: list[dict[str, Any]] = field(default_factory=list)


class Evidence:
    """The pages of a document, searchable for values."""

    def __init__(self, pages: list[tuple[int, str]]) -> None:
        self.pages = [PageText(number, text) for number, text in pages]
        self._by_number = {p.page: p for p in self.pages}

    def find(self, value: Any, node: dict[str, Any], order: list[int]) -> int | bool | None:
        """The first page (searched in ``order``, then the rest) holding ``value``; None when no
        page holds it; False when the value is not checked (see the module docstring)."""
        kind = _kind(value, node)
        if kind is None:
            return False
        candidates = [self._by_number[n] for n in order if n in self._by_number]
        candidates += [p for p in self.pages if p.page not in set(order)]
        if kind == "number":
            try:
                wanted = Decimal(repr(value) if isinstance(value, float) else str(value)).normalize()
            except InvalidOperation:
                return False
            return next((p.page for p in candidates if wanted in p.numbers), None)
        if kind == "date":
            renderings = date_renderings(value)
            return next((p.page for p in candidates if any(r in p.words for r in renderings)), None)
        needle = normalize_text(value)
        if needle.strip() == "":
            # Punctuation only ("-", "N/A" is words): compare the raw text instead.
            return next((p.page for p in candidates if value.strip() in p.text), None)
        return next((p.page for p in candidates if needle in p.words), None)


def _kind(value: Any, node: dict[str, Any]) -> str | None:
    if value is None or isinstance(value, bool) or node.get(DERIVED_KEY) is True:
        return None
    if "enum" in node or "const" in node:
        return None
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        text = value.strip()
        if not text or len(text) > MAX_CHECKED_CHARS:
            return None
        if node.get("format") in ("date", "date-time") and date_renderings(text):
            return "date"
        return "text"
    return None


def check_values(
    answer: Any, schema: dict[str, Any], evidence: Evidence, origins: dict[str, list[int]] | None = None
) -> ValueCheck:
    """Look every checked value of ``answer`` up in ``evidence``.

    ``origins`` maps a JSON pointer (a top-level property, or an item of a top-level array) to
    the pages of the request its value came from; those pages are searched first.
    """
    walker = _Walker(schema, evidence, origins or {})
    walker.walk(answer, schema, (), anchor=None)
    return walker.result


@dataclass
class _Walker:
    """One answer's walk: the schema beside the values, each scalar looked up."""

    root: dict[str, Any]
    evidence: Evidence
    origins: dict[str, list[int]]
    result: ValueCheck = field(default_factory=ValueCheck)

    def walk(self, value: Any, node: Any, path: tuple[Any, ...], anchor: int | None) -> None:
        node = non_null(self.root, resolve(self.root, node))
        if node.get(DERIVED_KEY) is True:
            return
        if isinstance(value, dict):
            props = node.get("properties") if isinstance(node.get("properties"), dict) else {}
            # Text first: an item's description fixes its page better than its quantity does.
            item_anchor = anchor
            for key in sorted(value, key=lambda k: 0 if isinstance(value[k], str) else 1):
                found = self.one(value[key], props.get(key, {}), (*path, key), item_anchor)
                if item_anchor is None and isinstance(found, int) and not isinstance(found, bool):
                    item_anchor = found
            return
        if isinstance(value, list):
            items = node.get("items", {}) if value_type(self.root, node) == "array" else {}
            for i, item in enumerate(value):
                self.one(item, items, (*path, i), None)
            return
        self.one(value, node, path, anchor)

    def one(self, value: Any, node: Any, path: tuple[Any, ...], anchor: int | None) -> int | bool | None:
        """Walk into a container, or look a scalar up: its page, None (nowhere), False (not checked)."""
        if isinstance(value, (dict, list)):
            self.walk(value, node, path, anchor)
            return False
        resolved = non_null(self.root, resolve(self.root, node))
        order = ([anchor] if anchor is not None else []) + self._origin_pages(path)
        found = self.evidence.find(value, resolved, order)
        where = pointer(list(path))
        if found is None:
            self.result.unsupported.append({"path": where,
                                            "value": value if isinstance(value, str) else json.dumps(value)})
        elif found is not False:
            self.result.pages.append({"path": where, "page": found})
        return found

    def _origin_pages(self, path: tuple[Any, ...]) -> list[int]:
        for length in range(len(path), 0, -1):
            pages = self.origins.get(pointer(list(path[:length])))
            if pages:
                return list(pages)
        return []
