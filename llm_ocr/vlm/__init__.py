"""Talking to a model: the client, the request recipes, and the grounding parser.

- :mod:`.client`    the one inference path: an OpenAI-compatible chat endpoint, retries, dead-man switch
- :mod:`.recipes`   request shapes per model family: prompts and sampling fields
- :mod:`.grounding` DeepSeek-OCR's grounding output -> layout blocks, figure boxes, Markdown

May import :mod:`llm_ocr.records` and :mod:`llm_ocr.backoff`; never :mod:`llm_ocr.servers`
(the servers are just endpoints to this package), storage, stages or runners. The aliases
``python -m llm_ocr.engines.sim`` and ``python -m llm_ocr.engines.cpu`` run the servers by
module name only.
"""
