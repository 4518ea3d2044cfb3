"""Counting pages without rendering (``llm-ocr plan``): PDF page trees, image frames, Parquet footers."""

from __future__ import annotations

from pathlib import Path

import pypdfium2 as pdfium
import pytest
from PIL import Image

from llm_ocr.bench.corpus import LETTER_PT, _helvetica_pdf
from llm_ocr.bench.file_server import CountingFileServer
from llm_ocr.bench.finevision import write_finevision
from llm_ocr.sources.counting import count_input_pages, pdf_pages
from tests.docs import make_pdf


def many_page_pdf(path: Path, pages: int) -> Path:
    """A born-digital PDF of ``pages`` Letter pages of one line each."""
    streams = [f"BT /F1 10 Tf 72 700 Td (Page {n} of a long report) Tj ET".encode() for n in range(1, pages + 1)]
    path.write_bytes(_helvetica_pdf(streams, LETTER_PT))
    return path


@pytest.fixture(scope="module")
def long_pdf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return many_page_pdf(tmp_path_factory.mktemp("long") / "report-2000p.pdf", 2000)


def test_a_2000_page_pdf_is_counted_from_its_page_tree_without_loading_a_page(
    long_pdf: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("a page was loaded or rendered to count pages")

    monkeypatch.setattr(pdfium.PdfDocument, "get_page", refuse)
    monkeypatch.setattr(pdfium.PdfDocument, "__getitem__", refuse)
    monkeypatch.setattr(pdfium.PdfPage, "render", refuse)
    count = count_input_pages([str(long_pdf)])
    assert (count.pages, count.documents, count.by_kind, count.uncounted) == (2000, 1, {"pdf": 2000}, [])


def test_a_remote_pdf_is_counted_from_a_small_part_of_it(long_pdf: Path) -> None:
    with CountingFileServer(long_pdf.parent) as server:
        assert pdf_pages(server.url + long_pdf.name) == 2000
        sent = server.counts().bytes
    # The trailer, the cross-reference table (20 bytes an object, 4,000 objects) and the page
    # tree's root: a fraction of the file, whose every page object is never fetched.
    assert sent < long_pdf.stat().st_size / 2, (sent, long_pdf.stat().st_size)


def test_pdfs_images_and_frames_are_counted_and_a_broken_file_is_named(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    make_pdf(docs / "a.pdf", pages=3)
    many_page_pdf(docs / "b.pdf", 12)
    Image.new("RGB", (60, 80), "white").save(docs / "scan.png")
    frames = [Image.new("L", (60, 80), shade) for shade in (0, 80, 160, 240)]
    frames[0].save(docs / "fax.tiff", save_all=True, append_images=frames[1:])
    (docs / "broken.pdf").write_bytes(b"%PDF-1.7\n" + b"\x00" * 200)
    count = count_input_pages([str(docs)])
    assert (count.pages, count.documents, count.by_kind) == (20, 5, {"pdf": 15, "image": 5})
    (problem,) = count.uncounted
    assert "broken.pdf" in problem and "PDF" in problem
    assert not count.estimated and "20 pages in 5 documents" in count.describe()


def test_many_documents_are_sampled_and_the_total_says_it_is_extrapolated(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    for i in range(30):
        many_page_pdf(docs / f"doc{i:02d}.pdf", 4)
    count = count_input_pages([str(docs)], sample=10)
    assert (count.pages, count.documents, count.counted, count.estimated) == (120, 30, 10, True)
    assert "extrapolated from 10 documents counted" in count.describe()


def test_a_parquet_dataset_is_counted_from_its_footers_one_page_per_image(tmp_path: Path) -> None:
    # Rows of 1 to 3 page images (a list column): the pages are the images, not the rows.
    fv = write_finevision(tmp_path / "fv", files=3, rows=(4, 9), row_group_rows=2, image_side=(40, 60), seed=3)
    images = sum(len(row) for row in fv.images)
    assert images > len(fv.images)
    count = count_input_pages([str(fv.folder)])
    assert (count.pages, count.documents, count.by_kind) == (images, len(fv.images), {"dataset": images})


def test_a_manifest_is_counted_from_its_pages_column_each_sha256_once(tmp_path: Path) -> None:
    same, other = "a" * 64, "b" * 64
    (tmp_path / "m.jsonl").write_text(
        f'{{"url": "x.pdf", "pages": 10, "sha256": "{same}"}}\n'
        f'{{"url": "copy-of-x.pdf", "pages": 10, "sha256": "{same.upper()}"}}\n'  # the same bytes
        f'{{"url": "y.pdf", "pages": 3, "sha256": "{other}"}}\n'
        '{"url": "z.pdf"}\n')  # no pages: named
    count = count_input_pages([str(tmp_path / "m.jsonl")])
    assert (count.documents, count.pages, count.duplicate_documents, count.duplicate_pages) == (4, 13, 1, 10)
    assert "1 duplicate documents (10 pages) not read" in count.describe()
    assert "1 of its documents have no pages column" in count.uncounted[0]
