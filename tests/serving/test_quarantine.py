"""The crash tracker's rules, driven by an in-process server that dies on chosen pages.

The end-to-end tests (tests/e2e/runners/test_quarantine_e2e.py) run real server processes; these
pin the rules themselves: who is a suspect, who runs alone, who is convicted, what the restart
budget is charged, with every request of the tracked pages going through the tracker's gate.
"""

from __future__ import annotations

import asyncio
import io
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import pytest
from PIL import Image

from llm_ocr.options import ClientOptions, ServerOptions
from llm_ocr.serving.command_lines import free_port
from llm_ocr.serving.dispatch import Dispatcher
from llm_ocr.serving.open import open_endpoint
from llm_ocr.serving.quarantine import CrashTracker, Incarnation, PageQuarantined
from llm_ocr.testing import SimulatedServer
from llm_ocr.vlm.client import EndpointDown, RequestFailed, VlmClient
from llm_ocr.vlm.families import DEEPSEEK_OCR
from llm_ocr.vlm.recipes import DEFAULT_MODEL, FREE_OCR_PROMPT


class Lost(Exception):
    """The request went down with the server."""


@dataclass
class Server:
    """A server with generations: a request of a poison page kills the current generation (and
    every request on it); the next generation starts at once."""

    tracker: CrashTracker
    poison: dict[tuple[str, int], int]  # page -> crashes left (-1: always)
    generation: int = 1
    in_flight: dict[asyncio.Future[None], tuple[str, int]] = field(default_factory=dict)
    peak_alone: list[int] = field(default_factory=list)  # in-flight count when a poison page was sent
    at_death: list[int] = field(default_factory=list)  # requests in flight when each generation died
    charged: list[int] = field(default_factory=list)
    #: Tells the tracker of a death (default: ``tracker.record_death``, a single server).
    count_death: Callable[[int], int] | None = None
    crash_delay: float = 0.01  # seconds a poison request is on the wire before the crash
    request_s: float = 0.02  # seconds any other request takes
    sent: list[tuple[float, tuple[str, int]]] = field(default_factory=list)  # (when, page) of each request
    died: list[tuple[float, list[tuple[str, int]]]] = field(default_factory=list)  # (when, pages in flight)
    #: Set at each death, for a waiter to check ``died`` again (clear it before waiting); the servers
    #: of a fleet share one, so a waiter hears of any one's death.
    death: asyncio.Event = field(default_factory=asyncio.Event)
    #: The first generation's requests stay on the wire until it dies, and a poison page kills it
    #: only once this many are (None: both timed). Timed, a loaded machine let requests sent
    #: before a stall of the event loop end before the poison page was even sent (r110: 6 of 8
    #: in flight at the first death).
    first_death_with: int | None = None
    _sent_one: asyncio.Event = field(default_factory=asyncio.Event)

    async def gate(self) -> int:
        await asyncio.sleep(0)
        return self.generation

    async def request(self, key: tuple[str, int], generation: int) -> None:
        if generation != self.generation:
            raise Lost
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.in_flight[done] = key
        self.sent.append((time.monotonic(), key))
        self._sent_one.set()
        held = self.first_death_with is not None and generation == 1
        if self.poison.get(key, 0):
            self.peak_alone.append(len(self.in_flight))
            self.poison[key] -= 1
            while held and len(self.in_flight) < (self.first_death_with or 0):
                self._sent_one.clear()
                await self._sent_one.wait()
            await asyncio.sleep(self.crash_delay)  # the crash comes while the request is on the wire
            self._die()
        elif not held:
            asyncio.get_running_loop().call_later(self.request_s, lambda: done.done() or done.set_result(None))
        try:
            await done
        finally:
            self.in_flight.pop(done, None)

    def _die(self) -> None:
        self.died.append((time.monotonic(), list(self.in_flight.values())))
        self.death.set()
        self.at_death.append(len(self.in_flight))
        self.charged.append((self.count_death or self.tracker.record_death)(self.generation))
        self.generation += 1
        for done in list(self.in_flight):
            if not done.done():
                done.set_exception(Lost())


@dataclass
class Wire:
    """A server driven step by step by the test: a request stays on the wire until the test
    answers it (:meth:`answer`) or kills the server (:meth:`kill`: the tracker is told, as by a
    managed server's watcher, and every request on the wire is lost)."""

    tracker: CrashTracker
    generation: int = 1
    requests: dict[asyncio.Future[None], tuple[str, int]] = field(default_factory=dict)
    #: (page, generation, the other pages on the wire then) of every request sent.
    log: list[tuple[tuple[str, int], int, list[tuple[str, int]]]] = field(default_factory=list)
    #: The name of the task, each time the tracker's gate asked this server for its generation:
    #: the tracker decides at once (no await between) whether that request may go or waits.
    asked: list[str] = field(default_factory=list)
    #: Set at every change of the wire (a request sent, answered, lost or gone; a death; a pass
    #: through the gate): :func:`until` checks its condition again then, and only then.
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    async def gate(self) -> int:
        await asyncio.sleep(0)
        task = asyncio.current_task()
        self.asked.append(task.get_name() if task else "")
        self.changed.set()
        return self.generation

    async def request(self, key: tuple[str, int], generation: int) -> None:
        if generation != self.generation:
            raise Lost
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.log.append((key, generation, self.on_wire()))
        self.requests[done] = key
        self.changed.set()
        try:
            await done
        finally:
            self.requests.pop(done, None)
            self.changed.set()

    def asked_in_turn(self, since: int, *tasks: str) -> bool:
        """Whether ``tasks`` asked the gate in this order (others between) from ``asked[since]`` on."""
        rest = iter(self.asked[since:])
        return all(task in rest for task in tasks)

    def on_wire(self) -> list[tuple[str, int]]:
        """The pages whose requests are on the wire, in the order sent."""
        return [key for done, key in self.requests.items() if not done.done()]

    def answer(self, key: tuple[str, int]) -> None:
        for done, page in self.requests.items():
            if page == key and not done.done():
                done.set_result(None)
        self.changed.set()

    def drop(self, key: tuple[str, int]) -> None:
        """``key``'s request fails without an answer (a dropped connection, an error status), the
        server's death not recorded yet (a managed server's watcher sees the exit later)."""
        for done, page in self.requests.items():
            if page == key and not done.done():
                done.set_exception(Lost())
        self.changed.set()

    def kill(self) -> None:
        self.tracker.record_death(self.generation)
        self.generation += 1
        for done in self.requests:
            if not done.done():
                done.set_exception(Lost())
        self.changed.set()


