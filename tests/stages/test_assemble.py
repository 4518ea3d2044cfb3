"""Assemble: pages in order → one Markdown document per document, figures and captions in place."""

from __future__ import annotations

import io
import json
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from reportlab.lib.pagesizes import letter
from reportlab.lib.utils import ImageReader
from reportlab.pdfgen import canvas

from llm_ocr.options import DEFAULT_PAGE_SEPARATOR, AssembleOptions
from llm_ocr.records import Figure, PageResult
from llm_ocr.runners.assemble import scan_assembled
from llm_ocr.stages.assemble import alt_text, assemble_document
from llm_ocr.stages.export import EXPORT_DIR, export_document, safe_name
from llm_ocr.storage import Storage
from llm_ocr.storage.parts import scan_shard
from llm_ocr.testing import SimulatedServer
from tests.conftest import REPO, read_stage
from tests.docs import chart_png, make_corpus
from tests.stages.common import documents_view, stage
from tests.waiting import HANG_GUARD_S

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


def test_a_description_quoting_the_printed_caption_does_not_repeat_it() -> None:
    """A description line the page's own text already holds (the CPU engine's ``Caption: ...``
    quotes the caption printed under the figure) is left out of the blockquote; the rest stays;
    a description made only of such lines leaves the link alone, with its alt text."""
    caption = "Figure 1: Pages processed per minute on five machines."
    quoting = Figure(id="p1-f1", bbox=[1, 2, 3, 4], image=b"png",
                     description=f"Caption: {caption}\nText in the figure: pages per minute alpha")
    doc = assemble_document([page(1, f"Intro.\n\n![](figure:p1-f1)\n\n{caption}", [quoting])])
    assert doc.markdown.count("Pages processed per minute") == 2  # the alt text and the page's caption line
    assert "> **Figure:** Text in the figure: pages per minute alpha\n\n" + caption in doc.markdown
    only = Figure(id="p1-f1", bbox=[1, 2, 3, 4], image=b"png", description=f"Caption: {caption}")
    doc = assemble_document([page(1, f"![](figure:p1-f1)\n\n{caption}", [only])])
    assert doc.markdown.startswith(f"![Caption: Figure 1: Pages processed per minute on five machines.](figure:p1-f1)\n\n{caption}\n")
    # A short description is kept even when its words are on the page, as is one that is not.
    short = Figure(id="p1-f1", bbox=[1, 2, 3, 4], image=b"png", description="Pages processed.\nA rising line.")
    doc = assemble_document([page(1, f"![](figure:p1-f1)\n\n{caption}", [short])])
    assert "> **Figure:** Pages processed.\n> A rising line." in doc.markdown


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
        # In input order (no look-ahead: longest first would send another page first).
        first = stage("extract", root / "out", server, str(root / "docs"), "--max-in-flight", "1", "--look-ahead", "0")
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
    # The reference: default batches over its own copy, so this test does not depend on another
    # test having assembled root/out first (xdist may run it alone, on another worker).
    default = tmp_path / "default"
    shutil.copytree(root / "out", default, ignore=shutil.ignore_patterns("assemble"))
    assert stage("assemble", default, None).returncode == 1
    reference = {r["doc_id"]: r for r in read_stage(default, "assemble")}
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


# A wrapper around the CLI that SIGKILLs its own process right after the N-th write whose path
# contains a given string: a kill at an exact point of an Assemble run (a part stored, a figure
# exported but not its .md, ...), which timing alone cannot hit reliably in a CPU-only stage
# that takes a fraction of a second.
KILL_AFTER_WRITE = """
import os, signal, sys
from llm_ocr.storage import Storage
needle, after = sys.argv[1], int(sys.argv[2])
write, seen = Storage.write_atomic, []
def write_then_die(self, path, data):
    write(self, path, data)
    if needle in path:
        seen.append(path)
        if len(seen) >= after:
            os.kill(os.getpid(), signal.SIGKILL)
Storage.write_atomic = write_then_die
from llm_ocr.cli import main
sys.exit(main(sys.argv[3:]))
"""


