"""A second reader of a started group (llm_ocr.runners.groups, docs/stragglers.md).

At a run's end the last groups are being read by whoever started them, a slow server's among
them; the processes that ran out of work would idle. One of them joins the group started longest
ago and reads the pages not stored yet; both watch the group's parts, and each stops the requests
of the pages the other stored first. The tests play both processes in one thread, as
test_work_groups_reserved.py does, and the page flow's side (stopping a request, leaving a page
out) against a real :class:`PageFlow`.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path

from llm_ocr.options import StealOptions
from llm_ocr.records import PageResult, page_schema
from llm_ocr.runners.groups import GroupLayout, GroupWork
from llm_ocr.runners.page_flow import Batch, FlowSettings, PageFlow
from llm_ocr.runners.progress import RunCounters
from llm_ocr.sources import plan_inputs
from llm_ocr.sources.base import DocumentRef, PageFailure, PageImage
from llm_ocr.storage import Storage
from llm_ocr.storage.group_parts import GroupLog
from tests.docs import make_corpus
from tests.storage.test_claims import keys, row


def work(out: Storage, docs: Path, shard: int, *, second_readers: bool = True) -> GroupWork:
    """Shard ``shard`` of 2, groups of one document."""
    return GroupWork(out, "extract", ["extract"], shard, 2, plan_inputs([str(docs)]), False, GroupLayout(2, 1),
                     StealOptions(steal=True, lease=600.0, second_readers=second_readers), page_schema(),
                     stop=asyncio.Event())


def test_an_idle_process_reads_a_started_group_beside_its_holder_which_then_stops_its_requests(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    make_corpus(docs, documents=2, pages=2)  # shard 0: doc000.pdf, shard 1: doc001.pdf
    out = Storage(str(tmp_path / "out"))
    holder, second = work(out, docs, 1), work(out, docs, 0)
    GroupLog(out.child("extract"), page_schema(), 0, 2, 0).append([row("doc000.pdf", 1), row("doc000.pdf", 2)])
    stopped: list[tuple[str, int]] = []

    def cancel(keys_: list[tuple[str, int]]) -> set[object]:  # the page flow: both requests still running
        stopped.extend(keys_)
        return set(keys_)

    holder.cancel_pages = cancel

    async def holder_sends() -> DocumentRef:
        ref = next(holder_pulls)
        holder.planned(ref, [1, 2])
        assert await holder.admit(ref) and await holder.admit(ref)  # both pages in flight, on a slow server
        return ref

    async def second_reads() -> DocumentRef:
        own = next(second_pulls)
        second.planned(own, [])  # its own group is done: nothing else is left anywhere
        joined = next(second_pulls)
        second.planned(joined, [1, 2])
        assert await second.admit(joined) and await second.admit(joined)
        writer = second.writer("extract")
        await writer.add(row(joined.doc_id, 1))
        await writer.add(row(joined.doc_id, 2))
        await writer.close()
        assert next(second_pulls, None) is None  # one second reader a group: nothing more to join
        return joined

    async def holder_watches() -> None:
        watch = asyncio.create_task(holder.watch(every=0.01))
        try:
            while holder.held:  # noqa: ASYNC110 - the group ends once the watch finds both pages stored
                await asyncio.sleep(0.01)
        finally:
            watch.cancel()
        await asyncio.gather(*holder._endings)

    holder_pulls, second_pulls = holder.documents(), second.documents()
    held = asyncio.run(holder_sends())
    assert asyncio.run(second_reads()).doc_id == held.doc_id
    assert next(holder_pulls, None) is None  # its group's documents all handed out; nothing else to take
    assert holder.held  # its two requests are still on their way
    asyncio.run(asyncio.wait_for(holder_watches(), 60))  # a bound on a hang, not a wait
    assert sorted(stopped) == [("doc001.pdf", 1), ("doc001.pdf", 2)]
    assert not holder.held
    claims = out.path("_state", "claims", "extract", "00001-of-00002")
    done = json.loads(out.read_bytes(f"{claims}/000000-0002.done.json"))  # ended by its holder, not the second
    assert done["by_shard"] == 1 and done["rows"] == 0
    assert json.loads(out.read_bytes(f"{claims}/000000-0002.second.json"))["by_shard"] == 0
    assert keys(out.child("extract")) == [("doc000.pdf", 1), ("doc000.pdf", 2), ("doc001.pdf", 1), ("doc001.pdf", 2)]
    assert second.stats.to_dict()["second_reader"] == {"groups_joined": 1, "pages_sent": 2,
                                                       "pages_left_to_the_other_reader": 0}
    assert holder.stats.to_dict()["second_reader"]["pages_left_to_the_other_reader"] == 2
    own = holder.claims.own_groups(holder.stats.read_here)
    assert own.left == [] and holder.stats.read_here == {0}


def test_without_second_readers_an_idle_process_leaves_a_started_group_to_its_holder(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    make_corpus(docs, documents=2, pages=1)
    out = Storage(str(tmp_path / "out"))
    holder, idle = work(out, docs, 1), work(out, docs, 0, second_readers=False)
    GroupLog(out.child("extract"), page_schema(), 0, 2, 0).append([row("doc000.pdf", 1)])

    async def holder_sends() -> None:
        ref = next(holder.documents())
        holder.planned(ref, [1])
        assert await holder.admit(ref)

    asyncio.run(holder_sends())
    pulls = idle.documents()
    idle.planned(next(pulls), [])
    assert next(pulls, None) is None
    assert not out.glob("_state", "claims", "extract", "00001-of-00002", "*.second.json")


def test_a_stopped_request_gives_no_row_and_a_page_left_out_is_never_sent(tmp_path: Path) -> None:
    """The page flow's side: page 1's handler is running when the other reader stores it (its
    request is stopped: no row, its slot back); page 2 waits for the one slot and is marked left
    out meanwhile (never sent); page 3 is read as usual."""
    ref = DocumentRef("d", 0, "d", "pdf", str(tmp_path / "d.pdf"))
    first_running = asyncio.Event()
    sent: list[int] = []
    calls: list[tuple[int, bool]] = []

    class ThreePages:
        from llm_ocr.runners.look_ahead import IN_ORDER as look_ahead

        async def batches(self, flow: PageFlow[DocumentRef, PageImage | PageFailure]):  # type: ignore[no-untyped-def]
            yield Batch(ref, [PageFailure("d", 1, "x"), PageFailure("d", 2, "x"), PageFailure("d", 3, "x")], 3)

    async def handler(ref: DocumentRef, item: PageImage | PageFailure, num_pages: int | None) -> PageResult:
        sent.append(item.page)
        if item.page == 1:
            first_running.set()
            await asyncio.Event().wait()  # a request on a slow server: ends only when stopped
        return PageResult(ref.doc_id, ref.index, item.page, ref.source, num_pages, status="ok")

    class Rows:
        def __init__(self) -> None:
            self.rows: list[dict[str, object]] = []

        async def add(self, row_: dict[str, object]) -> None:
            self.rows.append(row_)

        async def flush(self) -> None:
            pass

    async def main() -> tuple[PageFlow[DocumentRef, PageImage | PageFailure], Rows]:
        rows = Rows()
        flow: PageFlow[DocumentRef, PageImage | PageFailure] = PageFlow(
            handler=handler, writer=rows, counters=RunCounters("extract", 0, 1),  # type: ignore[arg-type]
            settings=FlowSettings(max_in_flight=1, prefetch_chunks=1))
        left_out: set[tuple[str, int]] = set()
        flow.page_key = GroupWork.page_key
        flow.left_out = lambda _ref, item: GroupWork.page_key(item) in left_out
        flow.returned = lambda _ref, item, coming: calls.append((item.page, coming))
        run = asyncio.create_task(flow.run(ThreePages()))
        try:
            await asyncio.wait_for(first_running.wait(), 20)
            left_out.add(("d", 2))  # stored by the other reader while it waited for the slot
            assert flow.cancel_pages([("d", 1), ("d", 9)]) == {("d", 1)}  # 9 is not running: nothing to stop
            done, _ = await asyncio.wait({run}, timeout=20)  # a bound on a hang, not a wait
            assert run in done, "the stopped request kept its slot"
            run.result()
        finally:
            run.cancel()
        return flow, rows

    flow, rows = asyncio.run(main())
    assert sent == [1, 3]
    assert [r["page"] for r in rows.rows] == [3]
    assert sorted(calls) == [(1, False), (2, False), (3, True)]
    assert flow.counters.pages_skipped == 2 and flow.counters.pages["ok"] == 1
    assert flow.slot_use == (1, 1) and flow._slots._value == 1  # type: ignore[union-attr]


def test_once_a_second_reader_joins_each_reader_stores_its_rows_as_they_come_and_the_other_leaves_them_out(
        tmp_path: Path) -> None:
    """A holder keeps a group's rows until the group ends; with a second reader that would make it
    read every page the holder had answered. Once the holder sees the join it stores what it has,
    and both store each row as it comes: the other reader leaves those pages out."""
    docs = tmp_path / "docs"
    make_corpus(docs, documents=2, pages=3)
    out = Storage(str(tmp_path / "out"))
    holder, second = work(out, docs, 1), work(out, docs, 0)
    GroupLog(out.child("extract"), page_schema(), 0, 2, 0).append([row("doc000.pdf", p) for p in (1, 2, 3)])
    mine = out.child("extract")

    async def until(condition: Callable[[], bool], watcher: GroupWork) -> None:
        watch = asyncio.create_task(watcher.watch(every=0.01))
        try:
            while not condition():  # noqa: ASYNC110 - the watch's own polling, in small steps
                await asyncio.sleep(0.01)
        finally:
            watch.cancel()

    async def play() -> None:
        ref = next(holder_pulls)
        assert holder.planned(ref, [1, 2, 3]) is None  # its holder reads them in their order
        for _ in range(3):
            assert await holder.admit(ref)
        writer = holder.writer("extract")
        await writer.add(row(ref.doc_id, 1))  # answered, kept: its group has two pages to go
        assert ("doc001.pdf", 1) not in keys(mine)
        second.planned(next(second_pulls), [])  # its own group is done
        joined = next(second_pulls)
        # Nothing of the group was stored when it joined; it reads from the end, toward the holder.
        assert second.planned(joined, [1, 2, 3]) == [3, 2, 1]
        await asyncio.wait_for(until(lambda: ("doc001.pdf", 1) in keys(mine), holder), 60)  # stored on the join
        await writer.add(row(ref.doc_id, 2))  # from now on each row is stored as it comes (by the writer's thread)
        await asyncio.wait_for(until(lambda: ("doc001.pdf", 2) in keys(mine), holder), 60)
        await asyncio.wait_for(until(lambda: second.left_out(joined, PageFailure("doc001.pdf", 1, "x")), second), 60)
        assert second.left_out(joined, PageFailure("doc001.pdf", 2, "x"))
        assert not second.left_out(joined, PageFailure("doc001.pdf", 3, "x"))  # still to be read by either
        await writer.close()

    holder_pulls, second_pulls = holder.documents(), second.documents()
    asyncio.run(play())
    assert second.stats.pages_left_to_the_other_reader == 2


def test_a_second_readers_pages_go_in_the_order_rendered_not_longest_first() -> None:
    """Ranked longest first, both readers of a group would send the same pages first and race for
    them; a second reader's go in its render order (from the group's end), after ranked ones."""
    from llm_ocr.runners.look_ahead import LookAhead, Waiting

    expected = {1: 5.0, 2: 1.0, 3: 9.0}
    waiting: Waiting[str, PageFailure] = Waiting(LookAhead(16, 1 << 30, expected=lambda item: expected[item.page]))
    waiting.in_render_order = lambda ref: ref == "second"
    waiting.add("second", [PageFailure("s", p, "x") for p in (3, 2, 1)], 3)  # rendered from the end
    waiting.add("held", [PageFailure("h", p, "x") for p in (1, 2, 3)], 3)

    async def order() -> list[tuple[str, int]]:
        return [((entry := await waiting.take(asyncio.Event())).ref, entry.item.page)  # type: ignore[union-attr]
                for _ in range(6)]

    assert asyncio.run(order()) == [("held", 3), ("held", 1), ("held", 2), ("second", 3), ("second", 2),
                                    ("second", 1)]


def test_a_row_left_out_as_a_second_one_is_taken_back_from_the_markers_page_counts(tmp_path: Path) -> None:
    """Both readers answered a page; the row stored second is left out, and the marker of its
    reader counts the page as done by another, not as read (a launch's table sums the markers:
    r72 and r73 counted 14 pages of 12)."""
    from llm_ocr.runners.groups import groups_finished

    docs = tmp_path / "docs"
    make_corpus(docs, documents=2, pages=1)
    out = Storage(str(tmp_path / "out"))
    reader = work(out, docs, 0)
    GroupLog(out.child("extract"), page_schema(), 0, 2, 0).append([row("doc000.pdf", 1)])  # the other's row
    ref = next(reader.documents())  # its own group, read again here (a slow look at the parts)
    reader.planned(ref, [1])
    reader.append(reader.group_of(ref.doc_id), "extract", [row(ref.doc_id, 1)])
    marker = {"stage": "extract", "pages": {"ok": 1, "truncated": 0, "error": 0, "quarantined": 0, "total": 1,
                                            "skipped": 0, "seen": 1}}
    asyncio.run(groups_finished(reader, [marker], stopped=False))
    pages = marker["pages"]
    assert (pages["ok"], pages["total"], pages["skipped"], pages["seen"]) == (0, 0, 1, 1)
    assert reader.stats.rows_already_written == 1