async def until(condition: Callable[[], bool], what: str, wire: Wire, *tasks: asyncio.Task[str]) -> None:
    """Wait until ``condition`` holds, checked at each change of the wire and when one of ``tasks``
    ends (what the conditions read); a hang fails the test (30 s: generous on a loaded machine,
    where each step takes milliseconds) with what never happened and what was on the wire."""
    for task in tasks:
        task.add_done_callback(lambda _: wire.changed.set())

    async def wait() -> None:
        while not condition():
            wire.changed.clear()
            await wire.changed.wait()

    try:
        await asyncio.wait_for(wait(), timeout=30)
    except asyncio.TimeoutError:
        raise AssertionError(f"never happened: {what} (on the wire: {wire.on_wire()})") from None


def start_page(tracker: CrashTracker, page: int, handler: Callable[[], Awaitable[str]]) -> asyncio.Task[str]:
    """Page ``page`` of doc.pdf through ``tracker.guard``, in a task named ``p{page}`` (as
    :attr:`Wire.asked` names it); its result is the handler's, or the quarantine message."""

    async def run(ref: SimpleNamespace, item: SimpleNamespace, num_pages: int | None) -> str:
        return await handler()

    async def quarantined(
        ref: SimpleNamespace, item: SimpleNamespace, num_pages: int | None, exc: PageQuarantined
    ) -> str:
        return exc.message

    guarded = tracker.guard(run, quarantined)
    ref, item = SimpleNamespace(doc_id="doc.pdf"), SimpleNamespace(page=page)
    return asyncio.create_task(guarded(ref, item, None), name=f"p{page}")


async def send(
    tracker: CrashTracker,
    gate: Callable[[], Awaitable[Incarnation]],
    server: Server | Wire,
    key: tuple[str, int],
) -> None:
    """One request of page ``key`` as :class:`~llm_ocr.vlm.client.VlmClient` sends it: through
    the gate, its end told to the tracker (answered, or lost with the server), and retried on
    the next generation when lost."""
    while True:
        sent_to = await gate()
        answered = False
        try:
            await server.request(key, sent_to.generation)
            answered = True
            return
        except Lost:
            continue
        finally:
            tracker.request_ended(sent_to, answered)


async def drive_pages(
    tracker: CrashTracker, pages: int, requests: int, route: Callable[[int], tuple[Callable[[], Awaitable[Incarnation]], Server]]
) -> dict[int, str]:
    """Pages 1..``pages`` of ``doc.pdf`` through the tracker's guard, each sending ``requests``
    requests; ``route(page)`` gives the gate and the server of its requests."""

    async def handler(ref: SimpleNamespace, item: SimpleNamespace, num_pages: int | None) -> str:
        gate, server = route(item.page)
        # Several requests per page (a truncation retry, figure descriptions): pages are still
        # sending while another runs alone.
        for _ in range(requests):
            await send(tracker, gate, server, (ref.doc_id, item.page))
        return "ok"

    async def quarantined(ref: SimpleNamespace, item: SimpleNamespace, num_pages: int | None, exc: PageQuarantined) -> str:
        return exc.message

    guarded = tracker.guard(handler, quarantined)
    ref = SimpleNamespace(doc_id="doc.pdf")
    results = await asyncio.wait_for(
        asyncio.gather(*(guarded(ref, SimpleNamespace(page=n), pages) for n in range(1, pages + 1))), timeout=20
    )
    return dict(zip(range(1, pages + 1), results))


async def run_pages(
    pages: int, poison: dict[tuple[str, int], int], requests: int = 3, first_death_with: int | None = None
) -> tuple[dict[int, str], Server, CrashTracker]:
    tracker = CrashTracker()
    server = Server(tracker, dict(poison), first_death_with=first_death_with)
    gate = tracker.gate(server.gate)
    return await drive_pages(tracker, pages, requests, lambda page: (gate, server)), server, tracker


def test_a_poison_page_is_isolated_convicted_and_charged_nothing() -> None:
    results, server, tracker = asyncio.run(run_pages(8, {("doc.pdf", 5): -1}, first_death_with=8))
    assert results[5] == "the model server crashed on this page 3 times; quarantined"
    assert all(results[n] == "ok" for n in results if n != 5)
    assert tracker.convicted == {("doc.pdf", 5): 3} and tracker.deaths == 3
    # Sent with the whole batch, then back in a group of at most √8 suspects, then alone: the
    # third death had nothing else in flight, though the other pages still had requests to send.
    assert server.at_death[0] == 8 and server.peak_alone[1] <= 2 and server.at_death[2] == 1
    # Only the group the poison page went back with (√8 of the 8 suspects) needed solo runs.
    assert 1 <= tracker.solo_runs <= 2
    # The first death counted while nothing explained it; once the page was due its solo retry,
    # and after its conviction, none of its deaths counts against the restart budget.
    assert server.charged == [1, 0, 0] and tracker.charged_deaths() == 0


