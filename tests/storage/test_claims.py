"""Work claims and a page group's parts, on real local storage (docs/stragglers.md).

The claim protocol is timing: a lease is read against a clock. These tests move a clock of
their own (``Clock``) instead of sleeping, so "the lease ran out" is an event they cause.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from llm_ocr.records import page_schema
from llm_ocr.storage import Storage
from llm_ocr.storage.claims import ClaimBook, Ending, GroupId, _start_ticks, claims_summary, this_process
from llm_ocr.storage.group_parts import GroupLog, group_part_name
from llm_ocr.storage.parts import list_parts


class Clock:
    """A wall clock the test moves."""

    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def book(out: Storage, holder: str, shard: int, clock: Clock, lease: float = 60.0) -> ClaimBook:
    return ClaimBook(out, "extract", 4, holder=holder, shard=shard, lease=lease, clock=clock)


GROUP = GroupId(shard=2, num_shards=4, group=5)


def test_of_processes_racing_for_a_group_exactly_one_holds_it(tmp_path: Path) -> None:
    out = Storage(str(tmp_path))
    clock = Clock()
    start = threading.Barrier(8)
    won: list[str] = []

    def claim(holder: str) -> None:
        # Each racer reads the group's state and finds it free before any of them claims, as
        # processes racing for one group do (a racer that read the winner's claim would see it
        # held and not try).
        mine = book(out, holder, 0, clock)
        seen = mine.view(2).groups.get(5)
        assert mine.is_free(GROUP, seen)
        start.wait()
        if mine.take(GROUP, seen) is not None:
            won.append(holder)

    threads = [threading.Thread(target=claim, args=(f"h{i}",)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(won) == 1
    assert book(out, "x", 1, clock).claim(GROUP, 1).holder == won[0]  # type: ignore[union-attr]


def test_a_lease_holds_while_renewed_and_frees_the_group_when_it_runs_out(tmp_path: Path) -> None:
    out = Storage(str(tmp_path))
    clock = Clock()
    owner, thief = book(out, "owner", 2, clock, lease=60), book(out, "thief", 0, clock, lease=60)
    claim = owner.take(GROUP, None)
    assert claim is not None
    clock.now += 50
    assert not thief.is_free(GROUP, thief.view(2).groups[5])
    claim = owner.renew(claim)  # pushes the expiry to now + 60
    assert claim is not None
    clock.now += 50
    assert not thief.is_free(GROUP, thief.view(2).groups[5])  # 100 s after the take, renewed at 50
    assert thief.take(GROUP, None) is None  # epoch 1 is taken: a stale view cannot take it again
    clock.now += 11
    seen = thief.view(2).groups[5]
    assert thief.is_free(GROUP, seen)
    taken = thief.take(GROUP, seen)
    assert taken is not None and taken.epoch == 2
    # The owner learns it lost the group at its next renewal; its end changes nothing.
    assert owner.renew(claim) is None and owner.superseded(claim)
    owner.end(claim, Ending("done", 2, rows=3))
    assert thief.latest(GROUP, None).epoch == 2 and not thief.view(2).groups[5].finished  # type: ignore[union-attr]
    thief.end(taken, Ending("done", 0, rows=3, errors=1))
    view = owner.view(2).groups[5]
    assert view.finished and not owner.is_free(GROUP, view)
    ending = owner.ending(GROUP, 2, "done")
    assert ending is not None and (ending.by_shard, ending.errors) == (0, 1)
    assert claims_summary(out)["extract"]["00002-of-00004"] == {"done": 1, "working": 0, "free": 0,
                                                                "done_by": {"00000": 1}}


def test_a_released_group_is_free_at_once(tmp_path: Path) -> None:
    out = Storage(str(tmp_path))
    clock = Clock()
    owner, other = book(out, "owner", 2, clock), book(out, "other", 1, clock)
    claim = owner.take(GROUP, None)
    assert claim is not None
    owner.end(claim, Ending("released"))
    seen = other.view(2).groups[5]
    assert seen.ending == "released" and other.is_free(GROUP, seen)
    assert other.take(GROUP, seen) is not None


def test_a_group_whose_holding_process_ended_is_free_at_once(tmp_path: Path) -> None:
    # A run killed mid-group (SIGKILL: nothing released) and started again on the same machine,
    # a requeued Slurm task or a restarted Ray actor, takes its group back at once instead of
    # after the lease. The lease stays far from running out throughout: the clock never moves.
    out = Storage(str(tmp_path))
    clock = Clock()
    here = this_process()
    assert here is not None  # Linux: /proc says
    holder = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        start = _start_ticks(holder.pid)
        assert start is not None
        dead = book(out, "killed", 2, clock)
        dead.process = (*here[:2], holder.pid, start)
        claim = dead.take(GROUP, None)
        assert claim is not None
        other = book(out, "rerun", 2, clock)
        assert other.state(GROUP, other.view(2).groups[5]) == "held"  # alive: its lease decides
        # The same pid on another boot or in another pid namespace (a container) is not this
        # machine's to judge: the lease decides, however that pid looks here.
        elsewhere = book(out, "elsewhere", 3, clock)
        elsewhere.process = ("another-boot", here[1], 999_999_999, 1)
        other_group = GroupId(shard=3, num_shards=4, group=1)
        assert elsewhere.take(other_group, None) is not None
        assert other.state(other_group, other.view(3).groups[1]) == "held"
        holder.kill()
        holder.wait()
        assert other.state(GROUP, other.view(2).groups[5]) == "free"
        assert other.take(GROUP, other.view(2).groups[5]) is not None
    finally:
        holder.kill()
        holder.wait()


def test_a_reserved_group_is_started_by_its_holder_or_taken_by_another_never_both(tmp_path: Path) -> None:
    out = Storage(str(tmp_path))
    clock = Clock()
    holder, taker = book(out, "holder", 2, clock), book(out, "taker", 0, clock)
    # A claim written before reservations existed has no "started": it is a started one.
    old = {"holder": "old", "by_shard": 2, "expires_at": clock.now + 60, "shard": 2, "num_shards": 4, "group": 5,
           "epoch": 1}
    assert out.create_exclusive(holder.path(GROUP, 1), json.dumps(old).encode())
    assert taker.state(GROUP, taker.view(2).groups[5]) == "held"
    clock.now += 61  # its lease runs out
    reserved = holder.take(GROUP, holder.view(2).groups[5], started=False)
    assert reserved is not None and taker.state(GROUP, taker.view(2).groups[5]) == "reserved"
    started = holder.start(reserved)
    assert started is not None and started.epoch == 3 and taker.state(GROUP, taker.view(2).groups[5]) == "held"
    # The next reservation: the taker creates the epoch the holder would start it with, first.
    holder.end(started, Ending("released"))
    again = holder.take(GROUP, holder.view(2).groups[5], started=False)
    assert again is not None
    assert taker.take(GROUP, taker.view(2).groups[5], started=True) is not None
    assert holder.start(again) is None and holder.superseded(again)


def row(doc: str, page: int, status: str = "ok", **extra: Any) -> dict[str, Any]:
    return {"doc_id": doc, "page": page, "num_pages": 3, "status": status, "doc_index": 0, "source": doc,
            "markdown": f"{doc} p{page}", **extra}


def keys(stage: Storage) -> list[tuple[str, int]]:
    found = []
    for path in list_parts(stage):
        found += [(r["doc_id"], r["page"]) for r in pq.read_table(path, columns=["doc_id", "page"]).to_pylist()]
    return sorted(found)


def test_two_writers_of_one_group_never_write_a_page_twice(tmp_path: Path) -> None:
    stage = Storage(str(tmp_path / "extract"))
    schema = page_schema()
    pages = [row(f"d{d}", p) for d in range(6) for p in (1, 2, 3)]
    start = threading.Barrier(2)
    written: list[int] = []

    def write(rows: list[dict[str, Any]]) -> None:
        log = GroupLog(stage, schema, 2, 4, 5)
        log.scan()
        start.wait()
        for chunk in range(0, len(rows), 4):  # several appends each, interleaved with the other's
            written.append(log.append(rows[chunk:chunk + 4]).written)

    # Both wrote most pages (a lease ran out while its holder was slow): each page lands once.
    threads = [threading.Thread(target=write, args=(pages[:14],)), threading.Thread(target=write, args=(pages[4:],))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert keys(stage) == sorted((r["doc_id"], r["page"]) for r in pages)
    assert sum(written) == len(pages)
    names = sorted(p.rsplit("/", 1)[1] for p in list_parts(stage))
    assert names == [group_part_name(2, 4, 5, slot) for slot in range(len(names))]  # slots 0..n, no gap


def test_a_page_zero_row_and_page_rows_of_one_document_exclude_each_other(tmp_path: Path) -> None:
    stage = Storage(str(tmp_path / "extract"))
    first, second = GroupLog(stage, page_schema(), 0, 1, 0), GroupLog(stage, page_schema(), 0, 1, 0)
    assert first.append([row("a", 0, "error", error="could not open"), row("b", 1)]).written == 2
    # Another writer opened "a" fine and read "b" again: only what is new lands.
    done = second.append([row("a", 1), row("a", 2), row("b", 1), row("c", 0, "error")])
    assert (done.written, done.already_there) == (1, 3)
    assert keys(stage) == [("a", 0), ("b", 1), ("c", 0)]


def test_a_holders_scan_drops_error_rows_to_retry_keeps_quarantined_and_never_deletes_a_slot(tmp_path: Path) -> None:
    stage = Storage(str(tmp_path / "extract"))
    log = GroupLog(stage, page_schema(), 1, 2, 3)
    log.append([row("a", 1, "error", error="HTTP 500"), row("a", 2, "error", quarantined=True), row("a", 3)])
    log.append([row("b", 1, "error", error="HTTP 500")])
    taker = GroupLog(stage, page_schema(), 1, 2, 3)
    index = taker.scan(retry_errors=True, keep_quarantined=True)
    assert index.done_pages == {"a": {2, 3}} and index.dropped_error_rows == 2 and index.kept_quarantined == 1
    assert keys(stage) == [("a", 2), ("a", 3)]
    assert len(list_parts(stage)) == 2  # slot 1 lost its only row: emptied, not deleted
    # The retried pages go to a new slot (2), never into a freed one.
    assert taker.append([row("a", 1), row("b", 1)]).slots == [2]
    assert keys(stage) == [("a", 1), ("a", 2), ("a", 3), ("b", 1)]


def test_an_unreadable_slot_is_emptied_and_its_pages_redone(tmp_path: Path) -> None:
    stage = Storage(str(tmp_path / "extract"))
    GroupLog(stage, page_schema(), 0, 1, 0).append([row("a", 1)])
    (tmp_path / "extract" / group_part_name(0, 1, 0, 0)).write_bytes(b"PAR1 cut short")
    log = GroupLog(stage, page_schema(), 0, 1, 0)
    assert log.scan().done_pages == {}
    assert log.append([row("a", 1)]).slots == [1]
    assert keys(stage) == [("a", 1)]


def test_an_own_group_taken_from_its_reservation_is_waited_for_before_the_queue_ends(tmp_path: Path) -> None:
    # The sweep's 8-group shape with two slow shards: a slow shard's reserved group was taken by
    # a fast one, the slow shard's queue ended without waiting for it, and it exited with no
    # completion marker although the group was done a second later.
    import asyncio

    from llm_ocr.storage.claims import Claims

    out = Storage(str(tmp_path))
    clock = Clock()
    group = GroupId(shard=0, num_shards=4, group=0)
    mine = Claims(book(out, "slow", 0, clock), lambda shard: 1 if shard == 0 else 0, steal=False,
                  stop=asyncio.Event())
    queue = mine.queue(lambda: None, lambda timeout: False)
    reserved, kind = next(queue)
    assert (reserved.group, reserved.started, kind) == (group, False, "own")
    fast = book(out, "fast", 1, clock)
    taken = fast.take(group, fast.view(0).groups.get(0), started=True)
    assert taken is not None and not mine.start(group)  # the fast one took it: none of its pages go out here
    polls: list[float] = []

    def fast_finishes(seconds: float) -> None:  # the queue waits: meanwhile the taker finishes the group
        polls.append(seconds)
        fast.end(taken, Ending("done", 1))

    mine._sleep = fast_finishes  # type: ignore[method-assign]
    assert list(queue) == []
    assert polls and mine.own_groups(set()).left == []
    # Its own group held by another, the slow shard looks again within a second, not a quarter
    # lease (15 s here): it ended 10 s after the others had finished its groups.
    assert polls == [1.0]


def test_a_holder_that_ends_a_group_taken_over_before_its_next_renewal_learns_it_lost_it(tmp_path: Path) -> None:
    # CI, loaded: a shard frozen past its lease woke with its answers waiting and ended the group
    # before its renewal (every lease/4) ran, so it counted the group as its own and never said
    # it had been taken over. The end must look for the later epoch itself.
    import asyncio

    from llm_ocr.storage.claims import Claims

    out = Storage(str(tmp_path))
    clock = Clock()
    group = GroupId(shard=0, num_shards=4, group=0)
    mine = Claims(book(out, "frozen", 0, clock, lease=2), lambda shard: 1 if shard == 0 else 0, steal=False,
                  stop=asyncio.Event())
    reserved, _ = next(mine.queue(lambda: None, lambda timeout: False))
    assert reserved.group == group and mine.start(group)
    clock.now += 3  # frozen: no renewal, the lease ran out
    thief = book(out, "thief", 1, clock, lease=2)
    taken = thief.take(group, thief.view(0).groups.get(0), started=True)
    assert taken is not None and taken.epoch == reserved.epoch + 2
    assert mine.end(group, Ending("done", 0, rows=1)) is False
    assert thief.latest(group, None).ending is None  # type: ignore[union-attr]  # the taker's epoch decides
    assert not out.exists(book(out, "x", 0, clock).path(group, reserved.epoch + 1, "done"))


def test_a_first_is_taken_over_only_while_its_group_stays_unclaimed(tmp_path: Path) -> None:
    """A copy found its first's group free (never claimed: its shard had not started) and names
    itself the first. A reader that claims the group between that look and the take-over reads the
    old first, so the copy must not read too: the take-over holds the group while it is written
    and gives way to a reader that got there first (HashClaims.take_over)."""
    from llm_ocr.storage.hash_claims import HashClaims

    out = Storage(str(tmp_path))
    clock = Clock()
    copy, reader = book(out, "copy", 0, clock), book(out, "reader", 2, clock)
    hashes = HashClaims(out, "extract", "copy")
    first = HashClaims(out, "extract", "reader").claim("f" * 64, "b.pdf", GROUP)  # b.pdf is Beta's first
    seen = copy.latest(GROUP, None)
    assert copy.state(GROUP, seen) == "free"  # the copy's look: nobody reads b.pdf's group yet
    held = reader.take(GROUP, None)  # ... and then its shard starts it, to read b.pdf
    assert held is not None
    assert hashes.take_over(first, "c.pdf", GroupId(0, 4, 0), book=copy, seen=seen) is None
    assert hashes.latest("f" * 64) == first  # b.pdf is still the first: read once, by its reader

    # Let go before the copy's next look: now the take-over is written, and the group is free
    # again for whoever reads it, who finds its b.pdf a copy of c.pdf.
    reader.end(held, Ending("released"))
    seen = copy.latest(GROUP, None)
    latest = hashes.take_over(first, "c.pdf", GroupId(0, 4, 0), book=copy, seen=seen)
    assert latest is not None and latest.doc_id == "c.pdf" and latest.epoch == 2
    after = reader.latest(GROUP, None)
    assert after is not None and reader.state(GROUP, after) == "free" and reader.take(GROUP, after) is not None
    assert HashClaims(out, "extract", "reader").claim("f" * 64, "b.pdf", GROUP).doc_id == "c.pdf"
