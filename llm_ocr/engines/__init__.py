"""The OpenAI-compatible servers llm-ocr ships, for ``--engine cpu|sim`` and for tests.

- :mod:`.frame`    the HTTP frame both engines share (chat completions, streaming, ``/metrics``,
                   ``/health``), so each engine supplies only how it reads a page
- :mod:`.cpu`      the CPU OCR engine (RapidOCR and a layout model) for machines without a GPU
- :mod:`.sim`      the simulator: plays each model family's recipe and answer format and vLLM's
                   timing and faults, for tests, benchmarks and demos
- :mod:`.harness`  :class:`~.harness.SimulatedServer` and :class:`~.harness.CpuServer`: either
                   engine as a subprocess in a test (re-exported by :mod:`llm_ocr.testing`)

The engines import :mod:`llm_ocr.vlm` (what a family's request and answer look like) and the
small shared modules; only the harness imports :mod:`llm_ocr.serving` (its process manager).
Never storage, sources, stages, runners, commands or launchers.
"""