def test_a_page_runs_alone_only_once_the_requests_already_in_flight_have_finished() -> None:
    # Scripted step by step: page A has been in flight at two deaths; page B's request is on the
    # wire when A asks to send. A waits for B; while A runs alone, page C waits for A.
    async def scenario() -> list[str]:
        tracker = CrashTracker()
        generation = 1
        events: list[str] = []

        async def inner() -> int:
            return generation

        gate = tracker.gate(inner)
        release = {name: asyncio.Event() for name in "ABC"}
        sent = {name: asyncio.Event() for name in "ABC"}

        async def handler(ref: SimpleNamespace, item: SimpleNamespace, num_pages: int | None) -> str:
            for _ in range(3 if ref.doc_id == "A" else 1):  # A: sent to generations 1, 2, then alone
                sent_to = await gate()
                events.append(f"{ref.doc_id} sends")
                sent[ref.doc_id].set()
                await release[ref.doc_id].wait()  # its request is on the wire until released ...
                release[ref.doc_id].clear()
                tracker.request_ended(sent_to, sent_to.generation == generation)  # ... then answered, or lost with its generation
            events.append(f"{ref.doc_id} done")
            return "ok"

        async def never(*args: object) -> str:
            raise AssertionError("nobody is convicted here")

        guarded = tracker.guard(handler, never)
        page = SimpleNamespace(page=1)
        a = asyncio.create_task(guarded(SimpleNamespace(doc_id="A"), page, 1))
        await sent["A"].wait()
        tracker.record_death(1)  # A's request went down with generation 1 ...
        generation = 2
        release["A"].set()
        await asyncio.sleep(0.01)
        tracker.record_death(2)  # ... and with generation 2: A is due a solo retry
        generation = 3
        sent["A"].clear()
        b = asyncio.create_task(guarded(SimpleNamespace(doc_id="B"), page, 1))
        await sent["B"].wait()  # B (no death on it) is on the wire
        release["A"].set()  # A comes back to the gate
        await asyncio.sleep(0.05)
        assert not sent["A"].is_set(), "A went out beside B's request"
        release["B"].set()
        await asyncio.wait_for(sent["A"].wait(), 1)  # B done: A goes out alone
        c = asyncio.create_task(guarded(SimpleNamespace(doc_id="C"), page, 1))
        await asyncio.sleep(0.05)
        assert not sent["C"].is_set(), "C went out while A ran alone"
        release["A"].set()
        await asyncio.wait_for(sent["C"].wait(), 1)
        release["C"].set()
        await asyncio.gather(a, b, c)
        assert tracker.solo_runs == 1 and tracker.convicted == {}
        return events

    assert asyncio.run(scenario()) == ["A sends", "A sends", "B sends", "B done", "A sends", "A done", "C sends", "C done"]


X, P, B, C = ("doc.pdf", 1), ("doc.pdf", 2), ("doc.pdf", 3), ("doc.pdf", 4)


def test_a_page_that_ran_alone_and_was_answered_gives_the_server_to_the_next_page_due_a_solo_retry() -> None:
    # The interleaving that hung test_a_page_due_its_solo_retry_holds_back_only_the_server_it_crashed
    # on a loaded machine, forced step by step. Pages X and P were both in flight when the server
    # died, so both are due a solo retry on it (isolate_after=1: one death is enough here). X's
    # lost request is back at the gate first and goes out alone; the server answers it; X's page
    # then sends request after request until P is convicted. P must get the server next: while X
    # kept it for the rest of its page, X's requests went out alone one after the other and P
    # waited at the gate for a page that was waiting for P.
    async def scenario() -> tuple[dict[str, str], Wire, CrashTracker]:
        tracker = CrashTracker(isolate_after=1)
        wire = Wire(tracker)
        gate = tracker.gate(wire.gate)
        convicted = asyncio.Event()

        async def x() -> str:
            while not convicted.is_set():
                await send(tracker, gate, wire, X)
            return "ok"

        async def p() -> str:
            try:
                await send(tracker, gate, wire, P)  # P crashes the server every time
            finally:
                convicted.set()
            return "ok"

        x_page = start_page(tracker, 1, x)
        await until(lambda: wire.on_wire() == [X], "X sends", wire)
        p_page = start_page(tracker, 2, p)
        await until(lambda: wire.on_wire() == [X, P], "P sends beside X", wire)
        wire.kill()  # both due a solo retry; X's request was lost first, so X is back at the gate first
        await until(lambda: wire.on_wire() == [X] and wire.generation == 2, "X goes out alone", wire)
        wire.answer(X)  # X ran alone and was answered: it is not the page that crashes the server
        await until(lambda: wire.on_wire() == [P], "P goes out alone next", wire)
        wire.kill()  # P crashed it alone: convicted
        while not x_page.done():  # X's requests are answered until X sees the conviction
            await until(lambda: bool(wire.on_wire()) or x_page.done(), "X sends again", wire, x_page)
            for key in wire.on_wire():
                wire.answer(key)
        return {"X": await x_page, "P": await p_page}, wire, tracker

    results, wire, tracker = asyncio.run(scenario())
    assert results == {"X": "ok", "P": "the model server crashed on this page 2 times; quarantined"}
    assert [(g, others) for key, g, others in wire.log if key == P] == [(1, [X]), (2, [])]  # then alone
    assert [g for key, g, _ in wire.log if key == X][:3] == [1, 2, 3]  # its next request waited for P's solo run
    assert tracker.solo_runs == 2 and tracker.convicted == {P: 2}


