"""Each process's pace, published beside the work groups' claims, and whether a group reserved
here would end sooner if a faster process took it (docs/stragglers.md, "A slow process leaves its
last groups to faster ones").

A process starts a group it reserved as soon as one of its slots is free. Near the end of a run,
when no group is free anywhere, that is wrong for a process several times slower than the
others: its last group ends long after theirs would have (issue 46's sweep: one shard 5x slower
started four one-page groups at 62 s and ended at 82 s, the fast ones done by 72 s). The
faster processes already take a group reserved and not started when their slots are free; what
the slow one needs is to know it should wait for that. So every process publishes, from what
its server actually answered:

- ``latency_s``: the mean seconds of its recent requests (:class:`Pace`), ``slots``: its in-flight
  limit, ``backlog``: pages in flight and waiting to be sent, ``at``: when.

and a process about to start a reserved group compares when it would end here (now, plus its
rounds at its own latency) with when the best other process would: once its backlog leaves it a
slot, and once the groups still free anywhere are read (the others take those first; their pages
at the others' pace together), plus its rounds at its latency. It waits only if elsewhere is
sooner by more than half a request of its own (the estimates' own error: a request's phase is
not known), and only until that process should have had a slot free, plus two of the takers'
looks (:data:`TAKER_LOOK_S`), and never longer than the group would take here: a wrong estimate
costs at most that, and what was waited is counted in the completion marker
(``groups.deferred_s``).
"""

from __future__ import annotations

import json
import logging
import math
import random
import time
from collections import deque
from dataclasses import asdict, dataclass

from llm_ocr.storage.claims import CLAIMS_DIR
from llm_ocr.storage.state import STATE_DIR
from llm_ocr.storage.stores import StorageError
from llm_ocr.storage.url import Storage

log = logging.getLogger("llm_ocr")

#: How often a process with free slots looks for a reserved group to take (its claims thread
#: waits on the room at most this long between looks: :meth:`llm_ocr.storage.claims.Claims.queue`).
TAKER_LOOK_S = 1.0
#: Answers a process must have had before its pace counts (its own, or a peer's).
MIN_ANSWERS = 4
#: Recent answers the mean is over: a server's pace now, not the run's.
WINDOW = 32
#: Peers' records read at most this often, and at most :data:`SAMPLE` of them (a random sample:
#: with a thousand shards, reading every record at every decision would cost the store more than
#: the claims do).
REFRESH_S = 2.0
SAMPLE = 16


@dataclass(frozen=True)
class PaceRecord:
    """One process's pace as it published it."""

    holder: str
    num_shards: int
    latency_s: float
    slots: int
    backlog: int
    at: float
    answers: int = 0

    def free_at(self) -> float:
        """When this process should have a slot free and nothing waiting for it: its backlog
        beyond one slot's room, drained at ``slots / latency_s`` pages a second."""
        over = max(0, self.backlog - self.slots + 1)
        return self.at + over * self.latency_s / max(1, self.slots)

    def ends(self, pages: int, now: float) -> float:
        """When this process would end a group of ``pages`` pages given it ``now``."""
        return max(now, self.free_at()) + self.latency_s * math.ceil(max(1, pages) / max(1, self.slots))


class Pace:
    """A process's own pace: the durations of its recent requests, as its server answered them."""

    def __init__(self) -> None:
        self._recent: deque[float] = deque(maxlen=WINDOW)
        self.answers = 0

    def answered(self, seconds: float) -> None:
        """A page's request took ``seconds`` (from being sent to its answer read)."""
        self._recent.append(seconds)
        self.answers += 1

    @property
    def latency_s(self) -> float | None:
        """The mean of the recent requests' seconds (None: too few answers yet)."""
        if len(self._recent) < MIN_ANSWERS:
            return None
        return sum(self._recent) / len(self._recent)


def deferral(own: PaceRecord, peers: list[PaceRecord], pages: int, now: float, *, free_pages: float = 0.0,
             population: int = 0) -> float | None:
    """Until when (wall clock) to leave a reserved group of ``pages`` pages unstarted so that a
    faster peer takes it; None: start it now. See the module docstring for the rule and its bound.

    ``free_pages`` are the pages of groups still free (unclaimed, or let go): the peers read those
    before they take a reserved one, at their pace together (``peers`` a sample of ``population``
    records: their rate is scaled up to it)."""
    here = now + own.latency_s * math.ceil(max(1, pages) / max(1, own.slots))
    best = min(peers, key=lambda p: p.ends(pages, now), default=None)
    if best is None:
        return None
    rate = sum(p.slots / p.latency_s for p in peers if p.latency_s > 0) * max(1.0, population / len(peers))
    first = free_pages / rate if rate > 0 else math.inf
    if best.ends(pages, now) + first > here - own.latency_s / 2:
        return None
    until = max(now, best.free_at()) + first + 2 * TAKER_LOOK_S
    return min(until, here)


class PaceBoard:
    """The pace records of one output's page flow: this process's (published, at most every
    :meth:`interval`) and its peers' (read at most every :data:`REFRESH_S`)."""

    def __init__(self, out: Storage, flow: str, num_shards: int, holder: str) -> None:
        self.out, self.flow, self.num_shards, self.holder = out, flow, num_shards, holder
        self._published = -math.inf
        self._read_at = -math.inf
        self._peers: list[PaceRecord] = []
        #: How many other records there were at the last read (the sample is of these).
        self.population = 0

    def folder(self) -> tuple[str, ...]:
        return STATE_DIR, CLAIMS_DIR, self.flow, "paces"

    def path(self, holder: str) -> str:
        return self.out.path(*self.folder(), f"{holder}.json")

    def due(self, latency_s: float) -> bool:
        """Whether to publish again: at most once a second, and once per half request."""
        return time.time() - self._published >= max(1.0, latency_s / 2)

    def publish(self, record: PaceRecord) -> None:
        """Write this process's record (a worker thread: on a remote store it is a request)."""
        self._published = time.time()
        self.out.write_now(self.path(self.holder), json.dumps(asdict(record), sort_keys=True).encode())

    def withdraw(self) -> None:
        """Remove this process's record (it ends: it takes no more groups)."""
        try:
            self.out.delete(self.path(self.holder))
        except (OSError, StorageError) as exc:
            log.debug("pace record not removed: %s", exc)

    def peers(self, max_age: float) -> list[PaceRecord]:
        """The other processes' records no older than ``max_age`` seconds (a process killed leaves
        one behind: the age drops it), refreshed at most every :data:`REFRESH_S`."""
        now = time.time()
        if now - self._read_at < REFRESH_S:
            return self._peers
        self._read_at = now
        paths = [p for p in self.out.glob(*self.folder(), "*.json") if not p.endswith(f"/{self.holder}.json")]
        self.population = len(paths)
        peers = []
        for path in random.sample(paths, min(SAMPLE, len(paths))):
            try:
                data = json.loads(self.out.read_bytes(path))
                record = PaceRecord(**data)
            except (FileNotFoundError, ValueError, TypeError):
                continue  # withdrawn meanwhile, or not a record of this version
            if record.num_shards == self.num_shards and now - record.at <= max_age:
                peers.append(record)
        self._peers = peers
        return peers
