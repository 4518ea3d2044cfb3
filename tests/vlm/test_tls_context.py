"""Making a client loads no CA bundle (llm_ocr/vlm/http.py): the OpenAI SDK's clients each built
a TLS context, about 25 ms of CPU on an idle core (70 at load 15) per client even for an
``http://`` endpoint, and the service's worker made several clients per document."""

from __future__ import annotations

import asyncio
import ssl

import pytest

from llm_ocr.options import ClientOptions
from llm_ocr.vlm.client import VlmClient


def test_clients_load_no_ca_bundle(monkeypatch: pytest.MonkeyPatch) -> None:
    loads = []
    real = ssl.SSLContext.load_verify_locations

    def counting(self: ssl.SSLContext, *args: object, **kwargs: object) -> None:
        loads.append(args)
        real(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(ssl.SSLContext, "load_verify_locations", counting)
    monkeypatch.setattr(ssl.SSLContext, "load_default_certs", lambda self, *a, **k: loads.append(("default",)))

    async def make_and_close() -> None:
        clients = [VlmClient(f"http://127.0.0.1:{9000 + n}/v1", "m", options=ClientOptions()) for n in range(3)]
        clients.append(VlmClient("https://ocr.example.org/v1", "m", options=ClientOptions()))
        for client in clients:
            await client.close()

    asyncio.run(make_and_close())
    assert loads == []
