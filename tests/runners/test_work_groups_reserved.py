"""A group claimed ahead but not started is taken by a process with room to read it, and its
first holder then sends none of its pages (llm_ocr.runners.groups, docs/stragglers.md).

A slow process claims its next group while its slots still read the one before, so that the
group's pages are rendered in time; until its first page is sent the claim is only reserved. The
test plays both processes' page flows in one thread, in the order it chooses: the holder claims
the group and plans its page, the taker (its own group already done) takes the group and stores
its row, and only then does the holder try to send the page.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from llm_ocr.options import StealOptions
from llm_ocr.records import page_schema
from llm_ocr.runners.groups import GroupLayout, GroupWork
from llm_ocr.sources import DocumentRef, plan_inputs
from llm_ocr.storage import Storage
from llm_ocr.storage.group_parts import GroupLog
from tests.docs import make_corpus
from tests.storage.test_claims import keys, row


def work(out: Storage, docs: Path, shard: int) -> GroupWork:
    """Shard ``shard`` of 2, groups of one document."""
    return GroupWork(out, "extract", ["extract"], shard, 2, plan_inputs([str(docs)]), False, GroupLayout(2, 1),
                     StealOptions(steal=True, lease=600.0), page_schema(), stop=asyncio.Event())


def test_a_group_claimed_ahead_is_taken_by_a_process_with_room_and_its_holder_then_skips_it(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    make_corpus(docs, documents=2, pages=1)  # shard 0: doc000.pdf, shard 1: doc001.pdf
    out = Storage(str(tmp_path / "out"))
    holder, taker = work(out, docs, 1), work(out, docs, 0)
    # The taker's own page is stored already: its own group has nothing to read.
    GroupLog(out.child("extract"), page_schema(), 0, 2, 0).append([row("doc000.pdf", 1)])

    async def holder_claims() -> DocumentRef:
        held = next(holder_pulls)  # claims its group: its page is being rendered, not sent
        holder.planned(held, [1])
        return held

    async def taker_reads() -> str | None:
        own = next(taker_pulls)
        taker.planned(own, [])  # done already: the taker's own group ends
        taken = next(taker_pulls, None)  # a group of another shard
        if taken is None:
            return None
        taker.planned(taken, [1])
        assert await taker.admit(taken)
        writer = taker.writer("extract")
        await writer.add(row(taken.doc_id, 1))
        await writer.close()
        assert next(taker_pulls, None) is None  # the group ends with its documents; nothing is left
        return taken.doc_id

    holder_pulls, taker_pulls = holder.documents(), taker.documents()
    held = asyncio.run(holder_claims())
    assert asyncio.run(taker_reads()) == held.doc_id
    assert dict(taker.stats.taken) == {"00001": 1}
    claims = out.path("_state", "claims", "extract", "00001-of-00002")
    assert json.loads(out.read_bytes(f"{claims}/000000-0001.json"))["started"] is False  # the holder's
    assert json.loads(out.read_bytes(f"{claims}/000000-0002.json"))["by_shard"] == 0  # the taker's
    assert asyncio.run(holder.admit(held)) is False  # the group went to the taker: the page is not sent
    assert next(holder_pulls, None) is None
    assert holder.stats.given_up == 1
    assert keys(out.child("extract")) == [("doc000.pdf", 1), ("doc001.pdf", 1)]  # every page once
    own = holder.claims.own_groups(holder.stats.read_here)
    assert (own.left, dict(own.read_by)) == ([], {"00000": 1})


def test_the_next_group_is_claimed_only_once_every_page_of_a_started_one_is_sent(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    make_corpus(docs, documents=2, pages=6)
    out = Storage(str(tmp_path / "out"))
    groups = work(out, docs, 0)
    groups.room.slots = lambda: (4, 4)  # 4 slots, all free

    async def read() -> list[bool]:
        ref = next(groups.documents())  # group 0 claimed ahead: 6 pages to send
        groups.planned(ref, [1, 2, 3, 4, 5, 6])
        room = [groups.room.has_room()]  # more pages wait than the slots take
        for _ in range(6):
            assert await groups.admit(ref)  # the first page starts the group
            room.append(groups.room.has_room())
        return room

    # Fewer pages wait than 4 after the third is sent, but they are the started group's: its
    # last page goes before another group's pages are rendered to compete with it.
    assert asyncio.run(read()) == [False, False, False, False, False, False, True]


def test_a_document_handed_out_holds_room_until_its_pages_are_planned(tmp_path: Path) -> None:
    """A group's document handed to the intake will need slots before its pages are planned: until
    they are, the process has no room to take another's reserved group. Counting only the pages
    planned, a process took three reserved groups in one second with 4 slots (each taken group's
    pages not planned yet when it looked again) and ended 26 s after the others."""
    docs = tmp_path / "docs"
    make_corpus(docs, documents=2, pages=1)
    groups = work(Storage(str(tmp_path / "out")), docs, 0)
    groups.room.slots = lambda: (2, 2)  # 2 slots, both free
    assert groups.room.now(0.0)  # nothing handed out, nothing waits
    pulls = groups.documents()
    ref = next(pulls)  # its group claimed; the intake has not opened it yet
    assert not groups.room.now(0.0)
    groups.planned(ref, [1])
    assert groups.room.now(0.0)  # one page waits, two slots are free
