"""A worker's claims: one claimer per worker, however many documents it reads at once.

The worker runs as it does in the service (:meth:`llm_ocr.service.worker.Worker.run`) on a real
SQLite queue; opening a model endpoint and reading a document are replaced by ending the
document, since what is counted is the claims."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from llm_ocr.service.queue import Document
from llm_ocr.service.spool import Spool
from llm_ocr.service.sqlite import SQLiteQueue
from llm_ocr.service.worker import Worker, WorkerSettings


class CountingQueue(SQLiteQueue):
    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.claims = 0

    def claim(self, owner: str, lease_s: float, max_deliveries: int) -> Document | None:
        self.claims += 1
        return super().claim(owner, lease_s, max_deliveries)


class EndingWorker(Worker):
    """Ends each document it takes at once, and says so."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.ended: asyncio.Queue[str] = asyncio.Queue()

    @contextlib.asynccontextmanager
    async def _endpoint(self) -> AsyncIterator[None]:
        yield None  # no model: nothing is read

    async def process(self, doc: Document, stop: asyncio.Event) -> None:
        await asyncio.to_thread(self.queue.finish, doc.id, self.name, "done", pages_done=1, pages_failed=0)
        await self.ended.put(doc.id)


async def _three_documents(tmp: Path) -> tuple[list[str], int]:
    queue = CountingQueue(tmp / "q.db")
    # `poll` an hour: every claim but the first is one a submission woke.
    settings = WorkerSettings(concurrency=8, poll=3600)
    worker = EndingWorker(queue, Spool(str(tmp)), settings)
    stop = asyncio.Event()
    loop = asyncio.create_task(worker.run(stop))
    ended = []
    for n in range(3):
        queue.submit(f"doc{n}", name=f"doc{n}.png", input_url=str(tmp / f"doc{n}.png"), options={}, pages=1,
                     key=None, limit=10)
        worker.wake.set()  # what the gateway in the same process does after a submission
        ended.append(await asyncio.wait_for(worker.ended.get(), timeout=120))
    stop.set()
    await asyncio.wait_for(loop, timeout=120)
    return ended, queue.claims


def test_a_submission_wakes_one_claim_not_one_per_place(tmp_path: Path) -> None:
    ended, claims = asyncio.run(_three_documents(tmp_path))
    assert ended == ["doc0", "doc1", "doc2"]
    # One claim when the worker starts, then per document the claim that takes it and, at most,
    # one that finds the queue empty: not eight (one per place) racing for each document.
    assert claims <= 1 + 2 * len(ended), claims
