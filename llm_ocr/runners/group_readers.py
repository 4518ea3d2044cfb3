"""Two readers of one group (docs/stragglers.md, "Second readers"): the holder and a second
reader both read the group's new parts every second; a page the other stored is left out when its
turn comes (:meth:`TwoReaders.left_out`), or its request in flight is stopped
(:meth:`TwoReaders.watch`), and it counts as stored. Nothing is estimated: whichever server
answers a page first wins it."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from llm_ocr.runners.group_state import GroupBase, HeldGroup
from llm_ocr.sources import DocumentRef
from llm_ocr.storage.claims import GroupId
from llm_ocr.storage.group_parts import GroupLog

log = logging.getLogger("llm_ocr")


class TwoReaders(GroupBase):
    """What a group read by two processes needs here (part of :class:`~llm_ocr.runners.groups.GroupWork`)."""

    def read_second(self, ref: DocumentRef | None) -> bool:
        """Whether ``ref``'s group is read here as its second reader (its pages go from the end)."""
        _, held = self._held_of(ref)
        return held is not None and held.second

    def shared(self, group: GroupId) -> bool:
        """Whether ``group`` is read here and by another process (its rows are stored as they come)."""
        with self._lock:
            held = self.held.get(group)
            return held is not None and held.shared

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
                    await self._store_read_here(group)
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
