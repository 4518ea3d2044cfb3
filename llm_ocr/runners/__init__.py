"""Shard runners: one module per stage, each running its stage over one shard of the inputs.

- :mod:`.shard`    what every runner shares: the shard, exit codes, signals, the output check
- :mod:`.extract`  Extract: documents -> page images -> OCR rows (``OUT/extract``)
- :mod:`.describe` Describe: ``OUT/extract`` rows -> figure descriptions (``OUT/describe``)
- :mod:`.assemble` Assemble: page rows -> one row per document (``OUT/assemble``)
- :mod:`.run`      ``llm-ocr run``: the three stages in one process on one endpoint
- :mod:`.bad_pages` quarantine rows and text-layer fallbacks around the page handler

A runner owns resume (which pages are done), the page flow, progress, and the completion
marker written last. May import everything below it (pipeline, stages, sources, storage, vlm,
endpoint); never commands, launchers or report.
"""
