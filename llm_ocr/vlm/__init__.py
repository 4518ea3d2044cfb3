"""Talking to a model: the client, the request recipes, and the families' parsers and writers.

- :mod:`.client`    the one inference path: an OpenAI-compatible chat endpoint, retries, dead-man switch
- :mod:`.recipes`   request shapes per model family: prompts and sampling fields
- :mod:`.families`  a recipe per model family: request, parser, writer, loop policy
- :mod:`.grounding` DeepSeek-OCR's grounding output -> layout blocks, figure boxes, Markdown (and back)
- :mod:`.layout`    the page a parser produces: blocks and figures in pixels, Markdown
- :mod:`.view`      what an image shows, in no family's format: what a writer writes from
- :mod:`.box`       ``Box``, the one rectangle type

May import :mod:`llm_ocr.records`, :mod:`llm_ocr.backoff` and :mod:`llm_ocr.resizing`; never
:mod:`llm_ocr.engines` or :mod:`llm_ocr.serving` (servers are just endpoints to this package; the
simulator imports the families' writers and checks requests against their recipes, not the
reverse), storage, stages or runners, nor the options: the options quote the families, and the
client reads the retry policy it is given (:class:`~.client.RequestPolicy`). The aliases
``python -m llm_ocr.engines.sim`` and ``python -m llm_ocr.engines.cpu`` run the servers by
module name only.
"""
