"""What the parts of :class:`~llm_ocr.runners.groups.GroupWork` share: the state of each group
this process holds (:class:`HeldGroup`), what it counts for the completion marker
(:class:`GroupStats`), the page flow's room for another group (:class:`Room`), and
:class:`GroupBase`, the lookups of the groups held here under one lock that the page flow's
hooks (:mod:`.group_sending`), the second readers' watch (:mod:`.group_readers`) and
:class:`~llm_ocr.runners.groups.GroupWork` itself work on."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from llm_ocr.sources import DocumentRef
from llm_ocr.storage import Storage
from llm_ocr.storage.claims import ClaimBook, Claims, GroupId, Kind
from llm_ocr.storage.group_parts import Appended, GroupLog
from llm_ocr.storage.parts import ShardIndex


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


class GroupBase:
    """The groups this process holds and the documents handed out of them, under one lock; what
    :class:`~llm_ocr.runners.groups.GroupWork` sets up and its parts read."""

    out: Storage
    folders: list[str]
    num_shards: int
    schema: pa.Schema
    book: ClaimBook
    claims: Claims
    stats: GroupStats
    room: Room
    #: The groups held here (read, or read second), and each document's group.
    held: dict[GroupId, HeldGroup]
    indexes: dict[str, ShardIndex]
    _doc_group: dict[str, GroupId]
    _lock: threading.RLock
    #: Stops the requests of pages another reader stored (the page flow's, set with its hooks).
    cancel_pages: Callable[[list[tuple[str, int]]], set[Any]]

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

    def _maybe_end(self, group: GroupId, *, soon: bool = False) -> None:
        """End ``group`` ``done`` if every row of it is stored (:class:`~llm_ocr.runners.groups.GroupWork`)."""
        raise NotImplementedError

    async def _store_read_here(self, group: GroupId) -> None:
        """Store the rows of ``group`` read here and buffered, now (:class:`~llm_ocr.runners.groups.GroupWork`)."""
        raise NotImplementedError
