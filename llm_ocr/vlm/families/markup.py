"""Markup every family's parser shares: tables to HTML, math to one form, HTML blocks to Markdown.

The page Markdown writes tables as HTML ``<table>`` and math as ``\\[...\\]`` / ``\\(...\\)``
(see :mod:`llm_ocr.vlm.layout`). Families answer in other forms: OTSL (docling's and
MinerU's table tokens), Markdown pipe tables, ``$$...$$``, Chandra's ``<math>`` HTML. The
functions here convert them; all are linear in their input and never raise on malformed text.
"""

from __future__ import annotations

import html
import re
from html.parser import HTMLParser

# -- math ----------------------------------------------------------------------------------------

_WRAPPERS = (("$$", "$$"), ("\\[", "\\]"), ("\\(", "\\)"), ("$", "$"))


def display_math(latex: str) -> str:
    """``latex`` (bare, or wrapped in ``$$``/``\\[``/``\\(``/``$``) as ``\\[ ... \\]``."""
    body = latex.strip()
    for left, right in _WRAPPERS:
        if len(body) >= len(left) + len(right) and body.startswith(left) and body.endswith(right):
            body = body[len(left) : len(body) - len(right)].strip()
            break
    return f"\\[ {body} \\]" if body else ""


_DOLLARS = re.compile(r"\$\$(.{1,4000}?)\$\$", re.DOTALL)
_DOLLAR = re.compile(r"(?<![\\$])\$([^$\n]{1,1000}?)\$(?!\$)")


_BRACKETS = re.compile(r"\\\[\s*(.*?)\s*\\\]", re.DOTALL)


def brackets_to_dollars(text: str) -> str:
    """``\\[ x \\]`` as ``$$`` on a line of its own, ``x``, ``$$`` (how GLM-OCR, Nanonets-OCR2 and
    LightOnOCR write display math)."""
    return _BRACKETS.sub(lambda m: f"$$\n{m.group(1)}\n$$", text)


def dollars_to_brackets(text: str) -> str:
    """``$$x$$`` as ``\\[ x \\]`` and ``$x$`` as ``\\( x \\)`` (escaped ``\\$`` left alone)."""
    text = _DOLLARS.sub(lambda m: f"\\[ {m.group(1).strip()} \\]", text)
    return _DOLLAR.sub(lambda m: f"\\( {m.group(1).strip()} \\)", text)


# -- tables --------------------------------------------------------------------------------------

_OTSL_TOKEN = re.compile(r"<(fcel|ecel|lcel|ucel|xcel|ched|rhed|srow|nl)>")


def otsl_to_html(otsl: str) -> str:
    """An OTSL table (docling-core ``TableToken``: ``<fcel>`` cell, ``<ecel>`` empty, ``<lcel>``
    spans the cell to its left, ``<ucel>`` the one above, ``<xcel>`` both, ``<ched>``/``<rhed>``/
    ``<srow>`` header cells, ``<nl>`` row end) as an HTML table with colspan/rowspan."""
    rows: list[list[tuple[str, str]]] = [[]]
    pieces = _OTSL_TOKEN.split(otsl)
    # pieces: [text before, tag, text after tag, tag, ...]; a cell's text follows its tag.
    for i in range(1, len(pieces), 2):
        tag, text = pieces[i], pieces[i + 1] if i + 1 < len(pieces) else ""
        if tag == "nl":
            rows.append([])
            continue
        rows[-1].append((tag, text.strip()))
    rows = [r for r in rows if r]
    if not rows:
        return ""
    width = max(len(r) for r in rows)
    grid = [r + [("ecel", "")] * (width - len(r)) for r in rows]
    covered = [[False] * width for _ in grid]
    out = ["<table>"]
    for y, row in enumerate(grid):
        cells = []
        for x, (tag, text) in enumerate(row):
            if covered[y][x] or tag in ("lcel", "ucel", "xcel"):
                continue
            colspan = 1
            while x + colspan < width and grid[y][x + colspan][0] in ("lcel", "xcel"):
                colspan += 1
            rowspan = 1
            while y + rowspan < len(grid) and grid[y + rowspan][x][0] in ("ucel", "xcel"):
                rowspan += 1
            for dy in range(rowspan):
                for dx in range(colspan):
                    covered[y + dy][x + dx] = True
            cell = "th" if tag in ("ched", "rhed", "srow") else "td"
            spans = (f' colspan="{colspan}"' if colspan > 1 else "") + (f' rowspan="{rowspan}"' if rowspan > 1 else "")
            cells.append(f"<{cell}{spans}>{html.escape(text, quote=False)}</{cell}>")
        out.append("<tr>" + "".join(cells) + "</tr>")
    out.append("</table>")
    return "".join(out)


def html_to_otsl(table: str) -> str:
    """A simple HTML table (``<tr>`` rows of ``<td>``/``<th>`` cells, no spans) as OTSL, its
    first row header cells (``<ched>``): what :func:`otsl_to_html` reads back."""
    rows = []
    for row in table.split("<tr>")[1:]:
        rows.append([c.split("</td>")[0].split("</th>")[0] for c in row.replace("<th>", "<td>").split("<td>")[1:]])
    return "".join(("<ched>" if i == 0 else "<fcel>").join([""] + row) + "<nl>" for i, row in enumerate(rows))


