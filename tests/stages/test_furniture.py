"""Page furniture: running headers, footers and page numbers found by a family's label and by
repetition over a document's pages, listed in Assemble's rows, kept, dropped or tagged in its
Markdown (``--page-furniture``), and put in the DoclingDocument's furniture layer."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from llm_ocr.options import AssembleOptions
from llm_ocr.records import Block, PageResult, page_schema
from llm_ocr.stages.assemble import assemble_document
from llm_ocr.stages.furniture import find, mark_labelled
from llm_ocr.vlm.families import family_named
from tests.conftest import read_stage
from tests.stages.common import run_in_process

HEADER = "Harbour Trust - Annual Report 2024"
BODY = ["Cargo through the three quays rose again this year.", "The eastern channel was dredged in May.",
        "Wardens counted seals on the breakwater.", "Fees for small craft were held for a third year."]


def report(pages: int = 4, title: str = "The year in review") -> list[PageResult]:
    """A report's page rows as a family without furniture labels writes them: a running header
    at the top, the body (a title on page 1, a heading in the top band of page 2 only), the page
    number at the bottom of each page, 1000 x 1400 px."""
    rows = []
    for n in range(1, pages + 1):
        blocks = [Block("text", [[100, 30, 900, 60]], HEADER)]
        if n == 1:
            blocks.append(Block("title", [[100, 90, 900, 140]], f"# {title}"))
        if n == 2:
            blocks.append(Block("sub_title", [[100, 90, 900, 130]], "## Cargo"))  # top band, one page only
        blocks.append(Block("text", [[100, 300, 900, 400]], BODY[(n - 1) % len(BODY)]))
        blocks.append(Block("text", [[450, 1350, 550, 1380]], f"Page {n} of {pages}"))
        markdown = "\n\n".join(b.text for b in blocks)
        rows.append(PageResult("report.pdf", 0, n, "report.pdf", num_pages=pages, markdown=markdown, blocks=blocks,
                               width=1000, height=1400, status="ok"))
    return rows


def test_running_lines_are_found_by_repetition_and_listed_while_the_markdown_keeps_them() -> None:
    document = assemble_document(report())
    found = [(f.page, f.kind, f.text, f.found) for f in document.furniture or []]
    assert found == [p for n in range(1, 5) for p in ((n, "page_header", HEADER, "repetition"),
                                                       (n, "page_number", f"Page {n} of 4", "repetition"))]
    assert document.markdown.count(HEADER) == 4 and "Page 3 of 4" in document.markdown  # keep: the default


def test_drop_leaves_the_body_and_tag_marks_each_line() -> None:
    dropped = assemble_document(report(), AssembleOptions(page_furniture="drop")).markdown
    assert HEADER not in dropped and "Page 2 of 4" not in dropped
    assert all(line in dropped for line in BODY) and "# The year in review" in dropped and "## Cargo" in dropped
    tagged = assemble_document(report(), AssembleOptions(page_furniture="tag")).markdown
    assert tagged.count(f"<!-- furniture: page_header -->\n{HEADER}") == 4
    assert "<!-- furniture: page_number -->\nPage 4 of 4" in tagged


def test_too_few_pages_or_lines_not_at_an_edge_are_not_furniture() -> None:
    # Two pages are evidence enough for a page number only.
    assert [(p.page, p.kind, p.text) for p in find(report(pages=2))] == [(1, "page_number", "Page 1 of 2"),
                                                                         (2, "page_number", "Page 2 of 2")]
    assert find(report(pages=1)) == []
    rows = report()
    for row in rows:  # the same sentence on every page, but in the body: not furniture
        row.blocks.append(Block("text", [[100, 700, 900, 740]], "All figures in thousands of tonnes."))
    assert {p.text for p in find(rows)} == {HEADER} | {f"Page {n} of 4" for n in range(1, 5)}


def test_pages_without_boxes_offer_their_first_and_last_paragraphs() -> None:
    rows = [PageResult("notes.png", 1, n, "notes.png", markdown=f"{HEADER}\n\n{BODY[n - 1]}\n\n- {n} -", status="ok")
            for n in range(1, 4)]
    assert [(p.page, p.kind) for p in find(rows)] == [(1, "page_header"), (1, "page_number"), (2, "page_header"),
                                                      (2, "page_number"), (3, "page_header"), (3, "page_number")]


def test_a_family_s_furniture_labels_mark_the_page_row_on_one_page() -> None:
    dots = family_named("dots-ocr")
    answer = ('[{"bbox": [100, 20, 900, 50], "category": "Page-header", "text": "ACME quarterly"}, '
              '{"bbox": [100, 100, 900, 200], "category": "Text", "text": "Sales rose."}, '
              '{"bbox": [480, 1350, 520, 1380], "category": "Page-footer", "text": "7"}]')
    layout = dots.parse(answer, width=1000, height=1400, page=1)
    row = mark_labelled(PageResult("q.pdf", 0, 1, "q.pdf", markdown=layout.markdown, status="ok", width=1000,
                                   height=1400, blocks=[b.record() for b in layout.blocks]))
    assert [b.furniture for b in row.blocks] == ["page_header", None, "page_footer"]
    document = assemble_document([row], AssembleOptions(page_furniture="drop"))
    assert [(f.kind, f.found) for f in document.furniture or []] == [("page_header", "label"), ("page_footer", "label")]
    assert "ACME" not in document.markdown and "Sales rose." in document.markdown


def test_nanonets_tagged_page_number_is_furniture_and_drop_takes_only_that_line() -> None:
    nanonets = family_named("nanonets")
    layout = nanonets.parse("Sales rose 7 percent in 2017.\n\n<page_number>7</page_number>", width=1000, height=1400,
                            page=7)
    row = mark_labelled(PageResult("q.pdf", 0, 1, "q.pdf", markdown=layout.markdown, status="ok",
                                   blocks=[b.record() for b in layout.blocks]))
    assert [(b.text, b.furniture) for b in row.blocks] == [("Sales rose 7 percent in 2017.", None), ("7", "page_number")]
    document = assemble_document([row], AssembleOptions(page_furniture="drop"))
    assert document.markdown == "Sales rose 7 percent in 2017."


def test_the_docling_document_puts_repeated_lines_in_its_furniture_layer() -> None:
    pytest.importorskip("docling_core")
    from docling_core.types.doc import ContentLayer

    from llm_ocr.stages.docling_export import build_document

    doc = build_document("report.pdf", report()).document
    furniture = [t.text for t in doc.texts if t.content_layer == ContentLayer.FURNITURE]
    assert furniture.count(HEADER) == 4 and "Page 1 of 4" in furniture
    body = doc.export_to_markdown()
    assert HEADER not in body and BODY[0] in body


def test_the_page_furniture_option_of_llm_ocr_assemble(tmp_path: Path) -> None:
    from llm_ocr.storage import Storage
    from llm_ocr.storage.parts import PartWriter

    async def write() -> None:
        writer = PartWriter(Storage(str(tmp_path / "out" / "extract")), page_schema(), 0, 1)
        for row in report():
            await writer.add(row.to_row())
        await writer.close()

    asyncio.run(write())
    run_in_process("assemble", "--output", str(tmp_path / "out"), "--page-furniture", "drop")
    (row,) = read_stage(tmp_path / "out", "assemble")
    assert HEADER not in row["markdown"] and BODY[1] in row["markdown"]
    assert {(f["kind"], f["found"]) for f in row["furniture"]} == {("page_header", "repetition"),
                                                                   ("page_number", "repetition")}
