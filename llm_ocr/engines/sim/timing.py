"""The simulated server's timing model, in one place: the server runs it against the clock, and
the benchmark replays it on a virtual clock to compute what a perfect client could achieve.

One request holding a slot (vLLM ``--max-num-seqs``) spends ``prefill_ms``, then decodes its
tokens in steps of at most :data:`DECODE_STEP_S` seconds. At the start of each step the time
per token is re-evaluated against the current load,
``decode_ms_per_token * (1 + load_slowdown * running / slots)``, so a batch that fills up slows
every member down, like a GPU whose step time grows with the batch size. ``running`` counts
every request in a slot, prefilling or decoding.

:func:`slot_steps` is the only place that turns a request into waits: the server sleeps them
(:meth:`llm_ocr.engines.sim.server.SimServer._run_in_slot`) and :func:`perfect_client_makespan`
adds them up on a virtual clock, so the two cannot drift apart.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

#: How often the per-token time is re-evaluated against the load (seconds).
DECODE_STEP_S = 0.05


def per_token_seconds(base_ms: float, load_slowdown: float, running: int, slots: int) -> float:
    """Seconds per output token of each running sequence at the given load."""
    return base_ms / 1000.0 * (1.0 + load_slowdown * running / max(1, slots))


@dataclass(frozen=True)
class TimingModel:
    """The knobs of the simulated server that decide how long requests take."""

    slots: int = 64
    prefill_ms: float = 20.0
    decode_ms_per_token: float = 0.0
    load_slowdown: float = 1.0
    step_s: float = DECODE_STEP_S

    def per_token(self, running: int) -> float:
        """Seconds per output token when ``running`` requests hold slots."""
        return per_token_seconds(self.decode_ms_per_token, self.load_slowdown, running, self.slots)

    def slot_steps(self, completion_tokens: int, running: Callable[[], int]) -> Iterator[tuple[float, float]]:
        """The waits of one request that holds a slot: ``(seconds, tokens decoded in them)``.

        The first wait is the prefill (0 tokens). ``running`` is called lazily, when the next
        step starts, so whoever drives the iterator decides what "now" is (the event loop's
        clock in the server, a virtual clock in :func:`perfect_client_makespan`).
        """
        yield self.prefill_ms / 1000.0, 0.0
        remaining = float(completion_tokens)
        while remaining > 0:
            per = self.per_token(running())
            if per <= 0:
                return
            if remaining * per <= self.step_s:
                # The last step: decode exactly what is left (no float residue, no extra step).
                yield remaining * per, remaining
                return
            done = self.step_s / per
            yield self.step_s, done
            remaining -= done


@dataclass(frozen=True)
class Replay:
    """The outcome of replaying requests through the timing model on a virtual clock."""

    makespan: float  # when the last request finished (seconds after t=0)
    mean_running: float  # time-average of the requests holding a slot, over the makespan
    admitted: tuple[float, ...]  # when each request got a slot
    finish: tuple[float, ...]  # when each request finished


def replay(
    model: TimingModel,
    completion_tokens: Sequence[int],
    after: Sequence[int | None] | None = None,
    arrivals: Sequence[float] | None = None,
    priority: Sequence[float] | None = None,
) -> Replay:
    """Run requests through the server's scheduling and timing on a virtual clock.

    Requests are admitted first come, first served into ``model.slots`` slots and each then
    takes the waits of :meth:`TimingModel.slot_steps`, re-evaluated against the number of
    requests holding a slot at that moment, exactly as the server does. Network, parsing and
    client time are zero.

    With ``priority``, the waiting request of the highest priority is admitted first (ties in
    list order): the server as a client sees it that holds its requests back and sends the
    best one whenever a slot frees (the longest first, with its completion tokens).

    ``arrivals[i]`` is when request ``i`` reaches the server (default: all at t=0; ties keep
    the list order). ``after[i] = j`` says request ``i`` can only be sent once request ``j``
    (earlier in the list) has finished, e.g. the retry of a page that looped: it arrives at
    ``max(arrivals[i], finish[j])``.
    """
    n = len(completion_tokens)
    if n == 0:
        return Replay(0.0, 0.0, (), ())
    deps = list(after) if after is not None else [None] * n
    times = list(arrivals) if arrivals is not None else [0.0] * n
    if len(deps) != n or len(times) != n or (priority is not None and len(priority) != n):
        raise ValueError("after, arrivals and priority must have one entry per request")
    followers: dict[int, list[int]] = {}
    for i, j in enumerate(deps):
        if j is not None:
            if not 0 <= j < i:
                raise ValueError(f"request {i} depends on {j}, which is not an earlier request")
            followers.setdefault(j, []).append(i)

    ARRIVE, STEP = 0, 1  # at equal times, arrivals first: they then see the same load
    running = 0
    now = last = area = 0.0
    finish = [0.0] * n
    admitted = [0.0] * n
    queue: deque[int] = deque()
    ranked: list[tuple[float, int]] = []  # (-priority, index): the queue when there are priorities
    events: list[tuple[float, int, int, int, Iterator[tuple[float, float]] | None]] = []
    counter = 0  # tie-breaker: events at the same time run in the order they were scheduled

    def push(when: float, kind: int, i: int, steps: Iterator[tuple[float, float]] | None) -> None:
        nonlocal counter
        heapq.heappush(events, (when, kind, counter, i, steps))
        counter += 1

    def current() -> int:
        return running

    def advance(i: int, steps: Iterator[tuple[float, float]]) -> bool:
        """Schedule the request's next wait; False when it has finished."""
        wait = next(steps, None)
        if wait is None:
            return False
        push(now + wait[0], STEP, i, steps)
        return True

    def admit() -> None:
        nonlocal running
        while (queue or ranked) and running < model.slots:
            i = heapq.heappop(ranked)[1] if priority is not None else queue.popleft()
            running += 1
            admitted[i] = now
            advance(i, model.slot_steps(completion_tokens[i], current))  # the prefill, always

    for i in range(n):
        if deps[i] is None:
            push(times[i], ARRIVE, i, None)
    finished = 0
    while events:
        now, kind, _, i, steps = heapq.heappop(events)
        area += running * (now - last)
        last = now
        if kind == ARRIVE:
            if priority is not None:
                heapq.heappush(ranked, (-priority[i], i))
            else:
                queue.append(i)
        elif steps is not None and advance(i, steps):
            continue
        else:
            running -= 1
            finished += 1
            finish[i] = now
            for k in followers.pop(i, ()):
                push(max(now, times[k]), ARRIVE, k, None)
        if events and events[0][0] == now and events[0][1] == ARRIVE:
            continue  # admit once every request arriving now is in the queue (priorities see them all)
        admit()
    if finished != n:  # pragma: no cover - every request is reachable by construction
        raise AssertionError(f"{n - finished} request(s) never ran")
    return Replay(now, area / now if now > 0 else 0.0, tuple(admitted), tuple(finish))


def perfect_client_makespan(
    model: TimingModel,
    completion_tokens: Sequence[int],
    after: Sequence[int | None] | None = None,
) -> float:
    """Seconds the server needs for these requests when a perfect client sends them all at t=0
    (a request that must wait for another, see :func:`replay`, is sent the moment it may)."""
    return replay(model, completion_tokens, after).makespan
