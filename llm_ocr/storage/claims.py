"""Work claims: which process reads which page group of a shard now, under a lease.

A shard's documents are cut into page groups (:mod:`llm_ocr.runners.groups`). Before a process
reads a group, owner or not, it claims it; a shard that has finished its own groups claims
unfinished ones of slow or dead shards (docs/stragglers.md). Claims are small JSON files in

    OUT/_state/claims/FLOW/SSSSS-of-NNNNN/

for the groups ``G`` of shard ``S``, one pair per epoch ``E`` (1, 2, ...) of a group:

- ``GGGGGG-EEEE.json``, the claim: who holds the group (``holder``, ``by_shard``, and ``process``:
  the holding process as its machine's kernel knows it) and until when (``expires_at``, wall
  clock). It is created with :meth:`Storage.create_exclusive` (atomic
  create-if-absent on the store itself), so of any number of processes racing for one epoch
  exactly one gets it. Its holder rewrites it every lease/4 to push ``expires_at`` forward.
- ``GGGGGG-EEEE.done.json`` or ``GGGGGG-EEEE.released.json``, written by the holder when it ends:
  done (every page of the group has a row; how many rows are errors, which a rerun retries), or
  released (stopped before the end, SIGTERM: anyone may take it at once).

The group's **latest** epoch decides: no claim, released, or working past ``expires_at`` is free,
and so is a working one whose holding process has ended, as a process on the same machine sees
(:func:`holder_ended`: a killed run restarted there, a requeued Slurm task, a restarted Ray actor
takes its groups back at once, not after the lease); taking a free group is creating the next
epoch; done is finished. One listing of a shard's folder tells which groups are unclaimed, done
or released; only working ones need a read (their expiry). Only an epoch's holder writes its
files, and a holder whose epoch is no longer the latest has lost the group (its lease ran out
while it was alive but slow).

**Claimed ahead, started later.** A process claims a group a little before its page flow can
send the group's pages (they are rendered meanwhile), so the claim says ``"started": false``:
*reserved*. Before it sends the group's first page it creates the next epoch itself, started
(:meth:`ClaimBook.start`). A process with room to send a group's pages at once may take a
reserved group from its holder by creating that same epoch first: one create wins, so either the
holder starts the group or the taker reads it, never both, and the holder then sends none of its
pages. A slow process thus holds, when the others run out of work, only the groups it has begun
to send. (A claim without ``started``, written by an older llm-ocr, is a started one.)

:class:`Claims` is one process's side: which group it claims next (its own in order, then other
shards'), the claims it holds, renewed every lease/4 and released when the run stops.

Clocks: ``expires_at`` is compared with the reader's clock, so machines' clocks should agree to
well within a lease (NTP does). A wrong clock costs work, never rows: the parts of a group are an
append-only log that two holders can share without writing a page twice (:mod:`.group_parts`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import socket
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from llm_ocr.storage.state import STATE_DIR
from llm_ocr.storage.stores import StorageError
from llm_ocr.storage.url import Storage

log = logging.getLogger(__name__)

CLAIMS_DIR = "claims"
_FILE_RE = re.compile(r"(\d{6})-(\d{4,})(?:\.(done|released))?\.json$")
#: ``GGGGGG-EEEE.second.json``: a second reader of epoch ``E`` (not a claim: older readers skip it).
_SECOND_RE = re.compile(r"(\d{6})-(\d{4,})\.second\.json$")
_SHARD_RE = re.compile(r"(\d{5})-of-(\d{5})$")

End = Literal["done", "released"]
#: A group as a process that might take it sees it (:meth:`ClaimBook.state`).
State = Literal["free", "reserved", "held", "done"]


#: ``(boot id, pid namespace, pid, start time in clock ticks since boot)`` of a process.
Process = tuple[str, str, int, int]


def _start_ticks(pid: int) -> int | None:
    """When process ``pid`` started (clock ticks since boot, /proc/PID/stat's 22nd field), None if
    there is no such process or it has ended (a zombie waiting to be reaped)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as file:
            stat = file.read().decode(errors="replace")
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2:].split()  # after "PID (COMM) ": the command may hold spaces
    if not fields or fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


