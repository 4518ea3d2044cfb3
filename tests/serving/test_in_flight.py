"""The in-flight limit that sizes itself from the server's /metrics."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest
from aiohttp import web

from llm_ocr.serving.in_flight import AdaptiveInFlight, AdaptivePolicy, InFlightLimit, Reading, in_flight_control
from llm_ocr.testing import SimulatedServer
from tests.conftest import run_cli
from tests.docs import make_corpus
from tests.waiting import HANG_GUARD_S, hangs_applied

# -- the resizable semaphore ------------------------------------------------------------------


def test_raising_the_limit_lets_waiters_in_and_lowering_it_takes_nothing_back() -> None:
    async def go() -> None:
        limit = InFlightLimit(2)
        await limit.acquire()
        await limit.acquire()
        assert limit.locked()
        waiters = [asyncio.create_task(limit.acquire()) for _ in range(3)]
        await asyncio.sleep(0)
        assert not any(w.done() for w in waiters)
        limit.set_limit(4)
        await asyncio.sleep(0)
        assert [w.done() for w in waiters] == [True, True, False]  # first come, first served
        limit.set_limit(1)  # four held: nobody loses a permit, nobody new gets one
        assert limit.held == 4
        for _ in range(3):
            limit.release()
        await asyncio.sleep(0)
        assert not waiters[2].done() and limit.held == 1
        limit.release()
        await asyncio.sleep(0)
        assert waiters[2].done() and limit.held == 1

    asyncio.run(go())


def test_a_cancelled_waiter_leaves_no_permit_behind() -> None:
    async def go() -> None:
        limit = InFlightLimit(1)
        await limit.acquire()
        waiter = asyncio.create_task(limit.acquire())
        await asyncio.sleep(0)
        waiter.cancel()
        await asyncio.sleep(0)
        limit.release()
        assert limit.held == 0 and not limit.locked()

    asyncio.run(go())


# -- the policy --------------------------------------------------------------------------------


def decide(
    limit: int, running: float, waiting: float, ours: int, overloaded: int = 0, before: Reading | None = None,
    sent: int | None = None,
) -> int:  # fmt: skip
    controller = AdaptiveInFlight(InFlightLimit(limit), metrics=None)  # type: ignore[arg-type]
    return controller.decide(limit, Reading(running, waiting, ours, overloaded, sent), before)


def test_it_grows_while_the_server_runs_all_of_ours_and_queues_nothing() -> None:
    assert decide(64, running=64, waiting=0, ours=64) == 128
    assert decide(64, running=64, waiting=0, ours=63) == 128


@pytest.mark.parametrize(
    ("running", "waiting", "ours", "why"),
    [
        (90, 0, 64, "another client's requests run too: 64 is our share"),
        (20, 0, 24, "we do not use the limit: the client, not the limit, is slow"),
        (10, 0, 64, "our requests are stuck client-side, not at the server"),
    ],
)
def test_it_does_not_grow_when_the_limit_is_not_what_holds_the_server_back(running, waiting, ours, why) -> None:
    assert decide(64, running, waiting, ours) == 64, why


def test_pages_read_in_several_requests_count_their_requests_at_the_server() -> None:
    # 64 pages in flight, one of them a dense page read in 8 tiles at once (and one long page in
    # 4 segments): 74 of our requests run on 64 permits. All ours: the limit grows.
    assert decide(64, running=74, waiting=0, ours=64, sent=74) == 128
    # Another client's requests beside our 74: 64 pages is our share.
    assert decide(64, running=110, waiting=0, ours=64, sent=74) == 64
    # Our requests stuck client-side (74 sent, 10 running): not the limit's fault.
    assert decide(64, running=10, waiting=0, ours=64, sent=74) == 64


def test_a_full_server_gets_a_small_queue_not_a_pile() -> None:
    full_before = Reading(256, 100, 512, 0)
    # After doubling past a 256-slot server: back to 256 running plus a queue of a quarter.
    assert decide(512, running=256, waiting=200, ours=512, before=full_before) == 256 + 64
    # A single reading with a queue is vLLM admitting a burst over a few steps: wait and see.
    assert decide(512, running=200, waiting=50, ours=512, before=None) == 512
    assert decide(512, running=230, waiting=20, ours=512, before=Reading(200, 50, 512, 0)) == 512
    # It never grows while requests wait.
    assert decide(64, running=64, waiting=4, ours=64, before=Reading(64, 4, 64, 0)) == 64


def test_it_backs_off_on_429_and_503() -> None:
    assert decide(100, running=50, waiting=0, ours=100, overloaded=3) == 70
    assert decide(10, running=5, waiting=0, ours=10, overloaded=1) == 8  # never below the floor


def test_fixed_and_preset_limits_do_not_adapt() -> None:
    async def metrics() -> dict[str, float]:
        return {"running": 0.0, "waiting": 0.0}

    assert in_flight_control(12, 300, metrics)[0].limit == 12
    limit, controller = in_flight_control(None, 300, metrics)
    assert limit.limit == 300 and controller is None
    limit, controller = in_flight_control(None, None, metrics)
    assert limit.limit == AdaptivePolicy().start and controller is not None


def test_without_metrics_the_limit_stays_at_the_default() -> None:
    """A non-vLLM endpoint: /metrics answers 404. The controller gives up at its first look."""

    async def go() -> tuple[int, list[tuple[float, int]]]:
        from llm_ocr.serving.open import _external_metrics

        app = web.Application()
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        url = f"http://127.0.0.1:{runner.addresses[0][1]}/v1"
        try:
            limit, controller = in_flight_control(None, None, lambda: _external_metrics(url), policy=AdaptivePolicy(interval=0.01))
            assert controller is not None
            await asyncio.wait_for(controller.run(), 5)  # returns: nothing to adapt to
            return limit.limit, controller.history
        finally:
            await runner.cleanup()

    limit, history = asyncio.run(go())
    assert limit == 64 and history == [(0.0, 64)]


def test_the_client_counts_its_requests_on_the_wire() -> None:
    """``sending``, what the controller compares with the server's running count: each request
    from when it is sent until it is answered or given up, per client and summed over a dispatcher."""
    from llm_ocr.options import ClientOptions
    from llm_ocr.serving.dispatch import Dispatcher
    from llm_ocr.vlm.client import VlmClient
    from llm_ocr.vlm.families import DEEPSEEK_OCR
    from llm_ocr.vlm.recipes import DEFAULT_MODEL
    from tests.docs import chart_png

    async def go(servers: list[SimulatedServer]) -> tuple[list[int], int, int]:
        clients = [VlmClient(server.base_url, DEFAULT_MODEL, options=ClientOptions()) for server in servers]
        dispatcher = Dispatcher(clients)
        try:
            bodies = [DEEPSEEK_OCR.body(chart_png(n), "image/png", temperature=0.0, max_tokens=200) for n in range(5)]
            tasks = [asyncio.ensure_future(dispatcher.chat(body)) for body in bodies]
            # The servers hold every request until its client leaves: all five get there and stay,
            # however slow the machine (no request can be answered before the last is sent).
            loop = asyncio.get_running_loop()
            deadline = loop.time() + HANG_GUARD_S
            while sum(hangs_applied(server) for server in servers) < 5:
                assert loop.time() < deadline, "the five requests never reached the servers"
                await asyncio.sleep(0.05)
            during = [c.sending for c in clients], dispatcher.sending
            for task in tasks:  # the run gives up on them: each leaves the wire
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            return during[0], during[1], dispatcher.sending
        finally:
            await asyncio.gather(*(c.close() for c in clients))

    with SimulatedServer("--instant") as one, SimulatedServer("--instant") as two:
        for server in (one, two):
            server.inject("hang", count=5)
        each, total, after = asyncio.run(go([one, two]))
    assert total == 5 and sorted(each) == [2, 3] and after == 0


# -- end to end -----------------------------------------------------------------------------------


def test_an_endpoint_with_more_slots_than_the_default_is_fed_to_its_size(tmp_path: Path) -> None:
    """128 slots behind --endpoint and no --max-in-flight: the run grows past 64 in flight, and
    settles at the server's size plus a small queue, not at double it."""
    make_corpus(tmp_path / "docs", documents=9, pages=16)
    # 300 tokens at 100 ms: each page holds a slot ~30 s, so 64 in flight would leave half idle, and
    # 144 pages overfill the 128 slots (the limit then settles). The client has to render the pages
    # faster than the slots free: at 36 DPI (the 640-pixel floor) it does at load 17 on 2 cores
    # (256 reached 6-14 s in, settled at 160). At 144 DPI and ~8 s a page it rendered about 2 pages
    # a second there: never 64 in flight (max running 39-53), or never past 128 (no queue to settle).
    args = ("--slots", "128", "--prefill-ms", "200", "--decode-ms-per-token", "100", "--load-slowdown", "0",
            "--output-tokens-mean", "300")  # fmt: skip
    with SimulatedServer(*args) as server:
        result = run_cli(
            "extract", str(tmp_path / "docs"), "--output", str(tmp_path / "out"), "--endpoint", server.base_url,
            "--workers", "1", "--progress", "off", "--dpi", "36", timeout=300,
        )  # fmt: skip
        stats = server.stats()
    assert result.returncode == 0, result.stderr[-3000:]
    assert stats["max_running"] > 64  # fed past the old fixed default
    (summary,) = re.findall(r"requests in flight adapted to the server: (.*)", result.stderr)
    limits = [int(n) for n in re.findall(r"(\d+) at [\d.]+s", summary)]
    assert limits[0] == 64 and max(limits) >= 128
    assert limits[-1] <= 128 + 32  # settled: the server's size plus a quarter


