"""What the gateway's page count of a submission shares with the worker's renders.

In the one-process service (``llm-ocr service`` with no flags) the gateway counts each upload's
pages while the worker renders other documents' pages in the same process. PDFium is not
thread-safe, so both take its lock; a render holds it for a call's pages. An image is counted by
Pillow, not PDFium: it must not wait for that lock (a profile of a burst of 64 one-page PNG
uploads, at load 12, put about 29 ms an upload in that wait). And the gateway closes the PDF it
counted, not every PDF the process keeps open: the worker's open documents are in the same
cache, and closing them all made each upload cost the worker a reopen of every PDF it was reading.
"""

from __future__ import annotations

import threading
from pathlib import Path

from PIL import Image

from llm_ocr.options import RenderOptions
from llm_ocr.service.spool import count_document
from llm_ocr.sources import render
from llm_ocr.sources.base import DocumentRef
from llm_ocr.sources.render import PDFIUM_LOCK, count_pages
from tests.docs import make_pdf


def test_an_image_is_counted_while_a_render_holds_pdfiums_lock(tmp_path: Path) -> None:
    png = tmp_path / "page.png"
    Image.new("RGB", (300, 400), "white").save(png)
    counted: list[int] = []
    with PDFIUM_LOCK:  # a render of the worker's, in progress
        counting = threading.Thread(target=lambda: counted.append(count_document(str(png), "page.png", 10)))
        counting.start()
        counting.join(60)  # with the lock taken for images too, the count waits here until the render ends
        assert counted == [1]


def test_counting_a_pdf_closes_that_pdf_only(tmp_path: Path) -> None:
    reading, submitted = tmp_path / "reading.pdf", tmp_path / "submitted.pdf"
    make_pdf(reading, 2, seed=1)
    make_pdf(submitted, 3, seed=2)
    ref = DocumentRef(doc_id="reading.pdf", index=0, source=str(reading), kind="pdf", location=str(reading))
    with PDFIUM_LOCK:
        # Only the worker's document open: an earlier test of this process may have left two PDFs
        # in the cache (two at most), and the count's own open then pushed the oldest out.
        render.close_documents()
        count_pages(ref, RenderOptions())  # the worker has this one open
        open_before = dict(render._PDF_CACHE)
    try:
        assert count_document(str(submitted), "submitted.pdf", 10) == 3
        with PDFIUM_LOCK:
            # The worker's document is still open, the same handle; the counted one is not kept.
            assert render._PDF_CACHE == open_before
            assert any(key[0] == str(reading) for key in render._PDF_CACHE)
    finally:
        with PDFIUM_LOCK:
            render.close_documents()
