"""A server's error, as a page's error row and the log lines say it: what the body said, on one
line, bounded, without secrets, whatever the body's shape."""

from __future__ import annotations

import asyncio
import json

from aiohttp import web

from llm_ocr.vlm.client import ERROR_CHARS, describe_error
from llm_ocr.vlm.http import ApiStatusError, HttpClient

KEY = "sk-PLANTED-0123456789abcdefghij"
TRACEBACK = "Traceback (most recent call last):\n" + '  File "engine.py", line 1, in step\n' * 60 + \
    f"RuntimeError: CUDA error: an illegal memory access was encountered (api_key={KEY})\n"
HTML_502 = ("<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n<center><h1>502 Bad Gateway</h1>"
            "</center>\r\n<hr><center>nginx</center>\r\n</body>\r\n</html>\r\n")

#: (status, content type, body) as servers and proxies in front of them answer.
ANSWERS = [
    (500, "text/plain", f"Internal Server Error: Bearer {KEY} refused"),  # uvicorn/Starlette's plain text
    (500, "text/plain", TRACEBACK),  # a long one: bounded
    (502, "text/html", HTML_502),  # a proxy's page
    (500, "application/json", json.dumps({"detail": "EngineCore died unexpectedly"})),  # FastAPI
    (500, "application/json", json.dumps({"object": "error", "message": "EngineCore encountered an issue",
                                          "type": "InternalServerError", "param": None, "code": 500})),  # vLLM
    (503, "application/json", json.dumps({"error": {"message": "overloaded, retry", "code": 503}})),  # OpenAI
]


def _errors() -> list[str]:
    """Each answer of :data:`ANSWERS` as ``describe_error`` says it, from the client's exception."""
    answers = iter(ANSWERS)

    async def chat(request: web.Request) -> web.Response:
        status, kind, body = next(answers)
        return web.Response(status=status, text=body, content_type=kind)

    async def go() -> list[str]:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", chat)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        client = HttpClient(f"http://127.0.0.1:{runner.addresses[0][1]}/v1", KEY, timeout=60)
        said = []
        try:
            for _ in ANSWERS:
                try:
                    await client.post_json("chat/completions", {"model": "m", "messages": [{"role": "user", "content": "hi"}]})
                except ApiStatusError as exc:
                    said.append(describe_error(exc, [KEY]))
        finally:
            await client.close()
            await runner.cleanup()
        return said

    return asyncio.run(go())


def test_an_http_error_says_what_the_body_said_bounded_and_redacted() -> None:
    plain, long, html, detail, vllm, openai_shaped = _errors()
    assert plain == "HTTP 500: Internal Server Error: Bearer *** refused"
    assert long.startswith("HTTP 500: Traceback (most recent call last): File \"engine.py\"")
    assert len(long) == ERROR_CHARS and long.endswith("…")
    assert html == "HTTP 502: 502 Bad Gateway 502 Bad Gateway nginx"
    assert detail == "HTTP 500: EngineCore died unexpectedly"
    assert vllm == "HTTP 500: EngineCore encountered an issue"
    assert openai_shaped == "HTTP 503: overloaded, retry"
    assert not any("PLANTED" in said or "\n" in said for said in (plain, long, html, detail, vllm, openai_shaped))
