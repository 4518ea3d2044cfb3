"""Fault injection, in process: the retry schedule (backoff, jitter, bounds), the memory the box
parser may use on adversarial model output, and an accounting line that can fail.

The end-to-end fault tests are in tests/e2e/runners/test_faults_e2e.py; these pin what a subprocess cannot see.
"""

from __future__ import annotations

import asyncio
import io
import random
import tracemalloc
from types import SimpleNamespace
from typing import Any

import pytest
from PIL import Image

import llm_ocr.backoff as backoff_module
import llm_ocr.vlm.client as client_module
from llm_ocr.options import ClientOptions
from llm_ocr.runners.progress import RunCounters
from llm_ocr.testing import SimulatedServer
from llm_ocr.vlm.client import EndpointDown, RequestFailed, VlmClient, display_url
from llm_ocr.vlm.grounding import parse_layout
from llm_ocr.vlm.recipes import DEFAULT_MODEL, DOCUMENT_PROMPT, image_messages, recipe_for

W, H = 1224, 1584


def page_body() -> dict[str, Any]:
    buffer = io.BytesIO()
    Image.new("RGB", (64, 48), "white").save(buffer, format="PNG")
    return {
        "messages": image_messages(buffer.getvalue(), "image/png", DOCUMENT_PROMPT),
        "max_tokens": 50,
        "temperature": 0.0,
        "extra_body": recipe_for(DEFAULT_MODEL).extra_body,
    }


class Schedule:
    """Stands in for ``asyncio`` and ``random`` of the client module (and ``random`` of
    ``llm_ocr.backoff``, which draws the half-jitter delays): records every backoff (the bounds
    the jitter was drawn from, and the delay slept), sleeping for real."""

    def __init__(self) -> None:
        self.bounds: list[tuple[float, float]] = []
        self.slept: list[float] = []
        self.asyncio = SimpleNamespace(sleep=self.sleep, CancelledError=asyncio.CancelledError)
        self.random = SimpleNamespace(uniform=self.uniform)
        # A clock that only the backoffs move (plus a microsecond a reading, so that readings
        # differ as a real clock's do): a test that patches the client's ``time`` with it sees
        # the same schedule however long the machine takes to answer.
        self.now = 0.0
        self.time = SimpleNamespace(monotonic=self.monotonic)

    def monotonic(self) -> float:
        self.now += 1e-6
        return self.now

    def uniform(self, low: float, high: float) -> float:
        self.bounds.append((low, high))
        return random.uniform(low, high)

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds
        await asyncio.sleep(seconds)


@pytest.fixture
def schedule(monkeypatch: pytest.MonkeyPatch) -> Schedule:
    recorder = Schedule()
    monkeypatch.setattr(client_module, "asyncio", recorder.asyncio)
    monkeypatch.setattr(client_module, "random", recorder.random)
    monkeypatch.setattr(backoff_module, "random", recorder.random)
    return recorder


@pytest.fixture(scope="module")
def sim() -> SimulatedServer:
    with SimulatedServer("--instant") as server:
        yield server


def test_page_retries_back_off_exponentially_with_full_jitter_and_are_bounded(sim: SimulatedServer, schedule: Schedule) -> None:
    options = ClientOptions(max_attempts=4, backoff_base=0.04, backoff_max=0.1, dead_after=60)

    async def scenario() -> tuple[Any, BaseException]:
        client = VlmClient(sim.base_url, "deepseek-ai/DeepSeek-OCR", options=options)
        # As if other pages kept succeeding meanwhile: the failures are this page's, so they
        # use up its attempts (the other path, a failing endpoint, is the next test).
        client._endpoint_failing_since = lambda sent, exc: False  # type: ignore[method-assign]
        try:
            sim.inject("error", count=3, status=503)
            ok = await client.chat(page_body())
            sim.inject("reset", count=10)
            with pytest.raises(RequestFailed) as failed:
                await client.chat(page_body())
            sim.clear_faults()
            return ok, failed.value
        finally:
            await client.close()

    ok, failed = asyncio.run(scenario())
    assert ok.attempts == 4 and ok.text  # three 503s, then the answer
    assert failed.attempts == 4 and str(failed).startswith("connection error")  # bounded: no 5th try
    # Delay k is drawn uniformly from [0, min(backoff_max, base * 2**(k-1))]: exponential, capped,
    # full jitter; no sleep after the last attempt.
    assert schedule.bounds == [(0, 0.04), (0, 0.08), (0, 0.1)] * 2
    assert all(0 <= slept <= high for slept, (_, high) in zip(schedule.slept, schedule.bounds))
    assert len(set(schedule.slept)) == len(schedule.slept)  # jittered: no two pages retry in step


