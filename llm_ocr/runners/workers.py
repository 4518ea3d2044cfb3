"""CPU work off the event loop: rendering, encoding and cropping in worker processes.

pypdfium2 is not thread-safe and rendering plus JPEG encoding is CPU-bound, so the real
pipeline uses processes: fresh interpreters started from llm-ocr's own entry point, which never
run the caller's script again (:mod:`llm_ocr.runners.process_pool` says why and how).
``workers=0`` runs the same functions on one background thread: cheaper to start, for tests and
tiny jobs.

Two kinds of call: :meth:`WorkerPool.read_ahead` for the pages rendered (and their documents
estimated) ahead of the requests, which may queue; :meth:`WorkerPool.run` for what a page waits on
while it holds an in-flight slot (its fingerprint, its figures cropped), which goes before every
read-ahead call not started (:meth:`~llm_ocr.runners.process_pool.ProcessPool.submit_first`; with
``workers=0``, :class:`ThreadLanes`). The read-ahead cannot be starved: a page asks for such calls
only once it was rendered, so with no render done the first lane runs dry.
"""

from __future__ import annotations

import asyncio
import io
import math
import os
import threading
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Executor, Future
from functools import partial
from typing import Any, TypeVar

from PIL import Image

from llm_ocr.options import DenseOptions, RenderOptions, dense, using_dense
from llm_ocr.runners.process_pool import Lanes, ProcessPool
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
            self._executor = ThreadLanes("llm-ocr-render")

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(*args)`` in the pool and await its result, before any :meth:`read_ahead` call
        not yet started: for what a page waits on while it holds an in-flight slot. The knobs of
        reading pages in pieces in force here are in force there (a worker, process or thread,
        does not share this context: the render's text estimate and a long page's segments read
        them)."""
        call = WithKnobs(dense(), fn)
        if isinstance(self._executor, ProcessPool):
            return await asyncio.wrap_future(self._executor.submit_first(call, *args))
        assert isinstance(self._executor, ThreadLanes)
        return await asyncio.wrap_future(self._executor.submit_first(_locked, call, *args))

    async def read_ahead(self, fn: Callable[..., T], *args: Any) -> T:
        """As :meth:`run`, behind the calls of :meth:`run` not yet started: for rendering and
        estimating pages ahead of their requests."""
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


class ThreadLanes(Executor):
    """One background thread running calls one at a time, those of :meth:`submit_first` before
    those of :meth:`submit` not yet started (the two lanes of
    :class:`~llm_ocr.runners.process_pool.ProcessPool`, in this process)."""

    def __init__(self, name: str) -> None:
        self._queue: Lanes[tuple[Future[Any], Callable[..., Any], tuple[Any, ...]]] = Lanes()
        self._changed = threading.Condition()
        self._closed = False
        # A daemon thread (ThreadPoolExecutor's are joined at exit): a pool never closed must
        # not keep the interpreter alive.
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        """Schedule ``fn(*args, **kwargs)`` behind every call queued."""
        return self._submit(self._queue.behind, partial(fn, **kwargs) if kwargs else fn, args)

    def submit_first(self, fn: Callable[..., Any], /, *args: Any) -> Future[Any]:
        """Schedule ``fn(*args)`` before every call of :meth:`submit` not yet started."""
        return self._submit(self._queue.first, fn, args)

    def _submit(self, lane: deque[tuple[Future[Any], Callable[..., Any], tuple[Any, ...]]], fn: Callable[..., Any],
                args: tuple[Any, ...]) -> Future[Any]:
        with self._changed:
            if self._closed:
                raise RuntimeError("cannot schedule new calls after shutdown")
            future: Future[Any] = Future()
            lane.append((future, fn, args))
            self._changed.notify()
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Stop taking calls; cancel those not started (``cancel_futures``); the thread ends once
        the calls queued before are run (``wait``: return only then)."""
        with self._changed:
            self._closed = True
            if cancel_futures:
                while self._queue:
                    self._queue.pop()[0].cancel()
            self._changed.notify()
        if wait:
            self._thread.join()

    def _serve(self) -> None:
        while True:
            with self._changed:
                while not self._queue and not self._closed:
                    self._changed.wait()
                if not self._queue:
                    return
                future, fn, args = self._queue.pop()
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn(*args))
            except BaseException as exc:  # noqa: BLE001 - the call's own error, raised where it is awaited
                future.set_exception(exc)


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
