"""The OpenAI-compatible HTTP frame of the servers llm-ocr ships (the simulator, the CPU engine).

:class:`OpenAIServer` holds everything that is the same whatever reads the page: the routes
(``/health``, ``/version``, ``/v1/models``, ``/metrics``, ``POST /v1/chat/completions``), the
request log (one JSON line per chat request, images redacted, whatever happens), reading and
validating the body, the answer's special tokens and token budget, the metrics vLLM exports, and
the completion JSON. A server subclasses it and says what differs: how it reads a page
(:meth:`OpenAIServer._chat`), its version, its model card, how it refreshes its gauges, and
any extra routes. :func:`serve` runs one until SIGTERM/SIGINT, answering 503 until it is ready.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from .answers import SPECIAL_TOKENS, truncate_to_tokens
from .metrics import MetricValues, render_metrics
from .protocol import KNOWN_FIELDS, ChatRequest, error_response, redact
from .streaming import SseAnswer

#: Page images as base64 exceed aiohttp's 1 MiB default body limit; vLLM has none.
MAX_BODY_BYTES = 512 * 1024 * 1024
#: A chat request's start (``time.monotonic()``) in its log record until its line is written.
_STARTED = "_started"


@dataclass
class FrameConfig:
    """The settings every frame server has; a server's config dataclass extends it."""

    host: str = "127.0.0.1"
    port: int = 0
    port_file: str | None = None
    served_model_names: list[str] = field(default_factory=lambda: ["deepseek-ai/DeepSeek-OCR"])
    max_model_len: int = 8192
    tokens_per_char: float = 0.3
    request_log: str | None = None


