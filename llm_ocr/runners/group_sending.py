"""The page flow's hooks into a process's work groups, as it plans and sends pages: how many
rows each group expects and in what order a second reader reads them (:meth:`GroupSending.planned`),
whether a page may be sent (:meth:`GroupSending.admit`: a group starts with its first page, and
one another process took before that is dropped), and which pages go ahead of others
(:meth:`GroupSending.started`). Called on the event loop."""

from __future__ import annotations

import asyncio
import logging

from llm_ocr.runners.group_state import GroupBase
from llm_ocr.sources import DocumentRef

log = logging.getLogger("llm_ocr")


class GroupSending(GroupBase):
    """Planning and sending the pages of the groups held here (part of :class:`~llm_ocr.runners.groups.GroupWork`)."""

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

    def started(self, ref: DocumentRef | None) -> bool:
        """Whether a page of ``ref`` may go ahead of waiting pages of groups only claimed: its
        group has started here (or it is of no group, or of one dropped here: :meth:`admit`
        settles those at once)."""
        _, held = self._held_of(ref)
        return held is None or held.started
