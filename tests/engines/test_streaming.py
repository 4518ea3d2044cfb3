"""The simulated server streams like vLLM: chunk shapes, usage, disconnects that free the slot."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import aiohttp
from openai import AsyncOpenAI

from llm_ocr.engines.frame.app import _STARTED, FrameConfig, OpenAIServer
from llm_ocr.engines.frame.protocol import ChatRequest
from llm_ocr.engines.frame.streaming import SseAnswer
from llm_ocr.testing import SimulatedServer
from tests.engines.test_simulated import MODEL, RECIPE, body_for, picture_bytes
from tests.waiting import wait_until


def chat_body(image: bytes, **extra: Any) -> dict[str, Any]:
    # DeepSeek-OCR's recipe sets max_tokens; the simulator refuses a page request without it.
    body = {"model": MODEL, "messages": body_for(image, mime="image/png"), "temperature": 0, "max_tokens": 2048, **RECIPE}
    return {**body, **extra}


async def raw_events(base_url: str, body: dict[str, Any]) -> tuple[int, list[Any]]:
    """POST ``body`` and return the status and every SSE event (JSON, or the string [DONE])."""
    async with aiohttp.ClientSession() as session:
        async with session.post(f"{base_url}/chat/completions", json=body) as response:
            raw = (await response.read()).decode()
            if response.status != 200:
                return response.status, [raw]
    assert response.headers["Content-Type"].startswith("text/event-stream")
    events = []
    for block in raw.split("\n\n"):
        if block.startswith("data: "):
            payload = block[len("data: ") :]
            events.append(payload if payload == "[DONE]" else json.loads(payload))
    return 200, events


def test_a_stream_has_vllms_shape_and_the_same_answer_as_json() -> None:
    image = picture_bytes(21)
    with SimulatedServer("--instant") as sim:
        status, events = asyncio.run(
            raw_events(sim.base_url, chat_body(image, stream=True, stream_options={"include_usage": True}, stream_interval=8))
        )
        assert status == 200
        whole = asyncio.run(_json_answer(sim.base_url, chat_body(image)))
    assert events[-1] == "[DONE]"
    first, *content, finish, usage = events[:-1]
    assert first["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert all(e["object"] == "chat.completion.chunk" and e["choices"][0]["finish_reason"] is None for e in content)
    assert finish["choices"][0]["finish_reason"] == "stop"
    assert usage["choices"] == [] and usage["usage"] == whole["usage"]
    text = "".join(e["choices"][0]["delta"].get("content", "") for e in [*content, finish])
    assert text == whole["choices"][0]["message"]["content"]
    # stream_interval 8 at 0.3 tokens a character: chunks of 26 characters.
    assert max(len(e["choices"][0]["delta"]["content"]) for e in content) == 26
    assert "usage" not in content[0]  # only with continuous_usage_stats


async def _json_answer(base_url: str, body: dict[str, Any]) -> dict[str, Any]:
    async with aiohttp.ClientSession() as session:
        async with session.post(f"{base_url}/chat/completions", json=body) as response:
            return dict(await response.json())


def test_continuous_usage_and_stream_options_without_stream() -> None:
    image = picture_bytes(22)
    with SimulatedServer("--instant") as sim:
        options = {"include_usage": True, "continuous_usage_stats": True}
        status, events = asyncio.run(raw_events(sim.base_url, chat_body(image, stream=True, stream_options=options)))
        assert status == 200
        tokens = [e["usage"]["completion_tokens"] for e in events[1:-2]]
        assert tokens == sorted(tokens) and tokens[-1] == events[-2]["usage"]["completion_tokens"]
        # As in vLLM: stream options on a request that does not stream are an error.
        status, body = asyncio.run(raw_events(sim.base_url, chat_body(image, stream_options=options)))
        assert status == 400 and "only be defined when `stream=True`" in body[0]


def test_the_openai_sdk_reads_the_stream() -> None:
    image = picture_bytes(23)

    async def go(base_url: str) -> tuple[str, Any]:
        client = AsyncOpenAI(base_url=base_url, api_key="EMPTY", max_retries=0)
        try:
            stream = await client.chat.completions.create(
                model=MODEL, messages=body_for(image, mime="image/png"), temperature=0, extra_body=RECIPE,  # type: ignore[arg-type]
                max_tokens=2048, stream=True, stream_options={"include_usage": True},
            )  # fmt: skip
            parts, usage = [], None
            async for chunk in stream:
                parts.extend(c.delta.content or "" for c in chunk.choices)
                usage = chunk.usage or usage
            return "".join(parts), usage
        finally:
            await client.close()

    with SimulatedServer("--instant") as sim:
        text, usage = asyncio.run(go(sim.base_url))
    assert text.startswith("<|ref|>") and usage.completion_tokens > 0


def test_a_client_that_leaves_frees_the_slot_and_pays_only_what_was_generated() -> None:
    """One slot, 100 ms a token: a loop page would hold it for 400 s, longer than the test may
    run. The client reads the first chunk and closes; the next request then gets the slot (it
    could not finish otherwise) and the server counts the tokens generated before the client
    left, not 4000. No stopwatch: a loaded machine slows both requests, not the verdict."""
    looping, other = picture_bytes(24), picture_bytes(25)
    args = ("--slots", "1", "--prefill-ms", "0", "--decode-ms-per-token", "100", "--load-slowdown", "0")

    async def go(base_url: str) -> None:
        body = chat_body(looping, stream=True, max_tokens=4000)
        async with aiohttp.ClientSession() as session:
            response = await session.post(f"{base_url}/chat/completions", json=body)
            await response.content.read(100)
            response.close()  # drop the connection, as the client does on a loop
            async with session.post(f"{base_url}/chat/completions", json=chat_body(other, max_tokens=20)) as second:
                assert second.status == 200
                await second.json()

    with SimulatedServer(*args) as sim:
        sim.inject("loop")
        asyncio.run(go(sim.base_url))
        records = wait_until(lambda: sim.requests() if len(sim.requests()) >= 2 else None, "both requests were logged")
        metrics = sim.metrics()
    cut = next(r for r in records if r.get("outcome") == "disconnected")
    assert cut["status"] == 200 and cut["finish_reason"] == "abort"
    assert 1 <= cut["completion_tokens"] < 4000
    assert metrics["vllm:generation_tokens_total"] == sum(r["completion_tokens"] for r in records)
    assert metrics['vllm:request_success_total{engine="0",finished_reason="abort",model_name="' + MODEL + '"}'] == 1


def test_a_streamed_request_is_in_the_log_before_its_last_chunk_is_sent(tmp_path: Path) -> None:
    """A client that has its whole answer finds its request in the log. Tests count a step's
    requests in the log; a line written after ``[DONE]`` could land after the client's next step
    had begun (r100: a count of 5 against 4 in tests/runners/test_dedup.py)."""
    log = tmp_path / "requests.jsonl"
    server = OpenAIServer(FrameConfig(request_log=str(log)))
    server.open_log()
    seen: list[tuple[str, int]] = []  # (what was written, lines in the log at that moment)

    class Wire:  # the socket: every write notes what the log held when it went out
        async def write(self, data: bytes) -> None:
            seen.append((data.decode(), len(log.read_text().splitlines())))

        async def write_eof(self) -> None:
            seen.append(("eof", len(log.read_text().splitlines())))

    req = ChatRequest(model=MODEL, prompt="<image>\nFree OCR.", kind="page", image=b"", media_type="image/png",
                      max_tokens=100, skip_special_tokens=True, stream=True, include_usage=True, stream_interval=4)
    record: dict[str, Any] = {"time": 0.0, "path": "/v1/chat/completions", "status": 200, "outcome": "cancelled",
                              _STARTED: 0.0}
    stream = SseAnswer(server, req, "A line of text the model read from the page.", 10, record)
    stream.response = Wire()  # type: ignore[assignment]
    asyncio.run(stream.finish("stop", 14))
    server.end_line(record)  # as the handler's end does: the line is written once
    server.close()

    last = next(i for i, (data, _) in enumerate(seen) if '"finish_reason": "stop"' in data)
    assert seen[last][1] == 1, "the finish chunk went out before the request was logged"
    assert all(lines == 1 for _, lines in seen[last:])
    (line,) = (json.loads(text) for text in log.read_text().splitlines())
    assert line["outcome"] == "ok" and line["finish_reason"] == "stop" and line["completion_tokens"] == 14
    assert _STARTED not in line and line["latency_s"] >= 0
