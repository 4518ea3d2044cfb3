"""The HTML report and the notebook helpers: escaping of model text, images, boxes, the CLI."""

from __future__ import annotations

import html
import io
import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from llm_ocr.options import RenderOptions
from llm_ocr.records import document_schema, page_schema
from llm_ocr.report import markdown_to_html, sanitize_table, write_report
from llm_ocr.report.display import HTML, show_document, show_page, summary
from llm_ocr.sources.base import DocumentRef, PageImage
from llm_ocr.sources.render import close_documents, render_pages
from tests.conftest import run_cli
from tests.docs import make_pdf

SCRIPT = "<script>alert(1)</script>"
IMG = "<img src=x onerror=alert(1)>"
JS_LINK = "[x](javascript:alert(1))"
TEXTAREA = "</textarea>"
TABLE = (
    '<table onclick="alert(1)"><tr><th colspan="2" onmouseover="alert(2)">Head</th></tr>'
    "<tr><td rowspan=\"1\">a<script>alert(3)</script></td><td><img src=x onerror=alert(4)>b</td></tr></table>"
)
EVIL = f"{SCRIPT} {IMG} {JS_LINK} {TEXTAREA} <iframe src=javascript:alert(5)></iframe>"


def png(size: tuple[int, int] = (40, 30), colour: str = "red") -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", size, colour).save(buffer, format="PNG")
    return buffer.getvalue()


def page_row(**overrides: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "doc_id": "doc.pdf",
        "doc_index": 0,
        "page": 1,
        "source": "/nonexistent/doc.pdf",
        "num_pages": 1,
        "markdown": "# Title\n\nSome text.\n\n![](figure:p1-f1)\n",
        "raw": "<|ref|>title<|/ref|><|det|>[[1, 2, 3, 4]]<|/det|>\n# Title",
        "figures": [
            {"id": "p1-f1", "bbox": [10, 10, 50, 40], "image": {"bytes": png(), "path": None},
             "description": "A red square.", "description_json": None, "error": None}
        ],
        "blocks": [{"label": "title", "boxes": [[100, 50, 500, 90]], "text": "# Title"}],
        "width": 1000,
        "height": 1400,
        "status": "ok",
        "error": None,
        "finish_reason": "stop",
        "prompt_tokens": 10,
        "completion_tokens": 20,
        "latency_s": 0.5,
        "attempts": 1,
        "model": "m",
    }
    row.update(overrides)
    return row


def write_stage(out: Path, stage: str, rows: list[dict[str, Any]], schema: pa.Schema | None = None) -> None:
    folder = out / stage
    folder.mkdir(parents=True, exist_ok=True)
    table = pa.Table.from_pylist(rows, schema=schema or page_schema())
    pq.write_table(table, folder / "part-00000-of-00001-000000.parquet")


