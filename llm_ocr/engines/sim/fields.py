"""The simulated model's structured answers to a document: a JSON Schema instance read from the
document's text, the way a careful extraction model would, with faults on demand.

It reads:

* **labelled values**: a line ``Label: value`` (Markdown emphasis, headings and quotes ignored;
  a label alone on its line takes the next line as its value) fills the property whose name
  (``invoice_number`` → "invoice number") or ``title`` is the label, any case;
* **tables**: an array of objects is read from the lines under a header line that names every
  item property (by title or name), one row per line: the trailing numbers fill the numeric
  columns from the right, the words before them the text column; a Markdown table
  (``| a | b |``) works too, and so does an HTML one (``<table><tr><td>``, as DeepSeek-OCR and
  the CPU engine write tables), read as a Markdown table, a row that starts with a label
  (``Total:``) read as a labelled value; the rows stop at the first line that
  is not one, and resume under the next header (a table continued on the next page);
* **choices**: an ``enum`` takes the labelled value when one matches, else the choice that comes
  first in the text (whole word), else ``other`` when that is a choice.

Values are converted to the schema's type: numbers with thousands separators or a decimal
comma, dates in the usual printed forms → ISO ``YYYY-MM-DD``. What it cannot find is null when
the schema allows null, else an empty string, 0 or false.

Faults, decided by a hash of the seed and the document (the same request always gets the same
answer, as at temperature 0): with ``invalid_rate``, a first answer is cut in the middle (not
JSON); with ``invent_rate``, one free-text value is replaced by a name that is nowhere in the
document. A repair request (the conversation goes on after the model's answer) is answered
correctly, like a model shown its errors.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import html
import json
import re
from typing import Any

from ..frame.answers import _resolve_ref

_NUMBER_TOKEN = re.compile(r"^[-+]?[$€£]?\d[\d,.' ]*$")
_NON_WORD = re.compile(r"[\W_]+", re.UNICODE)
_MARKUP = re.compile(r"(\*\*|__|`|^#+\s*|^>\s*|^[-*]\s+)")
_COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)
_FENCED_JSON = re.compile(r"```json\s*\n(.*?)\n\s*```", re.DOTALL)
_HTML_TABLE = re.compile(r"<table\b.*?</table>", re.DOTALL | re.IGNORECASE)
_HTML_ROW = re.compile(r"<tr\b[^>]*>(.*?)</tr>", re.DOTALL | re.IGNORECASE)
_HTML_CELL = re.compile(r"<t[dh]\b[^>]*>(.*?)</t[dh]>", re.DOTALL | re.IGNORECASE)
_TAG = re.compile(r"<[^>]+>")
_DATE_FORMATS = ("%Y-%m-%d", "%B %d, %Y", "%b %d, %Y", "%d %B %Y", "%d %b %Y", "%d.%m.%Y", "%m/%d/%Y", "%d/%m/%Y")
#: Names the model "invents" (each is checked not to be in the document).
_INVENTED = ("Quillfeather Holdings", "Brightwater Logistics GmbH", "Saffron & Slate Ltd", "Oberlin Partners")


def _words(text: str) -> str:
    return _NON_WORD.sub(" ", text.casefold()).strip()


def schema_in_prompt(system: str) -> Any:
    """The JSON Schema an instruction states in a fenced ```json block, if any."""
    match = _FENCED_JSON.search(system or "")
    if not match:
        return None
    try:
        schema = json.loads(match.group(1))
    except json.JSONDecodeError:
        return None
    return schema if isinstance(schema, dict) else None


def _markdown_rows(table: re.Match[str]) -> str:
    """An HTML table as Markdown table lines, one per ``<tr>`` (cell text without its tags); a row
    whose first cell is a label (``Total:``, a sum set in the amounts' column) is that labelled
    value, not an item."""
    rows = []
    for row in _HTML_ROW.findall(table.group(0)):
        cells = [" ".join(_TAG.sub(" ", html.unescape(c)).split()) for c in _HTML_CELL.findall(row)]
        if len(cells) > 1 and cells[0].endswith(":"):
            rows.append(" ".join(c for c in cells if c))
        elif cells:
            rows.append("| " + " | ".join(cells) + " |")
    return "\n" + "\n".join(rows) + "\n"


def _lines(text: str) -> list[str]:
    out = []
    text = _HTML_TABLE.sub(_markdown_rows, text)
    for raw in _COMMENT.sub("\n", text).splitlines():
        line = _MARKUP.sub("", raw.strip()).strip()
        if line:
            out.append(" ".join(line.split()))
    return out


def _labels(lines: list[str]) -> dict[str, str]:
    found: dict[str, str] = {}
    for i, line in enumerate(lines):
        if ":" not in line or line.startswith("|"):
            continue
        label, _, value = line.partition(":")
        key = _words(label)
        if not key or len(key.split()) > 6:
            continue
        value = value.strip()
        if not value and i + 1 < len(lines):
            value = lines[i + 1]
        found.setdefault(key, value)
    return found


def _node(root: dict[str, Any], node: Any) -> dict[str, Any]:
    node = node if isinstance(node, dict) else {}
    for _ in range(16):
        if "$ref" in node:
            node = {**_resolve_ref(root, node["$ref"]), **{k: v for k, v in node.items() if k != "$ref"}}
            continue
        for key in ("anyOf", "oneOf"):
            options = [o for o in node.get(key) or [] if _node(root, o).get("type") != "null"]
            if options:
                node = {**{k: v for k, v in node.items() if k != key}, **_node(root, options[0])}
                break
        else:
            break
    typ = node.get("type")
    if isinstance(typ, list):
        node = {**node, "type": next((t for t in typ if t != "null"), "string")}
    return node


def _nullable(root: dict[str, Any], node: Any) -> bool:
    node = node if isinstance(node, dict) else {}
    if "$ref" in node:
        return _nullable(root, _resolve_ref(root, node["$ref"]))
    typ = node.get("type")
    if typ == "null" or (isinstance(typ, list) and "null" in typ):
        return True
    return any(_nullable(root, o) for o in (node.get("anyOf") or []) + (node.get("oneOf") or []))


def _keys(name: str, node: dict[str, Any]) -> list[str]:
    keys = [_words(name.replace("_", " "))]
    if isinstance(node.get("title"), str):
        keys.append(_words(node["title"]))
    return [k for k in keys if k]


def parse_number(text: str) -> float | None:
    """``$1,234.50`` → 1234.5, ``1.234,50`` → 1234.5, ``12,5`` → 12.5."""
    match = re.search(r"[-+]?\d[\d,.' ]*", text)
    if not match:
        return None
    token = match.group(0).strip().replace("'", "").replace(" ", "")
    if "," in token and "." in token:
        decimal = "," if token.rfind(",") > token.rfind(".") else "."
        token = token.replace("." if decimal == "," else ",", "").replace(",", ".")
    elif "," in token:
        token = token.replace(",", ".") if re.search(r",\d{1,2}$", token) else token.replace(",", "")
    try:
        return float(token)
    except ValueError:
        return None


def parse_date(text: str) -> str | None:
    """A printed date → ISO ``YYYY-MM-DD`` (None if it reads as none of the usual forms)."""
    cleaned = re.sub(r"(\d)(st|nd|rd|th)\b", r"\1", text.strip())
    for fmt in _DATE_FORMATS:
        try:
            return dt.datetime.strptime(cleaned, fmt).date().isoformat()
        except ValueError:
            continue
    return None


def _convert(raw: str, node: dict[str, Any]) -> Any:
    typ = node.get("type")
    if node.get("enum"):
        for choice in node["enum"]:
            if isinstance(choice, str) and _words(choice) == _words(raw):
                return choice
        return None
    if typ in ("number", "integer"):
        number = parse_number(raw)
        if number is None:
            return None
        return int(number) if typ == "integer" and number.is_integer() else number
    if typ == "boolean":
        return _words(raw) in ("yes", "true", "paid", "y")
    if node.get("format") in ("date", "date-time"):
        return parse_date(raw) or raw
    return raw


def _choice_in_text(node: dict[str, Any], text: str) -> Any:
    words = f" {_words(text)} "
    positions = []
    for choice in node.get("enum") or []:
        if isinstance(choice, str) and _words(choice):
            at = words.find(f" {_words(choice)} ")
            if at >= 0:
                positions.append((at, choice))
    if positions:
        return min(positions)[1]
    return "other" if "other" in (node.get("enum") or []) else None


def _default(root: dict[str, Any], node: Any, resolved: dict[str, Any]) -> Any:
    if _nullable(root, node):
        return None
    if resolved.get("enum"):
        return resolved["enum"][0]
    return {"string": "", "number": 0, "integer": 0, "boolean": False, "array": [],
            "object": {}}.get(str(resolved.get("type")), "")


def _table(lines: list[str], item: dict[str, Any], root: dict[str, Any]) -> list[dict[str, Any]] | None:
    props = {name: _node(root, sub) for name, sub in (item.get("properties") or {}).items()}
    if not props:
        return None
    rows: list[dict[str, Any]] = []
    found_header = False
    order: list[str] | None = None
    for line in lines:
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            header = _header_order(" ".join(cells), props, cells=cells)
            if header is not None:
                order, found_header = header, True
                continue
            if order is not None and not set(line) <= set("|-: "):
                if len(cells) == len(order):
                    rows.append({name: _convert(cell, props[name]) for name, cell in zip(order, cells)})
            continue
        header = _header_order(line, props)
        if header is not None:
            order, found_header = header, True
            continue
        if order is None:
            continue
        row = _row(line, order, props)
        if row is None:
            order = None  # the table ended; a header further on starts it again
        else:
            rows.append(row)
    return rows if found_header else None


def _header_order(line: str, props: dict[str, dict[str, Any]], cells: list[str] | None = None) -> list[str] | None:
    words = f" {_words(line)} "
    found = []
    for name, node in props.items():
        positions = [words.find(f" {k} ") for k in _keys(name, node) if words.find(f" {k} ") >= 0]
        if not positions:
            return None
        found.append((min(positions), name))
    if cells is not None and len(cells) != len(props):
        return None
    return [name for _, name in sorted(found)]


def _row(line: str, order: list[str], props: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    if ": " in line:
        return None
    tokens = line.split()
    numeric = [n for n in reversed(order) if props[n].get("type") in ("number", "integer")]
    text_columns = [n for n in order if n not in numeric]
    if len(text_columns) > 1 or order[: len(text_columns)] != text_columns:
        return None  # only "text first, then numbers" rows are read
    if len(tokens) < len(numeric) + len(text_columns):
        return None
    row: dict[str, Any] = {}
    for name in numeric:
        token = tokens.pop()
        if not _NUMBER_TOKEN.match(token):
            return None
        row[name] = _convert(token, props[name])
    if text_columns:
        row[text_columns[0]] = " ".join(tokens)
    return {name: row[name] for name in order}


def read_object(schema: dict[str, Any], text: str, root: dict[str, Any] | None = None,
                lines: list[str] | None = None, prefix: str = "") -> dict[str, Any]:
    """An instance of object ``schema`` filled from ``text`` (see the module docstring)."""
    root = root if root is not None else schema
    lines = lines if lines is not None else _lines(text)
    labels = _labels(lines)
    node = _node(root, schema)
    out: dict[str, Any] = {}
    for name, sub in (node.get("properties") or {}).items():
        resolved = _node(root, sub)
        typ = resolved.get("type")
        value: Any = None
        if typ == "object" or "properties" in resolved:
            value = read_object(resolved, text, root, lines, prefix=f"{prefix}{name} ")
        elif typ == "array":
            item = _node(root, resolved.get("items"))
            value = _table(lines, item, root) if (item.get("type") == "object" or "properties" in item) else None
        else:
            raw = next((labels[k] for k in _keys(name,
                resolved) + [_words(prefix + name.replace('_', ' '))] if k in labels), None)
            if raw is not None:
                value = _convert(raw, resolved)
            if value is None and resolved.get("enum"):
                value = _choice_in_text(resolved, text)
        out[name] = value if value is not None else _default(root, sub, resolved)
    return out


def _draw(seed: int, text: str, salt: str) -> float:
    digest = hashlib.sha256(f"{seed}|{salt}|".encode() + text.encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def _invent(value: dict[str, Any], schema: dict[str, Any], text: str) -> None:
    """Replace the first free-text top-level value (no enum, format or pattern) with a made-up name."""
    node = _node(schema, schema)
    document = _words(text)
    for name, sub in (node.get("properties") or {}).items():
        resolved = _node(schema, sub)
        if resolved.get("type") != "string" or any(k in resolved for k in ("enum", "format", "pattern", "const")):
            continue
        if not isinstance(value.get(name), str) or not value[name]:
            continue
        value[name] = next(n for n in _INVENTED if _words(n) not in document)
        return


def answer(schema: Any, text: str, *, repair: bool, seed: int = 0, invalid_rate: float = 0.0,
           invent_rate: float = 0.0) -> tuple[str, str | None]:
    """``(answer text, fault applied or None)`` for a structured request about ``text``."""
    if not isinstance(schema, dict):
        return json.dumps({"text": text[:200]}), None
    value = read_object(schema, text)
    if not repair and _draw(seed, text, "invalid") < invalid_rate:
        full = json.dumps(value, ensure_ascii=False)
        return full[: max(1, len(full) // 2)], "invalid_json"
    fault = None
    if not repair and _draw(seed, text, "invent") < invent_rate:
        before = json.dumps(value, sort_keys=True)
        _invent(value, schema, text)
        fault = "invented_value" if json.dumps(value, sort_keys=True) != before else None
    return json.dumps(value, ensure_ascii=False), fault
