"""A writer's close() waits for every part it started, also when two flushes ran at once
(llm_ocr.storage.writer.SerialWriter, which PartWriter and the work groups' GroupWriter stand on).

Two flushes at once (a full buffer and the flush timer, or rows of two groups completing
together) both waited for the write before them; the later one then found none pending and
started its own, and the earlier one's task replaced it: close() never waited for the lost write.
On the Hub, where a part is a commit that may be retried, a shard wrote its completion checks
before that part was stored (CI of stop 43: "groups 1 of this shard are not done"). The test
holds the writes with gates, so the order of events is the test's, not the machine's.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

from llm_ocr.records import page_schema
from llm_ocr.storage import Storage
from llm_ocr.storage.parts import PartWriter
from tests.storage.test_claims import keys, row


def test_close_waits_for_a_part_started_by_a_flush_that_raced_another(tmp_path: Path) -> None:
    stage = Storage(str(tmp_path / "extract"))
    writer = PartWriter(stage, page_schema(), 0, 1)
    gates = {"a.pdf": threading.Event(), "c.pdf": threading.Event()}  # b.pdf's part is not held
    write = writer._write

    def held_write(path: str, rows: list[dict[str, Any]]) -> None:
        gate = gates.get(rows[0]["doc_id"])
        if gate is not None:
            assert gate.wait(30)
        write(path, rows)

    writer._write = held_write  # type: ignore[method-assign]

    async def main() -> list[tuple[str, int]]:
        await writer.add(row("a.pdf", 1))
        await writer.flush()  # a.pdf's part is being written (held)
        await writer.add(row("b.pdf", 1))
        first = asyncio.create_task(writer.flush())  # waits for a.pdf's part
        await asyncio.sleep(0.05)
        await writer.add(row("c.pdf", 1))
        second = asyncio.create_task(writer.flush())  # at the same time: c.pdf's part (held)
        await asyncio.sleep(0.05)
        gates["a.pdf"].set()
        await asyncio.gather(first, second)
        # c.pdf's part is let through only later: close() must wait for it.
        asyncio.get_running_loop().call_later(0.5, gates["c.pdf"].set)
        await writer.close()
        return keys(stage)

    assert asyncio.run(main()) == [("a.pdf", 1), ("b.pdf", 1), ("c.pdf", 1)]
    assert writer.parts_written == 3