def this_process() -> Process | None:
    """This process as the kernel knows it (None where /proc does not say: not Linux)."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as boot:
            boot_id = boot.read().strip()
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:
        return None
    start = _start_ticks(os.getpid())
    return None if start is None else (boot_id, namespace, os.getpid(), start)


def holder_ended(process: Process | None, here: Process | None) -> bool:
    """Whether the claim holder ``process`` has ended, as seen from ``here`` (:func:`this_process`):
    only a process of the same boot and pid namespace can tell, by its pid and start time (a pid
    reused since is another process). False when it cannot tell: the lease decides then."""
    if process is None or here is None or process[:2] != here[:2]:
        return False
    return _start_ticks(process[2]) != process[3]


def new_holder_id(shard: int) -> str:
    """A name for this process as a claim holder: its shard, host and pid, and a random token
    (two runs of one shard never share one, even on one machine after a restart)."""
    return f"shard{shard:05d}-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


@dataclass(frozen=True)
class GroupId:
    """Page group ``group`` of shard ``shard`` of ``num_shards``."""

    shard: int
    num_shards: int
    group: int

    def __str__(self) -> str:
        return f"group {self.group} of shard {self.shard}"


@dataclass(frozen=True)
class Claim:
    """One epoch of a group's claim: what its holder wrote."""

    group: GroupId
    epoch: int
    holder: str
    #: The shard index of the holding process (who read the group: markers and status say it).
    by_shard: int
    expires_at: float
    #: False while the group is only reserved: its holder has not sent any of its pages.
    started: bool = True
    #: The holding process (:func:`this_process`), if known.
    process: Process | None = None
    #: When its holder started reading the group (wall clock; 0: reserved, or an older llm-ocr).
    started_at: float = 0.0

    def to_bytes(self) -> bytes:
        process = None if self.process is None else dict(zip(("boot", "pid_namespace", "pid", "start"), self.process))
        return json.dumps({"holder": self.holder, "by_shard": self.by_shard, "expires_at": self.expires_at,
                           "shard": self.group.shard, "num_shards": self.group.num_shards, "group": self.group.group,
                           "epoch": self.epoch, "started": self.started, "process": process,
                           "started_at": self.started_at}, sort_keys=True).encode()


@dataclass(frozen=True)
class Ending:
    """How a holder's work on its epoch ended: ``done`` (with its rows and error rows) or ``released``."""

    state: End
    by_shard: int = -1
    rows: int = 0
    #: Error rows a rerun retries, and quarantined error rows it keeps (unless told to retry them).
    errors: int = 0
    quarantined: int = 0


@dataclass
class GroupView:
    """A group's state as one listing shows it: its latest epoch and how that epoch ended."""

    epoch: int
    ending: End | None = None
    #: Whether a second reader has joined the latest epoch (:meth:`ClaimBook.join`).
    second: bool = False

    @property
    def finished(self) -> bool:
        return self.ending == "done"


@dataclass
class ShardView:
    """A shard's claims folder as one listing shows it: the claimed groups, by group."""

    groups: dict[int, GroupView] = field(default_factory=dict)


