"""The one first guess of tokens a model writes per character of a page's text.

Three places need it before a run has shown the real figure: the dense-page planner (how many
pieces a page's text needs, :mod:`llm_ocr.stages.pieces.rate`), a stream cut before the server
reported its usage (:mod:`llm_ocr.vlm.streaming`), and the Fields stage sizing its requests
(:mod:`llm_ocr.stages.fields.chunks`). Each corrects it from what the run's answers show where
it can. 0.35 is DeepSeek-OCR's grounding output as the project's **simulator** writes it for
its 7-column newspaper page (29,274 characters of markup for 24,883 of text layer, at 0.3
tokens a character): no fact about any model. It errs high (markup counted), which is the
safe side in all three places: more, smaller pieces; a cut stream counted a little long;
smaller Fields requests.
"""

from __future__ import annotations

#: Tokens per character of a page's text, markup included (see the module docstring).
TOKENS_PER_CHAR = 0.35