def test_a_solo_retry_waits_for_requests_on_the_wire_not_for_a_page_waiting_for_a_permit() -> None:
    # llm-ocr run describes a page's figures under a limit whose permits its figure requests hold
    # while they wait at the gate. P is due its solo retry; B's request is on the wire, so P
    # waits; C's figure request holds the one permit and waits behind P. The server answers B,
    # and B's page asks for a permit for its figure. P must go out now: B has nothing on the
    # wire. Waiting for B to come back to the gate, it waited for C, which waited for P.
    async def scenario() -> tuple[dict[str, str], Wire, CrashTracker]:
        tracker = CrashTracker(isolate_after=1)
        wire = Wire(tracker)
        gate = tracker.gate(wire.gate)
        permit = asyncio.Semaphore(1)  # a Describe limit of one
        p_again = asyncio.Event()

        async def p() -> str:
            await send(tracker, gate, wire, P)
            await p_again.wait()
            await send(tracker, gate, wire, P)  # its solo retry
            return "ok"

        async def b() -> str:
            await send(tracker, gate, wire, B)  # the page's own request ...
            async with permit:
                await send(tracker, gate, wire, B)  # ... then one for its figure
            return "ok"

        async def c() -> str:
            async with permit:
                await send(tracker, gate, wire, C)
            return "ok"

        pages = [start_page(tracker, 2, p)]
        await until(lambda: wire.on_wire() == [P], "P sends", wire)
        wire.answer(P)
        wire.kill()  # P's latest request went to the generation that died: P is due its solo retry
        pages.append(start_page(tracker, 3, b))
        await until(lambda: wire.on_wire() == [B], "B sends", wire)
        mark = len(wire.asked)
        p_again.set()
        await until(lambda: wire.asked_in_turn(mark, "p2"), "P asks the gate again", wire)  # and waits for B's request
        mark = len(wire.asked)
        pages.append(start_page(tracker, 4, c))
        # C asks the gate, and waits behind P, holding the permit.
        await until(lambda: wire.asked_in_turn(mark, "p4"), "C asks the gate", wire)
        assert wire.on_wire() == [B]
        wire.answer(B)
        await until(lambda: wire.on_wire() == [P], "P goes out alone once B's request is answered", wire)
        wire.answer(P)
        await until(lambda: wire.on_wire() == [C], "C goes out", wire)
        wire.answer(C)
        await until(lambda: wire.on_wire() == [B], "B's figure goes out", wire)
        wire.answer(B)
        return dict(zip("PBC", await asyncio.gather(*pages))), wire, tracker

    results, wire, tracker = asyncio.run(scenario())
    assert results == {"P": "ok", "B": "ok", "C": "ok"}
    assert [(g, others) for key, g, others in wire.log if key == P] == [(1, []), (2, [])]
    assert tracker.solo_runs == 1 and tracker.convicted == {}


def test_suspects_over_the_square_root_limit_wait_for_requests_on_the_wire_not_for_busy_pages() -> None:
    # B and C were both in flight at a death: suspects of one death, they go back one at a time
    # (√2 rounded down). C's figure request holds the one permit of a Describe limit. B goes back
    # first and is answered, then asks for the permit for its figure. C must go now: B has
    # nothing on the wire. Counting B as busy until it came back to the gate, C waited for B,
    # which waited for C's permit.
    async def scenario() -> tuple[dict[str, str], Wire]:
        tracker = CrashTracker()
        wire = Wire(tracker)
        gate = tracker.gate(wire.gate)
        permit = asyncio.Semaphore(1)

        async def b() -> str:
            await send(tracker, gate, wire, B)
            async with permit:
                await send(tracker, gate, wire, B)
            return "ok"

        async def c() -> str:
            async with permit:
                await send(tracker, gate, wire, C)
            return "ok"

        pages = [start_page(tracker, 3, b)]
        await until(lambda: wire.on_wire() == [B], "B sends", wire)
        pages.append(start_page(tracker, 4, c))
        await until(lambda: wire.on_wire() == [B, C], "C sends beside B", wire)
        wire.kill()  # both suspects of one death; B's request was lost first and goes back first
        await until(lambda: wire.on_wire() == [B] and wire.generation == 2, "B goes back", wire)
        wire.answer(B)
        await until(lambda: wire.on_wire() == [C], "C goes back once B is answered", wire)
        wire.answer(C)
        await until(lambda: wire.on_wire() == [B], "B's figure goes out", wire)
        wire.answer(B)
        return dict(zip("BC", await asyncio.gather(*pages))), wire

    results, wire = asyncio.run(scenario())
    assert results == {"B": "ok", "C": "ok"}
    assert [others for key, g, others in wire.log if g == 2] == [[], [], []]  # one at a time after the death


def test_a_suspect_waiting_for_its_turn_is_not_overtaken_by_one_that_just_had_it() -> None:
    # B, P and C were in flight at a death: suspects of one death, they go back one at a time.
    # B goes first; P and C wait. B's page sends its next request as soon as the server answers
    # B: it must queue behind P and C. It overtook them every time (it asks the gate again before
    # the pages its answer woke up do), so P, the page that crashes the server, never went back
    # out while B's page had requests to send (in the test of two servers: 120 s, then a failure).
    async def scenario() -> tuple[dict[str, str], Wire]:
        tracker = CrashTracker()
        wire = Wire(tracker)
        gate = tracker.gate(wire.gate)
        p_out = asyncio.Event()

        async def b() -> str:
            while not p_out.is_set():
                await send(tracker, gate, wire, B)
            return "ok"

        async def p_or_c(key: tuple[str, int]) -> str:
            await send(tracker, gate, wire, key)
            return "ok"

        pages = [start_page(tracker, 3, b)]
        await until(lambda: wire.on_wire() == [B], "B sends", wire)
        pages.append(start_page(tracker, 2, lambda: p_or_c(P)))
        pages.append(start_page(tracker, 4, lambda: p_or_c(C)))
        await until(lambda: wire.on_wire() == [B, P, C], "P and C send beside B", wire)
        wire.kill()  # three suspects of one death; B's request was lost first and goes back first
        await until(lambda: wire.on_wire() == [B] and wire.generation == 2, "B goes back", wire)
        wire.answer(B)  # B's page sends again at once
        await until(lambda: wire.on_wire() == [P], "P goes back next (it waited longer than B's next request)", wire)
        p_out.set()
        wire.answer(P)
        await until(lambda: wire.on_wire() == [C], "C goes back next", wire)
        wire.answer(C)
        await until(lambda: wire.on_wire() == [B], "B's page's last request goes", wire)
        wire.answer(B)
        return dict(zip("BPC", await asyncio.gather(*pages))), wire

    results, wire = asyncio.run(scenario())
    assert results == {"B": "ok", "P": "ok", "C": "ok"}
    assert [key for key, g, _ in wire.log if g == 2] == [B, P, C, B]


