"""The parts of one page group: an append-only log two writers can share without writing a page twice.

With work claims (docs/stragglers.md) the rows of a shard's page group ``G`` go to parts named

    part-SSSSS-of-NNNNN-GGGGGG-JJJJ.parquet

for slots ``J = 0, 1, 2...`` of the group, whoever writes them (the shard itself, or a shard that
took the group over): the shard in the name stays the shard that owns the documents, so every
reader (Describe, Assemble, ``llm-ocr status``, ``load_dataset``) sees the same layout as without
claims. Three rules make the log safe for any number of writers, whatever their clocks say:

1. a slot is only ever **created** with :meth:`Storage.create_exclusive`, so each slot has one
   writer;
2. a writer reads every existing slot (from 0 up) before it creates the next one, and leaves out
   of its part every page some slot already holds (and a page-0 row, "the document could not be
   opened", once the document has page rows, or the reverse); when it loses a slot to another
   writer it reads that slot and tries the next one;
3. a slot is never deleted (an unreadable or emptied part is rewritten with no rows), and it is
   only rewritten to drop rows (error rows to retry), by whoever holds the group's claim.

So a page in slot ``J`` was absent from every slot below ``J`` when ``J``'s writer looked, and
no slot below ``J`` can be created after it (slots are created in order and never freed): no two
slots hold one page. The claims keep two writers off one group almost always; this log is what
makes the rare overlap (a lease that ran out while its holder was alive but slow) harmless.
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from llm_ocr.storage.parts import ShardIndex, parquet_file, rows_to_bytes, table_to_bytes
from llm_ocr.storage.url import Storage

log = logging.getLogger(__name__)

GROUP_PART_RE = re.compile(r"part-(\d{5})-of-(\d{5})-(\d{6})-(\d{4,})\.parquet$")

#: The columns a scan reads to know which pages a slot holds.
KEY_COLUMNS = ["doc_id", "page", "status", "num_pages", "quarantined"]


def group_part_name(shard: int, num_shards: int, group: int, slot: int) -> str:
    """File name of slot ``slot`` of group ``group`` of a shard."""
    return f"part-{shard:05d}-of-{num_shards:05d}-{group:06d}-{slot:04d}.parquet"


def is_group_part(path: str) -> bool:
    """Whether ``path`` is a part of a page group (as opposed to a shard's numbered part)."""
    return GROUP_PART_RE.search(path) is not None


@dataclass
class Present:
    """The pages a group's slots hold: ``(doc_id, page)``, and the documents with a page-0 row
    or with page rows (a page-0 row and page rows of one document exclude each other)."""

    keys: set[tuple[str, int]] = field(default_factory=set)
    whole_docs: set[str] = field(default_factory=set)
    paged_docs: set[str] = field(default_factory=set)

    def add(self, doc_id: str, page: int) -> None:
        self.keys.add((doc_id, page))
        (self.whole_docs if page == 0 else self.paged_docs).add(doc_id)

    def holds(self, doc_id: str, page: int) -> bool:
        """Whether a row of this page would be a second one."""
        if (doc_id, page) in self.keys:
            return True
        return doc_id in self.paged_docs if page == 0 else doc_id in self.whole_docs


@dataclass
class Appended:
    """What one :meth:`GroupLog.append` stored: rows written, and rows left out because another
    writer's slot held their page already."""

    written: int = 0
    already_there: int = 0
    slots: list[int] = field(default_factory=list)
    #: The rows left out, by status (a reader's counters counted them: the marker takes them back).
    left_out: Counter[str] = field(default_factory=Counter)


class GroupLog:
    """The slots of one page group in one stage folder (see the module docstring)."""

    def __init__(self, stage: Storage, schema: pa.Schema, shard: int, num_shards: int, group: int) -> None:
        self.stage = stage
        self.schema = schema
        self.shard = shard
        self.num_shards = num_shards
        self.group = group
        self.present = Present()
        #: The first slot this writer has not read yet.
        self.next_slot = 0

    def path(self, slot: int) -> str:
        """Where slot ``slot`` lives."""
        return self.stage.path(group_part_name(self.shard, self.num_shards, self.group, slot))

    def _read(self, slot: int, columns: list[str] | None) -> pa.Table | None:
        """Slot ``slot`` (None: not created); an unreadable one is rewritten empty (never deleted:
        rule 3), its pages redone."""
        try:
            data = self.stage.read_bytes(self.path(slot))
        except FileNotFoundError:
            return None
        try:
            parquet = parquet_file(data)
            present = [c for c in (columns or parquet.schema_arrow.names) if c in parquet.schema_arrow.names]
            return parquet.read(columns=present)
        except (pa.ArrowInvalid, OSError) as exc:
            log.warning("emptying unreadable part %s (%s); its pages will be redone",
                        self.stage.display(self.path(slot)), exc)
            self.stage.write_atomic(self.path(slot), rows_to_bytes([], self.schema))
            return pa.table({name: pa.array([], type=self.schema.field(name).type) for name in KEY_COLUMNS
                             if name in self.schema.names})

    def _learn(self, table: pa.Table) -> None:
        for doc_id, page in zip(table.column("doc_id").to_pylist(), table.column("page").to_pylist()):
            self.present.add(doc_id, page)

    def catch_up(self) -> None:
        """Read the slots other writers created since this writer last looked."""
        while (table := self._read(self.next_slot, ["doc_id", "page"])) is not None:
            self._learn(table)
            self.next_slot += 1

    def scan(self, *, retry_errors: bool = True, keep_quarantined: bool = False) -> ShardIndex:
        """Read every slot, as a holder does when it takes the group: which pages are done. With
        ``retry_errors``, error rows (but quarantined ones with ``keep_quarantined``) are dropped
        from their slots, so their pages are read again and appear once (rule 3)."""
        index = ShardIndex()
        self.present = Present()
        self.next_slot = 0
        while (table := self._read(self.next_slot, KEY_COLUMNS)) is not None:
            statuses = table.column("status").to_pylist()
            held = ([bool(q) for q in table.column("quarantined").to_pylist()]
                    if keep_quarantined and "quarantined" in table.column_names else [False] * len(statuses))
            keep = [s != "error" or q for s, q in zip(statuses, held)]
            if retry_errors and not all(keep):
                index.dropped_error_rows += keep.count(False)
                whole = self._read(self.next_slot, None)
                assert whole is not None
                self.stage.write_atomic(self.path(self.next_slot), table_to_bytes(whole.filter(pa.array(keep))))
                table = table.filter(pa.array(keep))
                held = [q for q, k in zip(held, keep) if k]
            self._learn(table)
            for doc_id, page, status, num_pages, quarantined in zip(
                table.column("doc_id").to_pylist(), table.column("page").to_pylist(),
                table.column("status").to_pylist(), table.column("num_pages").to_pylist(), held,
            ):
                index.status_counts[status] += 1
                index.kept_quarantined += quarantined
                if status != "error" or quarantined or not retry_errors:
                    index.done_pages[doc_id].add(page)
                if num_pages is not None:
                    index.num_pages[doc_id] = num_pages
            self.next_slot += 1
        return index

    def append(self, rows: Iterable[dict[str, Any]]) -> Appended:
        """Store ``rows`` in the next free slot, without the pages some slot holds already
        (rule 2); returns what was written and what was left out."""
        pending = list(rows)
        done = Appended()
        self.catch_up()
        while True:
            fresh = [row for row in pending if not self.present.holds(row["doc_id"], row["page"])]
            done.already_there += len(pending) - len(fresh)
            if len(fresh) < len(pending):
                kept = {id(row) for row in fresh}
                done.left_out.update(str(row.get("status")) for row in pending if id(row) not in kept)
            pending = fresh
            if not pending:
                return done
            slot = self.next_slot
            if self.stage.create_exclusive(self.path(slot), rows_to_bytes(pending, self.schema)):
                for row in pending:
                    self.present.add(row["doc_id"], row["page"])
                self.next_slot = slot + 1
                done.written += len(pending)
                done.slots.append(slot)
                return done
            log.info("%s was created by another writer first: reading it, then the next slot",
                     self.stage.display(self.path(slot)))
            self.catch_up()
