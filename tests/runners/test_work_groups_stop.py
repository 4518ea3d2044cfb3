"""A stopped process leaves no claim behind (llm_ocr.runners.groups, docs/stragglers.md).

The documents of a work-group run are pulled in a worker thread while SIGTERM stops the run on
the event loop, which then releases the groups held. A claim taken in between would be held by a
process gone until its lease ran out, and a rerun of the shard would find its group "held by
other processes" (seen in CI: the rerun of a stopped shard exited 1). These tests hold the
thread at the two points of that race with gates, so the order of events is theirs, not the
machine's.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from pathlib import Path

from llm_ocr.options import StealOptions
from llm_ocr.records import page_schema
from llm_ocr.runners.groups import GroupLayout, GroupWork
from llm_ocr.sources import plan_inputs
from llm_ocr.storage import Storage
from llm_ocr.storage.claims import GroupId
from tests.docs import make_corpus


def work(tmp_path: Path) -> tuple[GroupWork, Storage]:
    docs = tmp_path / "docs"
    make_corpus(docs, documents=4, pages=1)
    out = Storage(str(tmp_path / "out"))
    groups = GroupWork(out, "extract", ["extract"], 1, 2, plan_inputs([str(docs)]), False, GroupLayout(2, 1),
                       StealOptions(steal=True, lease=600.0), page_schema(), stop=asyncio.Event())
    return groups, out


def pull_in_thread(groups: GroupWork) -> tuple[threading.Thread, list[str]]:
    """The intake's worker thread: pull every document the groups hand out."""
    pulled: list[str] = []
    thread = threading.Thread(target=lambda: pulled.extend(ref.doc_id for ref in groups.documents()), daemon=True)
    thread.start()
    return thread, pulled


def claimed_not_ended(out: Storage) -> list[str]:
    """Claim files with neither a done nor a released ending: groups held by someone."""
    files = [p.rsplit("/", 1)[-1] for p in out.glob("_state", "claims", "extract", "*", "*.json")]
    claims = {f.removesuffix(".json") for f in files if f.count(".") == 1}
    ended = {f.split(".")[0] for f in files if f.count(".") == 2}
    return sorted(claims - ended)


def gate() -> tuple[threading.Event, threading.Event, Callable[[], None]]:
    """(reached, go, wait): the thread sets ``reached`` and blocks until the test sets ``go``."""
    reached, go = threading.Event(), threading.Event()

    def wait() -> None:
        reached.set()
        assert go.wait(30)

    return reached, go, wait


def stop_while_held(groups: GroupWork, reached: threading.Event, go: threading.Event,
                    between: Callable[[], None] = lambda: None) -> list[str]:
    """Pull the documents in a thread; once it is held at the gate, stop the run and close the
    groups (as SIGTERM does), call ``between``, let the thread go; the documents it pulled."""
    thread, pulled = pull_in_thread(groups)
    assert reached.wait(30)

    async def stop_and_close() -> None:
        groups.stop.set()
        await groups.close()

    asyncio.run(stop_and_close())
    between()
    go.set()
    thread.join(30)
    assert not thread.is_alive()
    return pulled


def test_a_run_stopped_while_waiting_for_room_claims_nothing_after(tmp_path: Path) -> None:
    groups, out = work(tmp_path)
    reached, go, wait = gate()

    def slots() -> tuple[int, int]:  # the page flow is full: the thread waits before its first claim
        if not go.is_set():
            wait()
        return 0, 0

    groups.room.slots = slots
    assert stop_while_held(groups, reached, go) == []
    assert claimed_not_ended(out) == []


def test_a_claim_that_lands_after_close_is_released_at_once(tmp_path: Path) -> None:
    groups, out = work(tmp_path)
    reached, go, wait = gate()
    take = groups.book.take

    def slow_take(group: GroupId, seen: object, **how: bool) -> object:  # the store answers the claim late
        wait()
        return take(group, seen, **how)  # type: ignore[arg-type]

    groups.book.take = slow_take  # type: ignore[assignment,method-assign]
    assert stop_while_held(groups, reached, go) == []
    files = [p.rsplit("/", 1)[-1] for p in out.glob("_state", "claims", "extract", "*", "*.json")]
    assert sorted(files) == ["000000-0001.json", "000000-0001.released.json"]  # taken, then let go
    assert claimed_not_ended(out) == []


def test_a_claim_taken_before_close_but_not_yet_read_is_released_by_close(tmp_path: Path) -> None:
    groups, out = work(tmp_path)
    reached, go, wait = gate()
    read = groups._read
    held_at_gate: list[list[str]] = []

    def late_read(group: GroupId, claim: object) -> object:  # claimed; the group's scan is slow
        held_at_gate.append(claimed_not_ended(out))
        wait()
        return read(group, claim)  # type: ignore[arg-type]

    groups._read = late_read  # type: ignore[assignment,method-assign]
    held_at_close: list[list[str]] = []
    pulled = stop_while_held(groups, reached, go, between=lambda: held_at_close.append(claimed_not_ended(out)))
    assert held_at_gate == [["000000-0001"]]  # the thread had claimed group 0 when the run stopped
    assert held_at_close == [[]]  # released by close, before the thread registered the group
    assert pulled == []
    assert claimed_not_ended(out) == []
