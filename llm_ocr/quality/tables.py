"""Tables in a page's Markdown, as olmOCR-bench reads them: cells on a grid with their
neighbours up, down, left and right, and heading cells.

A port of allenai/olmocr ``olmocr/bench/table_parsing.py`` (commit f7cfe4c). Markdown tables
are runs of lines holding a ``|``; the first row and the first column are headings. HTML
``<table>`` elements keep ``rowspan``/``colspan``; ``<th>`` cells and cells under ``<thead>``
are headings. Upstream parses HTML with BeautifulSoup's ``html.parser`` builder; the tiny tree
below is built the same way (the standard library's parser, tags nest as written, an end tag
closes the nearest open tag of its name and a stray one is ignored), so no BeautifulSoup is needed.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Any

Cell = tuple[int, int]

#: Elements with no content and no end tag: closed as soon as they open.
_VOID = frozenset(
    {"area", "base", "br", "col", "embed", "hr", "img", "input", "keygen", "link", "menuitem", "meta", "param",
     "source", "track", "wbr", "basefont", "bgsound", "command", "frame", "image", "isindex", "nextid", "spacer"}
)  # fmt: skip


@dataclass(frozen=True)
class TableData:
    """A table as a graph of cells: text by (row, column) of its top-left corner, headings,
    and each cell's neighbours in the four directions (several where spans meet)."""

    cell_text: dict[Cell, str]
    heading_cells: set[Cell]
    is_rectangular: bool
    up_relations: dict[Cell, set[Cell]]
    down_relations: dict[Cell, set[Cell]]
    left_relations: dict[Cell, set[Cell]]
    right_relations: dict[Cell, set[Cell]]

    def _walk_heading_relations(self, start: Cell, relation: dict[Cell, set[Cell]]) -> set[Cell]:
        headings: set[Cell] = set()
        ends: set[Cell] = set()
        visited: set[Cell] = set()
        to_visit = {start}
        while to_visit:
            current = to_visit.pop()
            visited.add(current)
            if current in self.heading_cells:
                headings.add(current)
            if not relation.get(current):
                ends.add(current)
            else:
                to_visit |= relation[current]
        headings.discard(start)
        ends.discard(start)
        return headings or ends

    def top_heading_relations(self, row: int, col: int) -> set[Cell]:
        """The heading cells above a cell (else the cells at the top of its column)."""
        return self._walk_heading_relations((row, col), self.up_relations)

    def left_heading_relations(self, row: int, col: int) -> set[Cell]:
        """The heading cells left of a cell (else the cells at the start of its row)."""
        return self._walk_heading_relations((row, col), self.left_relations)


def _span(value: Any, default: int = 1) -> int:
    if value in (None, "", 0):
        return default
    try:
        span = int(value)
    except (TypeError, ValueError):
        return default
    return span if span > 0 else default