# late: the first page is sent that many seconds after the client was made. A loaded machine
# (r20: load 10 and more) sent it after --dead-after had passed, and one refusal then stopped the
# run: the endpoint has failed only from that request's sending, and one answer is not a pattern.
@pytest.mark.parametrize("late", [0, 10])
def test_a_failing_endpoint_is_waited_for_with_backoff_then_the_run_stops(
    sim: SimulatedServer, schedule: Schedule, monkeypatch: pytest.MonkeyPatch, late: float
) -> None:
    # Nothing succeeds anywhere (a fresh client, every answer 503): the endpoint, not the page,
    # is failing. The page's attempts are kept; retries back off (half jitter) up to
    # backoff_max; after dead_after of silence EndpointDown stops the run. Bounded in time and
    # in requests even though max_attempts is never reached. The client's clock is the
    # schedule's, moved by the backoffs only: how many requests fit in dead_after does not
    # depend on how fast a loaded machine answers them.
    monkeypatch.setattr(client_module, "time", schedule.time)
    options = ClientOptions(max_attempts=2, backoff_base=0.02, backoff_max=0.16, dead_after=1.5)
    sim.clear_faults()
    before = sim.stats()["requests"]

    async def scenario() -> None:
        client = VlmClient(sim.base_url, "deepseek-ai/DeepSeek-OCR", options=options)
        schedule.now += late
        sim.inject("error", count=1000, status=503)
        try:
            with pytest.raises(EndpointDown, match="answered nothing successfully for 2s"):
                await client.chat(page_body())
            # Every later request of the run stops at once, without being sent.
            with pytest.raises(EndpointDown):
                await client.chat(page_body())
        finally:
            sim.clear_faults()
            await client.close()

    asyncio.run(scenario())
    sent = sim.stats()["requests"] - before
    # Stopped at the first failure after dead_after of silence (the clock's readings add up to
    # well under a millisecond), not before it and not later.
    assert sum(schedule.slept[:-1]) < 1.5 <= sum(schedule.slept) + 0.001
    expected = [min(0.16, 0.02 * 2**k) for k in range(1, len(schedule.bounds) + 1)]
    assert schedule.bounds == [(d / 2, d) for d in expected]  # 0.04, 0.08, 0.16, 0.16, ...
    assert all(low <= slept <= high for slept, (low, high) in zip(schedule.slept, schedule.bounds))
    assert len(set(schedule.slept)) == len(schedule.slept)
    # Backed off, not a tight loop: 11 to 20 backoffs of 0.04, 0.08, then 0.16 at most (half at
    # least) reach 1.5 s.
    assert sent == len(schedule.bounds) + 1 and 12 <= sent <= 21


def test_endpoint_urls_are_shown_without_credentials() -> None:
    assert display_url("http://user:sk-123@host:8000/v1") == "http://***@host:8000/v1"
    assert display_url("https://host/v1?api_key=sk-123") == "https://host/v1?***"
    assert display_url("http://127.0.0.1:8000/v1") == "http://127.0.0.1:8000/v1"


# --- the box parser's memory -------------------------------------------------------------------

MAX_CHARS = 2_000_000  # parse_layout's default cap on the text it reads


def _boxes(n: int, size: int) -> str:
    return ", ".join(f"[{i % 900}, {(i * 7) % 900}, {i % 900 + size}, {(i * 7) % 900 + size}]" for i in range(n))


#: Hostile model output, 0.4 to 2.2 MB: what fills memory if anything does (boxes, blocks,
#: figures, warnings, text) rather than what is slow (tests/vlm/test_grounding.py). The two
#: 64-box cases are shorter (~19,000 boxes each) because tracemalloc makes their many small
#: allocations ~10x slower; the bound below is per character, so the size does not weaken it.
HOSTILE = {
    "image blocks of 64 small boxes": lambda: (f"<|ref|>image<|/ref|><|det|>[{_boxes(64, 20)}]<|/det|>\n") * 300,
    "image blocks of full-page boxes": lambda: "<|ref|>image<|/ref|><|det|>[[0, 0, 999, 999]]<|/det|>\n" * 40_000,
    "text blocks of 64 boxes": lambda: (f"<|ref|>text<|/ref|><|det|>[{_boxes(64, 5)}]<|/det|>\nx\n") * 300,
    "one endless box list": lambda: "<|ref|>image<|/ref|><|det|>[" + _boxes(80_000, 9) + "]<|/det|>",
    "unclosed dets": lambda: "<|ref|>image<|/ref|><|det|>[[1, 2, 3, 4], " * 50_000,
    "tiny blocks": lambda: "<|ref|>a<|/ref|>b" * 125_000,
    "bad boxes (warnings)": lambda: "<|ref|>text<|/ref|><|det|>[[5, 5, 5, 5], [9, 1, 2]]<|/det|>\n" * 35_000,
    "stray tag fragments": lambda: "<|re<|/det|>f|>" * 130_000,
    "plain text with EOS": lambda: ("word " * 400 + "<｜end▁of▁sentence｜>") * 950,
}


