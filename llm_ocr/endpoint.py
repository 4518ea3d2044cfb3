"""Where requests go: a given ``--endpoint``, or a server this process launches and babysits.

Every stage that talks to a model opens it with :func:`open_endpoint`, so "use this URL" and
"start vLLM (or the CPU engine, or the simulator) and keep it alive" look the same to callers.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, Field

from llm_ocr.vlm.client import ClientOptions, EndpointDown, VlmClient

log = logging.getLogger("llm_ocr")


class EndpointError(Exception):
    """The model endpoint cannot be used; the message says why and what to do."""


class ServerOptions(BaseModel):
    """The model server this process launches when no ``--endpoint`` is given."""

    engine: Literal["auto", "vllm", "cpu", "sim"] = Field(
        "auto", description="Server to launch without --endpoint: vllm, cpu, sim, or auto (vllm on a CUDA GPU, else cpu)."
    )


@dataclass
class Endpoint:
    """An open model endpoint: the client, and the server's live metrics if we can read them."""

    client: VlmClient
    metrics: Callable[[], Awaitable[dict[str, float]]] | None = None
    suggested_in_flight: int | None = None


async def check_model(client: VlmClient) -> None:
    """Fail early, before any work, if the endpoint is down or does not serve the model."""
    try:
        served = await client.served_models()
    except EndpointDown as exc:
        raise EndpointError(str(exc)) from exc
    if client.model not in served:
        raise EndpointError(f"endpoint {client.base_url} does not serve --model {client.model!r}; it serves {served}")


@asynccontextmanager
async def open_endpoint(
    endpoint: str | None,
    model: str,
    *,
    api_key: str | None,
    client_options: ClientOptions,
    server_options: ServerOptions | None = None,
    state_dir: str | None = None,
) -> AsyncIterator[Endpoint]:
    """Yield a ready :class:`Endpoint`; a launched server is stopped on exit."""
    if not endpoint:
        raise EndpointError("no --endpoint given: start a server (llm-ocr serve) and pass --endpoint URL")
    client = VlmClient(endpoint, model, api_key=api_key, options=client_options)
    try:
        await check_model(client)
        yield Endpoint(client=client)
    finally:
        await client.close()
