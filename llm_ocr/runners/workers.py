"""CPU work off the event loop: rendering, encoding and cropping in worker processes.

pypdfium2 is not thread-safe and rendering plus JPEG encoding is CPU-bound, so the real
pipeline uses processes: fresh interpreters started from llm-ocr's own entry point, which never
run the caller's script again (:mod:`llm_ocr.runners.process_pool` says why and how).
``workers=0`` runs the same functions on one background thread: cheaper to start, for tests and
tiny jobs.
"""

from __future__ import annotations

import asyncio
import io
import math
import os
from collections.abc import Callable, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from typing import Any, TypeVar

from PIL import Image

from llm_ocr.options import DenseOptions, RenderOptions, dense, using_dense
from llm_ocr.runners.process_pool import ProcessPool
from llm_ocr.sources.base import DocumentRef, PageFailure, PageImage
from llm_ocr.sources.pieces import Region
from llm_ocr.sources.render import PDFIUM_LOCK

T = TypeVar("T")


def default_workers() -> int:
    """One worker per core, leaving the event loop a share of the CPU on small machines."""
    return max(1, (os.cpu_count() or 2))


class WorkerPool:
    """A pool of render/crop workers used from async code."""

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self._executor: Executor
        if workers > 0:
            self._executor = ProcessPool(workers, name="llm-ocr-render")
        else:
            self._executor = ThreadPoolExecutor(1, thread_name_prefix="llm-ocr-render")

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(*args)`` in the pool and await its result, with the knobs of reading pages in
        pieces in force here (a worker, process or thread, does not share this context: the
        render's text estimate and a long page's segments read them)."""
        loop = asyncio.get_running_loop()
        call = WithKnobs(dense(), fn)
        if self.workers == 0:
            # In this process, PDFium is shared with whatever else runs here (another run's
            # render thread, the service's gateway checking an upload): one call at a time.
            return await loop.run_in_executor(self._executor, _locked, call, *args)
        return await loop.run_in_executor(self._executor, call, *args)

    def close(self) -> None:
        """Stop the workers (pending work is cancelled)."""
        self._executor.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _locked(fn: Callable[..., T], *args: Any) -> T:
    with PDFIUM_LOCK:
        return fn(*args)


class WithKnobs:
    """``fn`` called with ``knobs`` in force (in a worker); named as ``fn`` is (a worker that dies
    names the call it was running)."""

    def __init__(self, knobs: DenseOptions, fn: Callable[..., Any]) -> None:
        self.knobs, self.fn = knobs, fn
        self.__qualname__ = getattr(fn, "__qualname__", repr(fn))

    def __call__(self, *args: Any) -> Any:
        with using_dense(self.knobs):
            return self.fn(*args)


def crop_figures(image: bytes, boxes: Sequence[Sequence[float]]) -> list[bytes]:
    """Crop each ``[x1, y1, x2, y2]`` pixel box from an encoded page image, as PNG bytes."""
    with Image.open(io.BytesIO(image)) as page:
        page = page.convert("RGB")
        crops = []
        for x1, y1, x2, y2 in boxes:
            buffer = io.BytesIO()
            page.crop((x1, y1, x2, y2)).save(buffer, format="PNG", compress_level=1)
            crops.append(buffer.getvalue())
    return crops


def transform_image(image: bytes, rotate: int = 0, size: tuple[int, int] | None = None,
                    min_side: int = 0) -> tuple[bytes, int, int]:
    """An encoded image turned ``rotate`` degrees counter-clockwise (0, 90, 180, 270, as PIL's
    ``Image.Transpose.ROTATE_*``), then resized to ``size`` (width, height), then scaled up so
    its shorter side has at least ``min_side`` pixels; PNG bytes and the new size."""
    with Image.open(io.BytesIO(image)) as opened:
        img = opened.convert("RGB")
    turns = {90: Image.Transpose.ROTATE_90, 180: Image.Transpose.ROTATE_180, 270: Image.Transpose.ROTATE_270}
    if rotate % 360:
        img = img.transpose(turns[rotate % 360])
    if size is not None and img.size != tuple(size):
        img = img.resize(tuple(size), Image.Resampling.BICUBIC)
    if min_side and min(img.size) < min_side:
        scale = min_side / min(img.size)
        img = img.resize((math.ceil(img.width * scale), math.ceil(img.height * scale)), Image.Resampling.BICUBIC)
    buffer = io.BytesIO()
    img.save(buffer, format="PNG", compress_level=1)
    return buffer.getvalue(), img.width, img.height


def rerender_page(
    doc_id: str, source: str | None, render: RenderOptions, storage_options: dict[str, Any],
    image_column: str | None, page: int, max_aspect: float = 0.0,
) -> PageImage | PageFailure:
    """Page ``page`` of a row's source rendered again as Extract rendered it (a dataset row's image
    read again from the dataset), with its segments when it is longer than ``max_aspect`` times
    its width: what the Escalate stage sends the stronger model."""
    from llm_ocr.sources.rerender import SourcePages

    with SourcePages(doc_id, source, render, storage_options, image_column) as pages:
        view = pages.page(page, max_aspect)
    if view.data is None or view.width is None or view.height is None:
        return PageFailure(doc_id, page, f"the page cannot be rendered again for the stronger model: {view.note}")
    return PageImage(doc_id, page, view.data, view.mime or "image/png", view.width, view.height, pieces=view.pieces,
                     pdf_page=view.pdf_page)


def render_page_regions(
    render: RenderOptions, ref: DocumentRef, page: int, regions: list[Region]
) -> list[tuple[bytes, str, int, int] | None]:
    """Regions of a page rendered from its source, each as a page of its own
    (:func:`llm_ocr.sources.render.render_regions`): the tiles and bands of a dense page."""
    from llm_ocr.sources.render import render_regions

    return render_regions(ref, page, render, regions)
