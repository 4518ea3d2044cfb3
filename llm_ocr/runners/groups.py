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
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from llm_ocr.options import StealOptions
from llm_ocr.outcomes import RunError
from llm_ocr.sources import DocumentRef, InputPlan
from llm_ocr.storage import Storage
from llm_ocr.storage.claims import Claim, ClaimBook, Claims, Ending, GroupId, Kind, new_holder_id
from llm_ocr.storage.group_parts import Appended, GroupLog, is_group_part
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


# -- one process's groups: what it reads of them, and what it counts ------------------------------


@dataclass
class HeldGroup:
    """A group this process holds: its parts per stage folder, and how far it is."""

    logs: dict[str, GroupLog]
    #: Whether its first page was sent (the claim is started: :meth:`Claims.start`).
    started: bool = False
    #: Read here as its second reader (the holder keeps the claim), and whether it is known to
    #: have two readers (this one, or a second reader joined the holder here).
    second: bool = False
    shared: bool = False
    #: Pages planned here whose handler has not returned: the stage folders that expect their row.
    open: dict[tuple[str, int], tuple[str, ...]] = field(default_factory=dict)
    #: Pages the other reader stored while they waited here to be sent: left out when their turn comes.
    left_out: set[tuple[str, int]] = field(default_factory=set)
    #: The group's parts as the watch reads them (its own readers of the slots: the writer's are a thread's).
    watched: dict[str, GroupLog] = field(default_factory=dict)
    #: Rows this process's flow will hand each stage folder, and those stored (or found stored).
    expected: Counter[str] = field(default_factory=Counter)
    settled: Counter[str] = field(default_factory=Counter)
    docs_yielded: int = 0
    docs_planned: int = 0
    #: Pages planned and not sent yet.
    unsent: int = 0
    all_yielded: bool = False
    ended: bool = False
    rows: int = 0
    errors: int = 0
    quarantined: int = 0

    def complete(self) -> bool:
        """Every document handed out and planned, and every row it plans stored."""
        return (self.all_yielded and self.docs_planned == self.docs_yielded
                and all(self.settled[name] >= self.expected[name] for name in self.logs))

    def stored(self, folder: str, rows: list[dict[str, Any]], appended: Appended, counted: bool) -> None:
        """Count rows handed to ``folder``'s parts (``counted``: the page's own rows, whose errors
        the group's ending records)."""
        self.settled[folder] += appended.written + appended.already_there
        if counted:
            self.rows += appended.written
            self.errors += sum(r.get("status") == "error" and not r.get("quarantined") for r in rows)
            self.quarantined += sum(r.get("status") == "error" and bool(r.get("quarantined")) for r in rows)


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
    #: Groups claimed ahead here that another process took before their first page was sent.
    given_up: int = 0
    #: Own groups other processes read (as the claims say at the end), by their shard.
    read_by_others: Counter[str] = field(default_factory=Counter)
    #: Error and quarantined rows of own groups this process did not read (their holders' count).
    errors_elsewhere: int = 0
    quarantined_elsewhere: int = 0
    #: The own groups this process read.
    read_here: set[int] = field(default_factory=set)
    #: Groups read here as a second reader; pages sent in them; pages (of any group) whose
    #: request was stopped or never sent because the other reader stored them first.
    second_reads: int = 0
    second_pages_sent: int = 0
    pages_left_to_the_other_reader: int = 0
    #: Rows read here and left out of the parts (another reader stored the page first), by stage
    #: folder and status: the page counters counted them, the marker does not.
    left_out: dict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))

    def ended(self, group: GroupId, kind: Kind) -> None:
        """Count a group this process ended done, claimed as ``kind``."""
        if kind == "second":
            self.second_reads += 1
        elif kind == "other":
            self.taken[f"{group.shard:05d}"] += 1
        else:
            self.read_here.add(group.group)
            self.taken_back += kind == "back"

    def to_dict(self) -> dict[str, Any]:
        return {"group_docs": self.group_docs, "own_groups": self.own_groups, "own_read_here": len(self.read_here),
                "own_found_done": self.own_found_done, "taken_from_other_shards": dict(sorted(self.taken.items())),
                "taken_back": self.taken_back, "given_up_before_start": self.given_up,
                "read_by_other_shards": dict(sorted(self.read_by_others.items())),
                "rows_already_written": self.rows_already_written,
                "second_reader": {"groups_joined": self.second_reads, "pages_sent": self.second_pages_sent,
                                  "pages_left_to_the_other_reader": self.pages_left_to_the_other_reader}}


