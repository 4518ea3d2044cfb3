"""A chat completion streamed as vLLM streams it: Server-Sent Events, one JSON chunk per event.

The shape follows vLLM's ``chat_completion_stream_generator``
(``vllm/entrypoints/openai/chat_completion/serving.py``, checked in vLLM 0.32):

- a first chunk whose delta is ``{"role": "assistant", "content": ""}``;
- content chunks ``{"delta": {"content": "..."}, "finish_reason": null}``;
- the last content chunk carries ``finish_reason`` (``stop`` or ``length``);
- with ``stream_options.include_usage`` a final chunk with ``"choices": []`` and the usage;
  with ``continuous_usage_stats`` too, every chunk carries the usage so far;
- ``data: [DONE]``.

A client that closes the connection cancels the handler (the frame runs aiohttp with
``handler_cancellation``), as vLLM aborts a request whose client went away: the caller frees the
slot and counts only the tokens generated until then (:meth:`SseAnswer.aborted`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import time
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from aiohttp import web

from .protocol import ChatRequest

if TYPE_CHECKING:
    from .app import OpenAIServer

#: Tokens per chunk when the request does not say (vLLM's ``--stream-interval`` default is 1;
#: a simulator answering at once sends bigger chunks so that it does not eat the client's CPU).
DEFAULT_CHUNK_TOKENS = 16


class SseAnswer:
    """One streamed answer: open it, send text as it is generated, then finish or abort."""

    def __init__(self, server: OpenAIServer, req: ChatRequest, text: str, prompt_tokens: int,
                 record: dict[str, Any]) -> None:
        self.server = server
        self.req = req
        self.text = text
        self.prompt_tokens = prompt_tokens
        self.record = record
        self.tokens: float = 0  # generated so far
        self.sent_chars = 0
        self._counted = False
        self.response: web.StreamResponse | None = None
        self._id = f"chatcmpl-{uuid.uuid4().hex}"
        self._created = int(time.time())

    def chars_for(self, tokens: float) -> int:
        """Characters of the answer that ``tokens`` tokens cover (the frame's token estimate,
        ``ceil(chars * tokens_per_char)``, inverted)."""
        return min(len(self.text), math.floor(tokens / self.server.cfg.tokens_per_char + 1e-9))

    async def open(self, request: web.Request) -> None:
        """Send the headers and the role chunk."""
        response = web.StreamResponse(status=200,
                                      headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await response.prepare(request)
        self.response = response
        # Status 200 is on the wire from here on, whatever happens next: the request log says so.
        self.record["status"] = 200
        await self._event(self._chunk({"role": "assistant", "content": ""}, None))

    async def send(self, tokens: float) -> None:
        """The answer has ``tokens`` tokens now: send the text of every whole chunk of the
        request's ``stream_interval`` tokens not sent yet (the rest waits for more, or for
        :meth:`finish`), as vLLM batches a request's output."""
        self.tokens = min(tokens, self._total_tokens())
        end = self.chars_for(self.tokens)
        step = max(1, self.chars_for(self.req.stream_interval or DEFAULT_CHUNK_TOKENS))
        while end - self.sent_chars >= step:
            upto = self.sent_chars + step
            await self._event(self._chunk({"content": self.text[self.sent_chars : upto]}, None))
            self.sent_chars = upto

    async def finish(self, finish: str, completion_tokens: int) -> web.StreamResponse:
        """Send the rest of the text, the finish reason, the usage and ``[DONE]``; count it."""
        assert self.response is not None, "open() first"
        await self.send(completion_tokens)
        self.tokens = completion_tokens
        rest = self.text[self.sent_chars :]
        self.sent_chars = len(self.text)
        # Counted and logged before the last chunk, not after ``[DONE]``: a client that has its
        # whole answer finds the request in the log (tests count a step's requests there).
        self.server.count_finished(self.req, finish, self.prompt_tokens, completion_tokens, self.record)
        self._counted = True
        self.server.end_line(self.record)
        await self._event(self._chunk({"content": rest} if rest else {}, finish))
        if self.req.include_usage:
            usage = {"id": self._id, "object": "chat.completion.chunk", "created": self._created,
                     "model": self.req.model,
                     "choices": [], "usage": self._usage()}  # fmt: skip
            await self._event(usage)
        await self.response.write(b"data: [DONE]\n\n")
        await self.response.write_eof()
        return self.response

    def aborted(self) -> None:
        """The client went away: count the tokens generated so far (the slot is the caller's);
        nothing once the whole answer was counted (the client left during its last chunk)."""
        if self._counted:
            return
        tokens = math.ceil(self.tokens)
        self.server.count_finished(self.req, "abort", self.prompt_tokens, tokens, self.record)
        self.record["outcome"] = "disconnected"

    @contextlib.contextmanager
    def abort_on_disconnect(self) -> Iterator[None]:
        """Count the answer as aborted if the client goes away inside the block: the handler is
        cancelled (re-raised) or a write finds the connection closed (swallowed: see
        :meth:`closed_response`)."""
        try:
            yield
        except asyncio.CancelledError:
            self.aborted()
            raise
        except ConnectionError:
            self.aborted()

    def closed_response(self) -> web.StreamResponse:
        """The response of a stream whose client went away mid-answer."""
        if self.response is None:
            raise ConnectionResetError("the client went away before the answer started")
        return self.response

    # -- wire format -----------------------------------------------------------------------------

    def _total_tokens(self) -> int:
        return math.ceil(len(self.text) * self.server.cfg.tokens_per_char)

    def _usage(self) -> dict[str, int]:
        tokens = math.ceil(self.tokens)
        return {"prompt_tokens": self.prompt_tokens, "completion_tokens": tokens,
                "total_tokens": self.prompt_tokens + tokens}

    def _chunk(self, delta: dict[str, Any], finish: str | None) -> dict[str, Any]:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        if finish is not None:
            choice["stop_reason"] = None
        chunk = {"id": self._id, "object": "chat.completion.chunk", "created": self._created, "model": self.req.model,
                 "choices": [choice]}  # fmt: skip
        if self.req.continuous_usage:
            chunk["usage"] = self._usage()
        return chunk

    async def _event(self, payload: dict[str, Any]) -> None:
        assert self.response is not None
        await self.response.write(b"data: " + json.dumps(payload, ensure_ascii=False).encode() + b"\n\n")
