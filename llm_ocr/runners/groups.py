"""Work groups: a shard's documents in page groups, each claimed before it is read, so that a
shard that has finished its own share reads the unfinished groups of slow or dead shards.

Static shards end when the slowest one does (a slow GPU, a shard of dense pages, a preempted
node). With work groups (docs/stragglers.md for the protocol and why each page is written once):

- **Groups.** Group ``g`` of shard ``s`` is the shard's documents ``g*K .. g*K+K-1`` in its own
  listing order (``K`` = ``--group-docs``, recorded in ``OUT/_state/groups-of-NNNNN.json`` when
  the output is begun, so every process and every rerun cuts the same groups).
- **Order.** A process claims its own groups in order as its page flow reaches them (just in
  time: a slow shard holds only the groups it is reading); then, with ``--steal``, free groups of
  other shards, from the end of the shard with the most left; then it waits for its own groups
  that others hold, taking back any whose lease runs out. Its completion marker is written only
  when every one of its groups is done, whoever read them.
- **Writing.** A group's rows go to the group's own parts (:mod:`llm_ocr.storage.group_parts`),
  named after the shard that owns the documents, whoever reads them; when every page of a group
  has a row stored, its claim is ended ``done``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from llm_ocr.options import StealOptions
from llm_ocr.outcomes import RunError
from llm_ocr.sources import DocumentRef, InputPlan
from llm_ocr.storage import Storage, StorageError
from llm_ocr.storage.claims import Claim, ClaimBook, Ending, GroupId, GroupView, new_holder_id
from llm_ocr.storage.group_parts import GroupLog, is_group_part
from llm_ocr.storage.parts import ShardIndex, list_parts
from llm_ocr.storage.state import STATE_DIR

log = logging.getLogger("llm_ocr")

#: Groups per shard the default group size aims at. The run ends when the slowest holder has read
#: the groups it holds (one or two: its page flow reads a few documents ahead), so a group of
#: 1/128 of a shard keeps that tail near 1/128 x (how much slower it is) x 2 of the run: 8% for a
#: GPU 5x slower. A shard writes about 3 small state files per group.
GROUPS_PER_SHARD = 128


# -- the layout: whether an output is read in work groups, and their size -----------------------


@dataclass(frozen=True)
class GroupLayout:
    """An output read in work groups: ``group_docs`` documents per group, with ``num_shards``."""

    num_shards: int
    group_docs: int


def layout_path(out: Storage, num_shards: int) -> str:
    """Where the output records its work groups (for one shard count)."""
    return out.path(STATE_DIR, f"groups-of-{num_shards:05d}.json")


def resolve_layout(
    out: Storage, plan: InputPlan, by_rows: bool, num_shards: int, options: StealOptions, folders: Sequence[str]
) -> GroupLayout | None:
    """Whether this run reads in work groups (None: static shards, as without claims).

    An output that records groups keeps them (whatever ``--steal`` says now: the other shards
    may be claiming this shard's groups). Otherwise groups are begun when there is more than one
    shard, ``--steal`` is not off, the store can create files atomically (the Hub only when asked:
    each claim is a commit there), every input can be counted from its listing, and no part was
    written without groups (their pages could be written twice).
    """
    path = layout_path(out, num_shards)
    if out.exists(path):
        return _read_layout(out, path, num_shards)
    if num_shards < 2 or options.steal is False:
        return None
    why_not = None
    if out.exclusive_create is None:
        why_not = f"{out.display(out.root)} cannot create files atomically (local disk, S3, GCS and the Hub can)"
    elif out.batches_writes and options.steal is None:
        why_not = "on the Hub every claim is a commit (pass --steal to claim anyway)"
    elif any(not is_group_part(p) for f in folders for p in list_parts(out.child(f), num_shards=num_shards)):
        why_not = f"{out.display(out.root)} holds parts written by static shards"
    sizes = [plan.shard_size(num_shards, s, by_rows=by_rows) for s in range(num_shards)]
    if why_not is None and any(size is None for size in sizes):
        why_not = "a dataset input can only be streamed (its rows are not counted ahead)"
    if why_not is not None:
        if options.steal:
            raise RunError(f"--steal: {why_not}; run without it")
        log.info("static shards, no work groups: %s", why_not)
        return None
    largest = max(size or 0 for size in sizes)
    group_docs = options.group_docs or max(1, math.ceil(largest / GROUPS_PER_SHARD))
    record = json.dumps({"num_shards": num_shards, "group_docs": group_docs}).encode()
    if not out.create_exclusive(path, record):  # another shard began the output first: its record holds
        return _read_layout(out, path, num_shards)
    log.info("reading in work groups of %d document(s) (%s)", group_docs, out.display(path))
    return GroupLayout(num_shards, group_docs)


def _read_layout(out: Storage, path: str, num_shards: int) -> GroupLayout:
    try:
        record = json.loads(out.read_bytes(path))
        return GroupLayout(num_shards, int(record["group_docs"]))
    except (ValueError, KeyError, TypeError) as exc:
        raise RunError(f"{out.display(path)} is not a work-group record ({exc}): remove it only if no shard "
                       "of this output has written parts yet") from exc


# -- one process's groups: claiming, reading, writing, ending ------------------------------------


@dataclass
class HeldGroup:
    """A group this process holds: its claim, its parts per stage folder, and how far it is."""

    claim: Claim
    logs: dict[str, GroupLog]
    #: Rows this process's flow will hand each stage folder, and those stored (or found stored).
    expected: Counter[str] = field(default_factory=Counter)
    settled: Counter[str] = field(default_factory=Counter)
    docs_yielded: int = 0
    docs_planned: int = 0
    all_yielded: bool = False
    #: Another process took the group over (this one's lease ran out while it was slow).
    lost: bool = False
    ended: bool = False
    rows: int = 0
    errors: int = 0
    quarantined: int = 0
    already_there: int = 0

    def complete(self) -> bool:
        """Every document handed out and planned, and every row it plans stored."""
        return (self.all_yielded and self.docs_planned == self.docs_yielded
                and all(self.settled[name] >= self.expected[name] for name in self.logs))


@dataclass
class GroupStats:
    """What this process did with work groups (the completion marker's ``groups``)."""

    group_docs: int
    own_groups: int = 0
    #: Own groups found done (by earlier runs or other processes) when this process reached them.
    own_found_done: int = 0
    #: Groups of other shards this process read, by shard.
    taken: Counter[str] = field(default_factory=Counter)
    #: Rows left out because another writer's part held their page already.
    rows_already_written: int = 0
    #: Own groups taken back after their holder's lease ran out.
    taken_back: int = 0
    #: Own groups other processes read (as the claims say at the end), by their shard.
    read_by_others: Counter[str] = field(default_factory=Counter)
    #: Error and quarantined rows of own groups this process did not read (their holders' count).
    errors_elsewhere: int = 0
    quarantined_elsewhere: int = 0
    #: The own groups this process read.
    read_here: set[int] = field(default_factory=set)

    def to_dict(self) -> dict[str, Any]:
        return {"group_docs": self.group_docs, "own_groups": self.own_groups, "own_read_here": len(self.read_here),
                "own_found_done": self.own_found_done, "taken_from_other_shards": dict(sorted(self.taken.items())),
                "taken_back": self.taken_back, "read_by_other_shards": dict(sorted(self.read_by_others.items())),
                "rows_already_written": self.rows_already_written}


class GroupWork:
    """This process's work groups for one page flow: the documents to read (:meth:`documents`,
    pulled from a worker thread), what the intake plans for each (:meth:`planned`), the writers
    of the groups' parts (:meth:`writer`), the lease renewals (:meth:`start`/:meth:`close`).

    Args:
        out: the output.
        flow: the page flow's name (``extract`` or ``run``): its claims are its own.
        folders: the stage folders the flow writes; the first is the page's own row.
        shard, num_shards: this process's shard.
        plan, by_rows: the inputs (each group's documents are listed from them).
        layout: the groups' size.
        options: ``--steal``, ``--lease``.
        schema: the rows' Arrow schema.
        retry_errors, keep_quarantined: what a group's scan drops (its error rows are read again).
        stop: set when the run is interrupted.
    """

    def __init__(
        self, out: Storage, flow: str, folders: Sequence[str], shard: int, num_shards: int, plan: InputPlan,
        by_rows: bool, layout: GroupLayout, options: StealOptions, schema: pa.Schema, *, retry_errors: bool = True,
        keep_quarantined: bool = True, stop: asyncio.Event | None = None, max_rows: int = 1000,
    ) -> None:
        self.out = out
        self.folders = list(folders)
        self.shard = shard
        self.num_shards = num_shards
        self.plan = plan
        self.by_rows = by_rows
        self.layout = layout
        self.steal = options.steal is not False
        self.lease = options.lease
        self.schema = schema
        self.retry_errors = retry_errors
        self.keep_quarantined = keep_quarantined
        self.stop = stop or asyncio.Event()
        self.max_rows = max_rows
        self.book = ClaimBook(out, flow, num_shards, holder=new_holder_id(shard), shard=shard, lease=options.lease)
        #: The intake's view of what is done, one per stage folder, filled as groups are taken.
        self.indexes: dict[str, ShardIndex] = {name: ShardIndex() for name in self.folders}
        self.stats = GroupStats(layout.group_docs)
        self.held: dict[GroupId, HeldGroup] = {}
        self._doc_group: dict[str, GroupId] = {}
        self._lock = threading.RLock()
        self._sizes: dict[int, int] = {}
        self._heartbeat: asyncio.Task[None] | None = None
        self._writers: dict[str, GroupWriter] = {}
        #: Batches of pages the page flow has ready ahead of its free slots (set by the flow).
        self.backlog: Callable[[], int] = lambda: 0
        #: Own groups not done when this process last looked (the marker waits for them).
        self.own_unfinished: list[int] = []
        self._endings: set[asyncio.Task[None]] = set()
        #: Claims taken whose group :meth:`_read` has not registered in :attr:`held` yet, and
        #: whether :meth:`close` has run: a claim must never outlive its process unreleased.
        self._unheld: dict[GroupId, Claim] = {}
        self._closed = False

    # -- the groups of a shard -------------------------------------------------------------------

    def groups_of(self, shard: int) -> int:
        """How many groups shard ``shard`` has."""
        if shard not in self._sizes:
            self._sizes[shard] = self.plan.shard_size(self.num_shards, shard, by_rows=self.by_rows) or 0
        return math.ceil(self._sizes[shard] / self.layout.group_docs)

    def _group_documents(self, group: GroupId) -> Iterator[DocumentRef]:
        size = self.layout.group_docs
        return self.plan.documents(self.num_shards, group.shard, by_rows=self.by_rows, start=group.group * size,
                                   stop=(group.group + 1) * size)

    # -- the documents to read (a blocking generator: the intake pulls it in a worker thread) ----

    def documents(self) -> Iterator[DocumentRef]:
        """The documents this process reads, group by group: its own free groups in order, then
        (with ``--steal``) other shards' free groups, then its own groups others held and let go.
        Returns when none is left, or when the run stops."""
        own = self.groups_of(self.shard)
        self.stats.own_groups = own
        self.stats.own_found_done = 0  # counted afresh (nothing_to_read may have counted them)
        view = self.book.view(self.shard)
        waiting: dict[int, GroupView | None] = {}
        for number in range(own):
            if self.stop.is_set():
                return
            group = GroupId(self.shard, self.num_shards, number)
            seen = view.groups.get(number)
            if seen is not None and seen.finished and not self._redo(group, seen):
                self.stats.own_found_done += 1
                continue
            self._wait_for_room()
            claim, seen = self._try_take(group, seen, own=True)
            if claim is None:
                if seen is not None and seen.finished:
                    self.stats.own_found_done += 1
                else:
                    waiting[number] = seen
                continue
            self.stats.read_here.add(number)
            yield from self._read(group, claim)
        yield from self._steal_and_wait(waiting)

    def _redo(self, group: GroupId, seen: GroupView) -> bool:
        """Whether an own group found done has error rows to read again (a rerun's retry)."""
        if not self.retry_errors:
            return False
        ending = self.book.ending(group, seen.epoch, "done")
        return ending is not None and (ending.errors > 0 or (ending.quarantined > 0 and not self.keep_quarantined))

    def _try_take(self, group: GroupId, seen: GroupView | None, *, own: bool) -> tuple[Claim | None, GroupView | None]:
        """Take ``group`` if it is free (an own group found done is taken too, to retry its
        errors); returns the claim, or None and the group's latest state."""
        if not (own and seen is not None and seen.finished) and not self.book.is_free(group, seen):
            return None, seen
        claim = self._take(group, seen)
        if claim is None:
            return None, self.book.latest(group, seen)
        return claim, seen

    def _take(self, group: GroupId, seen: GroupView | None) -> Claim | None:
        """Claim ``group`` unless the run has stopped. The documents are pulled in a worker thread
        while the run may be stopping on the event loop: a claim taken as :meth:`close` releases
        the held ones would otherwise be held, by a process gone, until its lease ran out (and a
        rerun of the shard would find the group held). So a claim that lands after close is
        released at once, and one that lands before it is known to close until it is held."""
        if self.stop.is_set():
            return None
        claim = self.book.take(group, seen)
        if claim is None:
            return None
        with self._lock:
            if not self._closed:
                self._unheld[group] = claim
                return claim
        self._release(group, claim)
        return None

    def _release(self, group: GroupId, claim: Claim) -> None:
        try:
            self.book.end(claim, Ending("released", self.shard))
        except StorageError as exc:
            log.warning("could not release %s (others take it when its lease runs out): %s", group, exc)

    def _steal_and_wait(self, waiting: dict[int, GroupView | None]) -> Iterator[DocumentRef]:
        poll = min(10.0, self.lease / 4)
        while not self.stop.is_set():
            progressed = False
            for number, seen in list(waiting.items()):
                group = GroupId(self.shard, self.num_shards, number)
                latest = self.book.latest(group, seen)
                if latest is not None and latest.finished:
                    del waiting[number]
                    continue
                claim, latest = self._try_take(group, latest, own=False)
                if claim is not None:
                    del waiting[number]
                    self.stats.taken_back += 1
                    self.stats.read_here.add(number)
                    progressed = True
                    log.info("took back %s (its holder released it, or its lease ran out)", group)
                    yield from self._read(group, claim)
                else:
                    waiting[number] = latest
            self._wait_for_room()
            if self.steal and (taken := self._take_other()) is not None:
                self.stats.taken[f"{taken.group.shard:05d}"] += 1
                progressed = True
                yield from self._read(taken.group, taken)
                continue
            if not waiting:
                break
            if not progressed:
                self._sleep(poll)
        self.own_unfinished = sorted(waiting)

    def _take_other(self) -> Claim | None:
        """A free group of another shard: from the end of the shard with the most free groups
        (its owner reads from the start), None when no shard has one."""
        candidates = []
        for shard in range(self.num_shards):
            if shard == self.shard or self.stop.is_set():
                continue
            view = self.book.view(shard)
            unclaimed = [g for g in range(self.groups_of(shard)) if g not in view.groups]
            stale = [g for g, seen in view.groups.items() if not seen.finished]
            if unclaimed or stale:
                candidates.append((len(unclaimed), shard, unclaimed, stale, view))
        for _, shard, unclaimed, stale, view in sorted(candidates, reverse=True):
            for number in sorted(unclaimed, reverse=True):
                claim = self._take(GroupId(shard, self.num_shards, number), None)
                if claim is not None:
                    log.info("taking %s (unclaimed)", claim.group)
                    return claim
            for number in stale:
                group = GroupId(shard, self.num_shards, number)
                seen = view.groups[number]
                if self.book.is_free(group, seen) and (claim := self._take(group, seen)) is not None:
                    log.info("taking %s from its holder (released, or its lease ran out)", group)
                    return claim
        return None

    def _wait_for_room(self) -> None:
        """Claim the next group only when the page flow is about to need it (at most one batch
        ready ahead): the groups a process holds are the ones it is reading, so a slow process
        holds little when the others run out of work (its holding is the run's tail)."""
        while not self.stop.is_set() and self.backlog() > 1:
            time.sleep(0.02)

    def _sleep(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while not self.stop.is_set() and time.monotonic() < deadline:
            time.sleep(min(0.2, seconds))

    def _read(self, group: GroupId, claim: Claim) -> Iterator[DocumentRef]:
        """Scan a group just taken (its parts say which pages are done; error rows are dropped to
        be read again), then hand out its documents."""
        logs = {name: GroupLog(self.out.child(name), self.schema, group.shard, self.num_shards, group.group)
                for name in self.folders}
        found = {name: log_.scan(retry_errors=self.retry_errors, keep_quarantined=self.keep_quarantined)
                 for name, log_ in logs.items()}
        held = HeldGroup(claim, logs, quarantined=found[self.folders[0]].kept_quarantined)
        with self._lock:
            self._merge(found)
            self.held[group] = held
            self._unheld.pop(group, None)
        for ref in self._group_documents(group):
            if self.stop.is_set() or held.lost:
                break
            with self._lock:
                self._doc_group[ref.doc_id] = group
                held.docs_yielded += 1
            yield ref
        with self._lock:
            held.all_yielded = not self.stop.is_set() and not held.lost
        self._maybe_end(group)

    def _merge(self, found: dict[str, ShardIndex]) -> None:
        """Add a group's scan to the intake's indexes. A page counts as done only where every
        folder of the flow has its row (``run``: Extract and Describe): one missing in one of them
        is read again, and the folder that has it already leaves the second row out (the log)."""
        for name, index in found.items():
            target = self.indexes[name]
            for doc_id, pages in index.done_pages.items():
                done = set(pages)
                if name == self.folders[0]:
                    for other in self.folders[1:]:
                        done &= found[other].done_pages.get(doc_id, set())
                target.done_pages[doc_id] |= done
            target.num_pages.update(index.num_pages)
            for status, count in index.status_counts.items():
                target.status_counts[status] += count
            target.kept_quarantined += index.kept_quarantined
            target.dropped_error_rows += index.dropped_error_rows

    # -- planning (from the intake, on the event loop) -----------------------------------------

    def planned(self, ref: DocumentRef, pages: list[int]) -> None:
        """The intake will hand rows for ``pages`` of ``ref`` (none: the document is done)."""
        with self._lock:
            group = self._doc_group.get(ref.doc_id)
            held = self.held.get(group) if group is not None else None
            if held is None:
                return
            held.docs_planned += 1
            held.expected[self.folders[0]] += len(pages)
            described = self.indexes[self.folders[-1]].done_pages.get(ref.doc_id, set())
            for name in self.folders[1:]:
                # Later folders get no row for a page they hold already (llm-ocr run's Describe).
                held.expected[name] += sum(page not in described for page in pages)
        self._end_soon(group)

    def group_of(self, doc_id: str) -> GroupId:
        """The group a document's rows belong to (a group this process holds)."""
        with self._lock:
            group = self._doc_group.get(doc_id)
        if group is None:
            raise RuntimeError(f"a row of {doc_id!r} came after its work group was ended: its pages were counted wrong")
        return group

    # -- writing ---------------------------------------------------------------------------------

    def writer(self, folder: str) -> GroupWriter:
        """The writer of ``folder``'s rows into the groups' parts."""
        if folder not in self._writers:
            self._writers[folder] = GroupWriter(self, folder, self.max_rows)
        return self._writers[folder]

    def append(self, group: GroupId, folder: str, rows: list[dict[str, Any]]) -> None:
        """Store rows of ``group`` in its parts (a worker thread), then end the group if that was
        the last of its rows."""
        with self._lock:
            held = self.held[group]
        if held.lost:
            log.info("writing rows of %s, which another process took over: pages its parts hold already are "
                     "left out", group)
        appended = held.logs[folder].append(rows)
        with self._lock:
            held.settled[folder] += appended.written + appended.already_there
            self.stats.rows_already_written += appended.already_there
            if folder == self.folders[0]:
                held.rows += appended.written
                for row in rows:
                    if row.get("status") == "error":
                        if row.get("quarantined"):
                            held.quarantined += 1
                        else:
                            held.errors += 1
        self._maybe_end(group)

    def rows_pending(self, group: GroupId, folder: str, buffered: int) -> bool:
        """Whether ``buffered`` rows are the last ``folder`` expects of ``group`` (write them now)."""
        with self._lock:
            held = self.held.get(group)
            return (held is not None and held.all_yielded and held.docs_planned == held.docs_yielded
                    and held.settled[folder] + buffered >= held.expected[folder])

    # -- ending groups ---------------------------------------------------------------------------

    def _take_ending(self, group: GroupId) -> HeldGroup | None:
        with self._lock:
            held = self.held.get(group)
            if held is None or held.ended or not held.complete():
                return None
            held.ended = True
            return held

    def _maybe_end(self, group: GroupId) -> None:
        """End ``group`` ``done`` if every row of it is stored (blocking: from a worker thread)."""
        held = self._take_ending(group)
        if held is not None:
            self._end(group, held)

    def _end_soon(self, group: GroupId | None) -> None:
        """:meth:`_maybe_end` from the event loop (the storage call goes to a thread)."""
        if group is not None and (held := self._take_ending(group)) is not None:
            task = asyncio.get_running_loop().create_task(asyncio.to_thread(self._end, group, held))
            self._endings.add(task)
            task.add_done_callback(self._endings.discard)

    def _end(self, group: GroupId, held: HeldGroup) -> None:
        if held.lost:
            log.info("%s was taken over; its rows written here are kept (never twice)", group)
        else:
            self.book.end(held.claim, Ending("done", self.shard, held.rows, held.errors, held.quarantined))
            log.debug("%s done: %d row(s), %d error(s)", group, held.rows, held.errors)
        with self._lock:
            self.held.pop(group, None)
            for doc_id in [d for d, g in self._doc_group.items() if g == group]:
                del self._doc_group[doc_id]

    # -- the lease -------------------------------------------------------------------------------

    def start(self) -> None:
        """Start renewing the claims this process holds, every lease/4."""
        self._heartbeat = asyncio.get_running_loop().create_task(self._renew_forever())

    async def _renew_forever(self) -> None:
        while True:
            await asyncio.sleep(self.lease / 4)
            with self._lock:
                held = [(group, h) for group, h in self.held.items() if not h.ended and not h.lost]
            for group, h in held:
                try:
                    renewed = await asyncio.to_thread(self.book.renew, h.claim)
                except StorageError as exc:  # the store is away: the next renewal may get through
                    log.warning("could not renew the claim on %s: %s", group, exc)
                    continue
                if renewed is None:
                    h.lost = True
                    log.warning("%s was taken over by another process: this one did not renew its claim within "
                                "the %g s lease (too slow, or the store was away); pages are still written once",
                                group, self.lease)
                else:
                    h.claim = renewed

    async def close(self) -> None:
        """Stop renewing; release the groups this process did not finish (stopped, or its pages
        failed to be stored), so others may take them at once."""
        if self._heartbeat is not None:
            self._heartbeat.cancel()
            await asyncio.gather(self._heartbeat, return_exceptions=True)
        if self._endings:
            await asyncio.gather(*self._endings, return_exceptions=True)
        with self._lock:
            self._closed = True  # a claim that lands from now on is released by its taker
            unfinished = [(group, h.claim) for group, h in self.held.items() if not h.ended and not h.lost]
            unfinished += [(group, claim) for group, claim in self._unheld.items() if group not in self.held]
            self._unheld.clear()
        for group, claim in unfinished:
            await asyncio.to_thread(self._release, group, claim)

    def own_done(self) -> bool:
        """Whether every group of this shard is done (its completion marker may be written);
        notes which shards read its groups (:attr:`GroupStats.read_by_others`)."""
        view = self.book.view(self.shard)
        left = [g for g in range(self.groups_of(self.shard)) if not (g in view.groups and view.groups[g].finished)]
        if left:
            log.warning("groups %s of this shard are not done (held by other processes, or stopped): no completion "
                        "marker; rerun to finish them", _ranges(left))
            return False
        stats = self.stats
        stats.read_by_others.clear()
        stats.errors_elsewhere = stats.quarantined_elsewhere = 0
        for number, seen in view.groups.items():
            if number in stats.read_here:  # its rows are in this process's counts
                continue
            ending = self.book.ending(GroupId(self.shard, self.num_shards, number), seen.epoch, "done")
            if ending is None:
                continue
            stats.errors_elsewhere += ending.errors
            stats.quarantined_elsewhere += ending.quarantined
            if ending.by_shard != self.shard:
                stats.read_by_others[f"{ending.by_shard:05d}"] += 1
        return True

    def nothing_to_read(self) -> bool:
        """Whether this process would read nothing: every group of its shard done (with no error
        rows to retry), and no free group elsewhere to take. Such a run opens no endpoint (a
        task that starts after others read its groups launches no model server)."""
        view = self.book.view(self.shard)
        own = self.groups_of(self.shard)
        for number in range(own):
            seen = view.groups.get(number)
            group = GroupId(self.shard, self.num_shards, number)
            if seen is None or not seen.finished or self._redo(group, seen):
                return False
        # Every own group is done: the marker says so whether or not this run goes on to steal.
        self.stats.own_groups = self.stats.own_found_done = own
        if not self.steal:
            return True
        for shard in range(self.num_shards):
            if shard == self.shard:
                continue
            other = self.book.view(shard)
            if len(other.groups) < self.groups_of(shard):
                return False  # an unclaimed group
            for number, seen in other.groups.items():
                if not seen.finished and self.book.is_free(GroupId(shard, self.num_shards, number), seen):
                    return False
        return True


def _ranges(numbers: list[int]) -> str:
    """``0-3, 7``: a short list of group numbers."""
    spans: list[str] = []
    start = prev = numbers[0]
    for n in [*numbers[1:], None]:
        if n is not None and n == prev + 1:
            prev = n
            continue
        spans.append(f"{start}" if start == prev else f"{start}-{prev}")
        if n is not None:
            start = prev = n
    return ", ".join(spans)


class GroupWriter:
    """A stage folder's rows, buffered per group and appended to the group's parts from a worker
    thread, one write at a time (the back-pressure of :class:`~llm_ocr.storage.parts.PartWriter`):
    when a group's last row is in, when a group buffers ``max_rows``, and on every flush."""

    def __init__(self, work: GroupWork, folder: str, max_rows: int) -> None:
        self.work = work
        self.folder = folder
        self.max_rows = max_rows
        self._rows: dict[GroupId, list[dict[str, Any]]] = defaultdict(list)
        self._pending: asyncio.Task[None] | None = None
        #: As :class:`~llm_ocr.storage.parts.PartWriter`'s: two writes started at once (rows of
        #: two groups completing together) must not both find none pending, or the earlier task
        #: is lost to close(), and the shard checks its groups done before their rows are stored.
        self._turn = asyncio.Lock()
        self.failure: BaseException | None = None

    async def add(self, row: dict[str, Any]) -> None:
        group = self.work.group_of(row["doc_id"])
        rows = self._rows[group]
        rows.append(row)
        if len(rows) >= self.max_rows or self.work.rows_pending(group, self.folder, len(rows)):
            await self._write([group])

    async def flush(self) -> None:
        await self._write([group for group, rows in self._rows.items() if rows])

    async def _write(self, groups: list[GroupId]) -> None:
        batches = [(group, self._rows.pop(group)) for group in groups if self._rows.get(group)]
        if not batches:
            return
        async with self._turn:
            await self._wait_pending()
            self._pending = asyncio.create_task(asyncio.to_thread(self._store, batches))

    def _store(self, batches: list[tuple[GroupId, list[dict[str, Any]]]]) -> None:
        try:
            for group, rows in batches:
                self.work.append(group, self.folder, rows)
        except BaseException as exc:
            self.failure = self.failure or exc
            raise

    async def _wait_pending(self) -> None:
        if self._pending is not None:
            pending, self._pending = self._pending, None
            await pending

    async def close(self) -> None:
        await self.flush()
        async with self._turn:
            await self._wait_pending()
        if self.failure is not None:
            raise self.failure


@dataclass
class GroupsEnd:
    """How a page flow's work groups ended, for the shard's completion marker."""

    #: Every group of the shard is done, whoever read it: the shard may be marked complete.
    complete: bool = True
    #: Error rows in the shard's groups other processes read (the shard failed pages too).
    failed_elsewhere: bool = False


async def groups_finished(groups: GroupWork | None, results: Sequence[dict[str, Any]], *, stopped: bool) -> GroupsEnd:
    """After a page flow: whether the shard may be marked complete (every own group done, by
    whoever read it). The stats of ``results`` (its completion markers, the flow's page folders)
    get the work groups' numbers, and the error and quarantined rows of the groups other
    processes read (``pages.error_read_elsewhere``...: a rerun of this shard retries them, as it
    would its own)."""
    if groups is None:
        return GroupsEnd()
    if stopped:
        return GroupsEnd(complete=False)
    done = await asyncio.to_thread(groups.own_done)
    for stats in results:
        stats["groups"] = groups.stats.to_dict()
        stats["pages"]["error_read_elsewhere"] = groups.stats.errors_elsewhere
        stats["pages"]["quarantined_read_elsewhere"] = groups.stats.quarantined_elsewhere
    return GroupsEnd(done, failed_elsewhere=bool(groups.stats.errors_elsewhere or groups.stats.quarantined_elsewhere))


def group_work(
    out: Storage, flow: str, folders: Sequence[str], shard: int, num_shards: int, plan: InputPlan, by_rows: bool,
    options: StealOptions, schema: pa.Schema, **kwargs: Any,
) -> GroupWork | None:
    """This process's :class:`GroupWork`, or None when the output is read in static shards
    (:func:`resolve_layout`). Refuses a shard that has parts written without groups: they and
    the groups' parts could hold one page twice."""
    layout = resolve_layout(out, plan, by_rows, num_shards, options, folders)
    if layout is None:
        return None
    for name in folders:
        static = [p for p in list_parts(out.child(name), shard, num_shards) if not is_group_part(p)]
        if static:
            raise RunError(f"{out.display(static[0])} was written by a static shard, but {out.display(out.root)} is "
                           "read in work groups: write to a new --output (or remove the work-group record and every "
                           "claim if no other shard has run)")
    return GroupWork(out, flow, folders, shard, num_shards, plan, by_rows, layout, options, schema, **kwargs)
