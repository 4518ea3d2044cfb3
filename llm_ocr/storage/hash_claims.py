"""Which document of a run is the first of its bytes: one small file per content hash.

With work groups, the shards of one run read their documents side by side, and two
byte-identical documents may sit in different shards' groups (docs/dedup.md). The first process
to reach a hash creates

    OUT/_state/claims/hashes/FLOW/HH/SHA256-EEEE.json

naming the document it reads and the page group it is in (``HH``: the hash's first two hex
digits, so no folder holds more than 1/256 of them). It is created with
:meth:`Storage.create_exclusive`, so of any number of processes reaching copies of one document
at once exactly one names its document; every other copy is a duplicate of the one named, whose
rows the group's parts will hold.

The claim has no lease of its own: it lives as long as its group's claim. When the named
document's group is free again (its holder died or stopped before storing the document's rows),
a duplicate's process may create the next epoch (``EEEE`` + 1) naming itself and read its own
copy; the latest epoch names the first from then on, and whoever reads the old group later finds
its document a duplicate of the new first.

Pages are claimed the same way, by the sha256 of their decoded pixels, under
``OUT/_state/claims/pages/FLOW/HH/`` (:data:`PAGES_DIR`): the claim then names a page of the
document too (:mod:`llm_ocr.runners.shared_pages`).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass

from llm_ocr.storage.claims import CLAIMS_DIR, ClaimBook, Ending, GroupId, GroupView
from llm_ocr.storage.state import STATE_DIR
from llm_ocr.storage.url import Storage

log = logging.getLogger(__name__)

HASHES_DIR = "hashes"
#: Where the claims of pages (by their pixels' sha256) live, beside the documents'.
PAGES_DIR = "pages"


@dataclass(frozen=True)
class FirstCopy:
    """Epoch ``epoch`` of a hash's claim: the document ``doc_id`` of ``group`` (its page ``page``,
    for a page's claim; 0 for a document's) is read as the first."""

    sha256: str
    epoch: int
    doc_id: str
    group: GroupId
    holder: str
    page: int = 0

    def to_bytes(self) -> bytes:
        data = {"sha256": self.sha256, "epoch": self.epoch, "doc_id": self.doc_id, "shard": self.group.shard,
                "num_shards": self.group.num_shards, "group": self.group.group, "holder": self.holder}
        if self.page:
            data["page"] = self.page
        return json.dumps(data, sort_keys=True).encode()


class HashClaims:
    """The hash claims of one output and one page flow, as the process ``holder`` makes them
    (``kind``: :data:`HASHES_DIR` for documents, :data:`PAGES_DIR` for pages)."""

    def __init__(self, out: Storage, flow: str, holder: str, kind: str = HASHES_DIR) -> None:
        self.out = out
        self.flow = flow
        self.holder = holder
        self.kind = kind

    def path(self, sha256: str, epoch: int) -> str:
        """Where epoch ``epoch`` of ``sha256``'s claim lives."""
        return self.out.path(STATE_DIR, CLAIMS_DIR, self.kind, self.flow, sha256[:2], f"{sha256}-{epoch:04d}.json")

    def claim(self, sha256: str, doc_id: str, group: GroupId, page: int = 0) -> FirstCopy:
        """The first of ``sha256``: ``doc_id`` (its page ``page``) of ``group`` when this call made
        it so (or an earlier one did: the same document reached again), else the document the
        latest epoch names."""
        mine = FirstCopy(sha256, 1, doc_id, group, self.holder, page)
        if self.out.create_exclusive(self.path(sha256, 1), mine.to_bytes()):
            return mine
        latest = self.latest(sha256)
        assert latest is not None, "epoch 1 exists: it was just refused"
        return latest

    def latest(self, sha256: str) -> FirstCopy | None:
        """The latest epoch of ``sha256``'s claim (None: nobody claimed it)."""
        epoch = 0
        while self.out.exists(self.path(sha256, epoch + 1)):
            epoch += 1
        if epoch == 0:
            return None
        data = json.loads(self.out.read_bytes(self.path(sha256, epoch)))
        group = GroupId(int(data["shard"]), int(data["num_shards"]), int(data["group"]))
        return FirstCopy(sha256, epoch, str(data["doc_id"]), group, str(data["holder"]), int(data.get("page", 0)))

    def take_over(self, first: FirstCopy, doc_id: str, group: GroupId, page: int = 0, *, book: ClaimBook,
                  seen: GroupView | None) -> FirstCopy | None:
        """Name ``doc_id`` of ``group`` the first of ``first.sha256`` in the epoch after ``first``,
        whose group ``book`` found free as ``seen`` shows it; returns the latest epoch (this one, or
        the one another process created first), or None when another process claimed the first's
        group since (its reader reads the first: look again later).

        A group found free may be claimed by a reader at any moment (one never claimed yet: its
        shard had not started; or one let go). Taken over without holding it, a reader that
        claimed it between the look and the take-over found the old first still the latest and
        read it, and the copy was read too (shards started side by side: each reads its own first
        and the other's copy). So the first's group is held while the epoch is written: no reader
        can claim it meanwhile, and the one that claims it after finds its document a copy. It is
        let go at once (this process does not read it)."""
        hold = book.take(first.group, seen, started=True)
        if hold is None:
            return None
        try:
            mine = FirstCopy(first.sha256, first.epoch + 1, doc_id, group, self.holder, page)
            if self.out.create_exclusive(self.path(first.sha256, mine.epoch), mine.to_bytes()):
                log.info("%s: the first copy (%s) was left unread (its group was free); read here instead", doc_id,
                         first.doc_id)
                return mine
            latest = self.latest(first.sha256)
            assert latest is not None
            return latest
        finally:
            book.end(hold, Ending("released", book.shard))
