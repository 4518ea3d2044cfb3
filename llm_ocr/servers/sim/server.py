"""The simulated vLLM/DeepSeek-OCR HTTP server (aiohttp): routes, scheduling, faults.

Request validation lives in :mod:`.protocol`, the answers in :mod:`.content`.

Scheduling model: ``slots`` sequences run at once (vLLM's ``--max-num-seqs``); the rest wait
in FIFO order. A request spends ``prefill_ms`` then decodes its tokens; the time per token of
every running sequence is ``decode_ms_per_token * (1 + load_slowdown * running / slots)``,
re-evaluated every 50 ms, so a batch that fills up slows every member down, like a GPU whose
step time grows with batch size. The model itself lives in :mod:`.timing` (the benchmark
replays it to compute a perfect client's time). With ``instant`` no time passes at all.
"""

from __future__ import annotations

import asyncio
import collections
import hashlib
import json
import math
import os
import random
import signal
import sys
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from . import FAULT_KINDS, content
from .corpus import CorpusIndex, build_corpus
from .metrics import MetricValues, render_metrics
from .protocol import (
    KNOWN_FIELDS,
    ApiError,
    ChatRequest,
    ImageFacts,
    admit_max_tokens,
    analyse_image,
    error_response,
    estimate_prompt_tokens,
    is_json_int,
    parse_chat_request,
    redact,
)
from .timing import DECODE_STEP_S, TimingModel, per_token_seconds  # noqa: F401 - re-exported

_DECODE_STEP_S = DECODE_STEP_S  # the old private name, kept for existing imports


@dataclass
class SimConfig:
    """Settings of the simulated server (one field per command-line option)."""

    host: str = "127.0.0.1"
    port: int = 0
    port_file: str | None = None
    served_model_names: list[str] = field(default_factory=lambda: ["deepseek-ai/DeepSeek-OCR"])
    max_model_len: int = 8192
    corpus: list[str] = field(default_factory=list)
    slots: int = 64
    prefill_ms: float = 20.0
    decode_ms_per_token: float = 0.0
    load_slowdown: float = 1.0
    tokens_per_char: float = 0.3
    output_tokens_mean: float = 0.0  # 0: synthetic answers keep their natural length
    output_tokens_sigma: float = 0.5
    loop_rate: float = 0.0
    error_rate: float = 0.0
    hang_rate: float = 0.0
    reset_rate: float = 0.0
    seed: int = 0
    request_log: str | None = None
    startup_delay: float = 0.0
    instant: bool = False


@dataclass
class Fault:
    """One fault to apply to a chat request."""

    kind: str
    status: int = 500
    seconds: float = 3600.0
    message: str | None = None
    source: str = "queued"  # or "random"


