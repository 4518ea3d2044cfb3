"""Streaming against real vLLM: the request fields llm-ocr streams with are accepted, the streamed
answer is the plain one, and closing a stream aborts the request and frees its slot."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import time

import aiohttp
import pytest

if importlib.util.find_spec("vllm") is None:
    pytest.skip("vLLM is not installed (pip install 'llm-ocr[test-vllm]'; see scripts/test-vllm)", allow_module_level=True)

from llm_ocr.options import ClientOptions
from llm_ocr.vlm.client import VlmClient
from llm_ocr.vlm.recipes import image_messages, recipe_for
from tests.vllm_real.servers import SERVED, TierServer, page_jpeg

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(1200)]  # for hangs: a loaded machine starts vLLM in minutes


def test_streams_are_the_plain_answer_and_a_closed_stream_frees_its_slot(tiny_server: TierServer) -> None:
    asyncio.run(_streaming(tiny_server))


async def _streaming(tier: TierServer) -> None:
    server, headers = tier.server, tier.headers()
    client = VlmClient(server.base_url, SERVED, api_key=tier.api_key, options=ClientOptions())
    try:
        # The fields a DeepSeek-OCR page streams with (continuous usage, 64 tokens a chunk)
        # on a model of another family: vLLM must take them (an unknown one is only a warning,
        # a wrong type a 400).
        deepseek = recipe_for("deepseek-ai/DeepSeek-OCR")
        body = {"messages": image_messages(page_jpeg(), "image/jpeg", "Read the text."), "max_tokens": 96,
                "temperature": 0.0, "extra_body": {"ignore_eos": True}}  # fmt: skip
        plain = await client.chat(body)
        streamed = await client.chat(deepseek.streamed(body), stream=True)
        assert streamed.text == plain.text and streamed.finish_reason == plain.finish_reason == "length"
        assert streamed.completion_tokens == plain.completion_tokens == 96
        assert streamed.prompt_tokens == plain.prompt_tokens
        chunks = await _chunks(server.base_url, {**deepseek.streamed(body), "model": SERVED, "stream": True}, headers)
        usage = [c["usage"]["completion_tokens"] for c in chunks if c.get("usage")]
        assert usage and usage[-1] == 96 and usage == sorted(usage)  # continuous_usage_stats honoured
        # 64 tokens a chunk (vLLM's per-request stream_interval), not one chunk per token.
        content = [c for c in chunks if c.get("choices") and c["choices"][0]["delta"].get("content")]
        assert len(content) <= 4, [len(c["choices"][0]["delta"]["content"]) for c in content]

        # Close a stream early: vLLM aborts the request and counts only what it generated.
        before = await server.metrics()
        # Long, and it cannot end early (ignore_eos): the tiny model decodes fast on an idle CPU,
        # and a 3,000-token answer once ended before the close reached vLLM. The preset's context
        # (8,192) less the prompt; the shared server's family flags allow 32,768.
        longest = 8192 - plain.prompt_tokens - 16
        long_body = {**deepseek.streamed({**body, "max_tokens": longest}), "model": SERVED, "stream": True}
        await _read_then_close(server.base_url, long_body, headers)
        deadline = time.monotonic() + 20
        after = await server.metrics()
        while after["running"] > 0 and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
            after = await server.metrics()
        assert after["running"] == 0 and after["waiting"] == 0  # the slot is free again
        generated = after["generation_tokens_total"] - before["generation_tokens_total"]
        assert 0 < generated < longest
    finally:
        await client.close()


async def _chunks(base_url: str, body: dict, headers: dict[str, str]) -> list[dict]:
    async with aiohttp.ClientSession(headers=headers) as session:
        async with session.post(f"{base_url}/chat/completions", json={**body.pop("extra_body"), **body}) as response:
            assert response.status == 200, await response.text()
            raw = (await response.read()).decode()
    return [json.loads(b[len("data: "):]) for b in raw.split("\n\n") if b.startswith("data: ") and b != "data: [DONE]"]


async def _read_then_close(base_url: str, body: dict, headers: dict[str, str]) -> None:
    async with aiohttp.ClientSession(headers=headers) as session:
        response = await session.post(f"{base_url}/chat/completions", json={**body.pop("extra_body"), **body})
        assert response.status == 200, await response.text()
        await response.content.readuntil(b"\n\n")  # the role chunk: the request is running
        await response.content.readuntil(b"\n\n")
        response.close()
