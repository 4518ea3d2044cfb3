"""``llm-ocr export --format docling --chunks``: DoclingDocuments that docling-core loads back,
items with their page and box, tables with cells, pictures with crops and captions, and chunks
that carry their pages, headings and figure ids."""

from __future__ import annotations

import base64
import io
import json
import shutil
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from PIL import Image

from llm_ocr.records import Block, Figure, PageResult
from llm_ocr.stages.space import displayed_points
from llm_ocr.testing import SimulatedServer
from tests.conftest import read_stage
from tests.docs import chart_png, paragraph
from tests.stages.common import run_in_process, stage


@pytest.fixture(autouse=True, scope="module")
def docling() -> Any:
    """docling-core's document types, imported (or every test of the module skipped) when the
    module's first test runs, not at collection, which every test worker pays."""
    return pytest.importorskip("docling_core.types.doc")


def _png() -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (60, 35), "blue").save(buffer, "PNG")
    return buffer.getvalue()


def _make_pdf(path: Path) -> list[list[str]]:
    """Two pages, each a large heading over paragraphs (the simulator labels tall lines titles);
    a chart on page 1. Returns each page's lines, heading first."""
    import random

    from reportlab.lib.pagesizes import letter
    from reportlab.lib.utils import ImageReader
    from reportlab.pdfgen import canvas

    rng = random.Random(5)
    pdf = canvas.Canvas(str(path), pagesize=letter)
    texts = []
    for number in (1, 2):
        lines = [f"Chapter {number}"] + [paragraph(rng) for _ in range(3)]
        pdf.setFont("Helvetica-Bold", 28)
        pdf.drawString(72, 710, lines[0])
        pdf.setFont("Helvetica", 11)
        for i, line in enumerate(lines[1:]):
            pdf.drawString(72, 660 - i * 40, line)  # far apart: one paragraph each
        if number == 1:
            pdf.drawImage(ImageReader(io.BytesIO(chart_png(1))), 72, 300, width=300, height=180)
        pdf.showPage()
        texts.append(lines)
    pdf.save()
    return texts


def test_export_of_a_simulated_run_loads_back_with_pages_boxes_headings_and_pictures(tmp_path: Path, docling: Any) -> None:
    (tmp_path / "docs").mkdir()
    texts = {"doc000.pdf": _make_pdf(tmp_path / "docs" / "doc000.pdf")}
    with SimulatedServer("--instant", corpus=tmp_path / "docs") as server:
        assert stage("extract", tmp_path / "out", server, str(tmp_path / "docs")).returncode == 0
    result = run_in_process("export", str(tmp_path / "out"), "--format", "docling", "--chunks")
    assert result.returncode == 0, result.stderr
    rows = {r["page"]: r for r in read_stage(tmp_path / "out", "extract")}
    doc = docling.DoclingDocument.load_from_json(tmp_path / "out" / "docling" / "doc000.pdf.json")
    # A PDF's pages sized in points as displayed: the rendered pixels at the row's DPI.
    assert {n: (p.size.width, p.size.height) for n, p in doc.pages.items()} == {
        n: pytest.approx((r["width"] * 72 / r["dpi"], r["height"] * 72 / r["dpi"])) for n, r in rows.items()}
    headings = [t for t in doc.texts if t.label in ("title", "section_header")]
    assert [(h.text, h.prov[0].page_no) for h in headings] == [(texts["doc000.pdf"][0][0], 1),
                                                                (texts["doc000.pdf"][1][0], 2)]
    for number, lines in enumerate(texts["doc000.pdf"], start=1):
        page_text = " ".join(t.text for t in doc.texts if t.prov and t.prov[0].page_no == number)
        assert all(line in page_text for line in lines[1:])  # every paragraph, on its own page
    for item in doc.texts:  # each box is its block's, in points of the page, origin bottom left
        box = item.prov[0].bbox
        assert box.coord_origin == "BOTTOMLEFT"
        row = PageResult.from_row(rows[item.prov[0].page_no])
        block = next(b for b in row.blocks if displayed_points(row, b.boxes[0]) == (box.l, box.t, box.r, box.b))
        assert item.text in block.text
    # The figure of page 1 (make_pdf draws one on odd pages), with its crop and box.
    (picture,) = doc.pictures
    (figure,) = rows[1]["figures"]
    box = picture.prov[0].bbox
    assert picture.prov[0].page_no == 1
    assert (box.l, box.t, box.r, box.b) == displayed_points(PageResult.from_row(rows[1]), figure["bbox"])
    assert picture.image is not None and picture.image.size.width == figure["bbox"][2] - figure["bbox"][0]
    chunks = pq.read_table(tmp_path / "out" / "chunks").to_pylist()
    for chunk in chunks:
        (page,) = chunk["pages"]
        assert chunk["headings"] == [texts["doc000.pdf"][page - 1][0]]
        assert all(b["page"] == page for b in chunk["boxes"]) and chunk["boxes"]
        # Each box in the rows' two spaces: a block's pixel box, and its PDF-point box beside it.
        pixel_boxes = {tuple(b["boxes"][0]): b["pdf_boxes"][0] for b in rows[page]["blocks"]}
        pixel_boxes.update({tuple(f["bbox"]): f["pdf_bbox"] for f in rows[page]["figures"]})
        assert [[p["left"], p["bottom"], p["right"], p["top"]] for p in chunk["pdf_boxes"]] == [
            pixel_boxes[(b["x1"], b["y1"], b["x2"], b["y2"])] for b in chunk["boxes"]]
    assert {c["pages"][0] for c in chunks} == {1, 2}
    assert json.loads(result.stdout)["chunks"] == len(chunks)


