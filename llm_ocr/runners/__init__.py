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
- :mod:`.escalate`  Escalate: ``OUT/extract`` rows -> flagged pages read again by a stronger model
                    (``OUT/escalate``); :mod:`.escalation` its rules: which readings, which kept
- :mod:`.run`       ``llm-ocr run``: the three stages (and Fields, given a schema) in one process on one endpoint
- :mod:`.bad_pages` quarantine rows and text-layer fallbacks around the page handler

A runner owns resume (which pages are done), the page flow, progress, and the completion
marker written last. May import everything below it (stages, sources, storage, vlm, serving),
and of ``quality`` only its no-ground-truth page signals (the escalation rules ask them); never
commands, launchers, report or the API. Which runner runs which stage is the stage table's
(:mod:`llm_ocr.stage_table`).
"""

from __future__ import annotations
