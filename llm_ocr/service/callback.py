"""Callbacks: a submission's ``callback`` URL is told when its document ends.

The call is ``POST URL`` with the document's summary as JSON (what ``GET /v1/documents`` lists
of it: id, status, pages done and failed, error, times). With a shared secret
(``--callback-secret-file`` or ``LLM_OCR_SERVICE_CALLBACK_SECRET``) it is signed: header
``X-LLM-OCR-Timestamp`` holds the epoch seconds of the attempt and ``X-LLM-OCR-Signature``
``sha256=`` the hex HMAC-SHA256 of ``TIMESTAMP.BODY`` under the secret, so a receiver can check
that the call is the service's and refuse an old one replayed (:func:`signature` computes it).

An answer other than 2xx, a refused connection or a timeout is retried with backoff (doubling
from ``base_delay``, jittered, at most ``max_delay``) up to ``attempts`` times; then the failure is
logged and the document keeps its status. The worker that ended the document calls (the gateway,
for a document cancelled while queued); a worker killed before its call got through does not call
again, so a receiver that must not miss an end polls ``GET /v1/documents?since=`` as well.
Nothing here logs the URL beyond its host (a URL may carry a token) or the secret.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import time
import urllib.parse
from dataclasses import dataclass, field
from typing import Any

from llm_ocr.backoff import backoff_delay

log = logging.getLogger("llm_ocr.service")

#: The variable that holds the callbacks' secret (``--callback-secret-file`` names a file instead).
SECRET_VARIABLE = "LLM_OCR_SERVICE_CALLBACK_SECRET"  # noqa: S105 - the variable's name, not a secret
SIGNATURE_HEADER = "X-LLM-OCR-Signature"
TIMESTAMP_HEADER = "X-LLM-OCR-Timestamp"


@dataclass
class CallbackSettings:
    """How callbacks are made."""

    #: The shared secret that signs each call; None: calls are not signed.
    secret: str | None = field(default=None, repr=False)
    attempts: int = 6
    base_delay: float = 1.0
    max_delay: float = 60.0
    #: Seconds one attempt may take.
    timeout: float = 10.0


def signature(secret: str, timestamp: str, body: bytes) -> str:
    """``sha256=HEX``: the HMAC-SHA256 of ``TIMESTAMP.BODY`` under ``secret`` (what a receiver recomputes)."""
    digest = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()
    return f"sha256={digest}"


def _host(url: str) -> str:
    return urllib.parse.urlsplit(url).hostname or "?"


async def deliver(url: str, payload: dict[str, Any], settings: CallbackSettings) -> bool:
    """POST ``payload`` to ``url``, retried with backoff; whether a 2xx answer came."""
    import aiohttp  # here: the service's configuration imports this module, and a worker may never call back

    body = json.dumps(payload, sort_keys=True).encode()
    what = f"callback of document {payload.get('id')} to {_host(url)}"
    timeout = aiohttp.ClientTimeout(total=settings.timeout)
    for attempt in range(1, settings.attempts + 1):
        headers = {"Content-Type": "application/json", "User-Agent": "llm-ocr-service"}
        if settings.secret:
            stamp = str(int(time.time()))
            headers[TIMESTAMP_HEADER] = stamp
            headers[SIGNATURE_HEADER] = signature(settings.secret, stamp, body)
        try:
            async with aiohttp.ClientSession(timeout=timeout) as session, \
                    session.post(url, data=body, headers=headers, allow_redirects=False) as answer:
                if 200 <= answer.status < 300:
                    log.info("%s: delivered (attempt %d)", what, attempt)
                    return True
                why = f"answered {answer.status}"
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
            why = f"failed ({type(exc).__name__})"
        if attempt == settings.attempts:
            log.warning("%s %s; gave up after %d attempts", what, why, attempt)
            return False
        delay = backoff_delay(attempt, settings.base_delay, settings.max_delay)
        log.info("%s %s; trying again in %.1f s", what, why, delay)
        await asyncio.sleep(delay)
    return False
