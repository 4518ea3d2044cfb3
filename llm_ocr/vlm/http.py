"""A small OpenAI-compatible HTTP client on aiohttp: the three calls llm-ocr makes, nothing else.

``POST {base_url}/chat/completions`` (a JSON answer, or the response itself for a stream, whose
Server-Sent Events :mod:`llm_ocr.vlm.streaming` reads) and ``GET {base_url}/models``. It replaces
the ``openai`` SDK, whose import alone cost every CLI process, shard and worker ~0.6 CPU-s (it
builds hundreds of pydantic models for types this package never read).

It behaves as the SDK (openai 3.57, ``_base_client.py``, ``_client.py``, ``_exceptions.py``) did
with ``max_retries=0``, where llm-ocr could tell:

- the URL is the base URL with the path appended (``/v1`` + ``chat/completions``);
- ``Authorization: Bearer KEY`` (``EMPTY`` without a key); credentials in the URL
  (``http://user:TOKEN@host``) are sent as basic auth instead, as httpx did;
- ``extra_body`` fields are merged into the JSON body at the top level;
- the timeout bounds connecting (and waiting for a pooled connection) and each read, not the
  whole request: a stream that keeps sending may run longer (``httpx.Timeout(t)``);
- up to 1,000 connections per client (the SDK's ``DEFAULT_CONNECTION_LIMITS``): the in-flight
  control, not the pool, bounds what is sent; redirects are followed; proxies come from
  ``HTTP(S)_PROXY``/``ALL_PROXY``/``NO_PROXY``;
- an answer of status 400 or above raises :class:`ApiStatusError` (the SDK's ``APIStatusError``
  and its subclasses), a timeout :class:`ApiTimeoutError`, any other transport failure
  :class:`ApiConnectionError` (the transport's exception as its ``__cause__``).

https is verified against the system's store (``SSL_CERT_FILE``/``SSL_CERT_DIR`` honoured), as
httpcore's ``default_ssl_context`` did on Linux; aiohttp builds that context once per process,
at its import, so a client costs no certificate loading, and an http:// one no TLS at all.
"""

from __future__ import annotations

import asyncio
import json
import urllib.parse
import urllib.request
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp

#: Connections one client may open (the SDK's ``httpx.Limits(max_connections=1000)``).
MAX_CONNECTIONS = 1000
#: Seconds an idle connection is kept for reuse: under the 5 s vLLM's server keeps one
#: (``VLLM_HTTP_TIMEOUT_KEEP_ALIVE`` in ``vllm/envs.py``, uvicorn's ``timeout_keep_alive``), so
#: the client does not pick a connection the server is closing at that moment.
KEEPALIVE_S = 4.0


class ApiError(Exception):
    """A request to the endpoint failed (the SDK's ``OpenAIError``)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ApiConnectionError(ApiError):
    """The endpoint could not be reached, or the connection broke before the answer was read."""

    def __init__(self, message: str = "Connection error.") -> None:
        super().__init__(message)


class ApiTimeoutError(ApiConnectionError):
    """Connecting, or a read, took longer than the client's timeout."""

    def __init__(self) -> None:
        super().__init__("Request timed out.")


class ApiStatusError(ApiError):
    """The endpoint answered with an HTTP error status (400 or above)."""

    def __init__(self, status_code: int, body: object) -> None:
        message = f"Error code: {status_code}"
        said = _json_error_message(body)
        if said:
            message += f" - {said}"
        super().__init__(message)
        self.status_code = status_code
        #: The answer's JSON, else its text (stripped); None when it could not be read.
        self.body = body


def _json_error_message(body: object) -> str | None:
    """``error.message`` (or ``message``) of a JSON error body, as the SDK's message kept it."""
    if not isinstance(body, dict):
        return None
    error = body.get("error", body)
    said = error.get("message") if isinstance(error, dict) else None
    return said if isinstance(said, str) and said else None


def request_json(model: str, body: dict[str, Any]) -> dict[str, Any]:
    """The JSON of a chat request: ``body`` (keyword arguments of the SDK's
    ``chat.completions.create``) with ``model``, ``extra_body`` merged in at the top level."""
    out = {"model": model, **{k: v for k, v in body.items() if k != "extra_body"}}
    out.update(body.get("extra_body") or {})
    return out


def _env_proxy(url: str) -> str | None:
    """The proxy the environment names for ``url`` (None when NO_PROXY exempts its host)."""
    parts = urllib.parse.urlsplit(url)
    if parts.hostname and urllib.request.proxy_bypass(parts.hostname):
        return None
    proxies = urllib.request.getproxies()
    return proxies.get(parts.scheme) or proxies.get("all")


