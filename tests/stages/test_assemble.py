"""Assemble: pages in order → one Markdown document per document, figures and captions in place."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from llm_ocr.records import Figure, PageResult
from llm_ocr.stages.assemble import DEFAULT_PAGE_SEPARATOR, AssembleOptions, alt_text, assemble_document
from llm_ocr.testing import SimulatedServer
from tests.conftest import read_stage
from tests.docs import make_corpus
from tests.stages.common import stage

SPLIT = DEFAULT_PAGE_SEPARATOR


def page(number: int, markdown: str, figures: list[Figure] | None = None, **kw) -> PageResult:
    return PageResult(doc_id="doc", doc_index=4, page=number, source="doc.pdf", num_pages=3, markdown=markdown,
                      figures=figures or [], status=kw.pop("status", "ok"), **kw)


def test_pages_in_order_with_captions_in_place_and_fake_links_defused() -> None:
    chart = Figure(id="p2-f1", bbox=[1, 2, 3, 4], image=b"png", description="A bar chart [of sales]. Bars rise.\nSecond line.")
    rows = [
        page(3, "Third page."),
        page(1, "First page.\n\n![](figure:p1-f1)"),  # p1-f1 is not a figure of page 1: a fake link
        page(2, "Before.\n\n![](figure:p2-f1)\n\nAfter.", [chart]),
    ]
    doc = assemble_document(rows)
    assert doc.status == "ok" and doc.failed_pages == [] and doc.num_pages == 3 and doc.error is None
    assert doc.markdown == (
        "First page.\n\n!\\[\\](figure:p1-f1)"
        + SPLIT
        + "Before.\n\n![A bar chart (of sales).](figure:p2-f1)\n\n"
        "> **Figure:** A bar chart [of sales]. Bars rise.\n> Second line.\n\nAfter."
        + SPLIT
        + "Third page."
    )
    (figure,) = doc.figures
    assert figure["id"] == "p2-f1" and figure["page"] == 2 and figure["image"] == {"bytes": b"png", "path": None}
    assert figure["description"] == chart.description


def test_failed_and_missing_pages_make_a_partial_document() -> None:
    rows = [page(1, "One."), page(3, "", status="error", error="HTTP 400: bad -->request")]
    doc = assemble_document(rows)
    assert doc.status == "partial" and doc.failed_pages == [2, 3]
    assert doc.error.startswith("2 of 3 page(s) failed: page 2: no row") and "HTTP 400" in doc.error
    parts = doc.markdown.split(SPLIT)
    assert parts[0] == "One."
    assert parts[1] == "<!-- page 2: missing (no row for this page upstream) -->"
    assert parts[2].startswith("<!-- page 3: failed (HTTP 400: bad —›request)") and parts[2].count("-->") == 1


def test_a_document_level_error_row_makes_an_error_document() -> None:
    row = PageResult(doc_id="bad.pdf", doc_index=0, page=0, source="bad.pdf", status="error", error="not a PDF: truncated")
    doc = assemble_document([row])
    assert (doc.status, doc.error, doc.num_pages, doc.markdown, doc.failed_pages) == ("error", "not a PDF: truncated", 0, "", [])
    all_failed = assemble_document([page(n, "", status="error", error="x") for n in (1, 2, 3)])
    assert all_failed.status == "error" and all_failed.failed_pages == [1, 2, 3]


def test_separator_option_and_alt_text() -> None:
    options = AssembleOptions(page_separator="\\n\\n---\\n<!-- page {page} -->\\n\\n")
    doc = assemble_document([page(1, "a"), page(2, "b"), page(3, "c")], options)
    assert doc.markdown == "a\n\n---\n<!-- page 2 -->\n\nb\n\n---\n<!-- page 3 -->\n\nc"
    long = "word " * 60
    assert len(alt_text(long)) <= 100 and alt_text(long).endswith("…")
    assert alt_text("Uses *stars*, _under_ and `code`\\. Next") == "Uses \\*stars\\*, \\_under\\_ and \\`code\\`\\\\."
    assert alt_text(None) == ""


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory: pytest.TempPathFactory):
    """Extract (first page request fails) and Describe of 2 PDFs + a corrupt one; the server stays up."""
    root = tmp_path_factory.mktemp("assemble")
    texts = make_corpus(root / "docs", documents=2, pages=3)
    (root / "docs" / "broken.pdf").write_bytes(b"%PDF-1.4\n not really \n%%EOF")
    with SimulatedServer("--instant", corpus=root / "docs") as server:
        server.inject("error", count=1, status=400)
        # One page at a time: the failing request is the first page's (broken.pdf sends none).
        first = stage("extract", root / "out", server, str(root / "docs"), "--max-in-flight", "1")
        assert first.returncode == 1, first.stderr
        assert stage("describe", root / "out", server).returncode == 1  # failed pages pass through
        yield root, texts, server


def test_assembled_documents_hold_every_page_in_order(pipeline) -> None:
    root, texts, _ = pipeline
    out = root / "out"
    result = stage("assemble", out, None)
    assert result.returncode == 1, result.stderr  # a partial document
    docs = {r["doc_id"]: r for r in read_stage(out, "assemble")}
    assert sorted(docs) == ["broken.pdf", "doc000.pdf", "doc001.pdf"]
    assert docs["broken.pdf"]["status"] == "error" and "PDF" in docs["broken.pdf"]["error"]
    partial = docs["doc000.pdf"]
    assert partial["status"] == "partial" and partial["failed_pages"] == [1] and "HTTP 400" in partial["error"]
    assert partial["markdown"].startswith("<!-- page 1: failed (HTTP 400")
    doc = docs["doc001.pdf"]
    assert doc["status"] == "ok" and doc["num_pages"] == 3 and doc["failed_pages"] == []
    pages = doc["markdown"].split(SPLIT)
    assert len(pages) == 3
    described = {(r["doc_id"], r["page"]): r for r in read_stage(out, "describe")}
    for number, text in enumerate(pages, start=1):
        for line in texts["doc001.pdf"][number - 1]:
            assert line in text  # every line of the page, on its own page
        figures = described[("doc001.pdf", number)]["figures"]
        assert len(figures) == (1 if number % 2 else 0)
        for figure in figures:
            link = f"![{alt_text(figure['description'])}](figure:{figure['id']})"
            caption = f"> **Figure:** {figure['description']}"
            assert f"{link}\n\n{caption}" in text
            # In place: after the page's text lines (the chart is drawn below them).
            assert text.index(texts["doc001.pdf"][number - 1][-1]) < text.index(link)
    assert [(f["id"], f["page"]) for f in doc["figures"]] == [("p1-f1", 1), ("p3-f1", 3)]
    assert all(f["description"] and f["image"]["bytes"] for f in doc["figures"])


def test_small_batches_give_the_same_documents_and_a_rerun_redoes_partial_ones(pipeline, tmp_path: Path) -> None:
    root, _, server = pipeline
    out = tmp_path / "out"
    shutil.copytree(root / "out", out, ignore=shutil.ignore_patterns("assemble"))  # and its marker
    assert stage("assemble", out, None, "--assemble-batch-pages", "1", "--part-rows", "1").returncode == 1
    one_by_one = {r["doc_id"]: r for r in read_stage(out, "assemble")}
    reference = {r["doc_id"]: r for r in read_stage(root / "out", "assemble")}
    assert one_by_one == reference and len(list((out / "assemble").glob("*.parquet"))) == 3
    # The failed page is retried by Extract and Describe; Assemble then redoes only that document.
    assert stage("extract", out, server, str(root / "docs")).returncode == 1  # broken.pdf stays broken
    assert stage("describe", out, server).returncode == 1
    assert stage("assemble", out, None).returncode == 1
    rows = read_stage(out, "assemble")
    assert sorted(r["doc_id"] for r in rows) == ["broken.pdf", "doc000.pdf", "doc001.pdf"]
    docs = {r["doc_id"]: r for r in rows}
    assert docs["doc000.pdf"]["status"] == "ok" and docs["doc000.pdf"]["failed_pages"] == []
    assert docs["doc001.pdf"] == reference["doc001.pdf"]


def test_assemble_needs_upstream_output(tmp_path: Path) -> None:
    result = stage("assemble", tmp_path / "nothing", None)
    assert result.returncode == 2 and "nothing to assemble" in result.stderr


def test_an_unreadable_upstream_part_names_the_stage_that_repairs_it(pipeline, tmp_path: Path) -> None:
    root, _, _ = pipeline
    out = tmp_path / "out"
    shutil.copytree(root / "out", out, ignore=shutil.ignore_patterns("assemble"))
    (out / "describe" / "part-00000-of-00001-000099.parquet").write_bytes(b"PAR1 torn write")
    result = stage("assemble", out, None)
    assert result.returncode == 2 and "rerun llm-ocr describe" in result.stderr, result.stderr