def test_tables_captions_lists_and_furniture_map_to_docling_items(docling: Any) -> None:
    from llm_ocr.stages.docling_export import build_document, chunk_rows

    crop = _png()
    page = PageResult(
        doc_id="report.pdf", doc_index=0, page=3, source="report.pdf", width=1000, height=1400, status="ok",
        blocks=[
            Block("Page-header", [[100, 10, 900, 30]], "ACME annual report"),
            Block("sub_title", [[100, 50, 600, 90]], "## Results"),
            Block("text", [[100, 100, 900, 200]], "Revenue grew."),
            Block("table", [[100, 220, 900, 400]],
                  "<table><tr><td>Year</td><td>Revenue</td></tr><tr><td>2024</td><td>1.5</td></tr>"
                  "<tr><td colspan=\"2\">Total 1.5</td></tr></table>"),
            Block("image", [[200, 450, 800, 800]], ""),
            Block("image_caption", [[200, 810, 800, 830]], "<center>Figure 1: growth</center>"),
            Block("text", [[100, 835, 900, 848]], "### Details"),
            Block("List-item", [[100, 850, 900, 900]], "- first point\n- second point"),
            Block("equation", [[300, 920, 700, 960]], "\\[ E = mc^2 \\]"),
            Block("page_number", [[480, 1350, 520, 1380]], "3"),
        ],
        figures=[Figure("p3-f1", [200, 450, 800, 800], image=crop)],
    )
    export = build_document("report.pdf", [page])
    doc = docling.DoclingDocument.model_validate_json(export.document.model_dump_json())
    labels = [(t.label, t.text, t.content_layer) for t in doc.texts]
    assert labels == [
        ("page_header", "ACME annual report", "furniture"),
        ("section_header", "Results", "body"),
        ("text", "Revenue grew.", "body"),
        ("caption", "Figure 1: growth", "body"),
        ("section_header", "Details", "body"),
        ("list_item", "first point", "body"),
        ("list_item", "second point", "body"),
        ("formula", "E = mc^2", "body"),
        ("page_footer", "3", "furniture"),
    ]
    (table,) = doc.tables
    assert (table.data.num_rows, table.data.num_cols) == (3, 2)
    grid = [[cell.text for cell in row] for row in table.data.grid]
    assert grid == [["Year", "Revenue"], ["2024", "1.5"], ["Total 1.5", "Total 1.5"]]
    assert all(c.column_header for c in table.data.table_cells if c.start_row_offset_idx == 0)
    assert table.prov[0].page_no == 3 and table.prov[0].bbox.t == 220
    (picture,) = doc.pictures
    assert [c.resolve(doc).text for c in picture.captions] == ["Figure 1: growth"]
    assert picture.image is not None
    assert base64.b64decode(str(picture.image.uri).split(",", 1)[1]) == crop
    chunks = chunk_rows("report.pdf", export)
    (figure_chunk,) = [c for c in chunks if c["figure_ids"]]
    assert figure_chunk["figure_ids"] == ["p3-f1"] and "Figure 1: growth" in figure_chunk["text"]
    assert {"page": 3, "x1": 200.0, "y1": 450.0, "x2": 800.0, "y2": 800.0} in figure_chunk["boxes"]
    assert [h.level for h in doc.texts if h.label == "section_header"] == [1, 2]
    assert [c["headings"] for c in chunks] == [["Results"]] * 3 + [["Results", "Details"]] * 2
    assert not any("ACME" in c["text"] for c in chunks)  # furniture is not body text