class ClaimBook:
    """The claims of one output and one page flow, as one process sees and makes them.

    Args:
        out: the output.
        flow: which page flow the claims are for (``extract``; ``run``, which also writes
            Describe's rows: a group Extract finished is not finished for it).
        num_shards: the layout.
        holder: this process's id (:func:`new_holder_id`).
        shard: this process's shard.
        lease: seconds a claim lasts unless renewed.
        clock: wall clock (tests move it).
        process: the process this holder is, written in its claims (default: this one).
    """

    def __init__(
        self, out: Storage, flow: str, num_shards: int, *, holder: str, shard: int, lease: float,
        clock: Callable[[], float] = time.time, process: Process | None = None,
    ) -> None:
        self.out = out
        self.flow = flow
        self.num_shards = num_shards
        self.holder = holder
        self.shard = shard
        self.lease = lease
        self.clock = clock
        #: Who reads the claims (whether a holder has ended) and who this holder is.
        self.here = this_process()
        self.process = process or self.here

    # -- paths ----------------------------------------------------------------------------------

    def folder(self, shard: int) -> tuple[str, ...]:
        """The parts of the path of ``shard``'s claims folder under ``out``."""
        return STATE_DIR, CLAIMS_DIR, self.flow, f"{shard:05d}-of-{self.num_shards:05d}"

    def path(self, group: GroupId, epoch: int, ending: End | None = None) -> str:
        """Where epoch ``epoch`` of ``group``'s claim (or its ending) lives."""
        name = f"{group.group:06d}-{epoch:04d}" + (f".{ending}" if ending else "") + ".json"
        return self.out.path(*self.folder(group.shard), name)

    def second_path(self, group: GroupId, epoch: int) -> str:
        """Where the second reader of epoch ``epoch`` of ``group`` is recorded."""
        return self.out.path(*self.folder(group.shard), f"{group.group:06d}-{epoch:04d}.second.json")

    # -- reading --------------------------------------------------------------------------------

    def view(self, shard: int) -> ShardView:
        """``shard``'s claimed groups: one listing, no reads."""
        view = ShardView()
        endings: dict[tuple[int, int], End] = {}
        seconds: set[tuple[int, int]] = set()
        for path in self.out.glob(*self.folder(shard), "*.json"):
            if (second := _SECOND_RE.search(path)) is not None:
                seconds.add((int(second.group(1)), int(second.group(2))))
                continue
            match = _FILE_RE.search(path)
            if match is None:
                continue
            group, epoch = int(match.group(1)), int(match.group(2))
            if match.group(3):
                endings[(group, epoch)] = match.group(3)  # type: ignore[assignment]
            current = view.groups.get(group)
            if current is None or epoch > current.epoch:
                view.groups[group] = GroupView(epoch)
        for group, seen in view.groups.items():
            seen.ending = endings.get((group, seen.epoch))
            seen.second = (group, seen.epoch) in seconds
        return view

    def claim(self, group: GroupId, epoch: int) -> Claim | None:
        """Epoch ``epoch``'s claim as its holder last wrote it (None: no such epoch)."""
        try:
            data = json.loads(self.out.read_bytes(self.path(group, epoch)))
        except FileNotFoundError:
            return None
        process = data.get("process")
        return Claim(group, epoch, str(data["holder"]), int(data["by_shard"]), float(data["expires_at"]),
                     bool(data.get("started", True)),
                     None if not process else (str(process["boot"]), str(process["pid_namespace"]),
                                               int(process["pid"]), int(process["start"])),
                     float(data.get("started_at") or 0.0))

    def ending(self, group: GroupId, epoch: int, state: End) -> Ending | None:
        """What the holder of ``epoch`` recorded when it ended (None: it has not)."""
        try:
            data = json.loads(self.out.read_bytes(self.path(group, epoch, state)))
        except FileNotFoundError:
            return None
        return Ending(state, int(data.get("by_shard", -1)), int(data.get("rows", 0)), int(data.get("errors", 0)),
                      int(data.get("quarantined", 0)))

    def latest(self, group: GroupId, seen: GroupView | None) -> GroupView | None:
        """The group's latest epoch and its ending, looking up from ``seen`` (what a listing
        showed; epochs may have been created since)."""
        epoch = seen.epoch if seen is not None else 0
        while self.out.exists(self.path(group, epoch + 1)):
            epoch += 1
        if epoch == 0:
            return None
        view = GroupView(epoch)
        for state in ("done", "released"):
            if self.out.exists(self.path(group, epoch, state)):
                view.ending = state
        return view

    def state(self, group: GroupId, seen: GroupView | None) -> State:
        """What ``group`` is to a process that might take it, as ``seen`` shows it: ``free`` (never
        claimed, released, working past its expiry, or its holder ended), ``reserved`` (claimed ahead by a holder
        that has not started it), ``held`` or ``done``. Reads the claim of a working group."""
        return self.look(group, seen)[0]

    def look(self, group: GroupId, seen: GroupView | None) -> tuple[State, Claim | None]:
        """:meth:`state`, and the claim read to tell it (``held`` or ``reserved``; else None)."""
        if seen is None or seen.ending == "released":
            return "free", None
        if seen.ending == "done":
            return "done", None
        claim = self.claim(group, seen.epoch)
        if claim is None or self.clock() > claim.expires_at or holder_ended(claim.process, self.here):
            return "free", None
        return ("held" if claim.started else "reserved"), claim

    def is_free(self, group: GroupId, seen: GroupView | None) -> bool:
        """Whether anyone may take ``group`` now (:meth:`state` is ``free``)."""
        return self.state(group, seen) == "free"

    # -- writing --------------------------------------------------------------------------------

    def take(self, group: GroupId, seen: GroupView | None, *, started: bool = True) -> Claim | None:
        """Claim ``group`` after ``seen`` (its latest epoch as read: None if unclaimed): create the
        next epoch atomically, started or only reserved. Returns the claim, or None if another
        process created it first."""
        now = self.clock()
        claim = Claim(group, (seen.epoch if seen else 0) + 1, self.holder, self.shard, now + self.lease,
                      started, self.process, now if started else 0.0)
        if self.out.create_exclusive(self.path(group, claim.epoch), claim.to_bytes()):
            log.debug("claimed %s (epoch %d%s)", group, claim.epoch, "" if started else ", reserved")
            return claim
        return None

    def start(self, claim: Claim) -> Claim | None:
        """Begin reading a group this holder reserved: create its next epoch, started. None when
        another process created that epoch first: it took the group, and this holder sends none
        of its pages."""
        now = self.clock()
        started = Claim(claim.group, claim.epoch + 1, self.holder, self.shard, now + self.lease,
                        process=self.process, started_at=now)
        if self.out.create_exclusive(self.path(claim.group, started.epoch), started.to_bytes()):
            return started
        return None

    def join(self, claim: Claim) -> bool:
        """Join ``claim``'s epoch as its one second reader (an atomic create): False if another
        process did first. The holder keeps the claim; the second reader writes rows only."""
        record = {"holder": self.holder, "by_shard": self.shard, "at": self.clock()}
        return self.out.create_exclusive(self.second_path(claim.group, claim.epoch),
                                         json.dumps(record, sort_keys=True).encode())

    def joined(self, claim: Claim) -> bool:
        """Whether a second reader joined ``claim``'s epoch."""
        return self.out.exists(self.second_path(claim.group, claim.epoch))

    def superseded(self, claim: Claim) -> bool:
        """Whether a later epoch exists: the group was taken over."""
        return self.out.exists(self.path(claim.group, claim.epoch + 1))

    def renew(self, claim: Claim) -> Claim | None:
        """Push ``claim``'s expiry a lease ahead; None if the group was taken over meanwhile."""
        if self.superseded(claim):
            return None
        renewed = replace(claim, expires_at=self.clock() + self.lease)
        self.out.write_now(self.path(claim.group, claim.epoch), renewed.to_bytes())
        return renewed

    def end(self, claim: Claim, ending: Ending) -> None:
        """Record how this holder's work on its epoch ended. (After a takeover it changes nothing:
        the later epoch decides.)"""
        record = {"by_shard": self.shard, "rows": ending.rows, "errors": ending.errors,
                  "quarantined": ending.quarantined, "holder": self.holder, "at": self.clock()}
        data = json.dumps(record, sort_keys=True).encode()
        self.out.write_now(self.path(claim.group, claim.epoch, ending.state), data)


