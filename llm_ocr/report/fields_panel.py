"""A document's fields (its ``OUT/fields`` row) as HTML: every value with a link to the page it was
found on, values found nowhere in the document's text marked, validation errors listed."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from llm_ocr.report.safe_html import esc

FIELDS_CSS = """
.llmocr .llmocr-fields{border:1px solid #cfd8e3;background:#f7fafc;padding:.4em .8em;margin:.8em 0}
.llmocr .llmocr-fields>h3{font-size:1.1em;margin:.2em 0}
.llmocr table.llmocr-ftable{border-collapse:collapse;margin:.3em 0;font-size:.92em}
.llmocr table.llmocr-ftable th,.llmocr table.llmocr-ftable td{border:1px solid #ccd;padding:.15em .45em;vertical-align:top;text-align:left}
.llmocr table.llmocr-ftable th{background:#eef2f7;font-weight:600}
.llmocr .llmocr-flag{background:#ffe0e0;outline:2px solid #c62828;border-radius:2px}
.llmocr .llmocr-flag::after{content:" \\26A0";color:#c62828}
.llmocr .llmocr-pg{font-size:.75em;color:#555;margin-left:.3em}
.llmocr .llmocr-null{color:#999;font-style:italic}
.llmocr .llmocr-status-invalid{background:#fde2c8;color:#7a3b00}
.llmocr .llmocr-fields-here{font-size:.85em;margin:.3em 0;color:#234}
""".strip()  # noqa: E501 - CSS rules, one a line


def _pointer(parts: list[Any]) -> str:
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)


class _Marks:
    """Where each value was found and which ones were flagged, by JSON pointer."""

    def __init__(self, row: Mapping[str, Any], page_link: Callable[[int], str | None] | None) -> None:
        self.pages = {str(p.get("path")): p.get("page") for p in row.get("value_pages") or []}
        self.flagged = {str(u.get("path")) for u in row.get("unsupported_values") or []}
        self.errors = {str(e.get("path")) for e in row.get("validation_errors") or []}
        self.page_link = page_link

    def scalar(self, value: Any, path: list[Any]) -> str:
        where = _pointer(path)
        if value is None:
            text = '<span class="llmocr-null">null</span>'
        else:
            text = esc(value if isinstance(value, str) else json.dumps(value, ensure_ascii=False))
        if where in self.flagged:
            text = f'<span class="llmocr-flag" title="not found anywhere in the document\'s text">{text}</span>'
        elif where in self.errors:
            text = f'<span class="llmocr-flag" title="fails validation (see below)">{text}</span>'
        page = self.pages.get(where)
        if page:
            label = f"p.&nbsp;{esc(str(page))}"
            link = self.page_link(int(page)) if self.page_link else None
            text += f'<a class="llmocr-pg" href="#{link}">{label}</a>' if link else f'<span class="llmocr-pg">{label}</span>'  # noqa: E501 - not wrapped yet
        return text

    def value(self, value: Any, path: list[Any]) -> str:
        if isinstance(value, dict):
            rows = "".join(f"<tr><th>{esc(str(k))}</th><td>{self.value(v, [*path, k])}</td></tr>" for k,
                           v in value.items())
            return f'<table class="llmocr-ftable">{rows}</table>' if rows else '<span class="llmocr-null">{}</span>'
        if isinstance(value, list):
            if value and all(isinstance(v, dict) for v in value):
                keys: list[str] = []
                for item in value:
                    keys += [k for k in item if k not in keys]
                head = "".join(f"<th>{esc(k)}</th>" for k in keys)
                body = "".join(
                    "<tr>" + "".join(f"<td>{self.value(item.get(k), [*path, i, k])}</td>" for k in keys) + "</tr>"
                    for i, item in enumerate(value)
                )
                return f'<table class="llmocr-ftable"><tr>{head}</tr>{body}</table>'
            return ", ".join(self.value(v, [*path, i]) for i,
                             v in enumerate(value)) or '<span class="llmocr-null">[]</span>'
        return self.scalar(value, path)


def render_fields(row: Mapping[str, Any], page_link: Callable[[int], str | None] | None = None) -> str:
    """The fields panel of one document; ``page_link(page)`` gives the element id of a page."""
    status = row.get("status")
    badge = f'<span class="llmocr-status llmocr-status-{status if status in ("ok", "invalid") else "error"}">{esc(str(status))}</span>'  # noqa: E501 - not wrapped yet
    head = f"Fields &middot; class {esc(str(row.get('class') or '?'))} ({esc(str(row.get('class_by') or ''))}) {badge}"
    parts = [f'<section class="llmocr-fields"><h3>{head}</h3>']
    if row.get("error"):
        css = "llmocr-error" if status == "error" else "llmocr-note"
        parts.append(f'<div class="{css}">{esc(str(row["error"]))}</div>')
    try:
        fields = json.loads(row["fields"]) if row.get("fields") else None
    except ValueError:
        fields = None
    marks = _Marks(row, page_link)
    if isinstance(fields, (dict, list)):
        parts.append(marks.value(fields, []))
    elif row.get("class") == "other":
        parts.append('<p class="llmocr-missing">no known class: no fields extracted</p>')
    flagged = row.get("unsupported_values") or []
    if flagged:
        listed = ", ".join(f"{esc(str(u.get('path')))} = {esc(str(u.get('value')))}" for u in flagged)
        parts.append(f'<div class="llmocr-error">Found nowhere in the document\'s text: {listed}</div>')
    errors = row.get("validation_errors") or []
    if errors:
        items = "".join(f"<li><code>{esc(str(e.get('path') or '(root)'))}</code>: "
                        f"{esc(str(e.get('message')))}</li>" for e in errors)
        parts.append(f'<div class="llmocr-error">Validation errors:<ul>{items}</ul></div>')
    conflicts = row.get("conflicts") or []
    if conflicts:
        items = "".join(
            f"<li><code>{esc(str(c.get('path')))}</code>: "
            + "; ".join(f"{esc(str(v))} (page {esc(str(p))})" for v,
                        p in zip(c.get("values") or [], c.get("pages") or []))
            + "</li>"
            for c in conflicts
        )
        parts.append('<div class="llmocr-note">Pages disagree (the first value is kept unless the schema says '
                     f'last):<ul>{items}</ul></div>')
    meta = [f"{name}: {esc(str(row.get(key)))}" for name, key in (
        ("model", "model"), ("requests", "requests"), ("structured", "structured"), ("repaired", "repaired"),
        ("prompt tokens", "prompt_tokens"), ("completion tokens", "completion_tokens"),
    ) if row.get(key) is not None]  # fmt: skip
    if meta:
        parts.append(f'<div class="llmocr-meta">{" &middot; ".join(meta)}</div>')
    parts.append("</section>")
    return "".join(parts)


def fields_on_page(row: Mapping[str, Any], page: int) -> str:
    """A line listing the fields whose values were found on ``page`` (empty when none)."""
    try:
        fields = json.loads(row["fields"]) if row.get("fields") else None
    except ValueError:
        return ""
    here = [str(p.get("path")) for p in row.get("value_pages") or [] if p.get("page") == page]
    if not here or not isinstance(fields, dict):
        return ""
    shown = []
    for path in here[:40]:
        value: Any = fields
        for part in path.strip("/").split("/"):
            key = part.replace("~1", "/").replace("~0", "~")
            value = value[int(key)] if isinstance(value, list) else value.get(key) if isinstance(value, dict) else None
        shown.append(f"<code>{esc(path)}</code> = {esc(value if isinstance(value, str) else json.dumps(value))}")
    more = f" and {len(here) - 40} more" if len(here) > 40 else ""
    return f'<div class="llmocr-fields-here">Fields found on this page: {"; ".join(shown)}{more}</div>'