def write_extract_output(out: Path, pages: int, figures_per_page: int) -> None:
    """An ``OUT/extract`` of ``pages`` ok pages with figures (and its completion marker), written
    directly: Describe needs its rows, not the rendering and OCR that made them."""
    import io

    from PIL import Image

    from llm_ocr.records import Figure, PageResult, page_schema
    from llm_ocr.storage import Storage
    from llm_ocr.storage.parts import PartWriter
    from llm_ocr.storage.state import write_marker

    buffer = io.BytesIO()
    Image.new("RGB", (96, 64), (200, 30, 30)).save(buffer, "PNG")
    crop = buffer.getvalue()

    async def write() -> None:
        storage = Storage(str(out))
        writer = PartWriter(storage.child("extract"), page_schema(), 0, 1)
        for number in range(pages):
            doc, page = divmod(number, 10)
            figures = [Figure(f"{page}-{i}", [0, 0, 96, 64], image=crop) for i in range(figures_per_page)]
            row = PageResult(f"doc{doc:03d}.pdf", doc, page + 1, f"doc{doc:03d}.pdf", 10, markdown="text",
                             figures=figures, status="ok")
            await writer.add(row.to_row())
        await writer.close()
        write_marker(storage, "extract", 0, 1, {"stage": "extract", "shard": 0, "num_shards": 1, "pages": {"error": 0}})

    asyncio.run(write())