#: Which way a process came to a group it claims (:meth:`Claims.queue`): its own shard's, another
#: shard's, its own taken back from another process, or one it reads as a second reader (the
#: holder keeps its claim: :meth:`ClaimBook.join`).
Kind = Literal["own", "other", "back", "second"]


@dataclass
class OwnGroups:
    """How a shard's own groups stand, as the claims say (for its completion marker)."""

    #: Groups not done yet (held by others, or stopped).
    left: list[int]
    #: Done groups other shards read, by shard (``"00003"``).
    read_by: Counter[str] = field(default_factory=Counter)
    #: Error and quarantined rows in the done groups this process did not read (their readers' counts).
    errors: int = 0
    quarantined: int = 0


class Claims:
    """One process's claims on one page flow's groups (see the module docstring).

    :meth:`queue` says which group to read next and claims it, in a worker thread (the page flow
    pulls documents there); :meth:`start` turns a reserved claim into a started one; the claims
    held are renewed every lease/4 from :meth:`begin` until :meth:`close`, which releases those not
    ended. The run may stop on the event loop while the thread is claiming: a claim that lands
    after :meth:`close` is released at once, so none outlives its process unreleased (a rerun of
    the shard would find its group held until the lease ran out).

    Args:
        book: the claim files, as this process sees and makes them.
        groups_of: how many groups a shard has.
        steal: whether groups of other shards are taken.
        second_readers: whether, with nothing left to take, this process joins a group another
            process is reading as its second reader (docs/stragglers.md).
        stop: set when the run stops: nothing more is claimed.
        retry_errors, keep_quarantined: an own group done with error rows (quarantined ones
            without ``keep_quarantined``) is taken again to retry them.
    """

    def __init__(self, book: ClaimBook, groups_of: Callable[[int], int], *, steal: bool, stop: asyncio.Event,
                 retry_errors: bool = True, keep_quarantined: bool = True, second_readers: bool = False) -> None:
        self.book = book
        self.groups_of = groups_of
        self.steal = steal
        self.second_readers = steal and second_readers
        self.stop = stop
        self.retry_errors = retry_errors
        self.keep_quarantined = keep_quarantined
        #: The claims held now (renewed, released on close); one lost to another process is dropped.
        self.held: dict[GroupId, Claim] = {}
        #: Own groups found done when :meth:`queue` reached them.
        self.found_done = 0
        self._lock = threading.Lock()
        self._closed = False
        self._heartbeat: asyncio.Task[None] | None = None

    # -- which group next (a worker thread) ------------------------------------------------------

    def queue(self, ahead: Callable[[], None], now: Callable[[float], bool]) -> Iterator[tuple[Claim, Kind]]:
        """Claim the groups this process reads, one at a time, each reserved, once ``ahead``
        returns (the page flow has room for another group's pages): its own in order, then (with
        --steal) other shards' free groups, from the end of the shard with the most unclaimed,
        then its own groups others held and let go. A group another process holds reserved is
        taken, started, only when ``now(timeout)`` says this process could send its pages at once.
        Returns when none is left, or when the run stops."""
        own = self.groups_of(self.book.shard)
        view = self.book.view(self.book.shard)
        self.found_done = 0
        waiting: dict[int, GroupView | None] = {}
        for number in range(own):
            if self.stop.is_set():
                return
            group = GroupId(self.book.shard, self.book.num_shards, number)
            seen = view.groups.get(number)
            if seen is not None and seen.finished and not self.redo(group, seen):
                self.found_done += 1
                continue
            ahead()
            claim, seen = self._try_take(group, seen, own=True)
            if claim is not None:
                yield claim, "own"
            elif seen is not None and seen.finished:
                self.found_done += 1
            else:
                waiting[number] = seen
        yield from self._steal_and_wait(waiting, ahead, now)

    def redo(self, group: GroupId, seen: GroupView) -> bool:
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
        claim = self.take(group, seen)
        if claim is None:
            return None, self.book.latest(group, seen)
        return claim, seen

    def take(self, group: GroupId, seen: GroupView | None, *, started: bool = False) -> Claim | None:
        """Claim ``group`` (see :meth:`ClaimBook.take`) unless the run has stopped; held until ended."""
        if self.stop.is_set():
            return None
        claim = self.book.take(group, seen, started=started)
        if claim is None:
            return None
        with self._lock:
            if not self._closed:
                self.held[group] = claim
                return claim
        self._release(claim)
        return None

    def _steal_and_wait(self, waiting: dict[int, GroupView | None], ahead: Callable[[], None],
                        now: Callable[[float], bool]) -> Iterator[tuple[Claim, Kind]]:
        poll = min(10.0, self.book.lease / 4)
        while not self.stop.is_set():
            progressed = False
            for number, seen in list(waiting.items()):
                group = GroupId(self.book.shard, self.book.num_shards, number)
                latest = self.book.latest(group, seen)
                if latest is not None and latest.finished:
                    del waiting[number]
                    continue
                claim, latest = self._try_take(group, latest, own=False)
                if claim is not None:
                    del waiting[number]
                    progressed = True
                    log.info("took back %s (its holder released it or ended, or its lease ran out)", group)
                    yield claim, "back"
                else:
                    waiting[number] = latest
            ahead()
            again = False
            if self.steal:
                taken, kind, again = self._take_other(now)
                if taken is not None:
                    yield taken, kind
                    continue
            if not waiting and not again:
                # An own group claimed ahead here and taken by another process before it started
                # is not in ``waiting``: its end is waited for like any own group others hold.
                waiting.update(self._lost_own())
                if not waiting:
                    break
            if not progressed:
                # Reserved groups elsewhere: look again as soon as this flow has room for one.
                # Own groups held here, being read: their end comes with this flow's pages (a
                # second, not a quarter lease, so a shard's end is not held up by the look).
                # Else only own groups others hold: their end comes with the others' pages, the
                # last of the run; each look costs a check or two per group, so a few groups are
                # looked at every second (a slow shard waited 10 s after its groups were done, the
                # tail of issue 46's held-out run), many groups less often, at most every poll.
                if again:
                    now(min(poll, 1.0))
                else:
                    self._sleep(min(poll, 1.0 if self._reading_own(waiting) else max(1.0, len(waiting) / 8)))

    def _take_other(self, now: Callable[[float], bool]) -> tuple[Claim | None, Kind, bool]:
        """A group of another shard: an unclaimed one from the end of the shard with the most
        unclaimed (its owner reads from the start), else a free one (released, or its lease ran
        out), else, if this process could send its pages at once, a reserved one, else (with
        ``second_readers``, and room) the group another process started longest ago and nobody
        has joined, as its second reader (the holder's claim, kind ``second``). Returns the claim
        (None: none taken), its kind, and whether to look again later: reserved or unjoined
        groups are left, or another process claimed a group first (it may be this one's to take
        once reserved)."""
        candidates = []
        for shard in range(self.book.num_shards):
            if shard == self.book.shard or self.stop.is_set():
                continue
            view = self.book.view(shard)
            unclaimed = [g for g in range(self.groups_of(shard)) if g not in view.groups]
            open_ = [g for g, seen in view.groups.items() if not seen.finished]
            if unclaimed or open_:
                candidates.append((len(unclaimed), shard, unclaimed, open_, view))
        reserved: list[tuple[GroupId, GroupView]] = []
        reading: list[Claim] = []
        lost_race = False
        for _, shard, unclaimed, open_, view in sorted(candidates, key=lambda c: (c[0], c[1]), reverse=True):
            for number in reversed(unclaimed):
                if (claim := self.take(GroupId(shard, self.book.num_shards, number), None)) is not None:
                    log.info("taking %s (unclaimed)", claim.group)
                    return claim, "other", False
                lost_race = True
            for number in open_:
                group, seen = GroupId(shard, self.book.num_shards, number), view.groups[number]
                with self._lock:
                    if group in self.held:
                        continue
                state, claim = self.book.look(group, seen)
                if state == "free":
                    if (claim := self.take(group, seen)) is not None:
                        log.info("taking %s from its holder (released, ended, or its lease ran out)", group)
                        return claim, "other", False
                    lost_race = True
                elif state == "reserved":
                    reserved.append((group, seen))
                elif state == "held" and not seen.second and claim is not None:
                    reading.append(claim)
        for group, seen in reserved:
            if not now(0.0):
                return None, "other", True
            if (claim := self.take(group, seen, started=True)) is not None:
                log.info("taking %s, claimed ahead by a process that had not started it", group)
                return claim, "other", False
            lost_race = True
        if self.second_readers and not reserved and not lost_race:
            reading += self._own_read_elsewhere()
            if reading:
                joined = self._join_oldest(reading, now)
                if joined is not None:
                    return joined, "second", False
                return None, "other", True
        return None, "other", lost_race

    def _own_read_elsewhere(self) -> list[Claim]:
        """The claims on this shard's groups another process is reading, nobody beside it: a
        second reader's candidates too (a slow process that took them holds up this shard's own end)."""
        view = self.book.view(self.book.shard)
        found = []
        for number, seen in view.groups.items():
            group = GroupId(self.book.shard, self.book.num_shards, number)
            with self._lock:
                if group in self.held:
                    continue
            if not seen.second and (look := self.book.look(group, seen))[0] == "held" and look[1] is not None:
                found.append(look[1])
        return found

    def _join_oldest(self, reading: list[Claim], now: Callable[[float], bool]) -> Claim | None:
        """Join, as its second reader, the group among ``reading`` (its holders' claims) that its
        holder started longest ago, if this process has room to send its pages at once. Nothing is left to take
        anywhere by then: the slots it fills would otherwise stay idle to the run's end, and each
        group gets one second reader at most, so the run reads at most one copy of the pages
        still in flight when the first process runs out of work."""
        if not now(0.0):
            return None
        # Never a group this process holds: one it ended since the listing still reads as held.
        claims = [claim for claim in reading if claim.holder != self.book.holder]
        for claim in sorted(claims, key=lambda c: (c.started_at, c.group.shard, c.group.group)):
            if self.stop.is_set():
                return None
            if self.book.join(claim):
                log.info("reading %s beside its holder (shard %d), which started it %.0f s ago", claim.group,
                         claim.by_shard, max(0.0, self.book.clock() - claim.started_at))
                return claim
        return None

    def _reading_own(self, waiting: dict[int, GroupView | None]) -> bool:
        """Whether one of the own groups waited for is held here."""
        with self._lock:
            return any(g.shard == self.book.shard and g.group in waiting for g in self.held)

    def _lost_own(self) -> dict[int, GroupView]:
        """This shard's groups neither finished nor being read here: a reservation another process
        took, or one held here that may still be taken before its first page is sent (the queue
        ends before that is known: a process that reserved its own group and two others, and lost
        all three, ended without waiting for its own and with no completion marker)."""
        with self._lock:
            here = {g.group for g, claim in self.held.items() if g.shard == self.book.shard and claim.started}
        view = self.book.view(self.book.shard)
        return {n: seen for n, seen in view.groups.items() if not seen.finished and n not in here}

    def _sleep(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while not self.stop.is_set() and time.monotonic() < deadline:
            time.sleep(min(0.2, seconds))

    # -- the claims held -------------------------------------------------------------------------

    def holds(self, group: GroupId) -> bool:
        """Whether this process holds ``group`` (not ended, not lost to another process)."""
        with self._lock:
            return group in self.held

    def claim_of(self, group: GroupId) -> Claim | None:
        """The claim this process holds on ``group`` (None: not held here)."""
        with self._lock:
            return self.held.get(group)

    def start(self, group: GroupId) -> bool:
        """Start reading a held group (its first page is about to be sent): a reserved claim becomes
        a started one (:meth:`ClaimBook.start`). False when the group is no longer held here: another
        process took it before it started, so none of its pages may be sent."""
        with self._lock:
            claim = self.held.get(group)
        if claim is None:
            return False
        if claim.started:
            return True
        started = self.book.start(claim)
        with self._lock:
            if started is None:
                if group in self.held and self.held[group].epoch == claim.epoch:
                    del self.held[group]
                return False
            if not self._closed:
                self.held[group] = started
                return True
        self._release(started)
        return False

    def end(self, group: GroupId, ending: Ending) -> bool:
        """Record how this process's work on ``group`` ended; False (nothing written) when it no
        longer held it (taken over: the later epoch decides)."""
        with self._lock:
            claim = self.held.pop(group, None)
        # Renewal finds a takeover only every lease/4: a holder that wakes from a stall (a frozen
        # or starved process) may end the group before its next renewal runs, so look here too.
        if claim is None or self.book.superseded(claim):
            return False
        self.book.end(claim, ending)
        return True

    def _release(self, claim: Claim) -> None:
        try:
            self.book.end(claim, Ending("released", self.book.shard))
        except StorageError as exc:
            log.warning("could not release %s (others take it when its lease runs out): %s", claim.group, exc)

    def begin(self) -> None:
        """Renew the claims held, every lease/4 (on the running event loop)."""
        self._heartbeat = asyncio.get_running_loop().create_task(self._renew_forever())

    async def _renew_forever(self) -> None:
        while True:
            await asyncio.sleep(self.book.lease / 4)
            with self._lock:
                held = list(self.held.items())
            for group, claim in held:
                try:
                    renewed = await asyncio.to_thread(self.book.renew, claim)
                except StorageError as exc:  # the store is away: the next renewal may get through
                    log.warning("could not renew the claim on %s: %s", group, exc)
                    continue
                with self._lock:
                    if self.held.get(group) is not claim:
                        continue  # started, ended or released meanwhile
                    if renewed is not None:
                        self.held[group] = renewed
                        continue
                    del self.held[group]
                if not claim.started:
                    log.info("%s, claimed ahead here, was taken by a process with room to read it", group)
                else:
                    log.warning("%s was taken over by another process: this one did not renew its claim within the "
                                "%g s lease (too slow, or the store was away); pages are still written once",
                                group, self.book.lease)

    async def close(self) -> None:
        """Stop renewing; release the groups not ended (stopped, or their pages failed to be
        stored), so others may take them at once."""
        if self._heartbeat is not None:
            self._heartbeat.cancel()
            await asyncio.gather(self._heartbeat, return_exceptions=True)
        with self._lock:
            self._closed = True  # a claim that lands from now on is released by its taker
            unfinished = list(self.held.values())
            self.held.clear()
        for claim in unfinished:
            await asyncio.to_thread(self._release, claim)

    # -- a shard's own groups --------------------------------------------------------------------

    def own_groups(self, read_here: set[int]) -> OwnGroups:
        """This shard's groups as the claims say now: those not done, and who read the done ones
        (the error rows of those read elsewhere: ``read_here`` are this process's own count)."""
        shard = self.book.shard
        view = self.book.view(shard)
        own = OwnGroups([g for g in range(self.groups_of(shard)) if not (g in view.groups and view.groups[g].finished)])
        if own.left:
            return own
        for number, seen in view.groups.items():
            if number in read_here:
                continue
            ending = self.book.ending(GroupId(shard, self.book.num_shards, number), seen.epoch, "done")
            if ending is None:
                continue
            own.errors += ending.errors
            own.quarantined += ending.quarantined
            if ending.by_shard != shard:
                own.read_by[f"{ending.by_shard:05d}"] += 1
        return own

    def nothing_to_read(self) -> bool:
        """Whether this process would read nothing: every group of its shard done (with no error
        rows to retry), and (with --steal) no unclaimed or free group elsewhere."""
        shard, num_shards = self.book.shard, self.book.num_shards
        view = self.book.view(shard)
        for number in range(self.groups_of(shard)):
            seen = view.groups.get(number)
            if seen is None or not seen.finished or self.redo(GroupId(shard, num_shards, number), seen):
                return False
        if not self.steal:
            return True
        for other in range(num_shards):
            if other == shard:
                continue
            groups = self.book.view(other).groups
            if len(groups) < self.groups_of(other):
                return False  # an unclaimed group
            if any(not seen.finished and self.book.is_free(GroupId(other, num_shards, number), seen)
                   for number, seen in groups.items()):
                return False
        return True


def claims_summary(out: Storage) -> dict[str, dict[str, dict[str, Any]]]:
    """For ``llm-ocr status``: by page flow and shard (``SSSSS-of-NNNNN``), the claimed groups by
    state, and which shards read the done ones (``{"done": 12, "done_by": {"00003": 5}, ...}``)."""
    layouts: set[tuple[str, int, int]] = set()
    for path in out.glob(STATE_DIR, CLAIMS_DIR, "*", "*-of-*", "*.json"):
        parts = path.rsplit("/", 3)
        match = _SHARD_RE.search(parts[-2]) if len(parts) == 4 else None
        if match is not None:
            layouts.add((parts[-3], int(match.group(1)), int(match.group(2))))
    summary: dict[str, dict[str, dict[str, Any]]] = {}
    for flow, shard, num_shards in sorted(layouts):
        book = ClaimBook(out, flow, num_shards, holder="status", shard=-1, lease=0.0)
        entry: dict[str, Any] = {"done": 0, "working": 0, "free": 0, "done_by": {}}
        for group, seen in book.view(shard).groups.items():
            gid = GroupId(shard, num_shards, group)
            if seen.ending == "done":
                entry["done"] += 1
                ending = book.ending(gid, seen.epoch, "done")
                by = f"{ending.by_shard if ending else -1:05d}"
                entry["done_by"][by] = entry["done_by"].get(by, 0) + 1
            elif book.is_free(gid, seen):
                entry["free"] += 1
            else:
                entry["working"] += 1
        summary.setdefault(flow, {})[f"{shard:05d}-of-{num_shards:05d}"] = entry
    return summary
