"""The crash tracker's rules, driven by an in-process server that dies on chosen pages.

The end-to-end tests (tests/runners/test_quarantine_e2e.py) run real server processes; these
pin the rules themselves: who is a suspect, who runs alone, who is convicted, what the restart
budget is charged, with every request of the tracked pages going through the tracker's gate.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from types import SimpleNamespace

from llm_ocr.serving.dispatch import Dispatcher
from llm_ocr.serving.quarantine import SERVER_STRIDE, CrashTracker, PageQuarantined


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

    async def gate(self) -> int:
        await asyncio.sleep(0)
        return self.generation

    async def request(self, key: tuple[str, int], generation: int) -> None:
        if generation != self.generation:
            raise Lost
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.in_flight[done] = key
        self.sent.append((time.monotonic(), key))
        if self.poison.get(key, 0):
            self.peak_alone.append(len(self.in_flight))
            self.poison[key] -= 1
            await asyncio.sleep(self.crash_delay)  # the crash comes while the request is on the wire
            self._die()
        else:
            asyncio.get_running_loop().call_later(self.request_s, lambda: done.done() or done.set_result(None))
        try:
            await done
        finally:
            self.in_flight.pop(done, None)

    def _die(self) -> None:
        self.died.append((time.monotonic(), list(self.in_flight.values())))
        self.at_death.append(len(self.in_flight))
        self.charged.append((self.count_death or self.tracker.record_death)(self.generation))
        self.generation += 1
        for done in list(self.in_flight):
            if not done.done():
                done.set_exception(Lost())


async def drive_pages(
    tracker: CrashTracker, pages: int, requests: int, route: Callable[[int], tuple[Callable[[], Awaitable[int]], Server, int]]
) -> dict[int, str]:
    """Pages 1..``pages`` of ``doc.pdf`` through the tracker's guard, each sending ``requests``
    requests; ``route(page)`` gives the gate, the server and the generation offset of its requests."""

    async def handler(ref: SimpleNamespace, item: SimpleNamespace, num_pages: int | None) -> str:
        gate, server, offset = route(item.page)
        # Several requests per page (a truncation retry, figure descriptions): pages are still
        # sending while another runs alone.
        for _ in range(requests):
            while True:  # the client's loop: a request lost to a crash is retried on the next generation
                generation = await gate()
                try:
                    await server.request((ref.doc_id, item.page), generation - offset)
                    break
                except Lost:
                    continue
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
    pages: int, poison: dict[tuple[str, int], int], requests: int = 3
) -> tuple[dict[int, str], Server, CrashTracker]:
    tracker = CrashTracker()
    server = Server(tracker, dict(poison))
    gate = tracker.gate(server.gate)
    return await drive_pages(tracker, pages, requests, lambda page: (gate, server, 0)), server, tracker


def test_a_poison_page_is_isolated_convicted_and_charged_nothing() -> None:
    results, server, tracker = asyncio.run(run_pages(8, {("doc.pdf", 5): -1}))
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
                await gate()
                events.append(f"{ref.doc_id} sends")
                sent[ref.doc_id].set()
                await release[ref.doc_id].wait()
                release[ref.doc_id].clear()
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


def test_independent_crashes_count_against_the_budget_once_their_suspects_are_cleared() -> None:
    # Page 2 crashes the server twice (the others with it each time), then works: every page in
    # flight at both deaths is retried alone, all succeed, and both deaths count.
    results, server, tracker = asyncio.run(run_pages(4, {("doc.pdf", 2): 2}))
    assert set(results.values()) == {"ok"} and tracker.convicted == {}
    assert tracker.deaths == 2 and tracker.charged_deaths() == 2
    assert server.charged == [1, 0]  # deferred while the repeat suspects waited for their solo runs


def test_requests_outside_a_guarded_page_pass_straight_through() -> None:
    async def scenario() -> int:
        tracker = CrashTracker()
        server = Server(tracker, {})
        server.generation = 7
        return await tracker.gate(server.gate)()

    assert asyncio.run(scenario()) == 7


def test_with_several_servers_a_death_blames_only_its_own_pages_and_spends_only_its_budget() -> None:
    # Two servers behind one dispatcher (one per GPU): odd pages go to server 1, where page 5
    # kills it every time; server 0 never dies. Both number their incarnations from 1.
    async def scenario() -> tuple[dict[int, str], list[Server], CrashTracker]:
        tracker = CrashTracker()
        servers = [Server(tracker, {("doc.pdf", 5): -1} if i else {}, count_death=tracker.server_death(i)) for i in range(2)]
        gates = [tracker.server_gate(i, server.gate) for i, server in enumerate(servers)]
        results = await drive_pages(tracker, 8, 3, lambda page: (gates[page % 2], servers[page % 2], page % 2 * SERVER_STRIDE))
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
        gates = [tracker.server_gate(i, server.gate) for i, server in enumerate(servers)]
        results = await drive_pages(tracker, 8, 3, lambda page: (gates[page % 2], servers[page % 2], page % 2 * SERVER_STRIDE))
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
    gate: Callable[[], Awaitable[int]]
    offset: int
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
        while True:
            generation = await self.gate()
            try:
                await self.server.request(key, generation - self.offset)
                return "ok"
            except Lost:
                continue


def _two_servers(poison: tuple[str, int], crash_delay: float) -> tuple[CrashTracker, list[Server], list[Member], Dispatcher]:
    """Two fake servers behind a dispatcher routed by one crash tracker; ``poison`` kills the
    server it is sent to, ``crash_delay`` seconds after it arrives."""
    tracker = CrashTracker()
    servers = [
        Server(tracker, {poison: -1}, count_death=tracker.server_death(i), crash_delay=crash_delay, request_s=0.05)
        for i in range(2)
    ]
    members = [Member(s, tracker.server_gate(i, s.gate), i * SERVER_STRIDE) for i, s in enumerate(servers)]
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
        tracker, servers, members, dispatcher = _two_servers(("doc.pdf", 5), crash_delay=0.3)
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
                await asyncio.sleep(0.01)
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
