"""The OpenAI-compatible HTTP frame shared by the servers llm-ocr ships (simulator, CPU engine).

- :mod:`.app`      :class:`~.app.OpenAIServer` (routes, request log, completion JSON) and :func:`~.app.serve`
- :mod:`.protocol` the chat request as vLLM serving DeepSeek-OCR validates it; error JSON; token estimates
- :mod:`.answers`  an answer as vLLM shapes it: special tokens, the token budget, JSON-schema instances
- :mod:`.metrics`  Prometheus exposition with vLLM's metric names, and a parser for it
- :mod:`.cli`      the command-line options every frame server has

Imports nothing from llm-ocr outside :mod:`llm_ocr.engines.frame`: a server is an endpoint.
"""