def test_a_document_docling_refuses_is_named_and_the_others_are_written(tmp_path: Path) -> None:
    import asyncio

    from llm_ocr.records import page_schema
    from llm_ocr.runners.export import export_docling
    from llm_ocr.storage import Storage
    from llm_ocr.storage.parts import PartWriter

    # A model's garbage table spanning more cells than docling-core accepts (1001 x 1000).
    huge = '<table><tr><td rowspan="1000" colspan="1000">x</td><td>y</td></tr></table>'
    rows = [PageResult(doc_id=name, doc_index=i, page=1, source=name, width=100, height=100, status="ok",
                       blocks=[Block(label, [[1, 1, 90, 90]], text)])
            for i, (name, label, text) in enumerate([("bad.pdf", "table", huge), ("good.pdf", "text", "Fine.")])]

    async def write() -> None:
        writer = PartWriter(Storage(str(tmp_path / "out" / "extract")), page_schema(), 0, 1)
        for row in rows:
            await writer.add(row.to_row())
        await writer.close()

    asyncio.run(write())
    result = export_docling(Storage(str(tmp_path / "out")), chunks=True)
    assert list(result.errors) == ["bad.pdf"] and "exceeds the limit" in result.errors["bad.pdf"]
    assert result.documents == 1 and (tmp_path / "out" / "docling" / "good.pdf.json").exists()
    assert not (tmp_path / "out" / "docling" / "bad.pdf.json").exists()
    chunks = pq.read_table(tmp_path / "out" / "chunks").to_pylist()
    assert [(c["doc_id"], c["text"]) for c in chunks] == [("good.pdf", "Fine.")]


@pytest.fixture(scope="module")
def samples_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """``samples/`` read through the simulated server by ``llm-ocr run``, then the same run again
    with ``--chunks`` (Extract and Describe are done: only the export is new)."""
    from tests.conftest import REPO

    folder = tmp_path_factory.mktemp("samples-run")
    shutil.copytree(REPO / "samples", folder / "in")
    out = folder / "out"
    with SimulatedServer("--instant", corpus=folder / "in") as server:
        first = stage("run", out, server, str(folder / "in"))
        assert first.returncode == 0, first.stderr
        exported_before = (out / "docling").exists() or (out / "chunks").exists()
        again = stage("run", out, server, str(folder / "in"), "--chunks")
    assert again.returncode == 0, again.stderr
    return {"inputs": folder / "in", "out": out, "exported_before": exported_before}


def _text_box(pdf_path: Path, page: int, text: str) -> tuple[float, float, float, float]:
    """Where PDFium finds ``text`` on ``page``: ``(left, bottom, right, top)`` in user space."""
    import pypdfium2 as pdfium

    pdf = pdfium.PdfDocument(str(pdf_path))
    try:
        textpage = pdf[page - 1].get_textpage()
        found = textpage.search(text, match_case=True).get_next()
        assert found is not None, text
        start, count = found
        boxes = [textpage.get_charbox(i) for i in range(start, start + count)
                 if not textpage.get_text_range(i, 1).isspace()]
        return (min(b[0] for b in boxes), min(b[1] for b in boxes), max(b[2] for b in boxes),
                max(b[3] for b in boxes))
    finally:
        pdf.close()


