"""A comma-separated ``--endpoint`` list: several servers we do not manage, behind one dispatcher.

Real simulated servers (subprocesses); one of them dies mid-run and does not come back. Every
page must still land exactly once, the dead server's pages must go to the others, and the
endpoint's summed ``/metrics`` must stay the sum of the servers still serving (the adaptive
in-flight sizing reads them).
"""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path

from PIL import Image

from llm_ocr.options import ClientOptions
from llm_ocr.serving.open import open_endpoint
from llm_ocr.serving.vllm.process import parse_metrics
from llm_ocr.testing import SimulatedServer
from llm_ocr.vlm.families import DEEPSEEK_OCR
from llm_ocr.vlm.recipes import DEFAULT_MODEL, FREE_OCR_PROMPT
from tests.conftest import read_stage, run_cli
from tests.docs import make_corpus


def answered_images(log: Path) -> list[str]:
    """The sha256 of the image of every chat request a server answered (HTTP 200)."""
    shas = []
    for line in log.read_text().splitlines() if log.exists() else []:
        record = json.loads(line)
        if record.get("status") != 200 or record.get("completion_tokens") is None:
            continue
        for message in record["body"]["messages"]:
            for part in message["content"]:
                if isinstance(part, dict) and part.get("type") == "image_url":
                    shas.append(part["image_url"]["url"]["sha256"])
    return shas


def test_a_list_of_endpoints_survives_one_dying_and_every_page_lands_once(tmp_path: Path) -> None:
    make_corpus(tmp_path / "docs", documents=8, pages=3)
    logs = [tmp_path / f"requests-{i}.jsonl" for i in range(3)]
    # Server 1 exits on its 6th request (a GPU that dies) and nobody restarts it.
    extra = [[], ["--crash-after", "6"], []]
    servers = [SimulatedServer("--prefill-ms", "150", *extra[i], request_log=logs[i]) for i in range(3)]
    for server in servers:
        server.start()
    try:
        endpoint = ",".join(s.base_url for s in servers)
        result = run_cli(
            "extract", str(tmp_path / "docs"), "--output", str(tmp_path / "out"), "--endpoint", endpoint,
            "--workers", "0", "--progress", "off", "--dead-after", "3",
            timeout=240,
        )  # fmt: skip
        assert servers[1].wait_exit(timeout=5) == 1  # it died mid-run
    finally:
        for server in servers:
            server.stop()
    assert result.returncode == 0, result.stderr[-3000:]
    assert "gone for good" in result.stderr and "2 of 3 servers left" in result.stderr, result.stderr[-3000:]
    # The requests in flight were sized from the summed /metrics all along: a dead server's
    # missing /metrics did not end the sizing ("cannot size the requests in flight").
    assert "cannot size" not in result.stderr, result.stderr[-3000:]
    rows = read_stage(tmp_path / "out", "extract")
    assert sorted((r["doc_id"], r["page"]) for r in rows) == [(f"doc{d:03d}.pdf", p) for d in range(8) for p in (1, 2, 3)]
    assert {r["status"] for r in rows} == {"ok"}
    answered = [answered_images(log) for log in logs]
    # The dead server answered at most the 5 requests before the one it died on; every page's
    # image was answered exactly once in all, the lost ones by the two servers left.
    assert len(answered[1]) <= 5
    everything = answered[0] + answered[1] + answered[2]
    assert len(everything) == 24 and len(set(everything)) == 24
    assert len(answered[0]) + len(answered[2]) == 24 - len(answered[1])


def test_the_summed_metrics_of_several_endpoints_leave_out_a_dead_one(tmp_path: Path) -> None:
    """``/metrics`` of an endpoint list is the sum of its servers'; once one dies, the sum of
    the others (not an error: that stopped the adaptive in-flight sizing for the whole run)."""
    servers = [SimulatedServer("--prefill-ms", "0", "--instant") for _ in range(3)]
    for server in servers:
        server.start()

    def image(n: int) -> bytes:
        buffer = io.BytesIO()
        Image.new("L", (64 + n, 64), 255).save(buffer, "PNG")
        return buffer.getvalue()

    def direct(server: SimulatedServer) -> dict[str, float]:
        return parse_metrics(server.metrics_text())  # the same reading of /metrics, one server

    async def scenario() -> tuple[dict[str, float], dict[str, float], list[dict[str, float]], list[dict[str, float]]]:
        urls = ",".join(s.base_url for s in servers)
        async with open_endpoint(urls, DEFAULT_MODEL, api_key=None, client_options=ClientOptions(dead_after=5)) as endpoint:
            assert endpoint.metrics is not None
            for n in range(9):  # spread over the three by the dispatcher
                body = DEEPSEEK_OCR.body(image(n), "image/png", temperature=0.0, max_tokens=64, text=FREE_OCR_PROMPT)
                await endpoint.client.chat(body)
            all_three = await endpoint.metrics()
            each = [direct(s) for s in servers]
            servers[2].stop()
            two = await endpoint.metrics()
            left = [direct(s) for s in servers[:2]]
        return all_three, two, each, left

    try:
        all_three, two, direct, left = asyncio.run(scenario())
    finally:
        for server in servers:
            server.stop()
    assert all(d["generation_tokens_total"] > 0 for d in direct)  # each server answered some
    for key in ("generation_tokens_total", "prompt_tokens_total", "running", "waiting"):
        assert all_three[key] == sum(d[key] for d in direct), key
        assert two[key] == sum(d[key] for d in left), key
