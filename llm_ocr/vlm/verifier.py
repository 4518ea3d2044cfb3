"""A verifier: a model that scores how likely a reading of an image is right.

The interface is deliberately small, so that any scorer can sit behind it (docs/routes.md, "A
verifier"): ``POST URL`` with the JSON ``{"image": "data:image/...;base64,...", "text": "...",
"category": "text"}`` answers ``{"probability": 0.93}``, the probability that ``text`` is a
correct reading of ``image``. MiniCPM-OCR Jev (``openbmb/MiniCPM-OCR-Jev``) is such a scorer — a
classifier head over (crop, candidate text, category) — but no OpenAI-compatible server serves it
as of this writing: it needs an adapter that runs it and answers this request.
"""

from __future__ import annotations

import aiohttp

from llm_ocr.vlm.families.base import data_uri


class VerifierError(Exception):
    """The verifier could not score a reading (the message says why)."""


async def verify(url: str, image: bytes, mime: str, text: str, *, timeout: float = 120.0) -> float:
    """The verifier's probability (0..1) that ``text`` is a correct reading of ``image``."""
    body = {"image": data_uri(image, mime), "text": text, "category": "text"}
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as session, \
                session.post(url, json=body) as response:
            if response.status != 200:
                said = (await response.text())[:200]
                raise VerifierError(f"the verifier answered HTTP {response.status}: {said}")
            answer = await response.json(content_type=None)
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
        raise VerifierError(f"the verifier could not be asked: {type(exc).__name__}: {exc}") from exc
    probability = answer.get("probability") if isinstance(answer, dict) else None
    if not isinstance(probability, (int, float)) or isinstance(probability, bool) or not 0 <= probability <= 1:
        raise VerifierError(f"the verifier's answer has no probability between 0 and 1: {str(answer)[:200]}")
    return float(probability)