def test_run_with_chunks_exports_the_samples_with_furniture_and_pdf_boxes(samples_run: dict[str, Any], docling: Any) -> None:
    """``llm-ocr run --chunks`` on the held-out-style samples: a DoclingDocument per document that
    docling-core loads back, the chunks in the shard's file, the invoice's page numbers in the
    furniture layer, and chunk boxes in PDF points where PDFium finds the text."""
    out, inputs = samples_run["out"], samples_run["inputs"]
    names = sorted(p.name for p in inputs.iterdir())
    assert not samples_run["exported_before"]  # the first run was without --chunks
    assert sorted(p.name for p in (out / "docling").iterdir()) == [n + ".json" for n in names]
    docs = {n: docling.DoclingDocument.load_from_json(out / "docling" / (n + ".json")) for n in names}
    assert [p.name for p in (out / "chunks").iterdir()] == ["chunks-00000-of-00001.parquet"]
    chunks = pq.read_table(out / "chunks").to_pylist()
    assert sorted({c["doc_id"] for c in chunks}) == names
    # invoice-2024-0042.pdf's two pages end with "Page 1 of 2", "Page 2 of 2": furniture, in no chunk.
    invoice = "invoice-2024-0042.pdf"
    furniture = [(t.text, t.prov[0].page_no) for t in docs[invoice].texts if t.content_layer == "furniture"]
    assert furniture == [("Page 1 of 2", 1), ("Page 2 of 2", 2)]
    assert not any("of 2" in c["text"] for c in chunks if c["doc_id"] == invoice)
    # Lines of the invoice, each a chunk: its box in PDF points is where PDFium finds its text.
    for page, line in [(1, "Invoice number: INV-2024-0042"), (1, "Cable tray 6 24.99 149.94"),
                       (2, "Total: 16,511.20")]:
        (chunk,) = [c for c in chunks if c["doc_id"] == invoice and c["text"] == line]
        assert chunk["pages"] == [page]
        (box,) = chunk["pdf_boxes"]
        got = (box["left"], box["bottom"], box["right"], box["top"])
        want = _text_box(inputs / invoice, page, line)
        assert all(abs(a - b) <= 3.0 for a, b in zip(got, want)), (line, got, want)
    # An image has no PDF points: its chunks carry pixel boxes only.
    assert all(c["boxes"] and not c["pdf_boxes"] for c in chunks if c["doc_id"] == "notes.png")


def test_export_in_shards_writes_each_shard_s_own_files_and_together_the_whole(samples_run: dict[str, Any],
                                                                                 tmp_path: Path) -> None:
    """``llm-ocr export --num-shards 2 --shard-index I``: each shard writes the DoclingDocuments of
    its documents and a chunk file of its own; the two hold every document once, the chunks the
    one-shard run wrote, and the one-shard file is removed (read together it would count twice)."""
    out = tmp_path / "out"
    shutil.copytree(samples_run["out"], out)
    whole = pq.read_table(out / "chunks").to_pylist()
    shutil.rmtree(out / "docling")
    written: list[set[str]] = []
    for index in (0, 1):
        before = {p.name for p in (out / "docling").iterdir()} if (out / "docling").exists() else set()
        result = run_in_process("export", str(out), "--chunks", "--num-shards", "2", "--shard-index", str(index))
        assert result.returncode == 0, result.stderr
        written.append({p.name for p in (out / "docling").iterdir()} - before)
        assert json.loads(result.stdout)["documents"] == len(written[-1]) > 0
    assert sorted(p.name for p in (out / "chunks").iterdir()) == ["chunks-00000-of-00002.parquet",
                                                                   "chunks-00001-of-00002.parquet"]
    assert written[0].isdisjoint(written[1])
    assert written[0] | written[1] == {n + ".json" for n in {c["doc_id"] for c in whole}}
    parts = [pq.read_table(out / "chunks" / f"chunks-0000{i}-of-00002.parquet").to_pylist() for i in (0, 1)]
    for part, files in zip(parts, written):
        assert {c["doc_id"] + ".json" for c in part} == files
    assert sorted(c["chunk_id"] for c in parts[0] + parts[1]) == sorted(c["chunk_id"] for c in whole)
    bad = run_in_process("export", str(out), "--num-shards", "2", "--shard-index", "2")
    assert bad.returncode == 2 and "out of range" in bad.stderr