_PIPE_ROW = re.compile(r"^\s*\|(.*)\|\s*$")
_RULE_CELL = re.compile(r"^\s*:?-{3,}:?\s*$")


def markdown_table_to_html(text: str) -> str:
    """Every Markdown pipe table in ``text`` (a header row, a ``---`` rule, rows) as an HTML
    table; the rest of the text unchanged."""
    lines = text.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        head = _PIPE_ROW.match(lines[i])
        rule = _PIPE_ROW.match(lines[i + 1]) if head and i + 1 < len(lines) else None
        if head and rule and all(_RULE_CELL.match(c) for c in rule.group(1).split("|")):
            rows = [_cells(head.group(1))]
            i += 2
            while i < len(lines) and (m := _PIPE_ROW.match(lines[i])):
                rows.append(_cells(m.group(1)))
                i += 1
            body = "".join(
                "<tr>" + "".join(f"<{t}>{c}</{t}>" for c in row) + "</tr>"
                for row, t in zip(rows, ["th"] + ["td"] * (len(rows) - 1))
            )
            out.append(f"<table>{body}</table>")
            continue
        out.append(lines[i])
        i += 1
    return "\n".join(out)


def _cells(row: str) -> list[str]:
    return [html.escape(c.strip(), quote=False) for c in row.split("|")]


# -- HTML blocks to Markdown ---------------------------------------------------------------------

_KEEP = {"table", "thead", "tbody", "tr", "td", "th", "caption"}  # tables stay HTML
_INLINE = {"b": "**", "strong": "**", "i": "*", "em": "*"}
_VOID = {"br", "hr", "img", "input"}


class _ToMarkdown(HTMLParser):
    """A small HTML-to-Markdown writer for OCR block HTML (Chandra): paragraphs, headings,
    lists, emphasis, math, checkboxes; tables copied as HTML; images noted, not written."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.out: list[str] = []
        self.table_depth = 0
        self.math: list[bool] = []  # display flags of the open <math> elements
        self.lists: list[list[int]] = []  # [ordered, counter] of the open lists
        self.images: list[str] = []  # alt texts of <img> elements, in order

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "table" or self.table_depth:
            if tag == "table":
                self.table_depth += 1
            if tag in _KEEP:
                spans = "".join(f' {k}="{html.escape(v or "")}"' for k, v in attrs if k in ("colspan", "rowspan"))
                self.out.append(f"<{tag}{spans}>")
            return
        if tag == "math":
            block = a.get("display") == "block"
            self.math.append(block)
            self.out.append("\n\\[ " if block else "\\( ")
        elif tag in ("h1", "h2", "h3", "h4", "h5", "h6"):
            self.out.append("\n\n" + "#" * int(tag[1]) + " ")
        elif tag in ("p", "div"):
            self.out.append("\n\n")
        elif tag == "br":
            self.out.append("\n")
        elif tag in ("ul", "ol"):
            self.lists.append([tag == "ol", 0])
            self.out.append("\n")
        elif tag == "li":
            depth = max(0, len(self.lists) - 1)
            marker = "-"
            if self.lists and self.lists[-1][0]:
                self.lists[-1][1] += 1
                marker = f"{self.lists[-1][1]}."
            self.out.append("\n" + "  " * depth + marker + " ")
        elif tag in _INLINE:
            self.out.append(_INLINE[tag])
        elif tag == "sup":
            self.out.append("<sup>")
        elif tag == "sub":
            self.out.append("<sub>")
        elif tag == "input" and a.get("type") in ("checkbox", "radio"):
            self.out.append("☑ " if "checked" in a else "☐ ")
        elif tag == "img":
            self.images.append(a.get("alt") or "")
        elif tag == "hr":
            self.out.append("\n\n---\n\n")

    def handle_endtag(self, tag: str) -> None:
        if self.table_depth:
            if tag in _KEEP:
                self.out.append(f"</{tag}>")
            if tag == "table":
                self.table_depth -= 1
                self.out.append("\n\n")
            return
        if tag == "math" and self.math:
            self.out.append(" \\]\n" if self.math.pop() else " \\)")
        elif tag in ("h1", "h2", "h3", "h4", "h5", "h6", "p"):
            self.out.append("\n\n")
        elif tag in ("ul", "ol") and self.lists:
            self.lists.pop()
            self.out.append("\n\n")
        elif tag in _INLINE:
            self.out.append(_INLINE[tag])
        elif tag in ("sup", "sub"):
            self.out.append(f"</{tag}>")

    def handle_data(self, data: str) -> None:
        if self.table_depth:
            self.out.append(html.escape(data, quote=False))
        elif self.math:
            self.out.append(data)
        else:
            self.out.append(re.sub(r"\s+", " ", data))


def html_to_markdown(fragment: str) -> tuple[str, list[str]]:
    """A block's HTML as Markdown (tables kept as HTML), and the alt texts of its images."""
    parser = _ToMarkdown()
    try:
        parser.feed(fragment)
        parser.close()
    except Exception:  # noqa: BLE001 - HTMLParser is lenient; never let a block sink the page
        return re.sub(r"<[^>]{0,200}>", " ", fragment).strip(), []
    text = "".join(parser.out)
    text = re.sub(r"[ \t]+\n", "\n", text)
    text = re.sub(r"\n[ \t]+(?=[^-\d ])", "\n", text)
    return re.sub(r"\n{3,}", "\n\n", text).strip(), parser.images
