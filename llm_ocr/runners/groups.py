"""Work groups: a shard's documents in page groups, each claimed before it is read, so that a
shard that has finished its own share reads the unfinished groups of slow or dead shards.

Static shards end when the slowest one does (a slow GPU, a shard of dense pages, a preempted
node). With work groups (docs/stragglers.md for the protocol and why each page is written once):

- **Groups.** Group ``g`` of shard ``s`` is the shard's documents ``g*K .. g*K+K-1`` in its own
  listing order (``K`` = ``--group-docs``, recorded in ``OUT/_state/groups-of-NNNNN.json`` when
  the output is begun, so every process and every rerun cuts the same groups).
- **Order.** The claims (:class:`llm_ocr.storage.claims.Claims`: which group next, and the
  leases): a process claims its next group when fewer of its pages wait to be sent than its
  in-flight limit (:class:`Room`), reserved; it starts the group as the group's first page is
  sent (:meth:`GroupWork.admit`), and until then a process with free slots may take it. Own
  groups first, in order; then, with ``--steal``, other shards'. Its completion marker is written
  only when every one of its groups is done, whoever read them.
- **Writing.** A group's rows go to the group's own parts (:mod:`llm_ocr.storage.group_parts`),
  named after the shard that owns the documents, whoever reads them; when every page of a group
  has a row stored, its claim is ended ``done``.
- **Second readers.** A process with free slots and nothing left to take anywhere joins the group
  another process started longest ago (:meth:`llm_ocr.storage.claims.ClaimBook.join`, one second
  reader a group) and reads its pages not stored yet; both watch the group's parts every second
  and stop the requests of pages the other has stored (:meth:`GroupWork.watch`). What the
  server answers decides who ends the group: no process guesses another's pace.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import threading
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from llm_ocr.options import StealOptions
from llm_ocr.outcomes import RunError
from llm_ocr.runners.group_readers import TwoReaders
from llm_ocr.runners.group_sending import GroupSending
from llm_ocr.runners.group_state import GroupStats, HeldGroup, Room
from llm_ocr.sources import DocumentRef, InputPlan
from llm_ocr.storage import Storage
from llm_ocr.storage.claims import Claim, ClaimBook, Claims, Ending, GroupId, Kind, new_holder_id
from llm_ocr.storage.group_parts import GroupLog, is_group_part
from llm_ocr.storage.parts import ShardIndex, list_parts
from llm_ocr.storage.state import STATE_DIR
from llm_ocr.storage.writer import SerialWriter

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


class GroupWork(GroupSending, TwoReaders):
    """This process's work groups for one page flow: the documents to read (:meth:`documents`,
    pulled in a worker thread as :meth:`Claims.queue` claims their groups), the writers of the
    groups' parts (:meth:`writer`), and each group's end once its rows are stored. The page
    flow's hooks as it plans and sends pages are :class:`~llm_ocr.runners.group_sending.GroupSending`'s,
    and what a group read by two processes needs, :class:`~llm_ocr.runners.group_readers.TwoReaders`'s.

    ``flow`` (``extract`` or ``run``) names the claims; ``folders`` are the stage folders the flow
    writes, the first the page's own row; ``retry_errors`` and ``keep_quarantined`` say what a
    group's scan drops to read again; ``stop`` is set when the run is interrupted.
    """

    def __init__(
        self, out: Storage, flow: str, folders: Sequence[str], shard: int, num_shards: int, plan: InputPlan,
        by_rows: bool, layout: GroupLayout, options: StealOptions, schema: pa.Schema, *, retry_errors: bool = True,
        keep_quarantined: bool = True, stop: asyncio.Event | None = None, max_rows: int = 1000,
    ) -> None:
        self.out, self.folders, self.shard, self.num_shards = out, list(folders), shard, num_shards
        self.plan, self.by_rows, self.layout, self.schema, self.max_rows = plan, by_rows, layout, schema, max_rows
        self.retry_errors, self.keep_quarantined = retry_errors, keep_quarantined
        self.stop = stop or asyncio.Event()
        self.book = ClaimBook(out, flow, num_shards, holder=new_holder_id(shard), shard=shard, lease=options.lease)
        self.claims = Claims(self.book, self.groups_of, steal=options.steal is not False, stop=self.stop,
                             retry_errors=retry_errors, keep_quarantined=keep_quarantined,
                             second_readers=options.second_readers)
        #: The intake's view of what is done, one per stage folder, filled as groups are taken.
        self.indexes: dict[str, ShardIndex] = {name: ShardIndex() for name in self.folders}
        self.stats = GroupStats(layout.group_docs)
        self.held: dict[GroupId, HeldGroup] = {}
        #: The page flow's room for another group (its slots are set by the flow).
        self.room = Room(self.stop)
        self._doc_group: dict[str, GroupId] = {}
        self._kinds: dict[GroupId, Kind] = {}
        self._lock = threading.RLock()
        self._sizes: dict[int, int] = {}
        self._writers: dict[str, GroupWriter] = {}
        self._endings: set[asyncio.Task[None]] = set()
        #: Stops the requests of pages another reader stored (the page flow's, set with its hooks).
        self.cancel_pages: Callable[[list[tuple[str, int]]], set[Any]] = lambda keys: set()
        self._watch: asyncio.Task[None] | None = None

    def groups_of(self, shard: int) -> int:
        """How many groups shard ``shard`` has."""
        if shard not in self._sizes:
            self._sizes[shard] = self.plan.shard_size(self.num_shards, shard, by_rows=self.by_rows) or 0
        return math.ceil(self._sizes[shard] / self.layout.group_docs)

    # -- the documents (a blocking generator: the intake pulls it in a worker thread) ------------

    def documents(self) -> Iterator[DocumentRef]:
        """The documents this process reads, group by group; returns when none is left, or when
        the run stops."""
        self.stats.own_groups = self.groups_of(self.shard)
        for claim, kind in self.claims.queue(self.room.ahead, self.room.now):
            self._kinds[claim.group] = kind
            # (``second`` only when it is: tests stand in for ``_read`` with two arguments.)
            yield from (self._read(claim.group, claim, second=True) if kind == "second"
                        else self._read(claim.group, claim))
        self.stats.own_found_done = self.claims.found_done

    def _read(self, group: GroupId, claim: Claim, second: bool = False) -> Iterator[DocumentRef]:
        """Scan a group just claimed (its parts say which pages are done; error rows are dropped to
        be read again), then hand out its documents while it is held. A ``second`` reader scans
        without dropping anything (only the holder rewrites a slot) and reads what is not stored."""
        logs = {name: GroupLog(self.out.child(name), self.schema, group.shard, self.num_shards, group.group)
                for name in self.folders}
        retry = self.retry_errors and not second
        found = {name: log_.scan(retry_errors=retry, keep_quarantined=self.keep_quarantined or second)
                 for name, log_ in logs.items()}
        held = HeldGroup(logs, started=claim.started or second, second=second, shared=second,
                         quarantined=0 if second else found[self.folders[0]].kept_quarantined)
        with self._lock:
            merge_scan(self.indexes, found, self.folders)
            self.held[group] = held
        size = self.layout.group_docs
        for ref in self.plan.documents(self.num_shards, group.shard, by_rows=self.by_rows, start=group.group * size,
                                       stop=(group.group + 1) * size):
            if self.stop.is_set() or not self._holds(group, held):
                break
            with self._lock:
                self._doc_group[ref.doc_id] = group
                held.docs_yielded += 1
            self.room.handed(ref.doc_id)
            yield ref
        with self._lock:
            held.all_yielded = not self.stop.is_set() and self._holds(group, held)
        self._maybe_end(group)

    def _holds(self, group: GroupId, held: HeldGroup) -> bool:
        """Whether this process still reads ``group``: it holds the claim, or reads it second."""
        return held.second or self.claims.holds(group)

    # -- writing and ending ----------------------------------------------------------------------

    def writer(self, folder: str) -> GroupWriter:
        """The writer of ``folder``'s rows into the groups' parts."""
        if folder not in self._writers:
            self._writers[folder] = GroupWriter(self, folder, self.max_rows)
        return self._writers[folder]

    async def _store_read_here(self, group: GroupId) -> None:
        for writer in list(self._writers.values()):
            await writer.store(group)

    def append(self, group: GroupId, folder: str, rows: list[dict[str, Any]]) -> None:
        """Store rows of ``group`` in its parts (a worker thread), then end the group if that was
        the last of its rows."""
        with self._lock:
            held = self.held[group]
        appended = held.logs[folder].append(rows)  # pages another holder stored meanwhile are left out
        with self._lock:
            held.stored(folder, rows, appended, counted=folder == self.folders[0])
            self.stats.rows_already_written += appended.already_there
            self.stats.left_out[folder].update(appended.left_out)
        self._maybe_end(group)

    def rows_pending(self, group: GroupId, folder: str, buffered: int) -> bool:
        """Whether ``buffered`` rows are the last ``folder`` expects of ``group`` (write them now)."""
        with self._lock:
            held = self.held.get(group)
            return (held is not None and held.all_yielded and held.docs_planned == held.docs_yielded
                    and held.settled[folder] + buffered >= held.expected[folder])

    def _maybe_end(self, group: GroupId, *, soon: bool = False) -> None:
        """End ``group`` ``done`` if every row of it is stored: here (a worker thread), or ``soon``
        (from the event loop: the storage call goes to a thread)."""
        with self._lock:
            held = self.held.get(group)
            if held is None or held.ended or not held.complete():
                return
            held.ended = True
        if soon:
            task = asyncio.get_running_loop().create_task(asyncio.to_thread(self._end, group, held))
            self._endings.add(task)
            task.add_done_callback(self._endings.discard)
        else:
            self._end(group, held)

    def _end(self, group: GroupId, held: HeldGroup) -> None:
        if held.second:
            self.stats.ended(group, "second")  # the holder ends the claim
        elif self.claims.end(group, Ending("done", self.shard, held.rows, held.errors, held.quarantined)):
            self.stats.ended(group, self._kinds.get(group, "other"))
        else:
            log.info("%s was taken over; its rows written here are kept (never twice)", group)
        with self._lock:
            self.held.pop(group, None)
            for doc_id in [d for d, g in self._doc_group.items() if g == group]:
                del self._doc_group[doc_id]

    # -- the run's start and end -----------------------------------------------------------------

    def start(self) -> None:
        """Start renewing the claims this process holds, and watching groups with two readers (on
        the running event loop)."""
        self.claims.begin()
        self._watch = asyncio.get_running_loop().create_task(self.watch())

    async def close(self) -> None:
        """Stop renewing; release the groups not finished (stopped, or their pages failed to be
        stored), so others may take them at once."""
        if self._watch is not None:
            self._watch.cancel()
            await asyncio.gather(self._watch, return_exceptions=True)
        await asyncio.gather(*self._endings, return_exceptions=True)
        await self.claims.close()

    def nothing_to_read(self) -> bool:
        """Whether this process would read nothing (:meth:`Claims.nothing_to_read`): such a run
        opens no endpoint (a task that starts after others read its groups launches no server)."""
        if not self.claims.nothing_to_read():
            return False
        # Every own group is done: the marker says so whether or not this run goes on to steal.
        self.stats.own_groups = self.stats.own_found_done = self.groups_of(self.shard)
        return True


def merge_scan(indexes: dict[str, ShardIndex], found: dict[str, ShardIndex], folders: Sequence[str]) -> None:
    """Add a group's scan to the intake's indexes. A page counts as done only where every folder
    of the flow has its row (``run``: Extract and Describe): one missing in one of them is read
    again, and the folder that has it already leaves the second row out (the group's log)."""
    for name, index in found.items():
        target = indexes[name]
        for doc_id, pages in index.done_pages.items():
            done = set(pages)
            if name == folders[0]:
                for other in folders[1:]:
                    done &= found[other].done_pages.get(doc_id, set())
            target.done_pages[doc_id] |= done
        target.num_pages.update(index.num_pages)
        for status, count in index.status_counts.items():
            target.status_counts[status] += count
        target.kept_quarantined += index.kept_quarantined
        target.dropped_error_rows += index.dropped_error_rows


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


class GroupWriter(SerialWriter):
    """A stage folder's rows, buffered per group and appended to the group's parts by the serial
    background writer (:class:`~llm_ocr.storage.writer.SerialWriter`): when a group's last row is
    in, when a group buffers ``max_rows``, and on every flush."""

    def __init__(self, work: GroupWork, folder: str, max_rows: int) -> None:
        super().__init__()
        self.work = work
        self.folder = folder
        self.max_rows = max_rows
        self._rows: dict[GroupId, list[dict[str, Any]]] = defaultdict(list)
        #: Rows handed to the background writer and not stored yet, by group: a group's last row
        #: must be stored at once even while earlier ones are on their way (stored early, for a
        #: copy waiting on them: :meth:`store_if_holding`), else it would wait for the next flush.
        self._unsettled: dict[GroupId, int] = defaultdict(int)
        self._unsettled_lock = threading.Lock()

    async def add(self, row: dict[str, Any]) -> None:
        group = self.work.group_of(row["doc_id"])
        rows = self._rows[group]
        rows.append(row)
        with self._unsettled_lock:
            on_the_way = self._unsettled.get(group, 0)
        if (len(rows) >= self.max_rows or self.work.shared(group)
                or self.work.rows_pending(group, self.folder, len(rows) + on_the_way)):
            # A group two processes read: each row is stored as it comes, so the other leaves its page out.
            await self._store([group])

    async def store(self, group: GroupId) -> None:
        """Store ``group``'s buffered rows now (a second reader joined it: they are pages it need not read)."""
        await self._store([group])

    async def flush(self) -> None:
        await self._store([group for group, rows in self._rows.items() if rows])

    async def store_if_holding(self, group: GroupId, doc_ids: set[str]) -> None:
        """Store ``group``'s rows now if some of those buffered are of ``doc_ids`` (the firsts of
        copies that may be waiting for them: :mod:`.shared_dedup`)."""
        if any(row["doc_id"] in doc_ids for row in self._rows.get(group, ())):
            await self._store([group])

    async def _store(self, groups: list[GroupId]) -> None:
        batches = [(group, self._rows.pop(group)) for group in groups if self._rows.get(group)]
        if batches:
            with self._unsettled_lock:
                for group, rows in batches:
                    self._unsettled[group] += len(rows)
            await self.submit(lambda: self._append(batches))

    def _append(self, batches: list[tuple[GroupId, list[dict[str, Any]]]]) -> None:
        for group, rows in batches:
            try:
                self.work.append(group, self.folder, rows)
            finally:  # after they count as stored: a row added meanwhile counts them once at least
                with self._unsettled_lock:
                    left = self._unsettled[group] - len(rows)
                    if left > 0:
                        self._unsettled[group] = left
                    else:
                        self._unsettled.pop(group, None)


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
    own = await asyncio.to_thread(groups.claims.own_groups, groups.stats.read_here)
    stats = groups.stats
    if own.left:
        log.warning("groups %s of this shard are not done (held by other processes, or stopped): no completion "
                    "marker; rerun to finish them", _ranges(own.left))
    else:
        stats.read_by_others = own.read_by
        stats.errors_elsewhere, stats.quarantined_elsewhere = own.errors, own.quarantined
    for result in results:
        result["groups"] = stats.to_dict()
        # A page read here whose row another reader stored first is that reader's: counted here as
        # done by another (a launch's table sums the markers), as a page found done is.
        left = stats.left_out.get(str(result.get("stage")), Counter())
        pages = result.get("pages") or {}
        for status, n in left.items():
            if status in pages:
                n = min(n, pages[status])  # a quarantined row's status is "error"; its count is apart
                pages[status] -= n
                pages["total"] = pages.get("total", 0) - n
                pages["skipped"] = pages.get("skipped", 0) + n
        result["pages"]["error_read_elsewhere"] = stats.errors_elsewhere
        result["pages"]["quarantined_read_elsewhere"] = stats.quarantined_elsewhere
    return GroupsEnd(not own.left, failed_elsewhere=bool(stats.errors_elsewhere or stats.quarantined_elsewhere))


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
