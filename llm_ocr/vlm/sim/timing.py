"""The simulated server's timing model, in one place: the server runs it against the clock, and
the benchmark replays it on a virtual clock to compute what a perfect client could achieve.

One request holding a slot (vLLM ``--max-num-seqs``) spends ``prefill_ms``, then decodes its
tokens in steps of at most :data:`DECODE_STEP_S` seconds. At the start of each step the time
per token is re-evaluated against the current load,
``decode_ms_per_token * (1 + load_slowdown * running / slots)``, so a batch that fills up slows
every member down, like a GPU whose step time grows with the batch size. ``running`` counts
every request in a slot, prefilling or decoding.

:func:`slot_steps` is the only place that turns a request into waits: the server sleeps them
(:meth:`llm_ocr.vlm.sim.server.SimServer._run_in_slot`) and :func:`perfect_client_makespan`
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


def perfect_client_makespan(
    model: TimingModel,
    completion_tokens: Sequence[int],
    after: Sequence[int | None] | None = None,
) -> float:
    """Seconds the server needs for these requests when a perfect client sends them all at t=0.

    Requests are admitted first come, first served into ``model.slots`` slots, in the given
    order, and each then takes the waits of :meth:`TimingModel.slot_steps`, re-evaluated
    against the number of requests holding a slot at that (virtual) moment, exactly as the
    server does. Network, parsing and client time are zero.

    ``after[i] = j`` says request ``i`` can only be sent once request ``j`` (earlier in the
    list) has finished: a retry of a page that looped cannot be sent before the loop is seen.
    Such a request joins the back of the queue when ``j`` finishes.
    """
    n = len(completion_tokens)
    if n == 0:
        return 0.0
    deps = list(after) if after is not None else [None] * n
    if len(deps) != n:
        raise ValueError("after must have one entry per request")
    followers: dict[int, list[int]] = {}
    queue: deque[int] = deque()
    for i, j in enumerate(deps):
        if j is None:
            queue.append(i)
        else:
            if not 0 <= j < i:
                raise ValueError(f"request {i} depends on {j}, which is not an earlier request")
            followers.setdefault(j, []).append(i)

    running = 0
    now = 0.0
    events: list[tuple[float, int, int, Iterator[tuple[float, float]]]] = []
    counter = 0  # tie-breaker: events at the same time run in the order they were scheduled

    def current() -> int:
        return running

    def step(i: int, steps: Iterator[tuple[float, float]]) -> bool:
        """Schedule the request's next wait; False when it has finished."""
        nonlocal counter
        wait = next(steps, None)
        if wait is None:
            return False
        heapq.heappush(events, (now + wait[0], counter, i, steps))
        counter += 1
        return True

    def admit() -> None:
        nonlocal running
        while queue and running < model.slots:
            i = queue.popleft()
            running += 1
            if not step(i, model.slot_steps(completion_tokens[i], current)):  # pragma: no cover
                raise AssertionError("a request always has a prefill step")

    finished = 0
    admit()
    while events:
        now, _, i, steps = heapq.heappop(events)
        if step(i, steps):
            continue
        running -= 1
        finished += 1
        queue.extend(followers.pop(i, ()))
        admit()
    if finished != n:  # pragma: no cover - every request is reachable by construction
        raise AssertionError(f"{n - finished} request(s) never ran")
    return now