class HttpClient:
    """One endpoint's HTTP client: one aiohttp session (a connection pool) for its lifetime."""

    def __init__(self, base_url: str, api_key: str | None, *, timeout: float) -> None:
        """``base_url`` ends where the API's paths begin (``http://host:8000/v1``); ``timeout``
        bounds connecting and each read, in seconds."""
        self.retarget(base_url)
        parts = urllib.parse.urlsplit(self.base_url)
        self._headers = {"Accept": "application/json"}
        if not (parts.username or parts.password):  # else aiohttp sends the URL's as basic auth
            self._headers["Authorization"] = f"Bearer {api_key or 'EMPTY'}"
        self._timeout = aiohttp.ClientTimeout(total=None, connect=timeout, sock_read=timeout)
        self._session: aiohttp.ClientSession | None = None

    def retarget(self, base_url: str) -> None:
        """Send the next requests to ``base_url`` (set at the start; again for a managed server
        that moved to another port): the connection pool is kept, a session serves any host, and
        connections to the old address go idle and close."""
        self.base_url = urllib.parse.urlunsplit(urllib.parse.urlsplit(base_url.rstrip("/")))
        self._proxy = _env_proxy(self.base_url)

    def _open(self) -> aiohttp.ClientSession:
        # Made on first use, inside the event loop that uses it (aiohttp's sessions belong to one).
        if self._session is None:
            connector = aiohttp.TCPConnector(limit=MAX_CONNECTIONS, limit_per_host=0, keepalive_timeout=KEEPALIVE_S)
            self._session = aiohttp.ClientSession(
                connector=connector, headers=self._headers, timeout=self._timeout, trust_env=False
            )
        return self._session

    async def close(self) -> None:
        """Close the connection pool (the client may not be used afterwards)."""
        if self._session is not None:
            await self._session.close()

    @asynccontextmanager
    async def _send(self, method: str, path: str, body: dict[str, Any] | None) -> AsyncIterator[aiohttp.ClientResponse]:
        """The response to one request, its status checked; released (or its connection closed,
        if its body was not read to the end) when the block is left."""
        url = f"{self.base_url}/{path}"
        try:
            response = await self._open().request(method, url, json=body, proxy=self._proxy)
        except TRANSPORT_ERRORS as exc:
            raise as_api_error(exc) from exc
        try:
            if response.status >= 400:
                raise ApiStatusError(response.status, await _error_body(response))
            yield response
        finally:
            if response.content.at_eof():
                response.release()
            else:
                # An answer left unread (a stream cut for a loop): the connection is closed, which
                # is how vLLM learns the client has gone and aborts the request.
                response.close()

    async def post_json(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST ``body`` as JSON to ``path`` and return the answer's JSON object."""
        async with self._send("POST", path, body) as response:
            return await _read_json(response)

    async def get_json(self, path: str) -> dict[str, Any]:
        """GET ``path`` and return the answer's JSON object."""
        async with self._send("GET", path, None) as response:
            return await _read_json(response)

    @asynccontextmanager
    async def post_stream(self, path: str, body: dict[str, Any]) -> AsyncIterator[aiohttp.ClientResponse]:
        """POST ``body`` and hand over the response to read as it arrives; leaving the block
        before its end closes the connection."""
        async with self._send("POST", path, body) as response:
            yield response


async def _read_json(response: aiohttp.ClientResponse) -> dict[str, Any]:
    try:
        raw = await response.read()
    except TRANSPORT_ERRORS as exc:
        raise as_api_error(exc) from exc
    try:
        data = json.loads(raw)
    except ValueError:
        data = None
    if not isinstance(data, dict):
        raise ApiError(f"the answer is not a JSON object: {raw[:200]!r}")
    return data


async def _error_body(response: aiohttp.ClientResponse) -> object:
    """An error answer's JSON, else its text; None when it cannot be read."""
    try:
        text = (await response.read()).decode("utf-8", "replace").strip()
    except TRANSPORT_ERRORS:  # the body broke off: the status says enough
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text


#: What the transport raises when the endpoint cannot be reached or the connection breaks (a
#: timeout is an ``asyncio.TimeoutError``: aiohttp's own, or the builtin one from Python 3.11).
TRANSPORT_ERRORS = (aiohttp.ClientError, OSError, asyncio.TimeoutError)


def as_api_error(exc: BaseException) -> ApiConnectionError:
    """The :class:`ApiConnectionError` (:class:`ApiTimeoutError` for a timeout) for one of
    :data:`TRANSPORT_ERRORS`; raise it ``from exc``: the message shows that cause."""
    return ApiTimeoutError() if isinstance(exc, (asyncio.TimeoutError, TimeoutError)) else ApiConnectionError()