class SimServer:
    """State and handlers of one simulated server."""

    def __init__(self, cfg: SimConfig) -> None:
        self.cfg = cfg
        self.ready = False
        self.corpus: CorpusIndex | None = None
        self.faults: collections.deque[Fault] = collections.deque()
        self.rng = random.Random(cfg.seed)
        self.metrics = MetricValues()
        self.kv_tokens = 0.0
        self.stats: dict[str, Any] = {
            "requests": 0,
            "responses": {},
            "prompt_kinds": {},
            "faults_applied": {},
            "known_pages": 0,
            "synthetic_pages": 0,
            "max_running": 0,
            "max_waiting": 0,
            "ngram_processor_off": 0,
            "special_tokens_skipped": 0,
        }
        self._sem: asyncio.Semaphore | None = None
        self._log = None
        self.timing = TimingModel(
            slots=cfg.slots,
            prefill_ms=cfg.prefill_ms,
            decode_ms_per_token=cfg.decode_ms_per_token,
            load_slowdown=cfg.load_slowdown,
        )

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
        app.router.add_post("/sim/faults", self.add_faults)
        app.router.add_get("/sim/faults", self.list_faults)
        app.router.add_delete("/sim/faults", self.clear_faults)
        app.router.add_get("/sim/stats", self.get_stats)
        return app

    async def become_ready(self) -> None:
        """Index the corpus (in a thread) and wait out the startup delay, then serve."""
        self._sem = asyncio.Semaphore(self.cfg.slots)
        if self.cfg.request_log:
            self._log = open(self.cfg.request_log, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()
        tasks = [asyncio.sleep(self.cfg.startup_delay)]
        if self.cfg.corpus:
            tasks.append(asyncio.to_thread(build_corpus, list(self.cfg.corpus)))
        results = await asyncio.gather(*tasks)
        if self.cfg.corpus:
            self.corpus = results[1]
        self.ready = True

    def close(self) -> None:
        """Release files."""
        if self._log is not None:
            self._log.close()
            self._log = None

    # -- small endpoints ----------------------------------------------------------------------

    async def health(self, request: web.Request) -> web.Response:
        """200 once ready, 503 while starting."""
        return web.Response(status=200 if self.ready else 503)

    async def version(self, request: web.Request) -> web.Response:
        """Like vLLM's ``/version``."""
        return web.json_response({"version": "simulated"})

    async def models(self, request: web.Request) -> web.Response:
        """OpenAI model list with vLLM's ``max_model_len`` field."""
        now = int(time.time())
        data = [
            {
                "id": name,
                "object": "model",
                "created": now,
                "owned_by": "vllm",
                "root": self.cfg.served_model_names[0],
                "parent": None,
                "max_model_len": self.cfg.max_model_len,
            }
            for name in self.cfg.served_model_names
        ]
        return web.json_response({"object": "list", "data": data})

    async def metrics_endpoint(self, request: web.Request) -> web.Response:
        """Prometheus text with vLLM's metric names."""
        self.metrics.kv_cache_usage = min(1.0, self.kv_tokens / (self.cfg.slots * self.cfg.max_model_len))
        text = render_metrics(self.metrics, self.cfg.served_model_names[0])
        return web.Response(text=text, content_type="text/plain", charset="utf-8")

    async def add_faults(self, request: web.Request) -> web.Response:
        """Queue faults for the next chat requests: ``{"kind", "count", "status", "seconds",
        "message"}``; each chat request takes the next queued fault, in order.

        Transport faults act before validation: ``error`` answers HTTP ``status`` (default
        500) with OpenAI error JSON; ``hang`` holds the request ``seconds`` (default 3600, then
        answers normally) or until the client disconnects; ``reset`` aborts the connection
        without a response; ``crash`` exits the process with code 1 at once. Content faults
        are consumed by the next request even when it then fails validation: ``loop`` (a
        valid start, then one phrase until ``max_tokens``, finish_reason "length"), ``empty``
        (content ""), ``untagged`` (the page as plain text without grounding tags) and
        ``bad_boxes`` (out-of-range, inverted, non-numeric, truncated and a thousand boxes).
        """
        try:
            body = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            return error_response(400, "Body must be JSON.")
        kind = body.get("kind") if isinstance(body, dict) else None
        if kind not in FAULT_KINDS:
            return error_response(400, f"kind must be one of {', '.join(FAULT_KINDS)}.")
        count, status = body.get("count", 1), body.get("status", 500)
        seconds = body.get("seconds", 3600.0)
        if not is_json_int(count) or count < 1 or not is_json_int(status) or not 100 <= status <= 599:
            return error_response(400, "count must be a positive integer and status an HTTP status.")
        if not isinstance(seconds, (int, float)) or seconds < 0:
            return error_response(400, "seconds must be a non-negative number.")
        for _ in range(count):
            self.faults.append(Fault(kind, status, float(seconds), body.get("message")))
        return web.json_response({"queued": len(self.faults)})

    async def list_faults(self, request: web.Request) -> web.Response:
        """The queued faults, next first."""
        return web.json_response({"faults": [f.__dict__ for f in self.faults]})

    async def clear_faults(self, request: web.Request) -> web.Response:
        """Drop every queued fault."""
        n = len(self.faults)
        self.faults.clear()
        return web.json_response({"cleared": n})

    async def get_stats(self, request: web.Request) -> web.Response:
        """Counters since start, plus the live queue state."""
        live = {
            "ready": self.ready,
            "running": self.metrics.running,
            "waiting": self.metrics.waiting,
            "queued_faults": len(self.faults),
            "corpus_pages": len(self.corpus) if self.corpus is not None else 0,
        }
        return web.json_response({**self.stats, **live})

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
            if record["outcome"] == "cancelled":  # a path that did not name its outcome
                record["outcome"] = "ok" if response.status == 200 else "error"
            self._count("responses", str(response.status))
            return response
        finally:
            record["latency_s"] = round(time.monotonic() - t0, 4)
            if record["outcome"] != "crash":  # the crash path wrote its own line
                self._write_log(record)

    def _next_fault(self) -> Fault | None:
        # Always draw the same three numbers per request so a --seed run is reproducible
        # whatever faults were queued on demand.
        u_err, u_hang, u_reset = self.rng.random(), self.rng.random(), self.rng.random()
        if self.faults:
            return self.faults.popleft()
        if u_err < self.cfg.error_rate:
            return Fault("error", 500, source="random")
        if u_hang < self.cfg.hang_rate:
            return Fault("hang", source="random")
        if u_reset < self.cfg.reset_rate:
            return Fault("reset", source="random")
        return None

    async def _chat(self, request: web.Request, record: dict[str, Any]) -> web.StreamResponse:
        if not self.ready:
            return error_response(503, "The server is starting up.", "ServiceUnavailableError")
        raw = await request.read()
        try:
            body = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            record["body"] = None
            record["body_bytes"] = len(raw)
            return error_response(400, f"Request body is not valid JSON: {exc}")
        if self._log is not None:
            record["body"] = redact(body)
            if isinstance(body, dict):
                record["ignored_fields"] = sorted(k for k in body if k not in KNOWN_FIELDS)
        self.stats["requests"] += 1

        fault = self._next_fault()
        if fault is not None:
            record["fault"] = fault.kind
        if fault is not None and fault.kind in ("crash", "reset", "error", "hang"):
            self._count("faults_applied", fault.kind)
            if fault.kind == "crash":
                record["outcome"] = "crash"
                self._write_log(record)
                print("simulated server: injected crash, exiting with code 1", file=sys.stderr, flush=True)
                os._exit(1)
            if fault.kind == "reset":
                record["outcome"] = "reset"
                if request.transport is not None:
                    request.transport.abort()  # RST-like close: the client sees no response at all
                raise asyncio.CancelledError  # nothing can be written on an aborted connection
            if fault.kind == "error":
                record["outcome"] = "error"
                return error_response(fault.status, fault.message or f"Injected fault: HTTP {fault.status}.")
            record["outcome"] = "hang"
            await asyncio.sleep(fault.seconds)  # cancelled when the client disconnects
            # A finite hang (``seconds``) ends as a slow but normal request.
            record["outcome"] = "cancelled"
            fault = None

        try:
            req = parse_chat_request(body, self.cfg.served_model_names)
            self._count("prompt_kinds", "structured" if req.structured else req.kind)
            if not req.ngram_enabled:
                self.stats["ngram_processor_off"] += 1
            need_colour = req.kind in ("describe", "figure", "other") or bool(req.structured)
            facts = await asyncio.to_thread(analyse_image, req.image, self.corpus, need_colour)
            prompt_tokens = estimate_prompt_tokens(facts.width, facts.height, req.prompt, self.cfg.tokens_per_char)
            max_tokens = admit_max_tokens(prompt_tokens, req.max_tokens, self.cfg.max_model_len)
        except ApiError as exc:
            record["outcome"] = "error"
            return error_response(exc.status, exc.message, exc.type)

        if fault is None and self.cfg.loop_rate > 0:
            # Decided by image and prompt, not drawn: at temperature 0 a page that loops loops
            # again when retried with the same request.
            h = hashlib.sha256(f"{self.cfg.seed}|{req.prompt}|".encode() + facts.sha256).digest()
            if int.from_bytes(h[:8], "big") / 2**64 < self.cfg.loop_rate:
                fault = Fault("loop", source="random")
                record["fault"] = "loop"
        if fault is not None:
            self._count("faults_applied", fault.kind)
        if facts.known is not None:
            self.stats["known_pages"] += 1
            record["known_page"] = {"source": facts.known.source, "page": facts.known.index + 1}
        elif req.kind in ("markdown", "ocr", "free"):
            self.stats["synthetic_pages"] += 1

        text = self._answer(req, facts, fault, max_tokens)
        if req.skip_special_tokens and any(t in text for t in content.SPECIAL_TOKENS):
            # vLLM's default skip_special_tokens=true drops the grounding tags from the text.
            self.stats["special_tokens_skipped"] += 1
            for tok in content.SPECIAL_TOKENS:
                text = text.replace(tok, "")
        text, completion_tokens, truncated = content.truncate_to_tokens(text, max_tokens, self.cfg.tokens_per_char)
        finish = "length" if truncated else "stop"

        await self._run_in_slot(prompt_tokens, completion_tokens)

        self.metrics.prompt_tokens += prompt_tokens
        self.metrics.generation_tokens += completion_tokens
        self.metrics.success[finish] = self.metrics.success.get(finish, 0) + 1
        record.update(
            outcome="ok",
            prompt_kind=req.kind,
            finish_reason=finish,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
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

    def _answer(self, req: ChatRequest, facts: ImageFacts, fault: Fault | None, max_tokens: int) -> str:
        """The model's text before token truncation."""
        kind = fault.kind if fault is not None else None
        if kind == "empty":
            return ""
        if kind == "bad_boxes":
            return content.bad_boxes_text(facts.sha256)
        if facts.known is not None:
            blocks = facts.known.blocks
        elif self.cfg.output_tokens_mean > 0 and req.kind in ("markdown", "ocr", "free") and not req.structured:
            # A long-tailed answer length, fixed per image and seed (like a page's true length).
            tokens = content.lognormal_tokens(
                facts.sha256, self.cfg.seed, self.cfg.output_tokens_mean, self.cfg.output_tokens_sigma
            )
            chars = max(1, math.floor(tokens / self.cfg.tokens_per_char))
            if req.kind == "free":
                blocks = content.sized_blocks(facts.sha256, chars, content.render_plain)
            else:
                markdown = req.kind == "markdown"
                render = lambda b: content.render_grounding(b, markdown=markdown)  # noqa: E731
                blocks = content.sized_blocks(facts.sha256, chars, render)
        else:
            blocks = content.synthetic_blocks(facts.sha256)
        if kind == "untagged":
            return content.render_plain(blocks)
        if req.structured:
            desc = content.describe(facts.sha256, facts.width, facts.height, facts.colour)
            if req.structured == "choice":
                text = str(req.choices[0]) if req.choices else ""
            elif req.structured == "json_object":
                text = json.dumps({"description": desc}, ensure_ascii=False)
            else:
                text = json.dumps(content.schema_instance(req.schema, desc), ensure_ascii=False)
            start = text[: len(text) // 2]
        elif req.kind in ("markdown", "ocr"):
            text = content.render_grounding(blocks, markdown=req.kind == "markdown")
            start = content.render_grounding(blocks[:2], markdown=req.kind == "markdown")
        elif req.kind == "free":
            text = content.render_plain(blocks)
            start = content.render_plain(blocks[:2])
        else:
            text = content.describe(facts.sha256, facts.width, facts.height, facts.colour)
            start = text[: len(text) // 2]
        if kind == "loop":
            # Enough characters to overrun max_tokens, so the answer ends with "length".
            return content.loop_text(start, facts.sha256, int(max_tokens / self.cfg.tokens_per_char) + 16)
        return text

    async def _run_in_slot(self, prompt_tokens: int, completion_tokens: int) -> None:
        """Wait for a slot, then spend prefill and decode time (see the module docstring)."""
        assert self._sem is not None
        m = self.metrics
        m.waiting += 1
        self.stats["max_waiting"] = max(self.stats["max_waiting"], m.waiting)
        try:
            await self._sem.acquire()
        finally:
            m.waiting -= 1
        held = 0.0  # KV tokens this request holds, released when it leaves its slot
        try:
            m.running += 1
            self.stats["max_running"] = max(self.stats["max_running"], m.running)
            self.kv_tokens += prompt_tokens
            held += prompt_tokens
            if self.cfg.instant:
                return
            loop = asyncio.get_running_loop()
            deadline = loop.time()
            for seconds, tokens in self.timing.slot_steps(completion_tokens, lambda: m.running):
                # Sleep until the model's deadline rather than for ``seconds``: timer overshoot
                # and a busy event loop (parsing image bodies, other requests, a loaded CPU)
                # would otherwise add up over hundreds of steps and make the server slower
                # than its own timing model, which a GPU's step time does not depend on.
                deadline += seconds
                await asyncio.sleep(max(0.0, deadline - loop.time()))
                self.kv_tokens += tokens
                held += tokens
        finally:
            m.running -= 1
            self.kv_tokens -= held
            self._sem.release()


async def serve(cfg: SimConfig) -> int:
    """Run the server until SIGTERM/SIGINT; returns the process exit code."""
    server = SimServer(cfg)
    # handler_cancellation: a client that gives up cancels its handler, freeing its slot, as
    # vLLM aborts a request whose connection closed.
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
            ready.result()  # re-raise a corpus failure
            print(f"simulated DeepSeek-OCR server ready on http://{cfg.host}:{port}/v1", file=sys.stderr, flush=True)
            await waiter
        else:
            ready.cancel()
    finally:
        await runner.cleanup()
        server.close()
    return 0
