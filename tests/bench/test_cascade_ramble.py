"""The cascade with a weak model whose answers are long, unrepeated and wrong (issue #47).

The held-out workload's small model wrote such answers, and the cascade spent twice the strong
model's GPU-seconds. The simulator plays that model (``--ramble-rate 1``: every image, a page
or a crop of it, answered with English text that is not its own until ``max_tokens``). One
born-digital page and one scan go through the real stages (Extract on the weak model, then
Escalate to the strong one), measured as ``llm-ocr bench-cascade`` measures them.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from llm_ocr.bench.cascade import CascadeConfig, run_cascade_bench


def test_a_rambling_weak_model_costs_one_answer_a_page_and_every_page_is_escalated(tmp_path: Path) -> None:
    # Twenty times faster models than the benchmark's (same ratio): the test waits for no GPU.
    config = CascadeConfig(documents=2, pages_per_document=1, garble_rate=0.0, drop_rate=0.0, loop_rate=0.0,
                           ramble_rate=1.0, workers=1, strong_decode_ms=0.7, strong_prefill_ms=7.0)
    (outcome,) = asyncio.run(run_cascade_bench(config, tmp_path, ["weak+escalate"]))
    assert outcome.pages == 2
    # Within the cost bound, and more: an answer no text layer vouches for is not asked again
    # hotter (a second max_tokens) nor cut into pieces; the stronger model reads the page once.
    assert outcome.max_requests <= outcome.request_bound
    assert outcome.max_requests == 1, outcome
    # Never kept `ok` with the invented text: both pages were caught and read by the strong model.
    assert outcome.kept_bad == 0 and outcome.caught == 2
    assert outcome.routes.get("escalated") == 2 and outcome.recall > 0.99, outcome
