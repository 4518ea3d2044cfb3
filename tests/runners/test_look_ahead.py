"""The look-ahead alone: which waiting page goes next, and when it takes no more pages."""

from __future__ import annotations

import asyncio

from llm_ocr.runners.look_ahead import IN_ORDER, LookAhead, Waiting
from llm_ocr.runners.page_flow import page_look_ahead
from llm_ocr.sources.base import PageFailure, PageImage
from llm_ocr.sources.density import TextEstimate


def page(number: int, chars: int | None, size: int = 1000) -> PageImage:
    estimate = TextEstimate(chars, "text layer") if chars is not None else None
    return PageImage("doc.pdf", number, b"x" * size, "image/jpeg", 10, 10, estimate)


def drain(waiting: Waiting) -> list[int]:
    async def take_all() -> list[int]:
        stop = asyncio.Event()
        waiting.close()
        taken = []
        while (entry := await waiting.take(stop)) is not None:
            taken.append(entry.item.page)
        return taken

    return asyncio.run(take_all())


def test_longest_expected_text_first_ties_in_input_order_failures_at_once() -> None:
    waiting: Waiting = Waiting(page_look_ahead(100, 100))
    waiting.add("ref", [page(1, 500), page(2, 9000), page(3, 500)], 3)
    waiting.add("ref", [PageFailure("doc.pdf", 4, "broken"), page(5, 3000)], 5)
    assert drain(waiting) == [4, 2, 5, 1, 3]


def test_a_page_without_an_estimate_ranks_with_the_mean_of_those_seen() -> None:
    waiting: Waiting = Waiting(page_look_ahead(100, 100))
    # Mean of the known ones when it came in: (1000 + 5000) / 2 = 3000: after 5000, before 1000.
    waiting.add("ref", [page(1, 1000), page(2, 5000), page(3, None), page(4, 2000)], 4)
    assert drain(waiting) == [2, 3, 4, 1]


def test_without_look_ahead_pages_go_in_input_order_one_chunk_at_a_time() -> None:
    waiting: Waiting = Waiting(page_look_ahead(0, 100))
    assert waiting.has_room()
    waiting.add("ref", [page(1, 100), page(2, 9000)], 2)
    assert not waiting.has_room()  # the next chunk waits until these are sent
    assert drain(waiting) == [1, 2]
    rows: Waiting = Waiting(IN_ORDER)
    rows.add(None, [page(1, 100), page(2, 9000)], 2)
    assert drain(rows) == [1, 2]


def test_it_takes_chunks_while_under_both_bounds_so_at_most_one_chunk_more() -> None:
    by_pages: Waiting = Waiting(LookAhead(4, 10**9, lambda p: p.text_estimate.chars, lambda p: len(p.image)))
    chunks = 0
    while by_pages.has_room() and chunks < 10:
        by_pages.add("ref", [page(3 * chunks + i, 100) for i in range(3)], None)
        chunks += 1
    assert (chunks, by_pages.pages) == (2, 6)  # 3 < 4 takes a second chunk; 6 takes no third
    by_bytes: Waiting = Waiting(page_look_ahead(1000, 2500 / 2**20))
    while by_bytes.has_room() and by_bytes.pages < 10:
        by_bytes.add("ref", [page(1, 100, size=1000)], None)
    assert (by_bytes.pages, by_bytes.bytes, by_bytes.peak_bytes) == (3, 3000, 3000)

    async def take_one() -> None:
        await by_bytes.take(asyncio.Event())

    asyncio.run(take_one())
    assert by_bytes.has_room() and by_bytes.bytes == 2000 and by_bytes.peak_pages == 3


def test_take_waits_for_a_page_and_ends_on_stop_or_when_closed_and_empty() -> None:
    async def main() -> None:
        waiting: Waiting = Waiting(page_look_ahead(10, 10))
        stop = asyncio.Event()
        taker = asyncio.create_task(waiting.take(stop))
        await asyncio.sleep(0)
        assert not taker.done()
        waiting.add("ref", [page(7, 100)], 7)
        entry = await taker
        assert entry is not None and entry.item.page == 7 and entry.seq == 0
        taker = asyncio.create_task(waiting.take(stop))
        await asyncio.sleep(0)
        stop.set()
        assert await taker is None
        closed: Waiting = Waiting(page_look_ahead(10, 10))
        closed.close()
        assert await closed.take(asyncio.Event()) is None

    asyncio.run(main())


def test_pages_of_started_groups_go_before_longer_pages_of_groups_only_claimed() -> None:
    """Work groups: group a started (its long page went out), group b is only claimed. b's page
    ranks above a's short one, yet a's goes first: b's would start b while a's pages still wait."""
    async def main() -> list[tuple[str, int]]:
        waiting: Waiting = Waiting(page_look_ahead(10, 10**6))
        waiting.add("a", [page(1, 900), page(2, 10)], 2)
        waiting.add("b", [page(1, 500), page(2, 400)], 2)
        started = {"a"}
        stop = asyncio.Event()
        order = []
        for _ in range(3):
            entry = await waiting.take(stop, lambda ref: ref in started)
            assert entry is not None
            order.append((entry.ref, entry.item.page))
        started.add("b")  # its first page was sent: b has started
        waiting.close()
        while (entry := await waiting.take(stop, lambda ref: ref in started)) is not None:
            order.append((entry.ref, entry.item.page))
        return order

    # Longest first among a's pages, then b's once none of a's waits.
    assert asyncio.run(main()) == [("a", 1), ("a", 2), ("b", 1), ("b", 2)]