@pytest.fixture(scope="module")
def described(tmp_path_factory: pytest.TempPathFactory):
    """4 PDFs x 2 pages through ``llm-ocr run`` (a chart on each first page); its Assemble
    output is the uninterrupted reference. The server is gone and the input PDFs are deleted
    afterwards: Assemble runs as on a CPU machine that has only OUT."""
    root = tmp_path_factory.mktemp("assemble-kill")
    make_corpus(root / "docs", documents=4, pages=2)
    with SimulatedServer("--instant", corpus=root / "docs") as server:
        result = stage("run", root / "out", server, str(root / "docs"))
    assert result.returncode == 0, result.stderr
    shutil.rmtree(root / "docs")
    return root / "out"


@pytest.mark.parametrize(
    ("needle", "after", "stored"),
    [("/assemble/part-", 2, 2), ("/markdown/figures/", 2, 1), (".pdf.md", 3, 2)],
    ids=["after-two-parts", "figure-written-md-not", "after-three-exports"],
)
def test_assemble_alone_resumes_after_sigkill(described: Path, tmp_path: Path, needle: str, after: int, stored: int) -> None:
    """SIGKILL of ``llm-ocr assemble --export-markdown`` at a chosen write (one document per part),
    then the same command again: every document once, equal to an uninterrupted run, the stored
    documents not redone, and the export whole."""
    out = tmp_path / "out"
    shutil.copytree(described, out, ignore=shutil.ignore_patterns("assemble"))  # and its marker
    argv = ["assemble", "--output", str(out), "--part-rows", "1", "--assemble-batch-pages", "1", "--export-markdown"]
    killed = subprocess.run([sys.executable, "-c", KILL_AFTER_WRITE, needle, str(after), *argv], cwd=REPO,
                            capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert killed.returncode == -signal.SIGKILL, killed.stderr  # killed mid-run, at the chosen write
    assert not (out / "_state" / "assemble").exists()
    assert stored <= len(read_stage(out, "assemble")) < 4
    result = stage("assemble", out, None, "--export-markdown")
    assert result.returncode == 0, result.stderr
    rows = read_stage(out, "assemble")
    assert sorted(r["doc_id"] for r in rows) == [f"doc{i:03d}.pdf" for i in range(4)]  # each exactly once
    assert documents_view(rows) == documents_view(read_stage(described, "assemble"))
    # The export is whole: every document's .md, every link resolving to its figure's bytes.
    export = out / EXPORT_DIR
    assert sorted(p.name for p in export.glob("*.md")) == sorted(f"{safe_name(r['doc_id'])}.md" for r in rows)
    for row in rows:
        text = (export / f"{safe_name(row['doc_id'])}.md").read_text(encoding="utf-8")
        targets = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text)
        assert len(targets) == len(row["figures"]) == 1
        for target, figure in zip(targets, row["figures"]):
            assert not target.startswith(("/", "figure:")) and (export / target).read_bytes() == figure["image"]["bytes"]
    assert not list(out.rglob("*.tmp"))
    marker = json.loads((out / "_state" / "assemble" / "done-00000-of-00001.json").read_text())
    assert marker["documents"]["skipped"] >= stored  # what the killed run stored was not assembled again


def sandwich_pdf(path: Path) -> list[list[tuple[str, str]]]:
    """A 3-page PDF whose figures sit *between* text: page 1 has text, a chart, a line, a second
    chart, text; page 2 only text; page 3 a chart above its text. Returns each page's content
    in reading order as ("text", line) and ("figure", "") items."""
    pdf = canvas.Canvas(str(path), pagesize=letter)

    def text(items: list, y: float, line: str) -> None:
        pdf.setFont("Helvetica", 11)
        pdf.drawString(72, y, line)
        items.append(("text", line))

    def chart(items: list, y: float, seed: int) -> None:
        pdf.drawImage(ImageReader(io.BytesIO(chart_png(seed))), 72, y, width=300, height=120)
        items.append(("figure", ""))

    first: list[tuple[str, str]] = []
    text(first, 720, "alpha archive batch caption column above both figures")
    chart(first, 570, seed=11)
    text(first, 530, "bravo document engine figure graph between the two figures")
    chart(first, 380, seed=12)
    text(first, 340, "charlie header index journal kernel below both figures")
    pdf.showPage()
    second: list[tuple[str, str]] = []
    text(second, 720, "delta layout margin network output on the page without figures")
    text(second, 600, "echo page quality render sample at the end of page two")
    pdf.showPage()
    third: list[tuple[str, str]] = []
    chart(third, 580, seed=13)
    text(third, 520, "foxtrot table unicode vector width under the figure of page three")
    pdf.showPage()
    pdf.save()
    return [first, second, third]


