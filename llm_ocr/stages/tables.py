"""Tables that continue across pages, joined into one (Assemble).

A table continues on the next page when the page ends with a table and the next page begins with
one, with nothing between them but page furniture (:mod:`llm_ocr.stages.furniture`; a caption
or a heading between them keeps them apart), and both have the same number of columns (the
widest row, ``colspan`` counted). The continuation's rows are moved into the first table, less
its first row when that repeats the first table's header row (the same cell texts); a table on
three pages is joined twice. Every family writes its tables as HTML ``<table>`` in the rows'
Markdown (docs/models.md, "One Markdown"), so this works on the page texts alone.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from html.parser import HTMLParser

_TABLE = re.compile(r"<table\b.*?</table>", re.DOTALL | re.IGNORECASE)
_ROW = re.compile(r"<tr\b.*?</tr>", re.DOTALL | re.IGNORECASE)
_FURNITURE_TAG = re.compile(r"<!-- furniture: \w+ -->")


class _Rows(HTMLParser):
    """The rows of an HTML table: each a list of ``(text, colspan)`` cells."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[list[tuple[str, int]]] = []
        self.cell: list[str] | None = None
        self.span = 1

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "tr":
            self.rows.append([])
        elif tag in ("td", "th"):
            if not self.rows:
                self.rows.append([])
            self.cell = []
            try:
                self.span = max(1, min(int(dict(attrs).get("colspan") or 1), 1000))
            except ValueError:
                self.span = 1

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self.cell is not None:
            self.rows[-1].append((" ".join("".join(self.cell).split()), self.span))
            self.cell = None

    def handle_data(self, data: str) -> None:
        if self.cell is not None:
            self.cell.append(data)


def rows_of(html: str) -> list[list[tuple[str, int]]]:
    """The rows of an HTML table, each a list of ``(cell text, colspan)``."""
    parser = _Rows()
    parser.feed(html)
    parser.close()
    return [row for row in parser.rows if row]


def columns(html: str) -> int:
    """The number of columns of an HTML table: its widest row, spans counted."""
    return max((sum(span for _, span in row) for row in rows_of(html)), default=0)


@dataclass
class Span:
    """A table joined across pages: the pages it spans, its columns and rows once joined."""

    pages: list[int]
    columns: int
    rows: int = 0
    #: Where it lives: the index of its first page's text, and its header row's cell texts.
    at: int = field(default=0, repr=False)
    header: list[str] = field(default_factory=list, repr=False)


def _core(text: str, furniture: list[str]) -> str:
    """The page's text without its furniture: what is between two pages' tables."""
    for line in furniture:
        if line.strip():
            text = text.replace(line.strip(), "", 1)
    return _FURNITURE_TAG.sub("", text).strip()


def _closing(text: str) -> int:
    """Where rows go into the last table of ``text``: before its ``</tbody>`` or ``</table>``."""
    low = text.lower()
    end = low.rfind("</table>")
    body = low.rfind("</tbody>", 0, end)
    return body if body != -1 and not low[body + len("</tbody>"):end].strip() else end


def join(texts: list[str | None], pages: list[int],
         furniture: dict[int, list[str]]) -> tuple[list[str | None], list[Span]]:
    """The page texts (``None``: a failed page, which ends any table) of pages ``pages``, with
    every table that continues on the next page joined into its first page's table; and the
    joined tables. ``furniture`` holds each page's furniture texts."""
    texts = list(texts)
    spans: list[Span] = []
    open_: Span | None = None
    for i, (text, page) in enumerate(zip(texts, pages)):
        if text is None:
            open_ = None
            continue
        core = _core(text, furniture.get(page, []))
        if open_ is not None and core.lower().startswith("<table"):
            match = _TABLE.search(text)
            if match is not None and columns(match.group(0)) == open_.columns:
                rows = _ROW.findall(match.group(0))
                first = rows_of(rows[0]) if rows else []
                if first and [t for t, _ in first[0]] == open_.header:
                    rows = rows[1:]  # the header row repeated on the new page
                held = texts[open_.at] or ""
                at = _closing(held)
                texts[open_.at] = held[:at] + "".join(rows) + held[at:]
                text = text[: match.start()] + text[match.end():]
                texts[i] = text
                open_.pages.append(page)
                open_.rows += len(rows)
                if open_ not in spans:
                    spans.append(open_)
                core = _core(text, furniture.get(page, []))
                if not core:
                    continue  # the table filled the page: it may go on again
        open_ = None
        if core.lower().endswith("</table>"):
            last = _TABLE.findall(text)
            if last:
                table = last[-1]
                parsed = rows_of(table)
                open_ = Span([page], columns(table), len(parsed), i, [t for t, _ in parsed[0]] if parsed else [])
    return texts, spans
