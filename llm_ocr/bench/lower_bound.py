"""The perfect-client lower bounds of a run, from the simulated server's request log.

The requests the server actually answered (their completion tokens, in arrival order) are
replayed through the server's own timing model (:mod:`llm_ocr.engines.sim.timing`) with every
request queued at t=0. A retry of a page (the same image again, after a loop hit
``max_tokens``) cannot be sent before the first answer is back, so it waits for it.

:func:`lower_bound` is the schedule of a client with no cost at all that keeps the server's
queue full, in the order the pages were really sent: sending the long pages first moves it too.
:func:`longest_first_bound` is the same client knowing every answer's length in advance and
sending the longest waiting request whenever a slot frees: a bound that does not depend on the
order the run chose, only on the requests themselves (the same requests, the same bound).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llm_ocr.engines.sim.timing import Replay, TimingModel, replay


@dataclass(frozen=True)
class LoggedRequest:
    """One answered chat request from the request log."""

    arrival: float
    image_sha256: str | None
    completion_tokens: int
    finish_reason: str | None
    latency_s: float = 0.0  # arrival to answer, as the server measured it
    fault: str | None = None  # "loop" when the simulated page looped
    outcome: str | None = None  # "ok", or "disconnected" when the client closed the stream


def _image_sha(body: Any) -> str | None:
    """The sha256 the server logged in place of the request's image (see ``redact``)."""
    try:
        for message in body["messages"]:
            for part in message.get("content") or []:
                if isinstance(part, dict) and part.get("type") == "image_url":
                    url = part["image_url"]["url"]
                    if isinstance(url, dict):
                        return url.get("sha256")
    except (KeyError, TypeError, AttributeError):
        return None
    return None


def read_request_log(path: str | Path) -> list[LoggedRequest]:
    """Answered requests (HTTP 200) of a request log, in arrival order."""
    requests = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut by a killed server
            # A stream the client closed has status 200 too (its headers went out): it held a
            # slot for the tokens it generated, so it counts.
            if record.get("status") != 200 or record.get("completion_tokens") is None:
                continue
            requests.append(
                LoggedRequest(
                    arrival=float(record.get("time") or 0.0),
                    image_sha256=_image_sha(record.get("body")),
                    completion_tokens=int(record["completion_tokens"]),
                    finish_reason=record.get("finish_reason"),
                    latency_s=float(record.get("latency_s") or 0.0),
                    fault=record.get("fault"),
                    outcome=record.get("outcome"),
                )
            )
    requests.sort(key=lambda r: r.arrival)
    return requests


def dependencies(requests: list[LoggedRequest]) -> list[int | None]:
    """For each request, the earlier request for the same image it had to wait for, if any."""
    last: dict[str, int] = {}
    after: list[int | None] = []
    for i, request in enumerate(requests):
        key = request.image_sha256
        after.append(last.get(key) if key else None)
        if key:
            last[key] = i
    return after


def lower_bound(model: TimingModel, requests: list[LoggedRequest]) -> Replay:
    """A perfect client on a server with ``model``: these requests, all queued at t=0 (a retry
    as soon as the answer it retries is back)."""
    return replay(model, [r.completion_tokens for r in requests], dependencies(requests))


def lower_bound_seconds(model: TimingModel, requests: list[LoggedRequest]) -> float:
    """Seconds a perfect client needs on a server with ``model`` for these requests."""
    return lower_bound(model, requests).makespan


def replay_arrivals(model: TimingModel, requests: list[LoggedRequest], start: float) -> Replay:
    """The same requests arriving when they really did (``start``: the run's ``time.time()``):
    when an exact server would have finished them. Its gap to :func:`lower_bound` is what the
    client's sending pattern cost; the wall time's gap to it is the simulated server's own
    lag (timer overshoot, a busy CPU) plus the client's work after the last answer."""
    return replay(
        model,
        [r.completion_tokens for r in requests],
        dependencies(requests),
        [max(0.0, r.arrival - start) for r in requests],
    )


def longest_first_bound(model: TimingModel, requests: list[LoggedRequest]) -> Replay:
    """A perfect client that knows every answer's length: these requests, all queued at t=0
    and admitted longest first (a retry once the answer it retries is back, then by its length
    too)."""
    return replay(model, [r.completion_tokens for r in requests], dependencies(requests),
                  priority=[float(r.completion_tokens) for r in requests])
