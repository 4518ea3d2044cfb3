"""The CPU OCR engine's HTTP server (aiohttp), with vLLM's OpenAI-compatible surface.

Request validation, error JSON and token estimates are the simulated server's
(:mod:`llm_ocr.servers.sim.protocol`), so a client that works against one works against the other;
the answer comes from RapidOCR instead of a corpus.

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
import os
import signal
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from ..sim import content
from ..sim.metrics import MetricValues, render_metrics
from ..sim.protocol import (
    KNOWN_FIELDS,
    ApiError,
    ChatRequest,
    admit_max_tokens,
    error_response,
    estimate_prompt_tokens,
    parse_chat_request,
    redact,
)
from .engine import ENGINE_NAME, EngineOptions, EnginePool, ModelUnavailable, OcrResult
from .layout import LayoutBlock, page_blocks, render_grounding, render_plain

log = logging.getLogger(__name__)

SERVER_NAME = "the CPU engine"
#: What the engine says instead of a description (it has no vision-language model).
NO_DESCRIPTION = "(The CPU engine cannot describe images: it only reads text.)"
#: What the engine cannot do, reported in /v1/models and logged at startup.
LIMITATIONS = (
    "text only: RapidOCR's shipped models detect and read text lines; nothing detects figures, "
    "so pages get text, sub_title/title and table blocks but never image blocks"
)


@dataclass
class CpuConfig:
    """Settings of the CPU engine server (one field per command-line option)."""

    host: str = "127.0.0.1"
    port: int = 0
    port_file: str | None = None
    served_model_names: list[str] = field(default_factory=lambda: ["deepseek-ai/DeepSeek-OCR"])
    max_model_len: int = 8192
    threads: int = 1
    tokens_per_char: float = 0.3
    request_log: str | None = None
    engine: EngineOptions = field(default_factory=EngineOptions)


class CpuEngineServer:
    """State and handlers of one CPU engine server."""

    def __init__(self, cfg: CpuConfig, pool: EnginePool | None = None) -> None:
        self.cfg = cfg
        self.pool = pool or EnginePool(cfg.threads, cfg.engine)
        self.ready = False
        self.metrics = MetricValues()
        self.stats: dict[str, Any] = {"requests": 0, "responses": {}, "prompt_kinds": {}, "pages_read": 0, "ocr_seconds": 0.0}
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._inflight = 0  # submitted OCR jobs not finished (waiting + running)
        self._running = 0  # jobs a worker thread is executing (written by workers, read here)
        self._running_lock = threading.Lock()
        self._log: Any = None

    # -- lifecycle ---------------------------------------------------------------------------

    def make_app(self) -> web.Application:
        """The aiohttp application with every route."""
        # Page images as base64 exceed aiohttp's 1 MiB default body limit; vLLM has none.
        app = web.Application(client_max_size=512 * 1024 * 1024)
        app.router.add_get("/health", self.health)
        app.router.add_get("/version", self.version)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/metrics", self.metrics_endpoint)
        app.router.add_post("/v1/chat/completions", self.chat)
        return app

    async def become_ready(self) -> None:
        """Load the models (in a thread, so /health answers 503 meanwhile), then serve."""
        if self.cfg.request_log:
            self._log = open(self.cfg.request_log, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()
        t0 = time.monotonic()
        await asyncio.to_thread(self.pool.load)
        self._executor = concurrent.futures.ThreadPoolExecutor(self.cfg.threads, thread_name_prefix="ocr")
        models = ", ".join(p.name for p in self.pool.models.values())
        print(
            f"CPU engine: {self.cfg.threads} x {ENGINE_NAME} ({models}) loaded in "
            f"{time.monotonic() - t0:.1f} s; {LIMITATIONS}",
            file=sys.stderr,
            flush=True,
        )
        self.ready = True

    def close(self) -> None:
        """Stop the workers and release files."""
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None
        if self._log is not None:
            self._log.close()
            self._log = None

    # -- small endpoints ----------------------------------------------------------------------

    async def health(self, request: web.Request) -> web.Response:
        """200 once the models are loaded, 503 before."""
        return web.Response(status=200 if self.ready else 503)

    async def version(self, request: web.Request) -> web.Response:
        """Like vLLM's ``/version``."""
        from .engine import rapidocr_version

        return web.json_response({"version": f"llm-ocr-cpu ({ENGINE_NAME} {rapidocr_version()})"})

    async def models(self, request: web.Request) -> web.Response:
        """OpenAI model list with vLLM's ``max_model_len``, plus what the engine really is."""
        from .engine import rapidocr_version

        now = int(time.time())
        engine = {
            "name": ENGINE_NAME,
            "version": rapidocr_version(),
            "models": {k: p.name for k, p in self.pool.models.items()},
            "threads": self.cfg.threads,
            "figures": False,
            "limitations": LIMITATIONS,
        }
        data = [
            {
                "id": name,
                "object": "model",
                "created": now,
                "owned_by": "llm-ocr-cpu",
                "root": self.cfg.served_model_names[0],
                "parent": None,
                "max_model_len": self.cfg.max_model_len,
                "ocr_engine": engine,
            }
            for name in self.cfg.served_model_names
        ]
        return web.json_response({"object": "list", "data": data})

    async def metrics_endpoint(self, request: web.Request) -> web.Response:
        """Prometheus text with vLLM's metric names."""
        m = self.metrics
        m.running = self._running
        m.waiting = max(0, self._inflight - self._running)
        # No KV cache here; the busy fraction of the workers is the closest analogue.
        m.kv_cache_usage = self._running / max(1, self.cfg.threads)
        text = render_metrics(m, self.cfg.served_model_names[0])
        return web.Response(text=text, content_type="text/plain", charset="utf-8")

    # -- chat ------------------------------------------------------------------------------------

    def _count(self, key: str, sub: str) -> None:
        bucket = self.stats[key]
        bucket[sub] = bucket.get(sub, 0) + 1

    def _write_log(self, record: dict[str, Any]) -> None:
        if self._log is not None:
            self._log.write(json.dumps(record, ensure_ascii=False, default=str) + "\n")
            self._log.flush()

    async def chat(self, request: web.Request) -> web.StreamResponse:
        """``POST /v1/chat/completions``; logs one line per request whatever happens."""
        t0 = time.monotonic()
        record: dict[str, Any] = {"time": time.time(), "path": request.path, "status": None, "outcome": "cancelled"}
        try:
            response = await self._chat(request, record)
            record["status"] = response.status
            if record["outcome"] == "cancelled":
                record["outcome"] = "ok" if response.status == 200 else "error"
            self._count("responses", str(response.status))
            return response
        finally:
            record["latency_s"] = round(time.monotonic() - t0, 4)
            self._write_log(record)

    def _read_page(self, image: bytes) -> OcrResult:
        """Worker-thread body: one page through a free engine."""
        with self._running_lock:  # "+=" on an attribute is not atomic across threads
            self._running += 1
        try:
            return self.pool.read(image)
        finally:
            with self._running_lock:
                self._running -= 1

    def _job_done(self, _: concurrent.futures.Future[OcrResult]) -> None:
        self._inflight -= 1

    async def _ocr(self, image: bytes) -> OcrResult:
        assert self._executor is not None
        loop = asyncio.get_running_loop()
        self._inflight += 1
        future = self._executor.submit(self._read_page, image)
        # The callback runs in the worker (or here, if cancelled before it started); hop to
        # the loop so that the counter is only ever written from one thread.
        future.add_done_callback(lambda f: _call_soon(loop, self._job_done, f))
        # Cancelling the wrapper (client gone) cancels the job if it has not started yet.
        return await asyncio.wrap_future(future)

    async def _chat(self, request: web.Request, record: dict[str, Any]) -> web.StreamResponse:
        if not self.ready:
            return error_response(503, "The server is starting up.", "ServiceUnavailableError")
        raw = await request.read()
        try:
            body = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            record["body_bytes"] = len(raw)
            return error_response(400, f"Request body is not valid JSON: {exc}")
        if self._log is not None:
            record["body"] = redact(body)
            if isinstance(body, dict):
                record["ignored_fields"] = sorted(k for k in body if k not in KNOWN_FIELDS)
        self.stats["requests"] += 1
        try:
            req = parse_chat_request(body, self.cfg.served_model_names, server_name=SERVER_NAME)
            self._count("prompt_kinds", "structured" if req.structured else req.kind)
            width, height = _image_size(req.image)
            prompt_tokens = estimate_prompt_tokens(width, height, req.prompt, self.cfg.tokens_per_char)
            max_tokens = admit_max_tokens(prompt_tokens, req.max_tokens, self.cfg.max_model_len)
            try:
                page = await self._ocr(req.image)
            except ValueError as exc:  # the header parsed but the pixels do not decode
                raise ApiError(400, str(exc)) from None
        except ApiError as exc:
            record["outcome"] = "error"
            return error_response(exc.status, exc.message, exc.type)

        self.stats["pages_read"] += 1
        self.stats["ocr_seconds"] += page.seconds
        blocks = page_blocks(page.lines)
        text = answer(req, blocks, page.width, page.height)
        if req.skip_special_tokens:
            # vLLM's default skip_special_tokens=true drops the grounding tags from the text.
            for tok in content.SPECIAL_TOKENS:
                text = text.replace(tok, "")
        text, completion_tokens, truncated = content.truncate_to_tokens(text, max_tokens, self.cfg.tokens_per_char)
        finish = "length" if truncated else "stop"
        self.metrics.prompt_tokens += prompt_tokens
        self.metrics.generation_tokens += completion_tokens
        self.metrics.success[finish] = self.metrics.success.get(finish, 0) + 1
        record.update(
            outcome="ok",
            prompt_kind=req.kind,
            finish_reason=finish,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            ocr_s=round(page.seconds, 3),
            ocr_cpu_s=round(page.cpu_seconds, 3),
            lines=len(page.lines),
            blocks=len(blocks),
        )
        return web.json_response(
            {
                "id": f"chatcmpl-{uuid.uuid4().hex}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": req.model,
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": text, "tool_calls": []},
                        "logprobs": None,
                        "finish_reason": finish,
                        "stop_reason": None,
                    }
                ],
                "usage": {
                    "prompt_tokens": prompt_tokens,
                    "completion_tokens": completion_tokens,
                    "total_tokens": prompt_tokens + completion_tokens,
                },
            }
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
    except Exception as exc:  # PIL raises many types for bad input; all mean "bad image"
        raise ApiError(400, f"Failed to load image: {exc}") from None