def build_table(row_specs: list[list[dict[str, Any]]]) -> TableData | None:
    """A :class:`TableData` from rows of cell specs (``text``, ``rowspan``, ``colspan``, ``is_heading``)."""
    if not row_specs:
        return None
    cell_text: dict[Cell, str] = {}
    heading_cells: set[Cell] = set()
    cell_meta: dict[Cell, tuple[int, int, int, int]] = {}  # row, col, rowspan, colspan
    occupancy: list[list[Cell | None]] = []
    active: list[tuple[Cell, int] | None] = []  # per column: the cell spanning down into it, rows left

    for row_idx, cells in enumerate(row_specs):
        entries: list[Cell | None] = []
        col = 0
        spec_idx = 0
        while spec_idx < len(cells) or col < len(active):
            if col < len(active) and active[col] is not None:
                cell_id, remaining = active[col]  # type: ignore[misc]
                entries.append(cell_id)
                remaining -= 1
                active[col] = (cell_id, remaining) if remaining > 0 else None
                col += 1
                continue
            if spec_idx >= len(cells):
                if col < len(active):
                    entries.append(None)
                    col += 1
                    continue
                break
            spec = cells[spec_idx]
            spec_idx += 1
            rowspan = spec.get("rowspan", 1)
            colspan = spec.get("colspan", 1)
            rowspan = max(1, rowspan if isinstance(rowspan, int) else _span(rowspan))
            colspan = max(1, colspan if isinstance(colspan, int) else _span(colspan))
            cell_id = (row_idx, col)
            cell_text[cell_id] = spec.get("text", "") or ""
            if spec.get("is_heading"):
                heading_cells.add(cell_id)
            cell_meta[cell_id] = (row_idx, col, rowspan, colspan)
            if len(active) < col + colspan:
                active.extend([None] * (col + colspan - len(active)))
            for offset in range(colspan):
                entries.append(cell_id)
                active[col + offset] = (cell_id, rowspan - 1) if rowspan > 1 else None
            col += colspan
        occupancy.append(entries)

    # Rows that exist only because a cell spans down into them.
    while any(entry is not None for entry in active):
        entries = []
        for col, entry in enumerate(active):
            if entry is None:
                entries.append(None)
                continue
            cell_id, remaining = entry
            entries.append(cell_id)
            remaining -= 1
            active[col] = (cell_id, remaining) if remaining > 0 else None
        occupancy.append(entries)

    if not cell_text:
        return None
    columns = {i for row in occupancy for i, value in enumerate(row) if value is not None}
    if not columns:
        return None
    width = max(columns) + 1
    for row in occupancy:
        if len(row) < width:
            row.extend([None] * (width - len(row)))
        elif len(row) > width:
            del row[width:]
    height = len(occupancy)

    up: dict[Cell, set[Cell]] = defaultdict(set)
    down: dict[Cell, set[Cell]] = defaultdict(set)
    left: dict[Cell, set[Cell]] = defaultdict(set)
    right: dict[Cell, set[Cell]] = defaultdict(set)
    for cell_id, (row0, col0, rowspan, colspan) in cell_meta.items():
        row1, col1 = row0 + rowspan - 1, col0 + colspan - 1
        for r in range(row0, row1 + 1):
            for c in range(col1 + 1, width):
                neighbour = occupancy[r][c]
                if neighbour is not None and neighbour != cell_id:
                    right[cell_id].add(neighbour)
                    break
            for c in range(col0 - 1, -1, -1):
                neighbour = occupancy[r][c]
                if neighbour is not None and neighbour != cell_id:
                    left[cell_id].add(neighbour)
                    break
        for c in range(col0, col1 + 1):
            for r in range(row1 + 1, height):
                if c >= len(occupancy[r]):
                    continue
                neighbour = occupancy[r][c]
                if neighbour is not None and neighbour != cell_id:
                    down[cell_id].add(neighbour)
                    break
            for r in range(row0 - 1, -1, -1):
                neighbour = occupancy[r][c]
                if neighbour is not None and neighbour != cell_id:
                    up[cell_id].add(neighbour)
                    break

    return TableData(
        cell_text=cell_text,
        heading_cells=heading_cells,
        is_rectangular=not any(any(x is None for x in row) for row in occupancy),
        up_relations={c: set(up[c]) for c in cell_text},
        down_relations={c: set(down[c]) for c in cell_text},
        left_relations={c: set(left[c]) for c in cell_text},
        right_relations={c: set(right[c]) for c in cell_text},
    )


# ============================================================================================
# Markdown tables


def _markdown_rows(lines: list[str]) -> list[list[str]]:
    separator = None
    for i, line in enumerate(lines):
        content = line.replace("|", "").strip()
        if content and all(c in "- :" for c in content):
            separator = i
            break
    rows = []
    for i, line in enumerate(lines):
        if i == separator or (line.strip() and all(c in "- :|" for c in line)):
            continue
        cells = [cell.strip() for cell in line.split("|")]
        if cells and cells[0] == "":
            cells = cells[1:]
        if cells and cells[-1] == "":
            cells = cells[:-1]
        if cells:
            rows.append(cells)
    return rows


