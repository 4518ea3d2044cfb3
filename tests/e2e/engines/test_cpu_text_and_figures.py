"""What the CPU engine reads as text and what as a figure, on real pages run through
``llm-ocr run`` (Extract, Describe, Assemble, the Markdown export, and with docling-core
installed the DoclingDocuments and chunks of ``--chunks``) against the real engine.

One run over one folder serves every test here (the engine reads ~20 page images):

- a 180 x 300 pt book page of plain text that the layout model calls a figure;
- a 234 x 2,600 pt strip like a well log (read in segments): depths and notes beside one curve
  track, and the layout model calls the whole segment holding the track a figure;
- a 306 x 2,448 pt wireline log (:func:`llm_ocr.bench.sheet_pages.well_log`): a header, curve
  tracks across the whole strip with the depths and formation tops among them, so that each
  segment past the header is one drawing;
- an A5 page with a bar chart and no caption;
- the sample invoices and receipts of ``samples/`` (their values in examples/fields-truth.json)
  and the sample report (its table and captioned chart made by scripts/make_samples.py).

The pages come from :mod:`llm_ocr.bench.layout_pages`, which also makes
``llm-ocr bench-accuracy --corpus layout|held-out``.
"""

from __future__ import annotations

import html
import io
import json
import re
import shutil
from html.parser import HTMLParser
from typing import Any

import pyarrow.parquet as pq
import pytest
from reportlab.lib.pagesizes import A5

from llm_ocr.bench.accuracy import text_layer, word_recall
from llm_ocr.bench.layout_pages import CorpusPage, bar_chart, book_page, columns_page, iou, strip
from llm_ocr.bench.sheet_pages import well_log
from llm_ocr.testing import CpuServer
from tests.conftest import REPO, read_stage, run_cli

# The hang guard (pytest-timeout; 300 s by default): the module's fixture reads a dozen pages with the real CPU engine: minutes on a loaded 2-core machine (over 300 s at load 36).
pytestmark = pytest.mark.timeout(1800)

SCALE = 2.0  # 144 DPI, the pipeline's rendering
SAMPLES = ["invoice-2024-0017.pdf", "invoice-2024-0042.pdf", "invoice-2024-0051.pdf", "receipt-0381.pdf",
           "receipt-0977.pdf", "report.pdf"]


def _has_docling() -> bool:
    try:
        import docling_core  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.fixture(scope="module")