class Tags(HTMLParser):
    """Every start tag and its attributes, as a browser's tokenizer would see them."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    handle_startendtag = handle_starttag


def tags_of(markup: str) -> list[tuple[str, dict[str, str | None]]]:
    parser = Tags()
    parser.feed(markup)
    parser.close()
    return parser.tags


def assert_inert(markup: str) -> None:
    """No active content: no script-like elements, no event handlers, no javascript: URLs."""
    tags = tags_of(markup)
    names = [t for t, _ in tags]
    for forbidden in ("script", "iframe", "object", "embed", "textarea", "form", "base", "link", "meta-refresh"):
        assert forbidden not in names, forbidden
    for tag, attrs in tags:
        for name, value in attrs.items():
            assert not name.startswith("on"), (tag, name, value)
            if name in ("href", "src", "action", "formaction", "xlink:href"):
                assert value is not None
                lowered = re.sub(r"[\s\x00-\x1f]", "", html.unescape(value)).lower()
                assert not lowered.startswith(("javascript:", "vbscript:", "data:text")), (tag, name, value)
                if name == "src":  # nothing is loaded from anywhere but the file itself
                    assert lowered.startswith("data:image/"), (tag, value)
    for raw in (SCRIPT, IMG, "<iframe", TEXTAREA, 'onclick="', "<img src=x"):
        assert raw not in markup


def test_sanitize_table_keeps_structure_and_spans_only() -> None:
    clean = sanitize_table(TABLE)
    assert clean == (
        '<table><tr><th colspan="2">Head</th></tr><tr><td rowspan="1">a</td><td>b</td></tr></table>'
    )
    # Unbalanced input cannot leave an element open or close one it did not open.
    assert sanitize_table("<table><tr><td>x") == "<table><tr><td>x</td></tr></table>"
    assert sanitize_table("<table></div></td><td colspan=x rowspan=99999>&lt;b&gt;</table>") == (
        "<table><td>&lt;b&gt;</td></table>"
    )


def test_markdown_escapes_html_but_renders_tables() -> None:
    rendered = markdown_to_html(f"# Head\n\n{EVIL}\n\n{TABLE}\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n<center>Caption</center>")
    assert_inert(rendered)
    assert "<h1>Head</h1>" in rendered
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in rendered  # shown as text, not run
    assert '<th colspan="2">Head</th>' in rendered and '<td rowspan="1">a</td>' in rendered
    assert "<td>1</td>" in rendered  # Markdown pipe tables too
    assert "Caption" in rendered and "center" not in rendered


@pytest.mark.parametrize(
    "link",
    ["javascript:alert(1)", "JaVaScRiPt:alert(1)", "java\tscript:alert(1)", "vbscript:x", "data:text/html,<b>",
     "&#106;avascript:alert(1)", "java%09script:alert(1)"],
)
def test_no_dangerous_link_survives(link: str) -> None:
    rendered = markdown_to_html(f"[x]({link}) ![y]({link}) <{link}>")
    assert_inert(rendered)
    assert "href" not in rendered


def test_safe_links_and_remote_images() -> None:
    rendered = markdown_to_html("[site](https://example.org) ![remote](https://example.org/x.png)")
    assert '<a href="https://example.org" rel="nofollow noopener noreferrer">site</a>' in rendered
    assert "<img" not in rendered and "[image remote: https://example.org/x.png]" in rendered


def test_report_escapes_everything_the_model_and_the_input_control(tmp_path: Path) -> None:
    out = tmp_path / "out"
    evil_doc = f"{SCRIPT}{IMG}.pdf"
    row = page_row(
        doc_id=evil_doc,
        source=f"/nonexistent/{IMG}{TEXTAREA}.pdf",
        markdown=f"# Title\n\n{EVIL}\n\n{TABLE}\n\n![{IMG}](figure:p1-f1)\n\n![x](figure:{SCRIPT})",
        raw=f"{EVIL}\n{TABLE}",
        error=f"failed: {EVIL}",
        status="truncated",
        model=SCRIPT,
        figures=[
            {"id": "p1-f1", "bbox": [1, 2, 3, 4], "image": {"bytes": png(), "path": None},
             "description": f"caption {EVIL} {TABLE}", "description_json": f'{{"x": "{SCRIPT}"}}', "error": IMG},
            {"id": f"f-{SCRIPT}", "bbox": [1, 2, 3, 4], "image": {"bytes": b"<svg onload=alert(1)>", "path": None},
             "description": None, "description_json": None, "error": None},
        ],
        blocks=[{"label": f"t{SCRIPT}", "boxes": [[1, 2, 30, 40]], "text": f"{EVIL}{TABLE}"}],
    )
    write_stage(out, "describe", [row])
    write_stage(
        out,
        "assemble",
        [{"doc_id": evil_doc, "doc_index": 0, "source": row["source"], "num_pages": 1,
          "markdown": f"{EVIL}\n\n{TABLE}\n\n![](figure:p1-f1)", "figures": [], "status": "partial",
          "failed_pages": [1], "error": EVIL}],
        document_schema(),
    )
    result = write_report(str(out))
    report = Path(result.path).read_text()
    assert_inert(report)
    tags = tags_of(report)
    assert [t for t, _ in tags].count("style") == 1 and [t for t, _ in tags].count("meta") >= 2
    # The sanitized DeepSeek table is still a table, in the page Markdown, the caption and the
    # assembled document; the caption's table and every image are there, as data URIs.
    assert report.count('<th colspan="2">Head</th>') >= 3
    assert "Content-Security-Policy" in report
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in report
    assert "[no image stored for this figure]" in report  # the SVG "image" was not inlined
    assert "page image not available" in report


def test_report_on_a_real_pdf_scales_boxes_to_the_rerendered_image(tmp_path: Path) -> None:
    pdf = tmp_path / "doc.pdf"
    make_pdf(pdf, pages=2)
    ref = DocumentRef("doc.pdf", 0, str(pdf), "pdf", str(pdf))
    sent = render_pages(ref, RenderOptions(), 1, 1)[0]
    close_documents()
    assert isinstance(sent, PageImage)
    rows = [
        page_row(source=str(pdf), num_pages=2, width=sent.width, height=sent.height,
                 blocks=[{"label": "image", "boxes": [[100, 200, 500, 600]], "text": ""}]),
        page_row(source=str(pdf), num_pages=2, page=2, status="error", error="boom", markdown="", figures=[],
                 blocks=[], width=None, height=None),
    ]
    out = tmp_path / "out"
    write_stage(out, "extract", rows)
    result = write_report(str(out), str(tmp_path / "r" / "half.html"), render=RenderOptions(dpi=72))
    report = Path(result.path).read_text()
    # Rendered at half the DPI, the page image is half the size and so are the boxes.
    assert f'viewBox="0 0 {round(sent.width / 2)} {round(sent.height / 2)}"' in report
    assert '<rect x="50.0" y="100.0" width="200.0" height="200.0"' in report
    # ... and labelled: the block's label is written at the box, in the box's colour.
    assert re.search(r'height="200.0" fill="(#[0-9a-f]{6})"[^>]*/><text x="52.0" [^>]*fill="\1">image</text>', report)
    assert report.count('src="data:image/jpeg;base64,') == 2  # both page images, re-rendered
    assert "boom" in report and "page image not available" not in report
    assert result.documents == 1 and result.pages == 2


def test_report_caps_documents_and_pages_in_input_order(tmp_path: Path) -> None:
    rows = [
        page_row(doc_id=f"d{i}", doc_index=i, page=p, num_pages=5, figures=[], markdown=f"marker-{i}-{p}")
        for i in reversed(range(6))
        for p in range(1, 6)
    ]
    out = tmp_path / "out"
    write_stage(out, "extract", rows)
    result = write_report(str(out), max_documents=2, max_pages_per_document=3)
    report = Path(result.path).read_text()
    shown = set(re.findall(r"marker-(\d)-(\d)", report))
    assert shown == {(str(i), str(p)) for i in range(2) for p in range(1, 4)}
    assert result.summary.documents == 6 and result.summary.pages == 30
    assert result.documents == 2 and result.pages == 6


def test_cli_report(tmp_path: Path) -> None:
    out = tmp_path / "out"
    write_stage(out, "extract", [page_row()])
    done = run_cli("report", str(out), "--max-documents", "1", "--html", str(tmp_path / "x.html"))
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "x.html").read_text().startswith("<!DOCTYPE html>")
    assert (tmp_path / "x.html").stat().st_mode & 0o044  # readable by others, like any output

def test_cli_report_without_pages_exits_2(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from llm_ocr.cli import main

    assert main(["report", str(tmp_path / "empty")]) == 2
    assert "no page rows" in caplog.text


def test_display_helpers(tmp_path: Path) -> None:
    out = tmp_path / "out"
    write_stage(out, "extract", [page_row(), page_row(page=2, markdown=f"second {SCRIPT}", figures=[])])
    write_stage(
        out,
        "assemble",
        [{"doc_id": "doc.pdf", "doc_index": 0, "source": "/nonexistent/doc.pdf", "num_pages": 2,
          "markdown": "assembled text ![](figure:renamed) ![](figure:elsewhere)", "status": "ok", "failed_pages": [],
          "figures": [
              {"id": "renamed", "page": 1, "bbox": [10, 10, 50, 40], "image": {"bytes": png(), "path": None},
               "description": "A red square.", "description_json": None, "error": None},
              {"id": "elsewhere", "page": 3, "bbox": [1, 1, 9, 9], "image": {"bytes": png(colour="blue"), "path": None},
               "description": "Blue.", "description_json": None, "error": None},
          ], "error": None}],
        document_schema(),
    )
    page = show_page(str(out), "doc.pdf", 2)
    assert isinstance(page, HTML)
    markup = page._repr_html_()
    assert_inert(markup)
    assert "second &lt;script&gt;" in markup and "<style>" in markup and str(page) == markup

    document = show_document(str(out), "doc.pdf")._repr_html_()
    assert "assembled text" in document and "A red square." in document and "second" in document
    assert "data:image/png;base64," in document
    # The assembled figure shown on page 1 links to it there (matched by page and box, as
    # Assemble may rename ids); the one whose page is not shown is embedded.
    link = re.search(r'<a class="llmocr-figid" href="#(llmocr-[0-9a-f]+)">\[figure renamed, page 1\]</a>', document)
    assert link and f'id="{link.group(1)}"' in document
    assert document.count("data:image/png;base64,") == 2

    counts = summary(str(out))._repr_html_()
    assert re.search(r"Pages ok</th><td class=\"n\">2<", counts)
    assert re.search(r"Assembled documents: ok</th><td class=\"n\">1<", counts)

    with pytest.raises(KeyError):
        show_page(str(out), "doc.pdf", 7)
    with pytest.raises(KeyError):
        show_document(str(out), "other.pdf")


def test_remote_output_and_source_go_through_fsspec(tmp_path: Path) -> None:
    """An object-store output (memory://): parts, source and report all through fsspec."""
    import fsspec

    fs = fsspec.filesystem("memory")
    pdf = tmp_path / "doc.pdf"
    make_pdf(pdf, pages=1)
    fs.pipe_file("/bucket/in/doc.pdf", pdf.read_bytes())
    local = tmp_path / "staging"
    rows = [
        page_row(source="memory://bucket/in/doc.pdf", width=1224, height=1584),
        page_row(doc_id="bad.pdf", doc_index=1, page=0, source="memory://bucket/in/bad.pdf", status="error",
                 error="not a PDF or corrupt PDF", markdown="", figures=[], blocks=[], width=None, height=None),
    ]
    write_stage(local, "extract", rows)
    fs.pipe_file("/bucket/out/extract/part-00000-of-00001-000000.parquet",
                 (local / "extract" / "part-00000-of-00001-000000.parquet").read_bytes())
    try:
        result = write_report("memory://bucket/out")
        assert result.path.startswith("memory://") and result.path.endswith("/bucket/out/report.html")
        report = fs.cat_file("/bucket/out/report.html").decode()
    finally:
        fs.rm("/bucket", recursive=True)
    assert_inert(report)
    assert report.count('<div class="llmocr-view"><img src="data:image/jpeg;base64,') == 1
    assert "not a PDF or corrupt PDF" in report and "Documents that could not be opened" in report
    assert result.summary.documents == 2 and result.summary.pages == 1
