"""A process several times slower than the others leaves its last reserved groups unstarted for a
while, so that a faster one takes them (llm_ocr.runners.pace; docs/stragglers.md).

Issue 46's sweep: one shard 5x slower started four one-page groups at 62 s, as its slots freed,
and ended at 82 s; the fast ones were done by 72 s and would have ended those four by about 76.
The rule is checked on its own (when to wait, and for how long at most), then with two processes'
page flows played in one event loop: the slow holder waits, the fast one takes the group, and
every page is still written once; and with no one to take it, the wait ends and the holder reads
the group itself.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest

from llm_ocr.options import StealOptions
from llm_ocr.records import page_schema
from llm_ocr.runners.groups import GroupLayout, GroupWork
from llm_ocr.runners.pace import TAKER_LOOK_S, PaceRecord, deferral
from llm_ocr.sources import DocumentRef, plan_inputs
from llm_ocr.storage import Storage
from llm_ocr.storage.group_parts import GroupLog
from tests.docs import make_corpus
from tests.storage.test_claims import keys, row


def record(latency: float, slots: int = 4, backlog: int = 0, at: float = 1000.0) -> PaceRecord:
    return PaceRecord("peer", 8, latency, slots, backlog, at, answers=32)


def test_a_slow_process_waits_only_for_a_faster_one_that_will_have_room_and_never_longer_than_the_group_here() -> None:
    now = 1000.0
    slow = record(19.5, backlog=1)  # one page of its own to send: the reserved group's
    # A peer 5x faster with its 4 slots busy and 4 pages waiting: 5 pages to go before it has a
    # free slot (3.9 s a request / 4 slots each), then one round of 3.9 s: it ends the group by
    # about 1008.8; here it would end at 1019.5. Wait until it should have room, plus two looks.
    busy = record(3.9, backlog=8, at=now)
    assert busy.free_at() == now + 5 * 3.9 / 4
    assert deferral(slow, [busy], pages=1, now=now) == busy.free_at() + 2 * TAKER_LOOK_S
    # Peers of the same pace: nothing to gain (here 1019.5, there at best 1019.5).
    assert deferral(slow, [record(19.5)], pages=1, now=now) is None
    # A faster peer busy for longer than the group takes here: start it here.
    assert deferral(slow, [record(3.9, backlog=100, at=now)], pages=1, now=now) is None
    # A gain smaller than half a request here is within the estimates' error: start it here.
    assert deferral(record(10.0), [record(5.5, backlog=3, at=now + 0.1)], pages=1, now=now) is None
    # The wait is never longer than the group would take here (2 s a request here; the peer
    # should have room at 1000.8 and end it at 1000.9, and two of its looks would reach 1002.8).
    assert deferral(record(2.0, slots=1), [record(0.1, slots=1, backlog=8, at=now)], pages=1, now=now) == now + 2.0
    # Free groups are read first, at the peers' pace together (4 / 3.9 + 4 / 19.5 pages a second):
    # 8 pages (6.5 s) put the busy peer's end past the threshold (1009.75); 1 page (0.8 s) does not.
    rate = 4 / 3.9 + 4 / 19.5
    assert deferral(slow, [busy, record(19.5)], pages=1, now=now, free_pages=8) is None
    assert deferral(slow, [busy, record(19.5)], pages=1, now=now, free_pages=1) == pytest.approx(
        busy.free_at() + 1 / rate + 2 * TAKER_LOOK_S)
    # 4 pages are 3.3 s for these two; read from 2 records of 8, the 8 read them 4 times faster.
    assert deferral(slow, [busy, record(19.5)], pages=1, now=now, free_pages=4) is None
    assert deferral(slow, [busy, record(19.5)], pages=1, now=now, free_pages=4, population=8) is not None
    # The best peer is the one that would end it soonest; a group of 8 pages is 2 rounds of 4 slots.
    assert deferral(slow, [record(19.5), busy, record(3.9, at=now)], pages=8, now=now) == now + 2 * TAKER_LOOK_S


def work(out: Storage, docs: Path, shard: int) -> GroupWork:
    """Shard ``shard`` of 2, groups of one document, one slot."""
    return GroupWork(out, "extract", ["extract"], shard, 2, plan_inputs([str(docs)]), False, GroupLayout(2, 1),
                     StealOptions(steal=True, lease=600.0), page_schema(), stop=asyncio.Event())


def two_processes(tmp_path: Path, documents: int = 2) -> tuple[Storage, GroupWork, GroupWork]:
    """A slow holder (shard 1, 10 s a request as its answers said) and a fast process (shard 0,
    1 s a request, its first group already read), one-page documents (2: one each)."""
    docs = tmp_path / "docs"
    make_corpus(docs, documents=documents, pages=1)  # shard 0: doc000.pdf ..., shard 1: doc001.pdf ...
    out = Storage(str(tmp_path / "out"))
    slow, fast = work(out, docs, 1), work(out, docs, 0)
    GroupLog(out.child("extract"), page_schema(), 0, 2, 0).append([row("doc000.pdf", 1)])
    for _ in range(4):
        slow.pace.answered(10.0)
    return out, slow, fast


def test_the_slow_holder_waits_and_the_fast_process_takes_its_group_every_page_once(tmp_path: Path) -> None:
    out, slow, fast = two_processes(tmp_path)
    slow_pulls, fast_pulls = slow.documents(), fast.documents()

    async def play() -> bool:
        held = next(slow_pulls)  # reserved: its page rendered, not sent
        slow.planned(held, [1])
        own = next(fast_pulls)
        fast.planned(own, [])  # the fast process's own group was read: it ends done
        # The fast process answered 1 s a request and has nothing to send: it has room now.
        assert fast.board is not None
        fast.board.publish(PaceRecord(fast.book.holder, 2, 1.0, 1, 0, time.time(), 4))
        sending = asyncio.create_task(slow.admit(held))  # the slow one's slot is free: it would start it ...
        while slow.waiting_for_faster is None:  # ... but leaves it unstarted
            assert not sending.done(), "the slow process started its group at once"
            await asyncio.sleep(0.01)
        taken = await asyncio.to_thread(next, fast_pulls, None)  # and the fast one takes it meanwhile
        assert taken is not None and taken.doc_id == held.doc_id
        fast.planned(taken, [1])
        assert await fast.admit(taken)
        writer = fast.writer("extract")
        await writer.add(row(taken.doc_id, 1))
        await writer.close()
        assert await asyncio.to_thread(next, fast_pulls, None) is None  # the group ends; nothing is left
        return await sending

    sent_here = asyncio.run(play())
    assert not sent_here  # the slow process sends none of its pages
    assert (slow.stats.deferred, slow.stats.deferred_started, slow.stats.given_up) == (1, 0, 1)
    assert dict(fast.stats.taken) == {"00001": 1}
    assert keys(out.child("extract")) == [("doc000.pdf", 1), ("doc001.pdf", 1)]  # every page once
    assert slow.stats.to_dict()["deferred_for_faster"] == 1


def test_with_no_one_to_take_it_the_wait_ends_and_the_holder_reads_the_group(tmp_path: Path) -> None:
    out, slow, fast = two_processes(tmp_path)
    slow_pulls, fast_pulls = slow.documents(), fast.documents()
    assert fast.board is not None

    async def play() -> bool:
        own = next(fast_pulls)
        fast.planned(own, [])
        # The fast process says it has room, but never looks (it stopped pulling): the wait is bounded.
        fast.board.publish(PaceRecord(fast.book.holder, 2, 1.0, 1, 0, time.time(), 4))
        held = next(slow_pulls)
        slow.planned(held, [1])
        return await slow.admit(held)

    assert asyncio.run(play())  # started here after all
    assert (slow.stats.deferred, slow.stats.deferred_started, slow.stats.given_up) == (1, 1, 0)
    # Until the peer should have had room (now) plus two of its looks; never the 10 s of the group.
    assert 2 * TAKER_LOOK_S - 0.5 <= slow.stats.deferred_s < 10.0
    claims = out.path("_state", "claims", "extract", "00001-of-00002")
    assert json.loads(out.read_bytes(f"{claims}/000000-0002.json"))["started"] is True


def test_no_wait_while_the_free_groups_would_keep_the_faster_one_busy_longer(tmp_path: Path) -> None:
    out, slow, fast = two_processes(tmp_path, documents=40)
    assert fast.board is not None
    fast.board.publish(PaceRecord(fast.book.holder, 2, 1.0, 1, 0, time.time(), 4))

    async def play(ref: DocumentRef) -> bool:
        slow.planned(ref, [1])
        return await slow.admit(ref)

    # 39 one-page groups are unclaimed: the fast process reads them first, about 39 s at its pace,
    # longer than the group's 10 s here.
    assert asyncio.run(play(next(slow.documents())))
    assert slow.stats.deferred == 0
    # The record is withdrawn when a process closes: no one waits for a process that has gone.
    asyncio.run(fast.close())
    assert out.glob("_state", "claims", "extract", "paces", "*.json") == []