def run(cpu_engine: CpuServer, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    folder = tmp_path_factory.mktemp("text-and-figures")
    inputs = folder / "in"
    made: dict[str, CorpusPage] = {}
    # Tight leading and wide margins: the layout model calls most of this page a figure.
    for page in (
        book_page(inputs, "book-page.pdf", (180, 300), "Helvetica", 8.5, 79, lead=1.1, margin=0.14)
        + strip(inputs, "strip.pdf", (234, 2600), 2, plots=1)
        + well_log(inputs, "well-log.pdf", 306, 8, 7.0, 5)
        + columns_page(inputs, "chart.pdf", A5, 1, "Helvetica", 9, 1, "Quarterly Landings",
                       chart=lambda rng, w: bar_chart(rng, w * 0.8, 150))
    ):
        made[page.path.name] = page
    for name in SAMPLES:
        shutil.copy(REPO / "samples" / name, inputs / name)
    out = folder / "out"
    result = run_cli(
        "run", str(inputs), "--output", str(out), "--endpoint", cpu_engine.base_url, "--export-markdown",
        *(("--chunks",) if _has_docling() else ()), "--workers", "0", "--progress", "log", timeout=1800,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    rows = {(r["doc_id"], r["page"]): r for r in read_stage(out, "describe")}
    failed = [(key, r["error"]) for key, r in rows.items() if r["status"] != "ok"]
    assert not failed, failed
    return {"inputs": inputs, "out": out, "rows": rows, "made": made}


def _truth_boxes(page: CorpusPage) -> list[tuple[float, ...]]:
    return [tuple(v * SCALE for v in box) for box in page.figures]


def test_a_plain_text_book_page_is_text_not_a_figure(run: dict[str, Any]) -> None:
    row = run["rows"][("book-page.pdf", 1)]
    assert row["figures"] == [] and "![" not in row["markdown"]
    assert [b["label"] for b in row["blocks"]] and "image" not in [b["label"] for b in row["blocks"]]
    assert word_recall(text_layer(str(run["inputs"] / "book-page.pdf"), 1), row["markdown"]) >= 0.95


def test_a_long_strip_keeps_its_text_and_its_plot_is_one_figure(run: dict[str, Any]) -> None:
    row = run["rows"][("strip.pdf", 1)]
    assert row["segments"] >= 5  # read in segments, as a 1:11 page is
    (truth,) = _truth_boxes(run["made"]["strip.pdf"])
    (figure,) = row["figures"]
    assert iou(truth, tuple(figure["bbox"])) >= 0.5, (truth, figure["bbox"])
    # Every depth and note is body text; the track's scale (0, 150) is the figure's.
    assert word_recall(text_layer(str(run["inputs"] / "strip.pdf"), 1), row["markdown"]) >= 0.97


def test_a_well_log_whose_segments_are_all_drawing_keeps_its_words(run: dict[str, Any]) -> None:
    row = run["rows"][("well-log.pdf", 1)]
    assert row["segments"] >= 4
    # The curve tracks fill each segment past the header: they are figures, and the depths and
    # formation tops written among them are still the page's text.
    assert row["figures"]
    assert word_recall(text_layer(str(run["inputs"] / "well-log.pdf"), 1), row["markdown"]) >= 0.9


def test_a_chart_is_a_figure_with_its_crop_and_nothing_stands_in_for_a_missing_caption(run: dict[str, Any]) -> None:
    from PIL import Image

    row = run["rows"][("chart.pdf", 1)]
    (truth,) = _truth_boxes(run["made"]["chart.pdf"])
    (figure,) = row["figures"]
    assert iou(truth, tuple(figure["bbox"])) >= 0.5, (truth, figure["bbox"])
    with Image.open(io.BytesIO(figure["image"]["bytes"])) as crop:
        x1, y1, x2, y2 = figure["bbox"]
        assert crop.size == (x2 - x1, y2 - y1)
    # No caption stands beside this chart: the description says what is known (the text read
    # inside it), and nothing takes the caption's place.
    description = figure["description"]
    assert description.startswith("Text in the figure: ") and "Caption" not in description
    markdown = (run["out"] / "markdown" / "chart.pdf.md").read_text()
    (alt,) = re.findall(r"!\[([^\]]*)\]\(figures/chart\.pdf/p1-f1\.png\)", markdown)
    for placeholder in ("none found", "unknown", "Caption:"):
        assert placeholder not in markdown and placeholder not in alt


class _Tables(HTMLParser):
    """The cells of every ``<table>`` in some Markdown: tables -> rows -> cell texts."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: list[list[list[str]]] = []
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: Any) -> None:
        if tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self.tables[-1].append([])
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None:
            self.tables[-1][-1].append(html.unescape("".join(self._cell)).strip())
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def tables_of(markdown: str) -> list[list[list[str]]]:
    parser = _Tables()
    parser.feed(markdown)
    return parser.tables


def _number(cell: str) -> float:
    return float(cell.replace(",", ""))


def test_every_sample_table_is_one_html_table_with_every_column_and_the_known_values(run: dict[str, Any]) -> None:
    truth = json.loads((REPO / "examples" / "fields-truth.json").read_text())
    for name in SAMPLES[:-1]:
        fields = truth[name]["fields"]
        pages = sorted(p for d, p in run["rows"] if d == name)
        body: list[list[str]] = []
        for page in pages:
            tables = tables_of(run["rows"][(name, page)]["markdown"])
            assert len(tables) == 1, (name, page, run["rows"][(name, page)]["markdown"])
            (table,) = tables
            header, *rows = table
            body += rows
            if truth[name]["class"] == "invoice":
                assert header == ["Description", "Quantity", "Unit price", "Amount"], (name, page, header)
            else:
                assert header == ["Description", "Amount"], (name, header)
        if truth[name]["class"] == "invoice":
            expected = [[i["description"], i["quantity"], i["unit_price"], i["amount"]] for i in fields["line_items"]]
            got = [[r[0], int(r[1]), _number(r[2]), _number(r[3])] for r in body]
        else:
            # A till receipt prints its total as the table's last row.
            expected = [[i["description"], i["amount"]] for i in fields["items"]] + [["Total:", fields["total"]]]
            got = [[r[0], _number(r[1])] for r in body]
        assert got == expected, name


def test_the_sample_report_keeps_its_table_and_its_captioned_chart(run: dict[str, Any]) -> None:
    # The values scripts/make_samples.py draws.
    (table,) = tables_of(run["rows"][("report.pdf", 2)]["markdown"])
    assert table == [["Machine", "GPU", "Pages per second"], ["alpha", "A100", "2.3"], ["beta", "L40S", "1.9"],
                     ["gamma", "L4", "0.8"]]
    (figure,) = run["rows"][("report.pdf", 1)]["figures"]
    assert figure["description"].startswith("Caption: Figure 1: Pages processed per minute on five machines.")
    markdown = (run["out"] / "markdown" / "report.pdf.md").read_text()
    alt = "Caption: Figure 1: Pages processed per minute on five machines."
    assert f"![{alt}](figures/report.pdf/p1-f1.png)" in markdown


def test_the_samples_docling_export_holds_each_table_with_its_cells_and_keeps_two_tables_apart(
        run: dict[str, Any]) -> None:
    """``--chunks``: the report's table is one TableItem with the cells make_samples.py draws, its
    chart a picture with its caption; invoice-2024-0042's table continues on page 2 under a
    heading, so by the rule (only page furniture may come between) it stays two tables."""
    if not _has_docling():
        pytest.skip("docling-core is not installed (the docling extra)")
    from docling_core.types.doc import DoclingDocument

    report = DoclingDocument.load_from_json(run["out"] / "docling" / "report.pdf.json")
    (table,) = report.tables
    assert [[cell.text for cell in row] for row in table.data.grid] == [
        ["Machine", "GPU", "Pages per second"], ["alpha", "A100", "2.3"], ["beta", "L40S", "1.9"],
        ["gamma", "L4", "0.8"]]
    assert [p.page_no for p in table.prov] == [2]
    (picture,) = report.pictures
    assert picture.prov[0].page_no == 1
    assert picture.caption_text(report) == "Figure 1: Pages processed per minute on five machines."
    invoice = DoclingDocument.load_from_json(run["out"] / "docling" / "invoice-2024-0042.pdf.json")
    assert [[p.page_no for p in t.prov] for t in invoice.tables] == [[1], [2]]
    assert all(t.data.grid[0][0].text == "Description" for t in invoice.tables)  # each its own header
    chunks = pq.read_table(run["out"] / "chunks").to_pylist()
    (table_chunk,) = [c for c in chunks if c["doc_id"] == "report.pdf" and "A100" in c["text"]]
    assert table_chunk["pages"] == [2] and table_chunk["pdf_boxes"]
