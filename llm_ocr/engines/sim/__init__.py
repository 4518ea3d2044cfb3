"""The simulated DeepSeek-OCR server (a vLLM look-alike) for tests, benchmarks and demos.

Run it as its own process: ``python -m llm_ocr.engines.sim --port 8000`` (or ``llm-ocr serve
--engine sim``); :class:`llm_ocr.testing.SimulatedServer` runs it in tests.

- :mod:`.cli`     the command line (:func:`~.cli.main`)
- :mod:`.corpus`  known PDF pages: fingerprints and text-layer layout
- :mod:`.checks`  requests checked against the family's recipe (refused with a 400 if they stray)
- :mod:`.content` what the simulated model answers
- :mod:`.timing`  the batch timing model (the benchmark replays it for its lower bound)
- :mod:`.server`  the aiohttp server: scheduling and faults on the shared frame
- :mod:`.poison`  pages that crash the server whenever they are sent (``--crash-on-page``)
"""

#: Fault kinds of ``POST /sim/faults`` (defined here so the CLI can list them without
#: importing the server and aiohttp).
FAULT_KINDS = ("error", "hang", "reset", "loop", "empty", "untagged", "bad_boxes", "crash")
