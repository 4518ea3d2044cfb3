"""``llm-ocr bench``: the perfect-client lower bound, the /metrics sampler, a tiny end-to-end run,
and the simulator's long-tailed answer lengths the benchmark relies on."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import math
import os
from pathlib import Path

import aiohttp
import pytest
from PIL import Image, ImageDraw

from llm_ocr.bench import BenchConfig, format_table, run_bench
from llm_ocr.bench.corpus import document_lengths, make_corpus
from llm_ocr.bench.lower_bound import (
    LoggedRequest,
    dependencies,
    longest_first_bound,
    lower_bound_seconds,
    read_request_log,
)
from llm_ocr.bench.measure import Sampler
from llm_ocr.engines.sim import content
from llm_ocr.engines.sim.timing import TimingModel, perfect_client_makespan, replay
from llm_ocr.testing import SimulatedServer
from tests.waiting import HANG_GUARD_S

MODEL = "deepseek-ai/DeepSeek-OCR"
PROMPT = "<|grounding|>Convert the document to markdown."


# ---------------------------------------------------------------------------------------------
# The lower-bound model, on cases small enough to work out by hand


def test_identical_requests_constant_speed_run_in_waves() -> None:
    # 10 ms/token, no load effect: each request takes 20 ms + 100 x 10 ms = 1.02 s, and 8
    # requests on 4 slots run in two waves.
    model = TimingModel(slots=4, prefill_ms=20, decode_ms_per_token=10, load_slowdown=0)
    assert perfect_client_makespan(model, [100] * 8) == pytest.approx(2.04)
    assert perfect_client_makespan(model, [100] * 9) == pytest.approx(3.06)  # a third wave of one
    assert perfect_client_makespan(model, [100] * 4) == pytest.approx(1.02)


def test_full_batch_runs_at_the_loaded_speed() -> None:
    # 4 requests on 4 slots: per token 10 ms x (1 + 1 x 4/4) = 20 ms throughout.
    model = TimingModel(slots=4, prefill_ms=20, decode_ms_per_token=10, load_slowdown=1)
    assert perfect_client_makespan(model, [100] * 4) == pytest.approx(0.02 + 100 * 0.020)
    # One request alone: 10 ms x (1 + 1/4) = 12.5 ms per token.
    assert perfect_client_makespan(model, [100]) == pytest.approx(0.02 + 100 * 0.0125)


def test_load_is_re_evaluated_at_each_step_boundary() -> None:
    # Two requests on 2 slots, 10 ms/token base, k=1: 20 ms/token while both run. The short
    # one (9 tokens) ends at 0.02 + 0.18 = 0.20 s. The long one's steps start at 0.02, 0.07,
    # 0.12, 0.17 and 0.22 s: at 0.22 it has 4 x 2.5 = 10 tokens and runs alone from then on,
    # at 10 x (1 + 1/2) = 15 ms/token, so it ends at 0.22 + 90 x 0.015 = 1.57 s.
    model = TimingModel(slots=2, prefill_ms=20, decode_ms_per_token=10, load_slowdown=1)
    result = replay(model, [9, 100])
    assert result.finish[0] == pytest.approx(0.20)
    assert result.finish[1] == pytest.approx(1.57)
    assert result.makespan == pytest.approx(1.57)


def test_a_long_request_dominates_and_order_matters() -> None:
    model = TimingModel(slots=4, prefill_ms=20, decode_ms_per_token=10, load_slowdown=0)
    # First in line: it runs from t=0 (20.02 s) while the others finish in two short waves.
    assert perfect_client_makespan(model, [2000] + [100] * 7) == pytest.approx(0.02 + 20.0)
    # Last in line: it gets a slot only when the first wave ends at 1.02 s.
    assert perfect_client_makespan(model, [100] * 7 + [2000]) == pytest.approx(1.02 + 0.02 + 20.0)


def test_the_longest_first_bound_admits_the_longest_waiting_request_first() -> None:
    model = TimingModel(slots=4, prefill_ms=20, decode_ms_per_token=10, load_slowdown=0)
    tokens = [100] * 7 + [2000]
    # The long request last in the list still gets a slot at t=0: it alone sets the makespan.
    longest = replay(model, tokens, priority=[float(t) for t in tokens])
    assert longest.makespan == pytest.approx(0.02 + 20.0) and longest.admitted[7] == 0.0
    # Five on four slots: the four longest at t=0, the shortest when the 100-token one ends; in
    # list order the 400-token one would wait for the 50-token one (0.52 s) and end at 4.54 s.
    tokens = [50, 100, 300, 200, 400]
    ranked = replay(model, tokens, priority=[float(t) for t in tokens])
    assert ranked.admitted == (pytest.approx(1.02), 0.0, 0.0, 0.0, 0.0)
    assert ranked.makespan == pytest.approx(4.02)  # 400 tokens from t=0
    assert replay(model, tokens).makespan == pytest.approx(0.52 + 4.02)
    # A retry arrives when its answer is back and, from then on, ranks by its length too.
    requests = [LoggedRequest(float(i), sha, t, "stop") for i, (sha, t) in enumerate(
        [("a", 100), ("b", 100), ("c", 100), ("d", 100), ("e", 100), ("a", 1000)])]
    bound = longest_first_bound(model, requests)
    assert bound.admitted[5] == pytest.approx(1.02) and bound.makespan == pytest.approx(1.02 + 10.02)


def test_a_retry_waits_for_the_answer_it_retries() -> None:
    model = TimingModel(slots=4, prefill_ms=20, decode_ms_per_token=10, load_slowdown=0)
    assert perfect_client_makespan(model, [100, 100]) == pytest.approx(1.02)
    assert perfect_client_makespan(model, [100, 100], after=[None, 0]) == pytest.approx(2.04)
    with pytest.raises(ValueError):
        perfect_client_makespan(model, [100, 100], after=[1, None])


def test_arrivals_delay_the_schedule_and_utilisation_is_time_averaged() -> None:
    model = TimingModel(slots=4, prefill_ms=20, decode_ms_per_token=10, load_slowdown=0)
    late = replay(model, [100] * 4, arrivals=[0, 0, 0, 5])
    assert late.makespan == pytest.approx(6.02)
    full = replay(model, [100] * 4)
    assert full.mean_running == pytest.approx(4.0)
    assert late.mean_running == pytest.approx((3 * 1.02 + 1.02) / 6.02)


def test_the_server_sleeps_the_same_steps_the_bound_adds_up() -> None:
    # The simulator and the bound share one step generator: its waits add up to the bound.
    model = TimingModel(slots=1, prefill_ms=50, decode_ms_per_token=3, load_slowdown=2)
    waits = list(model.slot_steps(1000, lambda: 1))
    assert waits[0] == (0.05, 0.0)
    assert sum(tokens for _, tokens in waits) == pytest.approx(1000)
    assert all(seconds <= model.step_s + 1e-12 for seconds, _ in waits)
    assert sum(seconds for seconds, _ in waits) == pytest.approx(perfect_client_makespan(model, [1000]))


def test_request_log_gives_arrival_order_and_retry_chains(tmp_path: Path) -> None:
    def line(t: float, sha: str, tokens: int, status: int = 200) -> str:
        body = {"messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": {"data_uri": "image/jpeg", "sha256": sha, "bytes": 1}}},
            {"type": "text", "text": PROMPT},
        ]}]}  # fmt: skip
        record = {"time": t, "status": status, "body": body, "completion_tokens": tokens if status == 200 else None}
        return json.dumps(record)

    log = tmp_path / "requests.jsonl"
    log.write_text("\n".join([
        line(2.0, "b", 4096), line(1.0, "a", 100), line(3.0, "c", 50, status=500), line(4.0, "b", 4096), "{cut",
    ]) + "\n")  # fmt: skip
    requests = read_request_log(log)
    assert [r.image_sha256 for r in requests] == ["a", "b", "b"]  # sorted, failed and cut lines dropped
    assert dependencies(requests) == [None, None, 1]
    model = TimingModel(slots=4, prefill_ms=0, decode_ms_per_token=1, load_slowdown=0)
    assert lower_bound_seconds(model, requests) == pytest.approx(2 * 4.096)


# ---------------------------------------------------------------------------------------------
# The workload


def test_corpus_has_the_pages_asked_for_and_is_reused(tmp_path: Path) -> None:
    import pypdfium2 as pdfium

    assert sum(document_lengths(37, seed=1)) == 37
    folder = tmp_path / "c"
    paths = make_corpus(folder, 12)
    assert sum(len(pdfium.PdfDocument(str(p))) for p in paths) == 12
    assert {p.suffix for p in folder.iterdir()} == {".pdf"}  # nothing else for the listing to trip on
    stamp = paths[0].stat().st_mtime_ns
    assert make_corpus(folder, 12) == paths and paths[0].stat().st_mtime_ns == stamp


# ---------------------------------------------------------------------------------------------
# The simulator: /metrics sampling and long-tailed answer lengths


def _page(seed: int) -> bytes:
    img = Image.new("RGB", (640, 800), "white")
    ImageDraw.Draw(img).rectangle((20 + seed, 20, 120 + seed, 60), fill="black")
    buf = io.BytesIO()
    img.save(buf, "PNG")
    return buf.getvalue()


async def _ask(session: aiohttp.ClientSession, base_url: str, image: bytes) -> dict:
    uri = f"data:image/png;base64,{base64.b64encode(image).decode()}"
    body = {
        "model": MODEL,
        "max_tokens": 2048,
        "temperature": 0,
        "skip_special_tokens": False,
        "vllm_xargs": {"ngram_size": 30, "window_size": 90, "whitelist_token_ids": [128821, 128822]},
        "messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": uri}}, {"type": "text", "text": PROMPT},
        ]}],
    }  # fmt: skip
    async with session.post(f"{base_url}/chat/completions", json=body) as response:
        assert response.status == 200, await response.text()
        return await response.json()


def test_sampler_reads_running_and_waiting_from_metrics() -> None:
    # 2 slots and 6 requests that would take an hour each: once all have arrived the server
    # shows 2 running and 4 waiting until the client leaves, however slow the machine, and the
    # sampler must read exactly that (no utilisation that depends on how fast the client sent).
    with SimulatedServer("--slots", "2", "--prefill-ms", "3600000", "--load-slowdown", "0") as sim:

        def settled(sampler: Sampler) -> list:
            return [s for s in sampler.samples if s.running == 2 and s.waiting == 4]

        async def main() -> Sampler:
            sampler = Sampler(f"{sim.url}/metrics", interval=0.05)
            sampler.start()
            async with aiohttp.ClientSession() as session:
                asks = [asyncio.ensure_future(_ask(session, sim.base_url, _page(i))) for i in range(6)]
                loop = asyncio.get_running_loop()
                deadline = loop.time() + HANG_GUARD_S
                while len(settled(sampler)) < 10:
                    assert loop.time() < deadline, f"the sampler never saw 2 running and 4 waiting: {sampler.samples[-3:]}"
                    await asyncio.sleep(0.05)
                sampler.stop()
                for ask in asks:  # the client leaves: the server frees the slots
                    ask.cancel()
                await asyncio.gather(*asks, return_exceptions=True)
            return sampler

        sampler = asyncio.run(main())
    since = settled(sampler)[0].t
    usage = sampler.utilisation(slots=2, start=since, end=sampler.samples[-1].t)
    assert usage is not None and usage.samples >= 10
    assert usage.max_running == 2 and usage.utilisation == pytest.approx(1.0)
    assert usage.waiting_fraction == pytest.approx(1.0) and usage.mean_waiting == pytest.approx(4.0)
    whole = sampler.utilisation(slots=2, start=0.0, end=sampler.samples[-1].t)
    assert whole is not None and whole.max_running == 2 and 0 < whole.utilisation <= 1.0
    assert sampler.errors == 0
    assert 0 < sampler.cpu_s < 1.0
    assert sampler.peak_rss()["main"] > 0


def test_answer_lengths_follow_the_lognormal_option() -> None:
    images = [_page(i) for i in range(6)]
    args = ("--instant", "--output-tokens-mean", "600", "--output-tokens-sigma", "0.5", "--seed", "7")
    with SimulatedServer(*args) as sim:

        async def main() -> list[dict]:
            async with aiohttp.ClientSession() as session:
                return [await _ask(session, sim.base_url, image) for image in images + images[:1]]

        answers = asyncio.run(main())
    tokens = [a["usage"]["completion_tokens"] for a in answers]
    assert tokens[-1] == tokens[0]  # fixed per image (and seed), like a page's true length
    import hashlib

    for image, got, answer in zip(images, tokens, answers):
        want = content.lognormal_tokens(hashlib.sha256(image).digest(), 7, 600, 0.5)
        assert want - 20 <= got <= want  # a few characters short at most
        assert answer["choices"][0]["finish_reason"] == "stop"
        assert answer["choices"][0]["message"]["content"].startswith("<|ref|>")
    assert len(set(tokens[:-1])) > 3


# ---------------------------------------------------------------------------------------------
# End to end


def test_tiny_instant_bench_reports_every_field(tmp_path: Path) -> None:
    results, _ = run_bench(
        BenchConfig(pages=12, instant=True, workers=1),
        corpus_dir=tmp_path / "corpus",
        work_dir=tmp_path / "work",
    )
    (result,) = results
    assert result.pages == 12 and result.exit_code == 0
    assert result.requests >= 12 and result.completion_tokens > 0
    assert result.wall_s > 0 and result.pages_per_s > 0 and result.tokens_per_s > 0
    assert result.lower_bound_s is None  # instant: there is no server time to bound
    assert result.server["samples"] > 0 and result.server["utilisation"] is not None
    client = result.client
    assert client["cpu_s"] > 0 and client["cpu_workers_s"] > 0 and client["cpu_ms_per_page"] > 0
    assert 0 < client["peak_rss_main_mb"] < 1500 and 0 < client["peak_rss_worker_mb"] < 1500
    assert result.machine["cpus"] >= 1
    assert not (tmp_path / "work" / "run-01" / "out").exists()  # not kept
    table = format_table(results)
    assert "wall / lower bound" in table and "pages/s" in table
    assert json.loads(json.dumps(result.to_dict()))["pages"] == 12


#: The nearness claims are timing claims: on CI's loaded 2 cores the client is starved of CPU
#: (4.3x the bound measured at load 38) whatever the code does. They run when asked for, on a
#: machine otherwise idle (docs/testing.md, "Tests on a busy machine"); the default suite checks
#: that the measurement holds together.
TIMING = os.environ.get("LLM_OCR_TIMING_TESTS") == "1"


def test_tiny_simulated_bench_keeps_the_server_near_its_lower_bound(tmp_path: Path) -> None:
    # 12 pages on 4 slots at ~0.3-0.5 s each: a few seconds of simulated GPU time.
    config = BenchConfig(
        pages=12, workers=1, slots=4, prefill_ms=10, decode_ms_per_token=1, load_slowdown=1,
        output_tokens_mean=250, loop_rate=0.0, max_tokens=1024,
    )  # fmt: skip
    (result,), _ = run_bench(config, corpus_dir=tmp_path / "corpus", work_dir=tmp_path / "work")
    assert result.pages == 12
    bound, times = result.lower_bound_s, result.breakdown
    assert bound is not None and bound > 0.5
    assert times["model_at_actual_arrivals_s"] >= bound - 1e-6
    if TIMING:
        # Near: from its first request on, the client feeds the server so that an exact server,
        # given the requests when they really arrived, finishes within 2x of the perfect client's
        # bound. Measured 1.11-1.14 on 2 cores at load 3-4, 1.15-1.37 at load 6-10, 1.83 at load 14
        # (the client starved of CPU); one request in flight at a time (the client kept to one)
        # gives 2.66-2.84, and fails.
        # (The bound is the all-at-t=0 schedule in the same order, not a proven optimum.)
        sending = times["model_at_actual_arrivals_s"] - times["first_request_s"]
        assert sending / bound < 2.0, times
        # The simulator keeps to that model: its last answer comes when the model says (measured
        # +0.03-0.06 s, up to +0.4 s at load 10).
        assert -0.2 < times["last_answer_s"] - times["model_at_actual_arrivals_s"] < 1.0, times
    # The whole run also pays for start-up (worker spawn, first render: 1.7-2.3 s measured, more
    # on a loaded machine), most of so short a run: no bound on it here, only that it is not
    # shorter than the bound.
    assert result.wall_over_lower_bound > 0.95
    assert math.isfinite(result.server["utilisation"])
