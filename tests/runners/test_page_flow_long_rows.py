"""A dataset row with hundreds of page images: workers get a chunk's images, not the row's.

Rendering decodes one page at a time; what used to grow with the row was the copy of *every*
image of the row shipped to a worker for each chunk of 8 pages (and once more to count them):
a 300-page row crossed the process boundary 39 times. Here each render call's arguments are
pickled as the process pool would, and must hold only their chunk's images; the pages must
still come out right, also when a resumed row skips pages already done.
"""

from __future__ import annotations

import asyncio
import io
import pickle
from pathlib import Path
from typing import Any

from PIL import Image

from llm_ocr.options import RenderOptions
from llm_ocr.records import PageResult, page_schema
from llm_ocr.runners.page_flow import CHUNK_PAGES, DocumentPages, FlowSettings, PageFlow
from llm_ocr.runners.progress import RunCounters
from llm_ocr.runners.workers import WorkerPool
from llm_ocr.sources.base import DocumentRef, PageFailure, PageImage
from llm_ocr.storage import Storage
from llm_ocr.storage.parts import PartWriter, ShardIndex

PAGES = 300


def page_png(page: int) -> bytes:
    """Page ``page`` is recognisable by its width."""
    buffer = io.BytesIO()
    Image.new("RGB", (100 + page, 50), (page % 256, 0, 0)).save(buffer, "PNG")
    return buffer.getvalue()


class MeasuredPool(WorkerPool):
    """The real pool, noting the size of what each call ships to a worker."""

    def __init__(self) -> None:
        super().__init__(0)
        self.shipped: list[tuple[str, int, int]] = []  # (function, images, pickled bytes)

    async def read_ahead(self, fn: Any, *args: Any) -> Any:
        ref = args[0]
        self.shipped.append((fn.__name__, len(ref.images), len(pickle.dumps(args))))
        return await super().read_ahead(fn, *args)


def test_a_long_row_ships_only_each_chunks_images_and_renders_every_page_right(tmp_path: Path) -> None:
    images = tuple(page_png(p) for p in range(1, PAGES + 1))
    row = DocumentRef("fv/default/train/00000007", 7, "fv", "dataset_row", "fv", images)
    index = ShardIndex()
    done = {p for p in range(1, PAGES + 1) if p % 7 == 0}  # a resumed row: these pages exist
    index.done_pages[row.doc_id] = set(done)
    index.num_pages[row.doc_id] = PAGES
    widths: dict[int, int] = {}

    async def handler(ref: DocumentRef, item: PageImage | PageFailure, num_pages: int | None) -> PageResult:
        assert isinstance(item, PageImage), item
        widths[item.page] = item.width
        return PageResult(ref.doc_id, ref.index, item.page, ref.source, num_pages, status="ok")

    pool = MeasuredPool()

    async def main() -> None:
        writer = PartWriter(Storage(str(tmp_path / "extract")), page_schema(), 0, 1)
        flow = PageFlow(handler=handler, writer=writer, counters=RunCounters("extract", 0, 1),
                        settings=FlowSettings(max_in_flight=16, prefetch_chunks=4))
        await flow.run(DocumentPages([row], index, pool, RenderOptions(image_format="png")))
        await writer.close()

    try:
        asyncio.run(main())
    finally:
        pool.close()
    todo = set(range(1, PAGES + 1)) - done
    assert widths == {p: 100 + p for p in todo}  # every page not done, once, from its own image
    assert {name for name, _, _ in pool.shipped} == {"render_pages"}  # nothing shipped to count pages
    largest = max(len(image) for image in images)
    # A chunk of 8 pages to do spans at most 9 pages here (every 7th page is done).
    assert all(count <= CHUNK_PAGES + 2 for _, count, _ in pool.shipped)
    assert max(size for _, _, size in pool.shipped) <= (CHUNK_PAGES + 2) * largest + 4096
