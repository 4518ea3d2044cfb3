"""Model servers llm-ocr starts, and the process manager that babysits them.

- :mod:`.process`  :class:`~.process.ManagedServer`: one server subprocess (its whole process
                   group): start, health, restarts, shutdown; reading ``/metrics``. The one process
                   manager: :mod:`llm_ocr.testing` runs its servers with it too
- :mod:`.prometheus` the one ``/metrics`` parser (Prometheus text; vLLM's series by short name)
- :mod:`.engines`  the command lines of the servers it can run (vLLM's DeepSeek-OCR recipe)
- :mod:`.presets`  vLLM sizing per GPU, and GPU detection with ``nvidia-smi``
- :mod:`.frame`    the OpenAI-compatible HTTP frame the simulator and the CPU engine share
- :mod:`.sim`      the simulated DeepSeek-OCR server (tests, benchmarks, demos)
- :mod:`.cpu`      the CPU OCR engine (RapidOCR) behind the same API

May import :mod:`llm_ocr.vlm` (recipes: what a request looks like) and the small shared
modules (records, backoff); never storage, stages, runners, commands or launchers.
"""