class Room:
    """How much room a page flow has for another group's pages: its pages planned and not sent,
    against its in-flight limit and its free slots (:attr:`slots`, set by the flow). Pages are
    counted on the event loop; the intake's worker thread waits on it before it claims a group."""

    def __init__(self, stop: asyncio.Event) -> None:
        self.stop = stop
        #: The flow's in-flight limit and its free slots now.
        self.slots: Callable[[], tuple[int, int]] = lambda: (1, 1)
        #: Pages planned and not sent, in every group held, and in the started ones.
        self.unsent = 0
        self.unsent_started = 0
        #: Documents (their ids) handed to the intake whose pages are not planned yet: their
        #: pages will need slots too. Uncounted, a process with free slots took three reserved
        #: groups in one second (each taken group's pages not yet planned when it looked again),
        #: held 12 pages for its 4 slots, and ended 26 s after the others (issue 46's held-out
        #: shape, 1.31).
        self.unplanned: set[str] = set()
        # Notified as pages are planned and sent; slots free up without a word, so waits are short.
        self._changed = threading.Condition()

    def add(self, pages: int, *, started: bool) -> None:
        """``pages`` more pages to send (fewer, when negative), of a started group or not."""
        with self._changed:
            self._count(pages, started)

    def handed(self, doc_id: str) -> None:
        """The document ``doc_id`` was handed to the intake; its pages are not planned yet."""
        with self._changed:
            self.unplanned.add(doc_id)
            self._changed.notify_all()

    def planned(self, doc_id: str, pages: int = 0, *, started: bool = False) -> None:
        """The document ``doc_id``, if it was handed out, is planned: its ``pages`` more pages to
        send (of a started group or not) are counted as it stops waiting, in one step, so that
        :meth:`now` never sees its pages in neither and takes another group in between."""
        with self._changed:
            self.unplanned.discard(doc_id)
            self._count(pages, started)

    def _count(self, pages: int, started: bool) -> None:
        """Count ``pages`` more to send (the condition held)."""
        self.unsent += pages
        self.unsent_started += pages if started else 0
        self._changed.notify_all()

    def begin(self, pages: int) -> None:
        """``pages`` waiting pages are now of a started group."""
        with self._changed:
            self.unsent_started += pages

    def ahead(self) -> None:
        """Return when no page of a started group waits to be sent and fewer pages of reserved
        ones wait than the in-flight limit, or when the run stops. So the next group's pages are
        rendered while the slots read the ones before, but sent only after them all: pages of two
        groups never wait together, where the longest of them would start the newer group and
        leave the older one's short pages to the end (a process would then hold both)."""
        with self._changed:
            while not self.stop.is_set() and not self.has_room():
                self._changed.wait(0.05)

    def has_room(self) -> bool:
        """Whether another group may be claimed now (see :meth:`ahead`)."""
        return self.unsent_started == 0 and self.unsent < self.slots()[0]

    def now(self, timeout: float) -> bool:
        """Whether more slots are free than pages wait, and no document handed out waits to be
        planned (another group's pages would go out at once), waiting up to ``timeout`` seconds
        for it."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while self.unplanned or self.slots()[1] <= self.unsent:
                left = deadline - time.monotonic()
                if left <= 0 or self.stop.is_set():
                    return False
                self._changed.wait(min(0.05, left))
            return True


class GroupWork:
    """This process's work groups for one page flow: the documents to read (:meth:`documents`,
    pulled in a worker thread as :meth:`Claims.queue` claims their groups), the pages the intake
    plans (:meth:`planned`) and sends (:meth:`admit`: a group starts with its first page, and
    one another process took before that is dropped), the writers of the groups' parts
    (:meth:`writer`), and each group's end once its rows are stored.

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

    def read_second(self, ref: DocumentRef | None) -> bool:
        """Whether ``ref``'s group is read here as its second reader (its pages go from the end)."""
        _, held = self._held_of(ref)
        return held is not None and held.second

    def shared(self, group: GroupId) -> bool:
        """Whether ``group`` is read here and by another process (its rows are stored as they come)."""
        with self._lock:
            held = self.held.get(group)
            return held is not None and held.shared

    def _holds(self, group: GroupId, held: HeldGroup) -> bool:
        """Whether this process still reads ``group``: it holds the claim, or reads it second."""
        return held.second or self.claims.holds(group)

    # -- planning and sending (from the page flow, on the event loop) ----------------------------

    def planned(self, ref: DocumentRef, pages: list[int]) -> list[int] | None:
        """The intake will hand rows for ``pages`` of ``ref`` (none: the document is done). Returns
        the order to read them in when it is not theirs: a second reader reads from the end, so
        that it and the holder, reading from the start, meet rather than race for the same pages."""
        with self._lock:
            group = self._doc_group.get(ref.doc_id)
            if group is None or (held := self.held.get(group)) is None:
                self.room.planned(ref.doc_id)
                return None
            held.docs_planned += 1
            held.unsent += len(pages)
            held.expected[self.folders[0]] += len(pages)
            described = self.indexes[self.folders[-1]].done_pages.get(ref.doc_id, set())
            for name in self.folders[1:]:
                # Later folders get no row for a page they hold already (llm-ocr run's Describe).
                held.expected[name] += sum(page not in described for page in pages)
            for page in pages:
                held.open[(ref.doc_id, page)] = (self.folders[0], *(
                    name for name in self.folders[1:] if page not in described))
        self.room.planned(ref.doc_id, len(pages), started=held.started)
        self._maybe_end(group, soon=True)
        return pages[::-1] if held.second else None

    async def admit(self, ref: DocumentRef | None) -> bool:
        """Whether a page of ``ref`` may be sent now: the first page of a group starts it
        (:meth:`Claims.start`); the pages of a group another process took before that are not."""
        group, held = self._held_of(ref)
        if group is None or held is None:
            return group is None  # not a document of a group; or one of a group dropped here
        if not held.started:
            if not await asyncio.to_thread(self.claims.start, group):
                with self._lock:
                    if self.held.pop(group, None) is held:
                        self.stats.given_up += 1
                        self.room.add(-held.unsent, started=False)
                log.info("%s was taken, before its first page was sent here, by a process with room", group)
                return False
            with self._lock:
                held.started = True
                self.room.begin(held.unsent)
        with self._lock:
            held.unsent -= 1
            if held.second:
                self.stats.second_pages_sent += 1
        self.room.add(-1, started=True)
        return True

    # -- two readers of a group: pages the other stored are not read here ------------------------

    @staticmethod
    def page_key(item: Any) -> tuple[str, int]:
        """A page's key in its group (what the group's parts know it by)."""
        return str(item.doc_id), int(item.page)

    def left_out(self, ref: DocumentRef, item: Any) -> bool:
        """Whether a page about to be sent was stored meanwhile by its group's other reader: it is
        then settled as stored, and not sent (the page flow asks as its turn comes)."""
        key = self.page_key(item)
        with self._lock:
            group = self._doc_group.get(ref.doc_id)
            held = self.held.get(group) if group is not None else None
            if group is None or held is None or key not in held.left_out:
                return False
            held.left_out.discard(key)
            held.unsent -= 1
            self._settle(held, key)
        self.room.add(-1, started=held.started)
        self._maybe_end(group, soon=True)
        return True

    def returned(self, ref: DocumentRef, item: Any, row_coming: bool) -> None:
        """A page's handler returned (its row is on its way to the writers), or its request was
        stopped because the group's other reader stored the page (settled as stored)."""
        key = self.page_key(item)
        with self._lock:
            group = self._doc_group.get(ref.doc_id)
            held = self.held.get(group) if group is not None else None
            if group is None or held is None or key not in held.open:
                return
            if row_coming:
                del held.open[key]
                return
            self._settle(held, key)
        self._maybe_end(group, soon=True)

    def _settle(self, held: HeldGroup, key: tuple[str, int]) -> None:
        """Count an open page of ``held`` as stored by the other reader (the lock held)."""
        for name in held.open.pop(key, ()):
            held.settled[name] += 1
        self.stats.pages_left_to_the_other_reader += 1

    async def watch(self, every: float = 1.0) -> None:
        """Every ``every`` seconds, for each started group held here that has a second reader (or
        that this process reads second): read the group's new parts, and stop the requests of the
        pages they hold, or leave them out when their turn comes. Runs until cancelled."""
        while True:
            await asyncio.sleep(every)
            with self._lock:
                held = [(g, h) for g, h in self.held.items() if h.started and h.open and not h.ended]
            for group, state in held:
                shared = state.shared
                try:
                    stored = await asyncio.to_thread(self._stored_elsewhere, group, state)
                except Exception as exc:  # noqa: BLE001 - the store may be away: the next look may get through
                    log.warning("could not read the parts of %s: %s", group, exc)
                    continue
                if state.shared and not shared:  # a second reader joined: what was read here, it need not read
                    for writer in list(self._writers.values()):
                        await writer.store(group)
                if stored:
                    self._leave(group, state, stored)

    def _stored_elsewhere(self, group: GroupId, held: HeldGroup) -> list[tuple[str, int]]:
        """The open pages of ``held`` some part of the group holds (a worker thread). A holder
        reads the parts only once a second reader has joined (one look at its claim's files)."""
        if not held.shared:
            claim = self.claims.claim_of(group)
            if claim is None or not claim.started or not self.book.joined(claim):
                return []
            held.shared = True
            log.info("%s has a second reader: this process stops the pages it stores", group)
        if not held.watched:
            held.watched = {name: GroupLog(self.out.child(name), self.schema, group.shard, self.num_shards,
                                           group.group) for name in self.folders}
        for log_ in held.watched.values():
            log_.catch_up()
        with self._lock:
            return [key for key, names in held.open.items()
                    if all(held.watched[name].present.holds(*key) for name in names)]

    def _leave(self, group: GroupId, held: HeldGroup, keys: list[tuple[str, int]]) -> None:
        """Stop the requests of ``keys`` (stored by the other reader), or mark them to be left out."""
        stopped = self.cancel_pages(keys)
        with self._lock:
            for key in keys:
                if key not in held.open:
                    continue  # its handler returned meanwhile: its row is a second one, left out when appended
                if key in stopped:
                    self._settle(held, key)
                else:
                    held.left_out.add(key)
        if stopped:
            log.info("stopped %d request(s) of %s: its other reader stored those pages", len(stopped), group)
        self._maybe_end(group, soon=True)

    def started(self, ref: DocumentRef | None) -> bool:
        """Whether a page of ``ref`` may go ahead of waiting pages of groups only claimed: its
        group has started here (or it is of no group, or of one dropped here: :meth:`admit`
        settles those at once)."""
        _, held = self._held_of(ref)
        return held is None or held.started

    def _held_of(self, ref: DocumentRef | None) -> tuple[GroupId | None, HeldGroup | None]:
        """The group of ``ref``'s pages and, while this process holds it, its state here."""
        with self._lock:
            group = self._doc_group.get(ref.doc_id) if ref is not None else None
            return group, self.held.get(group) if group is not None else None

    def group_of(self, doc_id: str) -> GroupId:
        """The group a document's rows belong to (a group this process holds)."""
        with self._lock:
            group = self._doc_group.get(doc_id)
        if group is None:
            raise RuntimeError(f"a row of {doc_id!r} came after its work group was ended: its pages were counted wrong")
        return group

    # -- writing and ending ----------------------------------------------------------------------

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
