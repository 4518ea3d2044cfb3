"""The page flow's shutdown: a stopped flow must return, whatever its producer is doing."""

from __future__ import annotations

import asyncio
from pathlib import Path

from llm_ocr.options import RenderOptions
from llm_ocr.records import PageResult, page_schema
from llm_ocr.runners.page_flow import DocumentPages, FlowSettings, PageFlow
from llm_ocr.runners.progress import RunCounters
from llm_ocr.runners.workers import WorkerPool
from llm_ocr.sources.base import DocumentRef, PageFailure, PageImage
from llm_ocr.sources.listing import list_documents
from llm_ocr.storage import Storage
from llm_ocr.storage.parts import PartWriter, ShardIndex
from tests.docs import make_corpus


def test_a_flow_stopped_with_a_full_prefetch_queue_and_nothing_in_flight_returns(tmp_path: Path) -> None:
    # The shape of CI's hang with a wedged endpoint: when the dispatcher notices the stop, every
    # page already sent has finished, the prefetch queue is full and the producer is blocked
    # putting into it. The flow used to cancel the producer twice without yielding in between;
    # the two cancels collapsed into one, and the producer's end marker then waited forever for
    # room in a queue nobody read. Here the first chunk's 8 pages fill every slot (the dispatcher
    # waits for one), the next chunk waits in the queue and the producer is blocked putting the
    # third; then the handlers set the stop (as a fatal EndpointDown or SIGTERM would) and return,
    # so no task is left in flight when the dispatcher wakes.
    make_corpus(tmp_path / "docs", documents=2, pages=40)  # 5 render chunks of 8 pages each
    stop = asyncio.Event()
    handled: list[tuple[str, int]] = []

    async def handler(ref: DocumentRef, item: PageImage | PageFailure, num_pages: int | None) -> PageResult:
        handled.append((ref.doc_id, item.page))
        await asyncio.sleep(0.2)  # the first chunk in flight: the dispatcher waits for a slot
        stop.set()
        return PageResult(ref.doc_id, ref.index, item.page, ref.source, num_pages, status="ok")

    async def main() -> RunCounters:
        counters = RunCounters("extract", 0, 1)
        pool = WorkerPool(0)
        writer = PartWriter(Storage(str(tmp_path / "out/extract")), page_schema(), 0, 1)
        flow = PageFlow(handler=handler, writer=writer, counters=counters,
                        settings=FlowSettings(max_in_flight=8, prefetch_chunks=1), stop=stop)
        intake = DocumentPages(list_documents([str(tmp_path / "docs")]), ShardIndex(), pool, RenderOptions())
        run = asyncio.create_task(flow.run(intake))
        try:
            done, _ = await asyncio.wait({run}, timeout=20)
            assert run in done, "the stopped flow did not return"
            run.result()
            await writer.close()
        finally:
            run.cancel()
            pool.close()
        return counters

    counters = asyncio.run(main())
    assert handled and handled[0] == ("doc000.pdf", 1)
    # Intake stopped: not every document was sent, and every page that was sent has its row.
    assert len(handled) < 80 and counters.pages["ok"] == len(handled)
