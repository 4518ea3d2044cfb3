"""Work claims: which process reads which page group of a shard now, under a lease.

A shard's documents are cut into page groups (:mod:`llm_ocr.runners.groups`). Before a process
reads a group, owner or not, it claims it; a shard that has finished its own groups claims
unfinished ones of slow or dead shards (docs/stragglers.md). Claims are small JSON files in

    OUT/_state/claims/FLOW/SSSSS-of-NNNNN/

for the groups ``G`` of shard ``S``, one pair per epoch ``E`` (1, 2, ...) of a group:

- ``GGGGGG-EEEE.json``, the claim: who holds the group (``holder``, ``by_shard``) and until when
  (``expires_at``, wall clock). It is created with :meth:`Storage.create_exclusive` (atomic
  create-if-absent on the store itself), so of any number of processes racing for one epoch
  exactly one gets it. Its holder rewrites it every lease/4 to push ``expires_at`` forward.
- ``GGGGGG-EEEE.done.json`` or ``GGGGGG-EEEE.released.json``, written by the holder when it ends:
  done (every page of the group has a row; how many rows are errors, which a rerun retries), or
  released (stopped before the end, SIGTERM: anyone may take it at once).

The group's **latest** epoch decides: no claim, released, or working past ``expires_at`` is free,
and taking a free group is creating the next epoch; done is finished. One listing of a shard's
folder tells which groups are unclaimed, done or released; only working ones need a read (their
expiry). Only an epoch's holder writes its files, and a holder whose epoch is no longer the
latest has lost the group (its lease ran out while it was alive but slow).

Clocks: ``expires_at`` is compared with the reader's clock, so machines' clocks should agree to
well within a lease (NTP does). A wrong clock costs work, never rows: the parts of a group are an
append-only log that two holders can share without writing a page twice (:mod:`.group_parts`).
"""

from __future__ import annotations

import json
import logging
import os
import re
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from llm_ocr.storage.state import STATE_DIR
from llm_ocr.storage.url import Storage

log = logging.getLogger(__name__)

CLAIMS_DIR = "claims"
_FILE_RE = re.compile(r"(\d{6})-(\d{4,})(?:\.(done|released))?\.json$")
_SHARD_RE = re.compile(r"(\d{5})-of-(\d{5})$")

End = Literal["done", "released"]


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

    def to_bytes(self) -> bytes:
        return json.dumps({"holder": self.holder, "by_shard": self.by_shard, "expires_at": self.expires_at,
                           "shard": self.group.shard, "num_shards": self.group.num_shards, "group": self.group.group,
                           "epoch": self.epoch}, sort_keys=True).encode()


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
    """

    def __init__(
        self, out: Storage, flow: str, num_shards: int, *, holder: str, shard: int, lease: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.out = out
        self.flow = flow
        self.num_shards = num_shards
        self.holder = holder
        self.shard = shard
        self.lease = lease
        self.clock = clock

    # -- paths ----------------------------------------------------------------------------------

    def folder(self, shard: int) -> tuple[str, ...]:
        """The parts of the path of ``shard``'s claims folder under ``out``."""
        return STATE_DIR, CLAIMS_DIR, self.flow, f"{shard:05d}-of-{self.num_shards:05d}"

    def path(self, group: GroupId, epoch: int, ending: End | None = None) -> str:
        """Where epoch ``epoch`` of ``group``'s claim (or its ending) lives."""
        name = f"{group.group:06d}-{epoch:04d}" + (f".{ending}" if ending else "") + ".json"
        return self.out.path(*self.folder(group.shard), name)

    # -- reading --------------------------------------------------------------------------------

    def view(self, shard: int) -> ShardView:
        """``shard``'s claimed groups: one listing, no reads."""
        view = ShardView()
        endings: dict[tuple[int, int], End] = {}
        for path in self.out.glob(*self.folder(shard), "*.json"):
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
        return view

    def claim(self, group: GroupId, epoch: int) -> Claim | None:
        """Epoch ``epoch``'s claim as its holder last wrote it (None: no such epoch)."""
        try:
            data = json.loads(self.out.read_bytes(self.path(group, epoch)))
        except FileNotFoundError:
            return None
        return Claim(group, epoch, str(data["holder"]), int(data["by_shard"]), float(data["expires_at"]))

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

    def is_free(self, group: GroupId, seen: GroupView | None) -> bool:
        """Whether anyone may take ``group`` now, as ``seen`` shows it: never claimed, released,
        or working past its expiry (this reads the claim)."""
        if seen is None or seen.ending == "released":
            return True
        if seen.ending == "done":
            return False
        claim = self.claim(group, seen.epoch)
        return claim is None or self.clock() > claim.expires_at

    # -- writing --------------------------------------------------------------------------------

    def take(self, group: GroupId, seen: GroupView | None) -> Claim | None:
        """Claim ``group`` after ``seen`` (its latest epoch as read: None if unclaimed): create the
        next epoch atomically. Returns the claim, or None if another process created it first."""
        claim = Claim(group, (seen.epoch if seen else 0) + 1, self.holder, self.shard, self.clock() + self.lease)
        if self.out.create_exclusive(self.path(group, claim.epoch), claim.to_bytes()):
            log.debug("claimed %s (epoch %d)", group, claim.epoch)
            return claim
        return None

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