def test_a_page_runs_alone_only_once_every_request_of_another_page_has_ended() -> None:
    # A page can have several requests on the wire (a dense page's tiles, a page's figures).
    # B's first request is on the wire and P, due its solo retry, waits for it; B's second
    # request comes to the gate. P must still wait: B's first request is on the wire.
    async def scenario() -> tuple[list[tuple[str, int]], Wire]:
        tracker = CrashTracker(isolate_after=1)
        wire = Wire(tracker)
        gate = tracker.gate(wire.gate)
        p_again, b_again = asyncio.Event(), asyncio.Event()

        async def p() -> str:
            await send(tracker, gate, wire, P)
            await p_again.wait()
            await send(tracker, gate, wire, P)
            return "ok"

        async def b() -> str:
            first = asyncio.ensure_future(send(tracker, gate, wire, B))
            await b_again.wait()
            await send(tracker, gate, wire, B)
            await first
            return "ok"

        pages = [start_page(tracker, 2, p)]
        await until(lambda: wire.on_wire() == [P], "P sends", wire)
        wire.answer(P)
        wire.kill()  # P is due its solo retry
        pages.append(start_page(tracker, 3, b))
        await until(lambda: wire.on_wire() == [B], "B's first request goes out", wire)
        mark = len(wire.asked)
        p_again.set()
        await until(lambda: wire.asked_in_turn(mark, "p2"), "P asks the gate again", wire)
        mark = len(wire.asked)
        b_again.set()
        # B's second request asks the gate, which wakes P, which asks again and decides.
        await until(lambda: wire.asked_in_turn(mark, "p3", "p2"), "B's second request asks the gate, then P", wire)
        during = wire.on_wire()
        wire.answer(B)
        await until(lambda: wire.on_wire() == [P], "P goes out alone", wire)
        wire.answer(P)
        await until(lambda: wire.on_wire() == [B], "B's second request goes out", wire)
        wire.answer(B)
        assert await asyncio.gather(*pages) == ["ok", "ok"]
        return during, wire

    during, wire = asyncio.run(scenario())
    assert during == [B], f"P went out beside B's first request: {during}"
    assert [(g, others) for key, g, others in wire.log if key == P] == [(1, []), (2, [])]


def test_a_page_running_alone_whose_request_got_no_answer_stays_alone_until_the_death_is_recorded() -> None:
    # vLLM answers the requests in flight with a 500 when its engine dies, and exits after; the
    # watcher of a managed server sees the exit a moment later. A page running alone whose
    # request failed so is not cleared: it keeps the server, X waits, and the death convicts it.
    async def scenario() -> tuple[dict[str, str], Wire, CrashTracker]:
        tracker = CrashTracker(isolate_after=1)
        wire = Wire(tracker)
        gate = tracker.gate(wire.gate)
        p_again = asyncio.Event()

        async def p() -> str:
            await send(tracker, gate, wire, P)
            await p_again.wait()
            await send(tracker, gate, wire, P)  # alone; retried while unanswered
            return "ok"

        async def x() -> str:
            await send(tracker, gate, wire, X)
            return "ok"

        pages = [start_page(tracker, 2, p)]
        await until(lambda: wire.on_wire() == [P], "P sends", wire)
        wire.answer(P)
        wire.kill()  # P is due its solo retry
        p_again.set()
        await until(lambda: wire.on_wire() == [P], "P goes out alone", wire)
        mark = len(wire.asked)
        pages.append(start_page(tracker, 1, x))
        await until(lambda: wire.asked_in_turn(mark, "p1"), "X asks the gate", wire)
        wire.drop(P)  # no answer; the server is dying
        await until(lambda: len([key for key, _, _ in wire.log if key == P]) == 3, "P goes out alone again", wire)
        assert wire.on_wire() == [P]
        wire.kill()  # the death is recorded: P ran alone, it is the culprit
        await until(lambda: wire.on_wire() == [X], "X goes out", wire)
        wire.answer(X)
        return dict(zip("PX", await asyncio.gather(*pages))), wire, tracker

    results, wire, tracker = asyncio.run(scenario())
    assert results == {"P": "the model server crashed on this page 2 times; quarantined", "X": "ok"}
    assert [(g, others) for key, g, others in wire.log if key == P] == [(1, []), (2, []), (2, [])]
    assert tracker.convicted == {P: 2}


def test_a_convicted_page_gives_the_server_back_at_once() -> None:
    # P runs alone; vLLM answers its request with a 500 as its engine dies, and the client waits
    # a backoff before it asks the gate again (where the conviction stops it). When the death is
    # recorded, P is convicted: X, waiting for the server, must go now, not after P's backoff.
    async def scenario() -> dict[str, str]:
        tracker = CrashTracker(isolate_after=1)
        wire = Wire(tracker)
        gate = tracker.gate(wire.gate)
        p_again, backoff_over = asyncio.Event(), asyncio.Event()

        async def p() -> str:
            await send(tracker, gate, wire, P)
            await p_again.wait()
            sent_to = await gate()  # its solo retry
            try:
                await wire.request(P, sent_to.generation)
            except Lost:
                tracker.request_ended(sent_to, False)
            await backoff_over.wait()
            await gate()  # the conviction stops it here
            raise AssertionError("a convicted page passed the gate")

        async def x() -> str:
            await send(tracker, gate, wire, X)
            return "ok"

        pages = [start_page(tracker, 2, p)]
        await until(lambda: wire.on_wire() == [P], "P sends", wire)
        wire.answer(P)
        wire.kill()  # P is due its solo retry
        p_again.set()
        await until(lambda: wire.on_wire() == [P], "P goes out alone", wire)
        mark = len(wire.asked)
        pages.append(start_page(tracker, 1, x))
        await until(lambda: wire.asked_in_turn(mark, "p1"), "X asks the gate", wire)
        wire.drop(P)  # a 500: P's client waits a backoff
        wire.kill()  # the death is recorded: P is convicted
        await until(lambda: wire.on_wire() == [X], "X goes out while P's client still waits", wire)
        wire.answer(X)
        backoff_over.set()
        return dict(zip("PX", await asyncio.gather(*pages)))

    results = asyncio.run(scenario())
    assert results == {"P": "the model server crashed on this page 2 times; quarantined", "X": "ok"}


def test_independent_crashes_count_against_the_budget_once_their_suspects_are_cleared() -> None:
    # Page 2 crashes the server twice (the others with it each time), then works: every page in
    # flight at both deaths is retried alone, all succeed, and both deaths count.
    results, server, tracker = asyncio.run(run_pages(4, {("doc.pdf", 2): 2}))
    assert set(results.values()) == {"ok"} and tracker.convicted == {}
    assert tracker.deaths == 2 and tracker.charged_deaths() == 2
    assert server.charged == [1, 0]  # deferred while the repeat suspects waited for their solo runs


