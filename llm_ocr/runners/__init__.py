"""Shard runners: one module per stage, each running its stage over one shard of the inputs.

- :mod:`.lifecycle` the shard lifecycle every stage runs through, written once: markers, checks,
                    resume, the endpoint, writers and progress, error mapping, reconciliation,
                    cost, completion markers, exit codes
- :mod:`.shard`     exit codes, signals, running a shard from synchronous code
- :mod:`.page_flow` pages (rendered documents, or an earlier stage's rows) -> requests in flight
                    -> rows in input order
- :mod:`.extract`   Extract: documents -> page images -> OCR rows (``OUT/extract``)
- :mod:`.describe`  Describe: ``OUT/extract`` rows -> figure descriptions (``OUT/describe``)
- :mod:`.assemble`  Assemble: page rows -> one row per document (``OUT/assemble``)
- :mod:`.fields`    Fields: ``OUT/assemble`` documents -> typed, validated fields (``OUT/fields``)
- :mod:`.run`       ``llm-ocr run``: the three stages (and Fields, given a schema) in one process on one endpoint
- :mod:`.bad_pages` quarantine rows and text-layer fallbacks around the page handler

A runner owns resume (which pages are done), the page flow, progress, and the completion
marker written last. May import everything below it (stages, sources, storage, vlm, endpoint);
never commands, launchers, report or the API.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import asyncio

    from llm_ocr.options import StageSpec
    from llm_ocr.runners.shard import ShardOutcome

StageRunner = Callable[["StageSpec", "asyncio.Event | None"], Awaitable["ShardOutcome"]]


def stage_runner(stage: str) -> StageRunner:
    """The coroutine function that runs ``stage`` over this process's shard (imported on demand)."""
    if stage == "run":
        from llm_ocr.runners.run import run_shard

        return run_shard
    if stage == "extract":
        from llm_ocr.runners.extract import extract_shard

        return extract_shard
    if stage == "describe":
        from llm_ocr.runners.describe import describe_shard

        return describe_shard
    if stage == "assemble":
        from llm_ocr.runners.assemble import assemble_shard

        return assemble_shard
    if stage == "fields":
        from llm_ocr.runners.fields import fields_shard

        return fields_shard
    raise ValueError(f"unknown stage {stage!r}")