def answer(req: ChatRequest, blocks: list[LayoutBlock], width: int, height: int) -> str:
    """The answer text for a request whose image read as ``blocks``.

    - grounding prompts: DeepSeek-OCR markup (``#`` headings only for the document prompt);
    - ``Free OCR.``: the plain text;
    - describe / parse-figure / any other prompt: an honest note that the engine cannot
      describe images, followed by the text found in the image, if any;
    - structured output (JSON schema, json_object, choice): that same note and text, fitted
      into the requested shape.
    """
    if req.structured:
        note = _note(blocks)
        if req.structured == "choice":
            return str(req.choices[0]) if req.choices else ""
        if req.structured == "json_object":
            return json.dumps({"description": note}, ensure_ascii=False)
        return json.dumps(content.schema_instance(req.schema, note), ensure_ascii=False)
    if req.kind in ("markdown", "ocr"):
        return render_grounding(blocks, width, height, markdown=req.kind == "markdown")
    if req.kind == "free":
        return render_plain(blocks)
    return _note(blocks)


def _note(blocks: list[LayoutBlock]) -> str:
    text = render_plain(blocks)
    return f"{NO_DESCRIPTION} Text in the image:\n\n{text}" if text else f"{NO_DESCRIPTION} It found no text in this image."


async def serve(cfg: CpuConfig) -> int:
    """Run the server until SIGTERM/SIGINT; returns the process exit code."""
    server = CpuEngineServer(cfg)
    runner = web.AppRunner(server.make_app(), handler_cancellation=True, access_log=None, shutdown_timeout=0.5)
    await runner.setup()
    site = web.TCPSite(runner, cfg.host, cfg.port)
    await site.start()
    port = runner.addresses[0][1]
    if cfg.port_file:
        tmp = f"{cfg.port_file}.tmp{os.getpid()}"
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(f"{port}\n")
        os.replace(tmp, cfg.port_file)  # atomic: readers never see a half-written file

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(sig, stop.set)
        except (NotImplementedError, RuntimeError):  # pragma: no cover - non-Unix
            pass
    try:
        ready = asyncio.ensure_future(server.become_ready())
        waiter = asyncio.ensure_future(stop.wait())
        await asyncio.wait({ready, waiter}, return_when=asyncio.FIRST_COMPLETED)
        if ready.done():
            try:
                ready.result()
            except ModelUnavailable as exc:
                print(f"CPU engine: {exc}", file=sys.stderr, flush=True)
                return 1
            print(f"CPU OCR engine ready on http://{cfg.host}:{port}/v1", file=sys.stderr, flush=True)
            await waiter
        else:
            ready.cancel()
    finally:
        await runner.cleanup()
        server.close()
    return 0
