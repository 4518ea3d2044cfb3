"""The serial background writer every row writer stands on: stores run in a worker thread, one
at a time, never blocking the event loop.

A writer buffers rows on the event loop and hands a store (a part, or a page group's rows) to
:meth:`SerialWriter.submit`, which waits for the store before it, then starts this one in a
thread. One store at a time is the back-pressure that bounds memory when storage is slow: a
second full buffer waits for the first to be stored. :meth:`SerialWriter.close` stores what is
buffered, waits for the last store, and raises the first failure of any of them.

The wait and the start are one step under a lock: two submits at once (a full buffer and the
flush timer, or the rows of two groups completing together) would otherwise both find no store
pending, and the later one's task replace the earlier one's, which close() would then never wait
for (seen in CI: a shard checked its groups done before a retried part commit had landed).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class SerialWriter:
    """Stores handed over in order, one at a time in a worker thread (see the module docstring).
    Subclasses buffer rows and implement :meth:`flush`, which hands the buffer to :meth:`submit`."""

    def __init__(self) -> None:
        self._pending: asyncio.Task[None] | None = None
        self._turn = asyncio.Lock()
        #: The first store that failed: raised again by :meth:`close` (its rows are redone by a
        #: rerun, since the shard then ends without its completion marker).
        self.failure: BaseException | None = None

    async def flush(self) -> None:
        """Hand what is buffered to a store (waiting for the previous store first)."""

    async def submit(self, store: Callable[[], None]) -> None:
        """Wait for the store under way, then start ``store`` in a worker thread."""
        async with self._turn:
            await self._wait_pending()
            self._pending = asyncio.create_task(asyncio.to_thread(self._run, store))

    def _run(self, store: Callable[[], None]) -> None:
        try:
            store()
        except BaseException as exc:
            self.failure = self.failure or exc
            raise

    async def _wait_pending(self) -> None:
        if self._pending is not None:
            pending, self._pending = self._pending, None
            await pending

    async def close(self) -> None:
        """Store everything buffered and wait until it is stored (raises if any store failed)."""
        await self.flush()
        async with self._turn:
            await self._wait_pending()
        if self.failure is not None:
            raise self.failure
