"""llm-ocr's own OpenAI-compatible client (:mod:`llm_ocr.vlm.http`) against a tiny in-process
server: the request it sends (OpenAI's chat API: path, auth, body), the exception each failure
becomes (what the retry loop tells apart), and one connection reused across requests."""

from __future__ import annotations

import asyncio
import base64
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest
from aiohttp import web

from llm_ocr.options import ClientOptions
from llm_ocr.vlm.client import VlmClient, describe_error
from llm_ocr.vlm.http import ApiConnectionError, ApiStatusError, ApiTimeoutError, HttpClient

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@asynccontextmanager
async def serving(handler: Handler) -> AsyncIterator[str]:
    """A server answering every path with ``handler``; yields its base URL (``.../v1``)."""
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}/v1"
    finally:
        await runner.cleanup()


def test_a_chat_request_is_openais_and_its_answer_read() -> None:
    seen: list[dict[str, Any]] = []

    async def chat(request: web.Request) -> web.Response:
        seen.append({"method": request.method, "path": request.path, "auth": request.headers.get("Authorization"),
                     "body": await request.json() if request.can_read_body else None, "peer": request.transport.get_extra_info("peername")})  # type: ignore[union-attr]
        if request.path == "/v1/models":
            return web.json_response({"object": "list", "data": [
                {"id": "other", "object": "model", "created": 1, "owned_by": "vllm"},
                {"id": "m", "object": "model", "created": 1, "owned_by": "vllm", "max_model_len": 8192}]})
        return web.json_response({"id": "c", "object": "chat.completion", "model": "m", "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "# Title"}, "finish_reason": "length"}],
            "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}})

    async def go(base_url: str) -> Any:
        client = VlmClient(base_url + "/", "m", api_key="sk-key", options=ClientOptions())
        try:
            body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 5,
                    "extra_body": {"top_k": 1, "skip_special_tokens": False}}
            return await client.chat(body), await client.max_model_len(), await client.served_models()
        finally:
            await client.close()

    async def run() -> Any:
        async with serving(chat) as base_url:
            return await go(base_url)

    result, context, models = asyncio.run(run())
    assert (result.text, result.finish_reason, result.prompt_tokens, result.completion_tokens) == ("# Title", "length", 11, 7)
    assert context == 8192 and models == ["other", "m"]
    post, *gets = seen
    assert (post["method"], post["path"], post["auth"]) == ("POST", "/v1/chat/completions", "Bearer sk-key")
    # extra_body's fields go at the top level of the JSON, as the SDK sent them.
    assert post["body"] == {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5,
                            "top_k": 1, "skip_special_tokens": False}
    assert [(g["method"], g["path"]) for g in gets] == [("GET", "/v1/models")] * 2
    # One connection pool per client: the three requests came over one connection.
    assert len({s["peer"] for s in seen}) == 1


def test_credentials_in_the_url_are_sent_as_basic_auth_not_as_the_key() -> None:
    said: list[str | None] = []

    async def answer(request: web.Request) -> web.Response:
        said.append(request.headers.get("Authorization"))
        return web.json_response({"object": "list", "data": []})

    async def run() -> None:
        async with serving(answer) as base_url:
            client = HttpClient(base_url.replace("http://", "http://user:pa55@"), "sk-key", timeout=60)
            try:
                await client.get_json("models")
            finally:
                await client.close()

    asyncio.run(run())
    assert said == ["Basic " + base64.b64encode(b"user:pa55").decode()]


#: (status, body) -> the message the SDK's exception had, and what the page's error row says
STATUSES = [
    ((400, {"object": "error", "message": "max_tokens is too large", "code": 400}),
     ("Error code: 400 - max_tokens is too large", "HTTP 400: max_tokens is too large")),
    ((401, {"error": {"message": "Incorrect API key", "code": "invalid_api_key"}}),
     ("Error code: 401 - Incorrect API key", "HTTP 401: Incorrect API key")),
    ((404, {"detail": "Not Found"}), ("Error code: 404", "HTTP 404: Not Found")),
    ((429, "slow down"), ("Error code: 429", "HTTP 429: slow down")),
    ((503, ""), ("Error code: 503", "HTTP 503: Error code: 503")),
]


@pytest.mark.parametrize(("answer", "expected"), STATUSES, ids=[str(a[0]) for a, _ in STATUSES])
def test_an_error_status_raises_a_status_error_with_what_the_body_said(answer: tuple[int, Any], expected: tuple[str, str]) -> None:
    status, body = answer

    async def fail(request: web.Request) -> web.Response:
        if isinstance(body, dict):
            return web.json_response(body, status=status)
        return web.Response(status=status, text=body)

    async def run() -> ApiStatusError:
        async with serving(fail) as base_url:
            client = HttpClient(base_url, "sk-key", timeout=60)
            try:
                with pytest.raises(ApiStatusError) as info:
                    await client.post_json("chat/completions", {"model": "m"})
                return info.value
            finally:
                await client.close()

    error = asyncio.run(run())
    message, row = expected
    assert error.status_code == status and error.body == body
    assert (error.message, describe_error(error)) == (message, row)


def test_a_refused_connection_and_a_silent_server_are_told_apart() -> None:
    """Connection refused: a connection error naming its cause. A server that accepts and never
    answers: a timeout (the client's read timeout)."""
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]  # bound, not listening: connections are refused
        answered = asyncio.Event()

        async def silent(request: web.Request) -> web.Response:
            await answered.wait()  # set only once the client has given up by itself
            return web.Response()

        async def run() -> tuple[BaseException, BaseException]:
            refused = HttpClient(f"http://127.0.0.1:{port}/v1", None, timeout=60)
            try:
                with pytest.raises(ApiConnectionError) as first:
                    await refused.get_json("models")
            finally:
                await refused.close()
            async with serving(silent) as base_url:
                wedged = HttpClient(base_url, None, timeout=0.5)
                try:
                    with pytest.raises(ApiTimeoutError) as second:
                        await wedged.post_json("chat/completions", {"model": "m"})
                finally:
                    await wedged.close()
                    answered.set()  # the server's shutdown waits for its handlers
            return first.value, second.value

        refused, timed_out = asyncio.run(run())
    assert not isinstance(refused, ApiTimeoutError) and not isinstance(refused, ApiStatusError)
    said = describe_error(refused)
    assert said.startswith("connection error: ") and str(port) in said
    assert describe_error(timed_out) == "request timed out"
