"""Tables across pages: Assemble joins a table that continues on the next page into one, and
records the pages it spans; tables that merely follow each other stay apart."""

from __future__ import annotations

import re

import pytest

from llm_ocr.options import AssembleOptions
from llm_ocr.records import Block, PageResult
from llm_ocr.stages.assemble import assemble_document

HEADER = "Harbour Trust - Annual Report 2024"
MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September"]


def row_html(*cells: str) -> str:
    return "<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>"


def page(n: int, pages: int, body: list[str]) -> PageResult:
    """A page's row: a running header and a page number around ``body`` (its Markdown blocks)."""
    texts = [HEADER, *body, f"Page {n} of {pages}"]
    height = 1400
    boxes = [[100, 30, 900, 60]] + [[100, 100 + 150 * i, 900, 240 + 150 * i] for i in range(len(body))] + [
        [450, 1350, 550, 1380]]
    blocks = [Block("table" if t.startswith("<table") else "text", [box], t) for t, box in zip(texts, boxes)]
    return PageResult("t.pdf", 0, n, "t.pdf", num_pages=pages, markdown="\n\n".join(texts), blocks=blocks,
                      width=1000, height=height, status="ok")


def three_page_table() -> list[PageResult]:
    """Nine months of tonnage over three pages: the header row repeated on page 2, not on page 3."""
    head = row_html("Month", "Tonnes")
    rows = [row_html(m, str(300 + i)) for i, m in enumerate(MONTHS)]
    return [
        page(1, 3, ["## Tonnage by month", f"<table>{head}{''.join(rows[:3])}</table>"]),
        page(2, 3, [f"<table>{head}{''.join(rows[3:6])}</table>"]),
        page(3, 3, [f"<table>{''.join(rows[6:])}</table>", "Tonnage rose in the autumn."]),
    ]


def test_a_table_over_three_pages_is_joined_into_one_with_its_pages() -> None:
    for mode in ("keep", "drop", "tag"):
        document = assemble_document(three_page_table(), AssembleOptions(page_furniture=mode))
        (table,) = re.findall(r"<table>.*?</table>", document.markdown, re.DOTALL)
        assert re.findall(r"<tr><td>([^<]+)</td>", table) == ["Month", *MONTHS], mode  # the header once
        assert [(t.pages, t.columns, t.rows) for t in document.table_spans or []] == [([1, 2, 3], 2, 10)], mode
        # On the first page, where it begins; the text after it stays on page 3.
        page_2 = document.page_starts[1] if document.page_starts else 0
        assert document.markdown.index("</table>") < page_2 < document.markdown.index("Tonnage rose"), mode


def test_adjacent_tables_with_other_columns_or_a_caption_between_stay_apart() -> None:
    two = f"<table>{row_html('Quay', 'Berths')}{row_html('North', '4')}</table>"
    three = f"<table>{row_html('Vessel', 'Flag', 'Tonnes')}{row_html('Ardent', 'NO', '900')}</table>"
    other_columns = [page(1, 3, ["Berths per quay.", two]), page(2, 3, [three]), page(3, 3, ["End."])]
    document = assemble_document(other_columns)
    assert len(re.findall(r"<table>", document.markdown)) == 2 and document.table_spans == []
    captioned = [page(1, 3, ["Berths per quay.", two]),
                 page(2, 3, ["Table 2: berths in the south basin.", two.replace("North", "South")]),
                 page(3, 3, ["End."])]
    document = assemble_document(captioned)
    assert len(re.findall(r"<table>", document.markdown)) == 2 and document.table_spans == []


def test_the_docling_document_holds_the_joined_table_once_with_a_box_on_each_page() -> None:
    pytest.importorskip("docling_core")
    from llm_ocr.stages.docling_export import build_document

    (table,) = build_document("t.pdf", three_page_table()).document.tables
    assert [c.text for c in table.data.table_cells if c.start_col_offset_idx == 0] == ["Month", *MONTHS]
    assert table.data.num_rows == 10 and [p.page_no for p in table.prov] == [1, 2, 3]
    two = f"<table>{row_html('Quay', 'Berths')}{row_html('North', '4')}</table>"
    three = f"<table>{row_html('Vessel', 'Flag', 'Tonnes')}{row_html('Ardent', 'NO', '900')}</table>"
    apart = [page(1, 3, ["Berths per quay.", two]), page(2, 3, [three]), page(3, 3, ["End."])]
    assert len(build_document("t.pdf", apart).document.tables) == 2