def test_requests_outside_a_guarded_page_pass_straight_through() -> None:
    async def scenario() -> Incarnation:
        tracker = CrashTracker()
        server = Server(tracker, {})
        server.generation = 7
        return await tracker.gate(server.gate, server=1)()

    assert asyncio.run(scenario()) == Incarnation(server=1, generation=7)


def test_with_several_servers_a_death_blames_only_its_own_pages_and_spends_only_its_budget() -> None:
    # Two servers behind one dispatcher (one per GPU): odd pages go to server 1, where page 5
    # kills it every time; server 0 never dies. Both number their incarnations from 1.
    async def scenario() -> tuple[dict[int, str], list[Server], CrashTracker]:
        tracker = CrashTracker()
        servers = [Server(tracker, {("doc.pdf", 5): -1} if i else {}, count_death=tracker.server_death(i)) for i in range(2)]
        gates = [tracker.gate(server.gate, server=i) for i, server in enumerate(servers)]
        results = await drive_pages(tracker, 8, 3, lambda page: (gates[page % 2], servers[page % 2]))
        return results, servers, tracker

    results, servers, tracker = asyncio.run(scenario())
    assert results[5] == "the model server crashed on this page 3 times; quarantined"
    assert all(results[n] == "ok" for n in results if n != 5)
    assert servers[0].at_death == [] and len(servers[1].at_death) == 3
    # The first death of server 1 blamed the pages in flight there (odd pages), none of server 0's.
    first = {page for _, page in tracker._deaths[0].suspects}
    assert 5 in first and first <= {1, 3, 5, 7}
    # Server 1's budget was charged its first death only; server 0's nothing.
    assert servers[1].charged == [1, 0, 0] and tracker.charged_deaths(0) == 0 and tracker.charged_deaths(1) == 0


def test_with_several_servers_a_retry_hook_is_told_only_its_own_servers_generations() -> None:
    # The dispatcher picks a server per request, so one page's requests go to several servers.
    # Before a page's request after one that ended unanswered, the gate asks the server's retry
    # hook (an --endpoint's watch probes there) about it: only when that request went to this
    # server, and with the generation this server gave it (not another server's number). An
    # answered request is followed by no question: a page's next piece or figure is no retry.
    async def scenario() -> dict[int, list[int]]:
        tracker = CrashTracker()
        servers = [Server(tracker, {}, generation=g) for g in (3, 8)]
        told: dict[int, list[int]] = {0: [], 1: []}

        def hook(i: int) -> Callable[[int], Awaitable[None]]:
            async def on_retry(generation: int) -> None:
                told[i].append(generation)

            return on_retry

        gates = [tracker.gate(s.gate, on_retry=hook(i), server=i) for i, s in enumerate(servers)]

        async def handler() -> str:
            # (server, answered): a failure on 0 retried on 0; answered ones on 1 and 0; a
            # failure on 1 retried on 0 (not 1's to ask), then 1 again (asked nothing: the
            # page's pass through 0 used it up); a failure on 1 retried on 1.
            for i, answered in ((0, False), (0, True), (1, True), (0, True), (1, False), (0, True), (1, True),
                                (1, False), (1, True), (0, True)):
                sent_to = await gates[i]()
                tracker.request_ended(sent_to, answered)
            return "ok"

        assert await start_page(tracker, 1, handler) == "ok"
        return told

    assert asyncio.run(scenario()) == {0: [3], 1: [8]}


def test_with_several_servers_each_death_is_charged_to_the_server_that_died() -> None:
    # Server 0 and server 1 each die once, each from a page of its own that crashes it once and
    # then works: two independent failures, one per server. Each server's restart budget must
    # be charged its own death only: a tracker that counted every server's deaths against the
    # one asking would charge the second server to die two deaths (and drop a healthy GPU with
    # a budget of 1).
    async def scenario() -> tuple[dict[int, str], list[Server], CrashTracker]:
        tracker = CrashTracker()
        poison = [{("doc.pdf", 2): 1}, {("doc.pdf", 3): 1}]  # page 2 is on server 0, page 3 on server 1
        servers = [Server(tracker, poison[i], count_death=tracker.server_death(i)) for i in range(2)]
        gates = [tracker.gate(server.gate, server=i) for i, server in enumerate(servers)]
        results = await drive_pages(tracker, 8, 3, lambda page: (gates[page % 2], servers[page % 2]))
        return results, servers, tracker

    results, servers, tracker = asyncio.run(scenario())
    assert set(results.values()) == {"ok"} and tracker.convicted == {}
    assert [len(s.at_death) for s in servers] == [1, 1]
    assert servers[0].charged == [1] and servers[1].charged == [1]
    assert tracker.charged_deaths(0) == 1 and tracker.charged_deaths(1) == 1 and tracker.charged_deaths() == 2


@dataclass
class Member:
    """One server of a fleet as the dispatcher sees it: a client whose requests go through the
    tracker's gate for that server (the client's loop: a request lost to a crash is retried)."""

    server: Server
    gate: Callable[[], Awaitable[Incarnation]]
    tracker: CrashTracker
    model: str = "m"
    options: object = None
    base_url: str = "sim"
    display_url: str = "sim"
    #: (when, page) of each request the dispatcher gave this member, before its gate.
    given: list[tuple[float, tuple[str, int]]] = field(default_factory=list)

    async def chat(self, body: dict[str, object], **kwargs: object) -> str:
        key = body["page"]
        assert isinstance(key, tuple)
        self.given.append((time.monotonic(), key))
        await send(self.tracker, self.gate, self.server, key)
        return "ok"


def _two_servers(poison: tuple[str, int], crash_delay: float) -> tuple[CrashTracker, list[Server], list[Member], Dispatcher]:
    """Two fake servers behind a dispatcher routed by one crash tracker; ``poison`` kills the
    server it is sent to, ``crash_delay`` seconds after it arrives."""
    tracker = CrashTracker()
    death = asyncio.Event()  # either server's
    servers = [
        Server(tracker, {poison: -1}, count_death=tracker.server_death(i), crash_delay=crash_delay, request_s=0.05,
               death=death)
        for i in range(2)
    ]
    members = [Member(s, tracker.gate(s.gate, server=i), tracker) for i, s in enumerate(servers)]
    return tracker, servers, members, Dispatcher(members, route=tracker.route)  # type: ignore[arg-type]


