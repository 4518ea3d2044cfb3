"""Parts of the simulated DeepSeek-OCR server; the entry point is :mod:`llm_ocr.vlm.simulated`.

- :mod:`.corpus`  known PDF pages: fingerprints and text-layer layout
- :mod:`.content` what the simulated model answers
- :mod:`.metrics` Prometheus exposition and :func:`parse_prometheus`
- :mod:`.server`  the aiohttp server, validation, scheduling and faults
"""

#: Fault kinds of ``POST /sim/faults`` (defined here so the CLI can list them without
#: importing the server and aiohttp).
FAULT_KINDS = ("error", "hang", "reset", "loop", "empty", "untagged", "bad_boxes", "crash")