def test_describe_feeds_an_endpoint_with_more_slots_than_the_default_to_its_size(tmp_path: Path) -> None:
    """Describe sizes its figure requests in flight from /metrics as Extract does: 256 slots behind
    --endpoint and no --max-in-flight, and the run grows past 64 requests in flight."""
    out = tmp_path / "out"
    write_extract_output(out, pages=200, figures_per_page=2)
    # 300 tokens at 50 ms: each figure holds a slot ~16 s, so 64 in flight would leave most idle; the
    # client must send faster than 64 per 16 s to feed more (at ~8 s a figure, a machine at load 19
    # sent too slowly and never had 64 in flight: max running 56).
    args = ("--slots", "256", "--prefill-ms", "200", "--decode-ms-per-token", "50", "--load-slowdown", "0",
            "--output-tokens-mean", "300", "--output-tokens-sigma", "0.1")  # fmt: skip
    with SimulatedServer(*args) as server:
        result = run_cli("describe", "--output", str(out), "--endpoint", server.base_url, "--progress", "off",
                         timeout=300)
        stats = server.stats()
    assert result.returncode == 0, result.stderr[-3000:]
    assert stats["requests"] == 400
    assert stats["max_running"] > 64  # fed past the old fixed default
    (summary,) = re.findall(r"requests in flight adapted to the server: (.*)", result.stderr)
    limits = [int(n) for n in re.findall(r"(\d+) at [\d.]+s", summary)]
    assert limits[0] == 64 and max(limits) >= 128