def test_run_keeps_text_order_and_puts_each_caption_after_its_own_figure(tmp_path: Path) -> None:
    """"Every document's final Markdown holds its pages' text in order, with each figure and its
    caption in place", checked by position through ``llm-ocr run``: page order, the order of the
    text within a page, each figure link between the text above and below it, and its own caption
    (not another figure's) right after it."""
    (tmp_path / "docs").mkdir()
    layout = sandwich_pdf(tmp_path / "docs" / "sandwich.pdf")
    out = tmp_path / "out"
    with SimulatedServer("--instant", corpus=tmp_path / "docs") as server:
        assert stage("run", out, server, str(tmp_path / "docs")).returncode == 0
    (document,) = read_stage(out, "assemble")
    assert document["status"] == "ok" and document["num_pages"] == 3
    figures = document["figures"]
    assert [(f["id"], f["page"]) for f in figures] == [("p1-f1", 1), ("p1-f2", 1), ("p3-f1", 3)]
    captions = [f["description"] for f in figures]
    assert all(captions) and len(set(captions)) == 3  # distinct captions: a swap would show
    pages = document["markdown"].split(SPLIT)
    assert len(pages) == 3
    remaining = iter(figures)
    for number, (text, items) in enumerate(zip(pages, layout), start=1):
        # Every text line of the other pages is absent from this one.
        for other, other_items in enumerate(layout, start=1):
            if other != number:
                assert not any(line in text for kind, line in other_items if kind == "text")
        position = 0
        for kind, line in items:
            if kind == "text":
                found = text.find(line, position)
                assert found >= position, f"page {number}: {line!r} missing or out of order"
                position = found + len(line)
            else:
                figure = next(remaining)
                block = (
                    f"![{alt_text(figure['description'])}](figure:{figure['id']})\n\n"
                    f"> **Figure:** {figure['description']}"
                )
                found = text.find(block, position)  # the link, then at once its own caption
                assert found >= position, f"page {number}: {figure['id']} with its caption missing or out of place"
                position = found + len(block)
        assert text.count("](figure:") == sum(1 for kind, _ in items if kind == "figure")
    assert next(remaining, None) is None


def test_a_rerun_removes_only_its_own_temporary_files(tmp_path: Path) -> None:
    """A kill -9 mid-write leaves ``NAME.XXXXXXXX.tmp`` on local disk; the next run of the same
    shard (or export of the same document) removes its own, never another writer's."""
    out = tmp_path / "out"
    # Shard 1 of 2 and document "doc" are ours; shard 0 and documents "other" and "doc.md.x" are not.
    mine = [
        "describe/part-00001-of-00002-000003.parquet.0badc0de.tmp",
        "assemble/part-00001-of-00002-000000.parquet.12345678.tmp",
        "markdown/doc.md.abcdef01.tmp",
        "markdown/figures/doc/p1-f1.png.abcdef02.tmp",
    ]
    theirs = [
        "describe/part-00000-of-00002-000003.parquet.0badc0de.tmp",
        "assemble/part-00000-of-00002-000000.parquet.1234abcd.tmp",
        "markdown/other.md.abcdef01.tmp",
        "markdown/figures/other/p1-f1.png.abcdef02.tmp",
        "markdown/doc.md.x.md.abcdef03.tmp",
        "markdown/figures/doc.md.x/p1-f1.png.abcdef04.tmp",
    ]
    for name in mine + theirs:
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_bytes(b"cut")
    storage = Storage(str(out))
    scan_shard(storage.child("describe"), 1, 2)
    scan_assembled(storage.child("assemble"), 1, 2)
    row = PageResult(doc_id="doc", doc_index=1, page=1, source="doc", num_pages=1, markdown="One.", status="ok")
    export_document(storage, assemble_document([row]))
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*.tmp")) == sorted(theirs)