def _markdown_table(lines: list[str]) -> TableData | None:
    rows = _markdown_rows(lines)
    if not rows:
        return None
    specs = [
        [{"text": cell, "rowspan": 1, "colspan": 1, "is_heading": r == 0 or c == 0} for c, cell in enumerate(row)]
        for r, row in enumerate(rows)
    ]
    return build_table(specs)


def parse_markdown_tables(markdown: str) -> list[TableData]:
    """Every Markdown table in ``markdown``: runs of at least two lines that hold a ``|``."""
    tables: list[TableData] = []
    run: list[str] = []
    for line in markdown.strip().split("\n") + [""]:  # the sentinel closes a run at the end
        if "|" in line:
            run.append(line)
            continue
        if len(run) >= 2 and (table := _markdown_table(run)) is not None:
            tables.append(table)
        run = []
    return tables


# ============================================================================================
# HTML tables


@dataclass(eq=False)
class _Node:
    name: str
    attrs: dict[str, str | None] = field(default_factory=dict)
    children: list[_Node | str] = field(default_factory=list)
    parent: _Node | None = None

    def descendants(self, names: frozenset[str]) -> list[_Node]:
        """Elements named in ``names`` below this one, in document order."""
        found: list[_Node] = []
        stack = list(reversed([c for c in self.children if isinstance(c, _Node)]))
        while stack:
            node = stack.pop()
            if node.name in names:
                found.append(node)
            stack.extend(reversed([c for c in node.children if isinstance(c, _Node)]))
        return found

    def has_ancestor(self, name: str) -> bool:
        node = self.parent
        while node is not None:
            if node.name == name:
                return True
            node = node.parent
        return False

    def text(self) -> str:
        """The text below this element, ``<br>`` read as a newline."""
        parts: list[str] = []
        stack: list[_Node | str] = [self]
        while stack:
            item = stack.pop()
            if isinstance(item, str):
                parts.append(item)
            elif item.name == "br":
                parts.append("\n")
            else:
                stack.extend(reversed(item.children))
        return "".join(parts)


class _TreeBuilder(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = _Node("[document]")
        self.stack = [self.root]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        node = _Node(tag, dict(attrs), parent=self.stack[-1])
        self.stack[-1].children.append(node)
        if tag not in _VOID:
            self.stack.append(node)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        node = _Node(tag, dict(attrs), parent=self.stack[-1])
        self.stack[-1].children.append(node)

    def handle_endtag(self, tag: str) -> None:
        for i in range(len(self.stack) - 1, 0, -1):
            if self.stack[i].name == tag:
                del self.stack[i:]
                return

    def handle_data(self, data: str) -> None:
        self.stack[-1].children.append(data)


def parse_html_tables(content: str) -> list[TableData]:
    """Every HTML ``<table>`` in ``content`` (nested ones too, each on its own)."""
    builder = _TreeBuilder()
    builder.feed(content)
    builder.close()
    tables: list[TableData] = []
    for table in builder.root.descendants(frozenset({"table"})):
        rows = table.descendants(frozenset({"tr"}))
        if not rows:
            continue
        specs: list[list[dict[str, Any]]] = []
        for row_idx, row in enumerate(rows):
            in_head = row.has_ancestor("thead")
            spec = []
            for cell in (c for c in row.children if isinstance(c, _Node) and c.name in ("th", "td")):
                raw_rowspan = cell.attrs.get("rowspan")
                rowspan = _span(raw_rowspan)
                if isinstance(raw_rowspan, str) and raw_rowspan.strip() == "0":
                    rowspan = max(1, len(rows) - row_idx)  # rowspan=0: to the end of the table
                spec.append(
                    {
                        "text": cell.text().strip(),
                        "rowspan": rowspan,
                        "colspan": _span(cell.attrs.get("colspan")),
                        "is_heading": cell.name == "th" or in_head,
                    }
                )
            specs.append(spec)
        if (data := build_table(specs)) is not None:
            tables.append(data)
    return tables