async def _until_convicted(
    tracker: CrashTracker,
    handler: Callable[[SimpleNamespace, SimpleNamespace, int | None], Awaitable[str]],
    pages: Sequence[int],
    convicted: asyncio.Event,
) -> dict[int, str]:
    """Every page of doc.pdf through ``tracker.guard(handler)``: ``"ok"`` or the quarantine
    message of each, by page; ``convicted`` is set when a page is quarantined."""

    async def quarantined(ref: SimpleNamespace, item: SimpleNamespace, num_pages: int | None, exc: PageQuarantined) -> str:
        convicted.set()
        return exc.message

    guarded = tracker.guard(handler, quarantined)
    ref = SimpleNamespace(doc_id="doc.pdf")
    results = await asyncio.wait_for(
        asyncio.gather(*(guarded(ref, SimpleNamespace(page=n), len(pages)) for n in pages)), timeout=120
    )
    return dict(zip(pages, results))


async def _send_until(dispatcher: Dispatcher, key: tuple[str, int], done: asyncio.Event) -> None:
    """Requests for page ``key``, one after another, until ``done`` is set (at most 1,200: 60 s
    of 50 ms requests)."""
    for _ in range(1200):
        await dispatcher.chat({"page": key})
        if done.is_set():
            break


def test_a_page_due_its_solo_retry_holds_back_only_the_server_it_crashed() -> None:
    # Two servers behind the dispatcher; page 5 kills whichever server it is sent to. While it
    # waits for its solo retry and runs alone on the server it crashed last, the other server
    # keeps serving the other pages (one suspect page idles one GPU, not the fleet).
    async def scenario() -> tuple[dict[int, str], list[Server], CrashTracker]:
        tracker, servers, _, dispatcher = _two_servers(("doc.pdf", 5), crash_delay=0.3)
        convicted = asyncio.Event()

        async def handler(ref: SimpleNamespace, item: SimpleNamespace, num_pages: int | None) -> str:
            # The other pages keep sending requests until page 5 is convicted, so they are busy
            # through its solo retry however slowly this machine runs.
            await _send_until(dispatcher, (ref.doc_id, item.page), convicted)
            return "ok"

        return await _until_convicted(tracker, handler, range(1, 21), convicted), servers, tracker

    results, servers, tracker = asyncio.run(scenario())
    assert results[5] == "the model server crashed on this page 3 times; quarantined"
    assert all(results[n] == "ok" for n in results if n != 5)
    # Page 5's requests were retried on the server they were lost on: it crashed that one three
    # times, the last time alone on it.
    poison = ("doc.pdf", 5)
    (home,) = [i for i, s in enumerate(servers) if s.died]
    deaths = servers[home].died
    assert len(deaths) == 3 and deaths[-1][1] == [poison]
    # From its second death (due a solo retry) to its conviction, the other server kept serving
    # the other pages' 50 ms requests instead of waiting with the whole fleet.
    pending_from, convicted_at = deaths[1][0], deaths[2][0]
    during = [key for t, key in servers[1 - home].sent if pending_from <= t <= convicted_at]
    assert len(during) >= 5, (
        f"the other server got {len(during)} requests while page 5 waited for or ran its solo retry "
        f"({pending_from:.2f}-{convicted_at:.2f} s; it served {len(servers[1 - home].sent)} from {servers[1 - home].sent[0][0]:.2f} "
        f"to {servers[1 - home].sent[-1][0]:.2f} s)"
    )
    assert poison not in during
    assert tracker.charged_deaths(0) == 0 and tracker.charged_deaths(1) == 0  # the poison page spent no budget


def test_the_dispatcher_gives_a_server_kept_for_a_solo_retry_no_other_page() -> None:
    # While page 1 is due its solo retry on the server it crashed (and while it runs alone
    # there), the other pages' new requests go to the other server, even when the kept one
    # looks the less busy: given to it, they would only wait at its gate.
    poison = ("doc.pdf", 1)

    async def scenario() -> tuple[dict[int, str], list[Member]]:
        tracker, servers, members, dispatcher = _two_servers(poison, crash_delay=0.5)
        convicted = asyncio.Event()

        async def handler(ref: SimpleNamespace, item: SimpleNamespace, num_pages: int | None) -> str:
            if item.page == poison[1]:
                await dispatcher.chat({"page": poison})
                return "ok"
            while not any(len(s.died) >= 2 for s in servers):  # until page 1 is due its solo retry
                servers[0].death.clear()  # the servers share it
                await servers[0].death.wait()
            # Then requests until page 1 is convicted, however slowly this machine runs.
            await _send_until(dispatcher, (ref.doc_id, item.page), convicted)
            return "ok"

        return await _until_convicted(tracker, handler, (1, 2, 3), convicted), members

    results, members = asyncio.run(scenario())
    assert results == {1: "the model server crashed on this page 3 times; quarantined", 2: "ok", 3: "ok"}
    (home,) = [i for i, m in enumerate(members) if m.server.died]
    deaths = members[home].server.died
    pending_from, convicted_at = deaths[1][0], deaths[2][0]
    given = [key for t, key in members[home].given if pending_from < t < convicted_at and key != poison]
    assert given == [], f"{len(given)} requests of other pages were given to the server kept for page 1"
    served = [key for t, key in members[1 - home].given if pending_from < t < convicted_at]
    assert len(served) >= 2  # the other server kept serving pages 2 and 3 meanwhile


def _page_image() -> bytes:
    buffer = io.BytesIO()
    Image.new("L", (64, 64), 255).save(buffer, "PNG")
    return buffer.getvalue()


