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


def test_a_page_that_gives_its_slot_up_lets_the_next_page_go_and_returns_it_once(tmp_path: Path) -> None:
    """A page waiting for another process's reading (:mod:`llm_ocr.runners.shared_pages`) gives
    its slot back: with one slot, page 2 is sent while page 1 waits for it (held, the flow would
    hang); page 1 then ends without a slot (a copy), and the slot is back once, not twice."""
    from llm_ocr.runners.look_ahead import IN_ORDER
    from llm_ocr.runners.page_flow import Batch, give_up_slot, take_slot

    ref = DocumentRef("d", 0, "d", "pdf", str(tmp_path / "d.pdf"))
    second_sent = asyncio.Event()

    class TwoPages:
        look_ahead = IN_ORDER

        async def batches(self, flow: PageFlow[DocumentRef, PageImage | PageFailure]):  # type: ignore[no-untyped-def]
            yield Batch(ref, [PageFailure("d", 1, "x"), PageFailure("d", 2, "x"), PageFailure("d", 3, "x")], 3)

    async def handler(ref: DocumentRef, item: PageImage | PageFailure, num_pages: int | None) -> PageResult:
        if item.page == 1:
            assert give_up_slot() is not None
            await second_sent.wait()
        elif item.page == 2:
            second_sent.set()
            assert give_up_slot() is not None and await take_slot()  # taken again: held at the end
        return PageResult(ref.doc_id, ref.index, item.page, ref.source, num_pages, status="ok")

    async def main() -> PageFlow[DocumentRef, PageImage | PageFailure]:
        writer = PartWriter(Storage(str(tmp_path / "out/extract")), page_schema(), 0, 1)
        flow: PageFlow[DocumentRef, PageImage | PageFailure] = PageFlow(
            handler=handler, writer=writer, counters=RunCounters("extract", 0, 1),
            settings=FlowSettings(max_in_flight=1, prefetch_chunks=1))
        run = asyncio.create_task(flow.run(TwoPages()))
        try:
            done, _ = await asyncio.wait({run}, timeout=20)  # a bound on a hang, not a wait
            assert run in done, "page 1 kept the only slot while it waited for page 2"
            run.result()
            await writer.close()
        finally:
            run.cancel()
        return flow

    flow = asyncio.run(main())
    assert flow.counters.pages["ok"] == 3 and flow.counters.in_flight == 0
    assert flow.slot_use == (1, 1)
    assert flow._slots._value == 1  # type: ignore[union-attr]  # released once per slot taken
