"""Every OpenAI client of a process shares one TLS context (llm_ocr/vlm/client.py, tls_context):
building one loads the CA bundle, and the service's worker made several clients per document."""

from __future__ import annotations

import asyncio
import ssl

import pytest

from llm_ocr.options import ClientOptions
from llm_ocr.vlm.client import VlmClient, tls_context


def test_clients_load_the_ca_bundle_once_and_still_verify(monkeypatch: pytest.MonkeyPatch) -> None:
    tls_context()  # whatever an earlier test built
    loads = []
    real = ssl.SSLContext.load_verify_locations

    def counting(self: ssl.SSLContext, *args: object, **kwargs: object) -> None:
        loads.append(args)
        real(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(ssl.SSLContext, "load_verify_locations", counting)
    clients = [VlmClient(f"http://127.0.0.1:{9000 + n}/v1", "m", options=ClientOptions()) for n in range(3)]
    clients.append(VlmClient("https://ocr.example.org/v1", "m", options=ClientOptions()))
    assert loads == []
    # Shared, not weakened: certificates and host names are checked on https endpoints.
    context = tls_context()
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    for client in clients:
        asyncio.run(client.close())
