"""The order pages are rendered in: the one expected to be longest first, estimated from the PDF.

The plan alone (which chunk of which document goes next), then a page flow in this process over
real PDFs whose longest page comes last, with the estimates on and off, and with a plan bound
smaller than the shard. The order is the one the intake starts rendering chunks in, not the one
pages reach the handler: with more slots than pages each page goes as it is rendered, but pages
rendered by the time the dispatcher next runs (a busy machine) wait together, and the look-ahead
then sends the longest first (r22 saw b.pdf's page 2 go before c.png so).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from PIL import Image
from reportlab.lib.pagesizes import letter
from reportlab.pdfgen import canvas

from llm_ocr.options import RenderOptions
from llm_ocr.records import PageResult, page_schema
from llm_ocr.runners.page_flow import DocumentPages, FlowSettings, PageFlow, page_look_ahead
from llm_ocr.runners.progress import RunCounters
from llm_ocr.runners.render_order import OpenDocument, RenderPlan
from llm_ocr.runners.workers import WorkerPool
from llm_ocr.sources.base import DocumentRef, PageFailure, PageImage
from llm_ocr.sources.listing import list_documents
from llm_ocr.sources.page_cost import SCAN, TEXT, PageEstimate
from llm_ocr.storage import Storage
from llm_ocr.storage.parts import PartWriter, ShardIndex
from tests.docs import paragraph


def plan_order(plan: RenderPlan[str]) -> list[tuple[str, list[int]]]:
    order = []
    while (chunk := plan.pop()) is not None:
        order.append((chunk.doc, chunk.pages))
    assert plan.pages == 0 and len(plan) == 0
    return order


def test_the_chunk_with_the_longest_page_goes_first_and_a_documents_pages_go_longest_first() -> None:
    plan: RenderPlan[str] = RenderPlan(chunk_pages=4)
    # A report whose pages grow towards its end, then a short letter with one long page: the
    # letter's short pages are not rendered with its long one, ahead of the report's.
    assert plan.add("report", 0, list(range(1, 11)), [100 * p for p in range(1, 11)]) == 3
    assert plan.add("letter", 1, [1, 2, 3], [50, 5000, 50]) == 2
    assert plan.pages == 13
    assert plan_order(plan) == [("letter", [2]), ("report", [10, 9, 8, 7]), ("report", [6, 5, 4, 3]),
                                ("report", [2, 1]), ("letter", [1, 3])]


def test_pages_without_an_estimate_rank_with_the_average_and_ties_keep_input_order() -> None:
    plan: RenderPlan[str] = RenderPlan(chunk_pages=2)
    plan.add("a", 0, [1, 2, 3], [None, None, None])  # nothing known yet: 0, input order
    plan.add("b", 1, [1, 2], [1000, 3000])  # a chunk each: 1000 is under half of 3000
    plan.add("c", 2, [1, 2], [None, None])  # the average of the known pages then: 2000
    plan.add("d", 3, [1, 2, 3], [None, None, None])  # 2000 too: after c, which came first
    assert plan_order(plan) == [("b", [2]), ("c", [1, 2]), ("d", [1, 2]), ("d", [3]), ("b", [1]), ("a", [1, 2]),
                                ("a", [3])]


def test_scans_and_born_digital_pages_are_ranked_on_one_scale_whichever_came_first() -> None:
    """A scan's estimate (its image's size) runs at about a third of a born-digital page's for the
    same answer when its type is small: ranked as read, the longest scan waits behind born-digital
    pages of a third its text. On the plan's one scale it goes with the longest born-digital
    page, the scans keep their own order, and chunks planned before the other kind was known are
    ranked again (the scans' documents came first here)."""
    scans = [PageEstimate(chars, SCAN) for chars in (300, 900, 1500, 2100, 5200)]
    born = [PageEstimate(chars, TEXT) for chars in (1000, 2500, 4000, 6000, 8000, 10000, 12000, 16000)]
    plan: RenderPlan[str] = RenderPlan(chunk_pages=1)
    plan.add("scans", 0, [1, 2, 3, 4, 5], scans)
    plan.add("born", 1, list(range(1, 9)), born)
    order = plan_order(plan)
    assert order[:2] == [("born", [8]), ("scans", [5])]  # 5,200 read alone ranked seventh of 13
    assert [pages for doc, pages in order if doc == "scans"] == [[5], [4], [3], [2], [1]]
    assert [pages for doc, pages in order if doc == "born"] == [[p] for p in range(8, 0, -1)]


def test_one_kind_alone_ranks_by_its_own_estimates() -> None:
    plan: RenderPlan[str] = RenderPlan(chunk_pages=2)
    plan.add("a", 0, [1, 2, 3], [PageEstimate(10, SCAN), PageEstimate(5000, SCAN), PageEstimate(40, SCAN)])
    plan.add("b", 1, [1, 2], [PageEstimate(3000, SCAN), PageEstimate(20, SCAN)])
    assert plan.value(PageEstimate(3000, SCAN)) == 3000
    assert plan_order(plan) == [("a", [2]), ("b", [1]), ("a", [3]), ("b", [2]), ("a", [1])]


def text_pdf(path: Path, lines_per_page: list[int], seed: int) -> None:
    """A born-digital PDF whose pages hold ``lines_per_page`` lines of text (about 90 characters each)."""
    rng = random.Random(seed)
    pdf = canvas.Canvas(str(path), pagesize=letter)
    for lines in lines_per_page:
        pdf.setFont("Helvetica", 8)
        for i in range(lines):
            pdf.drawString(40, 760 - i * 9, paragraph(rng, words=14))
        pdf.showPage()
    pdf.save()


def sent_order(folder: Path, ahead: int, look_ahead: int = 1024) -> list[tuple[str, int]]:
    """The pages of the PDFs in ``folder`` in the order a flow starts rendering them, with
    ``ahead`` pages estimated before rendering; every page is checked to reach the handler once."""
    handled: list[tuple[str, int]] = []
    rendered: list[tuple[str, int]] = []

    async def handler(ref: DocumentRef, item: PageImage | PageFailure, num_pages: int | None) -> PageResult:
        handled.append((ref.doc_id, item.page))
        return PageResult(ref.doc_id, ref.index, item.page, ref.source, num_pages, status="ok")

    async def main() -> None:
        pool = WorkerPool(0)
        writer = PartWriter(Storage(str(folder.parent / f"out-{ahead}/extract")), page_schema(), 0, 1)
        flow = PageFlow(handler=handler, writer=writer, counters=RunCounters("extract", 0, 1),
                        settings=FlowSettings(max_in_flight=512, prefetch_chunks=1))
        intake = DocumentPages(list_documents([str(folder)]), ShardIndex(), pool,
                               RenderOptions(dpi=36, image_format="png"), estimate_text=True,
                               look_ahead=page_look_ahead(look_ahead, 256), estimate_ahead=ahead)
        chunk = intake.chunk

        def noting(opened: OpenDocument, pages: list[int], cleanup: Callable[[], None] | None) -> Any:
            rendered.extend((opened.ref.doc_id, page) for page in pages)
            return chunk(opened, pages, cleanup)

        intake.chunk = noting  # type: ignore[method-assign]
        try:
            await flow.run(intake)
            await writer.close()
        finally:
            pool.close()

    asyncio.run(main())
    assert sorted(handled) == sorted(rendered)
    return rendered


def lines_of(document: int, page: int) -> int:
    """Lines of text on ``page`` of document ``document`` of :func:`shard`."""
    return 80 if (document, page) == (11, 10) else 10 + 3 * ((document + page - 1) % 10)


@pytest.fixture(scope="module")
def shard(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Twelve documents of 10 pages, 10-37 lines a page, except the last page of the last
    document: 80 lines, the longest of the shard, rendered last in input order."""
    folder = tmp_path_factory.mktemp("render-order") / "docs"
    folder.mkdir()
    for number in range(12):
        text_pdf(folder / f"doc{number:02d}.pdf", [lines_of(number, page) for page in range(1, 11)], seed=number)
    return folder


EVERY_PAGE = [(f"doc{d:02d}.pdf", p) for d in range(12) for p in range(1, 11)]


def test_the_longest_page_of_the_shard_is_rendered_first_when_the_pdfs_are_read_ahead(shard: Path) -> None:
    order = sent_order(shard, ahead=16384)
    assert sorted(order) == EVERY_PAGE  # each page once
    # The shard is smaller than two rounds of slots: every page is estimated before one is rendered.
    assert order[0] == ("doc11.pdf", 10)
    # Alone in its chunk (its document's other pages have under half its lines); the next chunk is
    # led by a page of 37 lines, the most any other document has, and every document's pages go
    # longest first.
    assert lines_of(int(order[1][0][3:5]), order[1][1]) == 37, order[:2]
    assert order.index(("doc11.pdf", 10)) == 0 and sum(1 for doc, _ in order[:12] if doc == "doc11.pdf") == 1
    for document in range(12):
        mine = [lines_of(document, page) for doc, page in order if doc == f"doc{document:02d}.pdf"]
        assert mine[0] == max(mine) and mine[-1] == min(mine), (document, mine)


def test_without_estimates_the_longest_page_waits_for_its_place_in_the_input(shard: Path) -> None:
    order = sent_order(shard, ahead=0)
    assert order[0][0] == "doc00.pdf"
    assert order.index(("doc11.pdf", 10)) >= 110  # in the last document's chunk


def test_a_plan_bound_smaller_than_the_shard_reaches_the_last_document_only_as_pages_are_rendered(
        shard: Path) -> None:
    order = sent_order(shard, ahead=20)
    assert sorted(order) == EVERY_PAGE
    # The plan holds 20 pages, and up to 4 documents being read (one worker's share): the last
    # document is read once 120 - 20 - 40 - 10 = 50 pages at least have gone to be rendered.
    assert order.index(("doc11.pdf", 10)) >= 50
    # Still ranked within the plan: its longest page is the first of its own document to go.
    assert next(page for doc, page in order if doc == "doc11.pdf") == 10


def test_images_go_in_input_order_beside_pdfs_read_ahead(tmp_path: Path) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    text_pdf(folder / "b.pdf", [10, 40, 20], seed=1)
    for name in ("a.png", "c.png"):
        Image.new("RGB", (200, 260), "white").save(folder / name)
    order = sent_order(folder, ahead=16384)
    # An image has no estimate before it is rendered: it goes as it comes, before planned pages.
    assert order == [("a.png", 1), ("c.png", 1), ("b.pdf", 2), ("b.pdf", 3), ("b.pdf", 1)]


def test_backward_a_documents_pages_go_in_the_exact_reverse_of_its_holders_order() -> None:
    """A work group's second reader plans the same pages at the same costs backward: the two
    readers meet instead of racing for the costliest pages first (docs/stragglers.md)."""
    costs = [100, 900, 100, 500, 900, 100]
    holder: RenderPlan[str] = RenderPlan(chunk_pages=2)
    holder.add("doc", 0, list(range(1, 7)), costs)
    second: RenderPlan[str] = RenderPlan(chunk_pages=2)
    second.add("doc", 0, list(range(1, 7)), costs, backward=True)
    ahead = [p for _, pages in plan_order(holder) for p in pages]
    assert ahead == [2, 5, 4, 1, 3, 6]
    assert [p for _, pages in plan_order(second) for p in pages] == ahead[::-1]