def _peak_bytes(raw: str, **kw: Any) -> tuple[int, Any]:
    """Peak of the memory allocated while parsing ``raw`` (the input itself excluded)."""
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        layout = parse_layout(raw, width=W, height=H, page=1, **kw)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak, layout


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_box_parsing_memory_is_bounded_by_the_capped_input(name: str) -> None:
    raw = HOSTILE[name]()
    assert 350_000 < len(raw) <= 2_200_000
    peak, layout = _peak_bytes(raw)
    # Linear in what is read, with a small constant (at most ~7 bytes a character seen): 2 MB
    # of output may cost tens of MB, never the hundreds a figure per box would.
    assert peak < 12 * min(len(raw), MAX_CHARS) + 4_000_000, f"{name}: {peak / 1e6:.1f} MB for {len(raw):,} characters"
    # What the row will hold is capped too: figures (each becomes a crop), boxes, warnings.
    assert len(layout.figures) <= 256
    assert sum((x2 - x1) * (y2 - y1) for x1, y1, x2, y2 in (f.bbox for f in layout.figures)) <= 4 * W * H
    assert len(layout.blocks) <= 4000 and all(len(b.boxes) <= 64 for b in layout.blocks)
    assert len(layout.warnings) <= 51


EOS = "<｜end▁of▁sentence｜>"


@pytest.mark.parametrize("name", ["plain text with EOS", "tiny blocks"])
def test_box_parsing_memory_does_not_grow_past_the_cap(name: str) -> None:
    # Past the cap, more input costs nothing more: the text is cut before anything (even the
    # end-of-sentence removal, and the output always ends with that token) copies it whole.
    unit = HOSTILE[name]()[:MAX_CHARS]
    peaks = []
    for times in (3, 10):
        peak, layout = _peak_bytes(unit * times + EOS)
        assert any("truncated to 2000000" in w for w in layout.warnings)
        peaks.append(peak)
    assert peaks[1] < 1.1 * peaks[0] + 1_000_000, f"{peaks[0] / 1e6:.1f} MB at 3x the cap, {peaks[1] / 1e6:.1f} MB at 10x"
    assert peaks[1] < 12 * MAX_CHARS + 4_000_000


def test_figures_are_capped_in_number_and_in_area() -> None:
    small = f"<|ref|>image<|/ref|><|det|>[{_boxes(64, 20)}]<|/det|>\n" * 5
    layout = parse_layout(small, width=W, height=H, page=2)
    assert [f.id for f in layout.figures] == [f"p2-f{k}" for k in range(1, 257)]  # ids stay contiguous
    assert layout.markdown.count("](figure:") == 256 and "over 256 figures" in layout.warnings[0]
    full = "<|ref|>image<|/ref|><|det|>[[0, 0, 999, 999]]<|/det|>\n" * 10
    layout = parse_layout(full, width=W, height=H, page=1)
    assert [f.bbox for f in layout.figures] == [(0, 0, W, H)] * 4  # four page areas in all
    assert len(layout.blocks) == 10 and all(b.boxes == [(0, 0, W, H)] for b in layout.blocks)  # boxes kept


# --- the accounting line -----------------------------------------------------------------------


def test_the_accounting_line_counts_pages_from_the_input_and_can_fail() -> None:
    counters = RunCounters("extract", 0, 2, pages_found=10, pages_skipped=3)
    counters.pages.update(ok=4, truncated=1, error=2)
    assert counters.pages_left == 0 and counters.summary()["pages"]["seen"] == 10
    assert counters.reconciliation().startswith(
        "[extract shard 1/2] pages seen 10 = ok 4 + truncated 1 + error 2 + quarantined 0 + done earlier 3; documents"
    )
    counters.pages_found = 12  # two pages of the input got no row (an interrupted run)
    assert counters.pages_left == 2 and "+ done earlier 3 + left for the rerun 2;" in counters.reconciliation()
    counters.pages_found = 9  # a row more than there are pages: a duplicate
    assert counters.pages_left == -1 and "MISMATCH: 1 row(s) more than pages seen" in counters.reconciliation()
