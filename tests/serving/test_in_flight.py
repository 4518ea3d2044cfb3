"""The in-flight limit that sizes itself from the server's /metrics."""

from __future__ import annotations

import asyncio

import pytest
from aiohttp import web

from llm_ocr.serving.in_flight import AdaptiveInFlight, AdaptivePolicy, InFlightLimit, Reading, in_flight_control
from llm_ocr.testing import SimulatedServer
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
