"""Read one streamed chat completion, watching the text for a repetition loop as it arrives.

The request goes through :class:`~llm_ocr.vlm.http.HttpClient` (its URL, auth, timeouts and its
mapping of HTTP errors to :mod:`llm_ocr.vlm.http`'s exceptions); the Server-Sent Events are read
here, straight from the response bytes: one ``json.loads`` per event, no model objects, so that a
page costs microseconds per chunk.

When :class:`~llm_ocr.vlm.loops.LoopWatch` sees a loop, the response is closed at once. Closing
an unfinished HTTP response closes its connection; vLLM aborts a request whose client went away,
which frees its slot for the next page (``with_cancellation`` / Starlette's disconnect listener
in ``vllm/entrypoints/serve/utils/api_utils.py``).

The wire format is vLLM's (``chat_completion_stream_generator`` in
``vllm/entrypoints/openai/chat_completion/serving.py``): ``data: {json}`` events, a role chunk,
content deltas, a chunk with ``finish_reason``, with ``stream_options.include_usage`` a last
chunk with ``choices: []`` and the usage (with ``continuous_usage_stats`` the usage so far in
every chunk), ``data: [DONE]``; an error after the headers arrives as ``data: {"error": ...}``.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from llm_ocr.dense_knobs import dense
from llm_ocr.vlm.http import (
    TRANSPORT_ERRORS,
    ApiConnectionError,
    ApiTimeoutError,
    HttpClient,
    as_api_error,
    request_json,
)
from llm_ocr.vlm.loops import Loop, LoopPolicy, LoopWatch


class StreamBroken(ApiConnectionError):
    """The stream ended without an answer: an error event, or bytes that are not SSE JSON."""


@dataclass
class Streamed:
    """What one streamed request produced."""

    text: str
    finish_reason: str | None  # "loop" when the watch cut the stream
    prompt_tokens: int | None
    completion_tokens: int | None
    loop: Loop | None = None
    tokens_estimated: bool = False  # completion_tokens is an estimate (the stream was cut)


class TokenRatio:
    """Tokens per character of the answers seen so far (to estimate a cut stream's tokens)."""

    def __init__(self) -> None:
        self.tokens = 0
        self.chars = 0

    def note(self, chars: int, tokens: int | None) -> None:
        """Remember a finished answer's length and token count."""
        if tokens and chars:
            self.tokens += tokens
            self.chars += chars

    def estimate(self, chars: int) -> int:
        """Tokens of an answer of ``chars`` characters: at the ratio this client's finished
        streams showed, until they hold 2,000 characters at the ``tokens_per_char`` knob in force
        (:func:`llm_ocr.dense_knobs.dense`: the one first guess a run sets)."""
        ratio = self.tokens / self.chars if self.chars >= 2000 else dense().tokens_per_char
        return math.ceil(chars * ratio)


async def stream_chat(
    client: HttpClient, model: str, body: dict[str, Any], policy: LoopPolicy | None, ratio: TokenRatio
) -> Streamed:
    """Send ``body`` (keyword arguments of the SDK's ``chat.completions.create``) with
    ``stream=True`` and read the answer; stop reading as soon as ``policy`` sees a loop (None:
    never).

    Raises :mod:`llm_ocr.vlm.http`'s exceptions for the request, and its
    :class:`~llm_ocr.vlm.http.ApiConnectionError` / :class:`~llm_ocr.vlm.http.ApiTimeoutError`
    for a stream that breaks off or stalls past the client's timeout after the headers.
    """
    watch = LoopWatch(policy) if policy is not None else None
    parts: list[str] = []
    finish: str | None = None
    usage: dict[str, Any] | None = None
    loop: Loop | None = None
    async with client.post_stream("chat/completions", request_json(model, {**body, "stream": True})) as response:
        buffer = b""
        try:
            async for data in response.content.iter_any():
                buffer += data
                if b"\r" in buffer:
                    buffer = buffer.replace(b"\r\n", b"\n")
                *events, buffer = buffer.split(b"\n\n")
                for event in events:
                    chunk = _event_json(event)
                    if chunk is None:
                        continue
                    if chunk is _DONE:
                        break
                    if chunk.get("usage"):
                        usage = chunk["usage"]
                    for choice in chunk.get("choices") or ():
                        content = (choice.get("delta") or {}).get("content")
                        if content:
                            parts.append(content)
                            if watch is not None:
                                loop = watch.feed(content)
                        if choice.get("finish_reason"):
                            finish = choice["finish_reason"]
                    if loop is not None:
                        break
                if loop is not None:
                    break  # leaving the block closes the response: vLLM frees the slot
        except TRANSPORT_ERRORS as exc:  # the body broke off, or stalled past the read timeout
            mapped = as_api_error(exc)
            if not isinstance(mapped, ApiTimeoutError):
                mapped = StreamBroken(f"the stream broke off: {type(exc).__name__}: {exc}")
            raise mapped from exc
    text = "".join(parts)
    if loop is None and watch is not None and finish is None:
        loop = watch.finish()  # a stream that ended without a finish reason: look at its tail
    prompt = usage.get("prompt_tokens") if usage else None
    tokens = usage.get("completion_tokens") if usage else None
    if loop is not None:
        finish = "loop"
        estimated = tokens is None
        if estimated:
            tokens = ratio.estimate(len(text))
        return Streamed(text, finish, prompt, tokens, loop, tokens_estimated=estimated)
    if finish is None:
        raise StreamBroken("the stream ended before the answer did (no finish_reason, no [DONE])")
    ratio.note(len(text), tokens)
    return Streamed(text, finish, prompt, tokens)


_DONE: dict[str, Any] = {}


def _event_json(event: bytes) -> dict[str, Any] | None:
    """The JSON of one SSE event; :data:`_DONE` for ``[DONE]``; None for comments or keep-alives."""
    payload = b""
    for line in event.split(b"\n"):
        if line.startswith(b"data:"):
            payload += line[5:].strip()
    if not payload:
        return None
    if payload == b"[DONE]":
        return _DONE
    try:
        chunk = json.loads(payload)
    except ValueError as exc:
        raise StreamBroken(f"a stream event is not JSON: {payload[:200]!r}") from exc
    if not isinstance(chunk, dict):
        raise StreamBroken(f"a stream event is not a JSON object: {payload[:200]!r}")
    if "error" in chunk:
        error = chunk["error"]
        message = error.get("message") if isinstance(error, dict) else error
        raise StreamBroken(f"the server reported an error mid-stream: {str(message)[:500]}")
    return chunk