class OpenAIServer:
    """State and routes shared by the servers; subclasses implement :meth:`_chat`."""

    #: ``owned_by`` in ``/v1/models``.
    owned_by = "vllm"

    def __init__(self, cfg: FrameConfig) -> None:
        self.cfg = cfg
        self.ready = False
        self.metrics = MetricValues()
        self.stats: dict[str, Any] = {"requests": 0, "responses": {}, "prompt_kinds": {}, "model_lists": 0,
                                      "health_probes": 0}
        self._log: Any = None

    # -- what subclasses say ----------------------------------------------------------------------

    def extra_routes(self) -> Iterable[web.RouteDef]:
        """Routes beyond the OpenAI surface (the simulator's ``/sim/*``)."""
        return ()

    def version_string(self) -> str:
        """``/version``'s answer."""
        return "unknown"

    def model_card(self) -> dict[str, Any]:
        """Fields added to every ``/v1/models`` entry."""
        return {}

    def refresh_metrics(self) -> None:
        """Bring the gauges of :attr:`metrics` up to date before a scrape."""

    async def _chat(self, request: web.Request, record: dict[str, Any]) -> web.StreamResponse:
        """Answer one chat request, filling ``record`` (the request-log line)."""
        raise NotImplementedError

    # -- lifecycle ----------------------------------------------------------------------------

    def make_app(self) -> web.Application:
        """The aiohttp application with every route."""
        app = web.Application(client_max_size=MAX_BODY_BYTES)
        app.router.add_get("/health", self.health)
        app.router.add_get("/version", self.version)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/metrics", self.metrics_endpoint)
        app.router.add_post("/v1/chat/completions", self.chat)
        app.add_routes(list(self.extra_routes()))
        return app

    def open_log(self) -> None:
        """Open the request log, if one was asked for (at start-up)."""
        if self.cfg.request_log:
            self._log = open(self.cfg.request_log, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()

    async def become_ready(self) -> None:
        """Load what the server needs; ``/health`` answers 503 until this returns."""
        self.open_log()
        self.ready = True

    def close(self) -> None:
        """Release files."""
        if self._log is not None:
            self._log.close()
            self._log = None

    # -- small endpoints ----------------------------------------------------------------------

    async def health(self, request: web.Request) -> web.Response:
        """200 once ready, 503 while starting (counted in ``health_probes``)."""
        self.stats["health_probes"] = self.stats.get("health_probes", 0) + 1  # subclasses set stats of their own
        return web.Response(status=200 if self.ready else 503)

    async def version(self, request: web.Request) -> web.Response:
        """Like vLLM's ``/version``."""
        return web.json_response({"version": self.version_string()})

    async def models(self, request: web.Request) -> web.Response:
        """OpenAI model list with vLLM's ``max_model_len`` field (counted in ``model_lists``)."""
        self.stats["model_lists"] = self.stats.get("model_lists", 0) + 1  # subclasses set stats of their own
        now = int(time.time())
        card = self.model_card()
        data = [
            {
                "id": name,
                "object": "model",
                "created": now,
                "owned_by": self.owned_by,
                "root": self.cfg.served_model_names[0],
                "parent": None,
                "max_model_len": self.cfg.max_model_len,
                **card,
            }
            for name in self.cfg.served_model_names
        ]
        return web.json_response({"object": "list", "data": data})

    async def metrics_endpoint(self, request: web.Request) -> web.Response:
        """Prometheus text with vLLM's metric names."""
        self.refresh_metrics()
        text = render_metrics(self.metrics, self.cfg.served_model_names[0])
        return web.Response(text=text, content_type="text/plain", charset="utf-8")

    # -- chat ------------------------------------------------------------------------------------

    def count(self, key: str, sub: str) -> None:
        """Add one to the counter ``sub`` of the stats bucket ``key``."""
        bucket = self.stats[key]
        bucket[sub] = bucket.get(sub, 0) + 1

    def write_log(self, record: dict[str, Any]) -> None:
        """Append one line to the request log (flushed: a killed server keeps its lines)."""
        if self._log is not None:
            line = {key: value for key, value in record.items() if key != _STARTED}
            self._log.write(json.dumps(line, ensure_ascii=False, default=str) + "\n")
            self._log.flush()

    def end_line(self, record: dict[str, Any]) -> None:
        """Write a chat request's log line, once, with its latency so far.

        A streamed answer writes it before its last chunk (:meth:`SseAnswer.finish
        <llm_ocr.engines.frame.streaming.SseAnswer.finish>`): a client that has its whole answer
        then finds the line in the log. Written after ``[DONE]``, it could land after the
        client's next step had begun, and a count of that step's requests took it in."""
        started = record.pop(_STARTED, None)
        if started is None:  # written already
            return
        record["latency_s"] = round(time.monotonic() - started, 4)
        if record["outcome"] != "crash":  # a crash path writes its own line before exiting
            self.write_log(record)

    async def chat(self, request: web.Request) -> web.StreamResponse:
        """``POST /v1/chat/completions``; logs one line per request whatever happens."""
        record: dict[str, Any] = {"time": time.time(), "path": request.path, "status": None, "outcome": "cancelled",
                                  _STARTED: time.monotonic()}
        try:
            response = await self._chat(request, record)
            record["status"] = response.status
            if record["outcome"] == "cancelled":  # a path that did not name its outcome
                record["outcome"] = "ok" if response.status == 200 else "error"
            self.count("responses", str(response.status))
            return response
        finally:
            self.end_line(record)

    async def read_body(self, request: web.Request, record: dict[str, Any]) -> Any:
        """The request's JSON body, or an error response to return (503 while starting, 400
        for a body that is not JSON). Logs the body, images redacted, and the fields vLLM would
        silently ignore."""
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
        return body

    def fit_answer(self, req: ChatRequest, text: str, max_tokens: int) -> tuple[str, int, str]:
        """``(text, completion_tokens, finish_reason)`` of an answer as vLLM returns it: grounding
        tags dropped unless ``skip_special_tokens`` is false, cut at ``max_tokens``."""
        if req.skip_special_tokens and any(t in text for t in SPECIAL_TOKENS):
            # vLLM's default skip_special_tokens=true drops the grounding tags from the text.
            self.stats["special_tokens_skipped"] = self.stats.get("special_tokens_skipped", 0) + 1
            for tok in SPECIAL_TOKENS:
                text = text.replace(tok, "")
        text, completion_tokens, truncated = truncate_to_tokens(text, max_tokens, self.cfg.tokens_per_char)
        return text, completion_tokens, "length" if truncated else "stop"

    def count_finished(
        self, req: ChatRequest, finish: str, prompt_tokens: int, completion_tokens: int, record: dict[str, Any],
        **log_fields: Any
    ) -> None:
        """Count a finished (or, ``finish == "abort"``, abandoned) request in the metrics and the log."""
        self.metrics.prompt_tokens += prompt_tokens
        self.metrics.generation_tokens += completion_tokens
        self.metrics.success[finish] = self.metrics.success.get(finish, 0) + 1
        record.update(
            outcome="ok",
            prompt_kind=req.kind,
            finish_reason=finish,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            **log_fields,
        )
        if req.stream:
            record["stream"] = True

    async def answer(
        self,
        request: web.Request,
        req: ChatRequest,
        text: str,
        finish: str,
        prompt_tokens: int,
        completion_tokens: int,
        record: dict[str, Any],
        **log_fields: Any,
    ) -> web.StreamResponse:
        """Answer a request whose text is ready: as JSON, or streamed at once in chunks."""
        if not req.stream:
            return self.completion(req, text, finish, prompt_tokens, completion_tokens, record, **log_fields)
        record.update(log_fields)
        stream = SseAnswer(self, req, text, prompt_tokens, record)
        with stream.abort_on_disconnect():
            await stream.open(request)
            await stream.send(completion_tokens)
            return await stream.finish(finish, completion_tokens)
        return stream.closed_response()

    def completion(
        self,
        req: ChatRequest,
        text: str,
        finish: str,
        prompt_tokens: int,
        completion_tokens: int,
        record: dict[str, Any],
        **log_fields: Any,
    ) -> web.Response:
        """Count a finished request in the metrics and the log, and answer it (OpenAI JSON)."""
        self.count_finished(req, finish, prompt_tokens, completion_tokens, record, **log_fields)
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


def _write_port_file(path: str, port: int) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(f"{port}\n")
    os.replace(tmp, path)  # atomic: readers never see a half-written file


async def serve(
    server: OpenAIServer,
    ready_message: str,
    *,
    fatal: tuple[type[BaseException], ...] = (),
    label: str = "server",
) -> int:
    """Run ``server`` until SIGTERM/SIGINT; returns the process exit code.

    It listens at once (so a port file is written early) and answers 503 until
    :meth:`~OpenAIServer.become_ready` returns, then prints ``ready_message`` (``{url}`` is
    replaced by its base URL). A start-up failure of a type in ``fatal`` prints
    ``"{label}: {error}"`` and exits 1; any other is raised.
    """
    cfg = server.cfg
    # handler_cancellation: a client that gives up cancels its handler, freeing its slot, as
    # vLLM aborts a request whose connection closed.
    runner = web.AppRunner(server.make_app(), handler_cancellation=True, access_log=None, shutdown_timeout=0.5)
    await runner.setup()
    site = web.TCPSite(runner, cfg.host, cfg.port)
    await site.start()
    port = runner.addresses[0][1]
    if cfg.port_file:
        _write_port_file(cfg.port_file, port)

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
                ready.result()  # re-raise a start-up failure
            except fatal as exc:
                print(f"{label}: {exc}", file=sys.stderr, flush=True)
                return 1
            print(ready_message.format(url=f"http://{cfg.host}:{port}/v1"), file=sys.stderr, flush=True)
            await waiter
        else:
            ready.cancel()
    finally:
        await runner.cleanup()
        server.close()
    return 0