@pytest.mark.parametrize("launched", [False, True], ids=["endpoint", "managed"])
def test_the_clients_a_run_opens_tell_the_tracker_when_a_request_was_answered(
    launched: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The fix above works only if the client a run uses tells the tracker when each request
    # ends. Through open_endpoint (an --endpoint, and a server it launches), on the simulator:
    # P is due its solo retry; X's request is answered, then X's page waits for P's. P must go
    # out now. Had the client not said that X's request ended, P would wait for it, X for P.
    async def scenario(url: str | None) -> tuple[list[str], int]:
        options = ServerOptions(engine="sim", server_args="--prefill-ms 0 --instant")
        async with open_endpoint(url, DEFAULT_MODEL, api_key=None, client_options=ClientOptions(dead_after=10),
                                 server_options=options) as endpoint:
            tracker, client = endpoint.tracker, endpoint.client
            assert tracker is not None
            tracker.isolate_after = 1  # one death makes a page due its solo retry
            body = DEEPSEEK_OCR.body(_page_image(), "image/png", temperature=0.0, max_tokens=16, text=FREE_OCR_PROMPT)
            p_sent, p_again, x_answered, p_done = (asyncio.Event() for _ in range(4))

            async def p() -> str:
                await client.chat(body)
                p_sent.set()
                await p_again.wait()
                await client.chat(body)  # its solo retry
                p_done.set()
                return "ok"

            async def x() -> str:
                await client.chat(body)
                x_answered.set()
                await p_done.wait()
                return "ok"

            pages = [start_page(tracker, 2, p)]
            await asyncio.wait_for(p_sent.wait(), 60)
            tracker.record_death(1)  # generation 1 died (as its watcher would tell): P's latest request went to it
            pages.append(start_page(tracker, 1, x))
            await asyncio.wait_for(x_answered.wait(), 60)
            p_again.set()
            try:
                results = await asyncio.wait_for(asyncio.gather(*pages), 60)
            except asyncio.TimeoutError:
                raise AssertionError("P's solo retry waited for X's answered request; X waited for P") from None
            return results, tracker.solo_runs

    if launched:
        monkeypatch.chdir(tmp_path)  # the launched server's log goes to .llm-ocr/logs here
        results, solo_runs = asyncio.run(scenario(None))
    else:
        with SimulatedServer("--prefill-ms", "0", "--instant") as sim:
            results, solo_runs = asyncio.run(scenario(sim.base_url))
    assert results == ["ok", "ok"] and solo_runs == 1


def test_an_endpoint_is_probed_after_a_failed_request_not_before_a_pages_every_request() -> None:
    # An --endpoint's watch asks GET /health before a page's request that may be a retry. A page
    # sends several requests that are no retries (its pieces, tiles, figures): those must cost no
    # probe (each did, before: a round trip under the watch's lock, a page at a time); a request
    # that failed (a 500) must still be followed by one before its retry.
    async def scenario(sim: SimulatedServer) -> tuple[int, int]:
        async with open_endpoint(sim.base_url, DEFAULT_MODEL, api_key=None,
                                 client_options=ClientOptions(dead_after=60, backoff_base=0.0)) as endpoint:
            tracker, client = endpoint.tracker, endpoint.client
            assert tracker is not None
            body = DEEPSEEK_OCR.body(_page_image(), "image/png", temperature=0.0, max_tokens=16, text=FREE_OCR_PROMPT)

            async def page() -> str:
                for _ in range(4):
                    await client.chat(body)
                return "ok"

            before = sim.stats()["health_probes"]
            assert await start_page(tracker, 1, page) == "ok"
            answered = sim.stats()["health_probes"] - before
            sim.inject("error", 1, status=500)
            assert await start_page(tracker, 2, page) == "ok"
            return answered, sim.stats()["health_probes"] - before - answered

    with SimulatedServer("--prefill-ms", "0", "--instant") as sim:
        answered, failed = asyncio.run(scenario(sim))
    assert answered == 0, f"{answered} probes for a page whose four requests were all answered"
    assert failed >= 1, "no probe after a request that failed"


def test_the_client_ends_every_pass_through_the_gate() -> None:
    # The tracker counts a page's requests on the wire from its passes through the gate, so the
    # client must end each one exactly once: a pass never ended holds every solo retry on that
    # server back for the rest of the page. After a connection error the client passes the gate
    # again (to see whether the server restarted) without sending anything: ended, unanswered.
    passes: list[int] = []
    ends: list[tuple[int, bool]] = []

    async def gate() -> int:
        passes.append(1)
        return 1

    async def refused() -> None:
        options = ClientOptions(max_attempts=2, backoff_base=0, backoff_max=0, dead_after=0.5)
        client = VlmClient(f"http://127.0.0.1:{free_port()}/v1", DEFAULT_MODEL, options=options, gate=gate,
                           request_ended=lambda generation, answered: ends.append((generation, answered)))
        try:
            await client.chat({"messages": [{"role": "user", "content": "hi"}]})
        finally:
            await client.close()

    with pytest.raises((RequestFailed, EndpointDown)):
        asyncio.run(refused())
    # Each attempt is one pass, and the pass after its connection error another (how many attempts
    # fit in --dead-after depends on the machine's load; each brings both passes).
    assert len(passes) >= 2 and len(ends) == len(passes) and {answered for _, answered in ends} == {False}

    # An error status is not an answer: vLLM answers the requests in flight with a 500 when its
    # engine dies (a page running alone must then stay alone until that death is recorded).
    passes.clear()
    ends.clear()

    async def answered(url: str) -> None:
        options = ClientOptions(max_attempts=3, backoff_base=0, backoff_max=0)
        client = VlmClient(url, DEFAULT_MODEL, options=options, gate=gate,
                           request_ended=lambda generation, answered: ends.append((generation, answered)))
        try:
            body = DEEPSEEK_OCR.body(_page_image(), "image/png", temperature=0.0, max_tokens=16, text=FREE_OCR_PROMPT)
            await client.chat(body)
        finally:
            await client.close()

    with SimulatedServer("--prefill-ms", "0", "--instant") as sim:
        sim.inject("error", count=1, status=503)
        asyncio.run(answered(sim.base_url))
    assert len(passes) == 2 and ends == [(1, False), (1, True)]  # the 503, then the answer
