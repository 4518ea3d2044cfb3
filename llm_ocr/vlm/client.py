"""The one inference path: an OpenAI-compatible chat endpoint, with retries and a dead-man switch.

Concurrency is bounded by the caller (the stage owns the in-flight limit); this module turns
one request body into one :class:`ChatResult`, retrying transient failures with exponential
backoff and jitter, and notices when the endpoint as a whole is gone so a run stops instead of
marking every remaining page failed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import re
import time
import urllib.parse
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from llm_ocr.backoff import backoff_delay
from llm_ocr.redaction import redact
from llm_ocr.vlm.http import ApiConnectionError, ApiError, ApiStatusError, ApiTimeoutError, HttpClient, request_json
from llm_ocr.vlm.loops import Loop, LoopPolicy
from llm_ocr.vlm.streaming import TokenRatio, stream_chat

log = logging.getLogger(__name__)

#: What a client's gate returns for a request (where it went), handed back to ``request_ended``.
Sent = TypeVar("Sent")


@dataclass
class ChatResult:
    """What the model answered, with the accounting the output rows keep."""

    text: str
    finish_reason: str | None
    prompt_tokens: int | None
    completion_tokens: int | None
    latency_s: float
    attempts: int
    #: The repetition loop the streamed answer was cut at (``finish_reason`` is then "loop").
    loop: Loop | None = None
    #: ``completion_tokens`` is estimated from the text (a stream cut before its usage came).
    tokens_estimated: bool = False


def _answer(response: dict[str, Any], *, latency_s: float, attempts: int) -> ChatResult:
    """A non-streamed chat completion's JSON as a :class:`ChatResult` (a field the answer lacks,
    or gives as null, is None; the text is "" without a message)."""
    choices = response.get("choices")
    choice = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else {}
    message = choice.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    usage = response.get("usage")
    usage = usage if isinstance(usage, dict) else {}
    return ChatResult(
        text=content if isinstance(content, str) else "",
        finish_reason=choice.get("finish_reason"),
        prompt_tokens=usage.get("prompt_tokens"),
        completion_tokens=usage.get("completion_tokens"),
        latency_s=latency_s,
        attempts=attempts,
    )


class RequestFailed(Exception):
    """A request that failed for good (a 4xx, or transient errors past the attempt budget)."""

    def __init__(self, message: str, attempts: int) -> None:
        super().__init__(message)
        self.attempts = attempts


class EndpointDown(Exception):
    """The endpoint stopped answering at all: the run should stop and report, not burn input."""

    def __init__(self, message: str, *, transient: bool = False) -> None:
        super().__init__(message)
        #: The failure may pass by itself (connection refused, 5xx, 429), unlike a 401 or 404.
        self.transient = transient


def _is_transient(exc: BaseException) -> bool:
    if isinstance(exc, ApiConnectionError):  # a timeout too
        return True
    if isinstance(exc, ApiStatusError):
        return exc.status_code in (408, 409, 429) or exc.status_code >= 500
    return False


#: Characters of an error's description kept in a page's error row or a log line.
ERROR_CHARS = 500


def describe_error(exc: BaseException, secrets: Iterable[str] = ()) -> str:
    """A one-line, secret-free description of a request error for the page's ``error`` field.

    An HTTP error carries what the server said in its body (its message keeps only a JSON
    body's ``error.message``: a plain-text 500, an HTML page from a proxy or FastAPI's
    ``{"detail": ...}`` would say nothing but the status), on one line, at most
    :data:`ERROR_CHARS` characters, with ``secrets`` (the client's key), the environment's
    secrets and anything shaped like a credential taken out (:mod:`llm_ocr.redaction`).
    """
    if isinstance(exc, ApiTimeoutError):
        return "request timed out"
    if isinstance(exc, ApiConnectionError):
        text = f"connection error: {exc.__cause__ or exc}"
    elif isinstance(exc, ApiStatusError):
        text = f"HTTP {exc.status_code}: {_body_message(exc)}"
    else:
        text = f"{type(exc).__name__}: {exc}"
    text = " ".join(redact(text, secrets).split())  # redacted before it is cut: no secret is cut in two
    return text if len(text) <= ERROR_CHARS else text[: ERROR_CHARS - 1] + "…"


def _body_message(exc: ApiStatusError) -> str:
    """What the server said: the body's message (OpenAI's ``error.message``, vLLM's ``message``,
    FastAPI's ``detail``), else the body itself (tags of an HTML page dropped)."""
    body = exc.body
    if isinstance(body, Mapping):
        error = body.get("error", body)
        said = error.get("message") or error.get("detail") if isinstance(error, Mapping) else error
        said = said or body.get("message") or body.get("detail")
        return said if isinstance(said, str) and said.strip() else json.dumps(body, default=str)
    if isinstance(body, str) and body.strip():
        return re.sub(r"<[^>]*>", " ", body)
    return exc.message


def display_url(url: str) -> str:
    """``url`` fit for messages: credentials in it (``http://user:TOKEN@host``, ``?api_key=``)
    are masked, so an --endpoint carrying them never reaches a log line or error message."""
    parts = urllib.parse.urlsplit(url)
    netloc = parts.netloc
    if "@" in netloc:
        netloc = "***@" + netloc.rpartition("@")[2]
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc, query="***" if parts.query else ""))


async def served_model_card(base_url: str, model: str, api_key: str | None = None) -> dict[str, Any]:
    """What ``GET /v1/models`` says of ``model`` beyond OpenAI's fields: vLLM's ``max_model_len``,
    the CPU engine's ``ocr_engine`` (what it really is); ``{}`` when the endpoint does not list
    the model or cannot be read (a probe: the caller decides what a missing card means)."""
    client = HttpClient(base_url, api_key, timeout=10)
    try:
        for entry in _model_entries(await client.get_json("models")):
            if entry.get("id") == model:
                return {k: v for k, v in entry.items() if k not in OPENAI_MODEL_FIELDS}
    except ApiError:
        return {}
    finally:
        await client.close()
    return {}


#: The fields of OpenAI's model object; a card is what an entry says beyond them.
OPENAI_MODEL_FIELDS = frozenset({"id", "object", "created", "owned_by"})


def _model_entries(listing: dict[str, Any]) -> list[dict[str, Any]]:
    """The entries of a ``GET /models`` answer (``{"object": "list", "data": [...]}``)."""
    data = listing.get("data")
    return [entry for entry in data if isinstance(entry, dict)] if isinstance(data, list) else []


class RequestPolicy(Protocol):
    """What the client reads of its retry and timeout policy: the caller's options
    (:class:`llm_ocr.options.ClientOptions`, whose flags and defaults say what each means)."""

    @property
    def request_timeout(self) -> float: ...  # seconds one request may take once sent

    @property
    def max_attempts(self) -> int: ...  # attempts per request before it fails

    @property
    def backoff_base(self) -> float: ...  # the first retry's delay, doubled per attempt

    @property
    def backoff_max(self) -> float: ...  # the longest delay between two attempts

    @property
    def dead_after(self) -> float: ...  # seconds unreachable with no success before the run stops


class VlmClient:
    """An OpenAI-compatible chat client for one endpoint and model."""

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        options: RequestPolicy,
        gate: Callable[[], Awaitable[Sent]] | None = None,
        request_ended: Callable[[Sent, bool], None] | None = None,
        locate: Callable[[], str] | None = None,
    ) -> None:
        """``options`` is the retry and timeout policy. ``gate``, for a server we manage or
        watch, waits until it is ready and returns where the request goes (the crash tracker's
        :class:`~llm_ocr.serving.quarantine.Incarnation`: the server and its generation, bumped
        on each restart); requests that failed because it crashed are then retried on the new
        incarnation without using up the page's attempts. ``request_ended`` is told, once for
        each pass through the gate, when that request ended: what the gate returned and whether
        the server answered it (a completion; not an error status: vLLM answers the requests in
        flight with a 500 when its engine dies). ``locate``, for a server we manage, says where
        it listens now: one restarted on another port (its own was taken while it was down, or
        while it started) is followed once it passes the gate, not left behind on the old one."""
        self.base_url = base_url.rstrip("/")
        self._locate = locate
        self.display_url = display_url(self.base_url)  # for messages: no credentials
        # What the gate returns is only compared and handed back: opaque here, and ``Sent`` ties
        # the two callables together where they are passed.
        self._gate: Callable[[], Awaitable[object]] | None = gate
        self._request_ended: Callable[[Any, bool], None] | None = request_ended
        self.model = model
        self.options = options
        #: Taken out of error messages (a server may repeat the key it refused).
        self._secrets = (api_key,) if api_key else ()
        # One connection pool for the client's life; it never retries (the loop in chat does).
        self._client = HttpClient(self.base_url, api_key, timeout=self.options.request_timeout)
        self._last_success = time.monotonic()
        #: Since the last success: when the first request that then failed was sent, and how many
        #: attempts failed (--dead-after counts from the former, and needs two of the latter).
        self._failing_since: float | None = None
        self._failed_attempts = 0
        self._down: EndpointDown | None = None
        self._ratio = TokenRatio()  # tokens per character of streamed answers, for cut streams
        #: Answers 429 or 503 so far: the server is overloaded (the in-flight control backs off).
        self.overloaded = 0
        #: Requests on the wire now (the in-flight control compares them with what the server runs).
        self.sending = 0
        self._busy_s = 0.0
        self._busy_since: float | None = None

    @property
    def busy_seconds(self) -> float:
        """Seconds during which at least one request of this client was on the wire: the time the
        server worked for this run (what a server that is given back when idle costs)."""
        open_for = time.monotonic() - self._busy_since if self._busy_since is not None else 0.0
        return self._busy_s + open_for

    async def close(self) -> None:
        """Release the HTTP connection pool."""
        await self._client.close()

    async def max_model_len(self) -> int | None:
        """The served model's context length from ``/v1/models`` (vLLM reports ``max_model_len``)."""
        self._follow()
        try:
            models = _model_entries(await self._client.get_json("models"))
        except ApiError as exc:
            log.warning("could not read /v1/models: %s", describe_error(exc, self._secrets))
            return None
        for model in models:
            if model.get("id") == self.model:
                value = model.get("max_model_len")
                return int(value) if value else None
        return None

    async def served_models(self) -> list[str]:
        """The model names the endpoint serves (raises EndpointDown when it cannot be reached)."""
        self._follow()
        try:
            models = _model_entries(await self._client.get_json("models"))
        except ApiError as exc:
            raise EndpointDown(
                f"endpoint {self.display_url} is not answering: {describe_error(exc, self._secrets)}",
                transient=_is_transient(exc),
            ) from exc
        return [str(m["id"]) for m in models if "id" in m]

    def _check_down(self) -> None:
        if self._down is not None:
            raise self._down

    async def chat(self, body: dict[str, Any], *, stream: bool = False, loops: LoopPolicy | None = None) -> ChatResult:
        """Send one chat completion (``body`` = keyword arguments of the OpenAI SDK's
        ``chat.completions.create``: ``extra_body`` is merged into the request's JSON).

        With ``stream`` the answer is streamed and, with ``loops``, cut as soon as it repeats
        itself (:mod:`llm_ocr.vlm.streaming`). Retries transient failures; raises
        :class:`RequestFailed` when the page should get an error row and
        :class:`EndpointDown` when the whole run should stop.
        """
        opts = self.options
        last_error = "no attempt made"
        attempt = 0
        free_retries = 0
        while attempt < opts.max_attempts:
            attempt += 1
            self._check_down()
            generation = await self._wait_gate()
            sent = time.monotonic()
            try:
                with self._on_the_wire(generation):
                    if stream:
                        streamed = await stream_chat(self._client, self.model, body, loops, self._ratio)
                    else:
                        response = await self._client.post_json("chat/completions", request_json(self.model, body))
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # classified below, never swallowed silently
                last_error = describe_error(exc, self._secrets)
                if isinstance(exc, ApiStatusError) and exc.status_code in (429, 503):
                    self.overloaded += 1
                if not _is_transient(exc):
                    raise RequestFailed(last_error, attempt + free_retries) from exc
                if self._gate is not None and isinstance(exc, ApiConnectionError):
                    # The managed server may have crashed: wait for its restart; a request lost
                    # to a crash is not the page's fault, so it does not use up an attempt.
                    now = await self._wait_gate()
                    self._ended(now, answered=False)  # this pass through the gate sent nothing
                    if now != generation:
                        free_retries += 1
                        attempt -= 1
                        continue
                if self._endpoint_failing_since(sent, exc):
                    # Nothing has succeeded anywhere since this request was sent: the endpoint,
                    # not this page, is in trouble. Wait for it without spending the page's
                    # attempts, until it has been silent for --dead-after (then EndpointDown):
                    # a dead endpoint must stop the run, not turn every page into an error row.
                    free_retries += 1
                    attempt -= 1
                    self._check_down()
                    await asyncio.sleep(backoff_delay(min(free_retries, 6) + 1, opts.backoff_base, opts.backoff_max))
                    continue
                if attempt == opts.max_attempts:
                    # A wedged endpoint (timeouts only, see _endpoint_failing_since) stops the
                    # run rather than giving this page an error row.
                    self._check_down()
                    raise RequestFailed(last_error, attempt + free_retries) from exc
                delay = min(opts.backoff_max, opts.backoff_base * 2 ** (attempt - 1))
                # Full jitter: many pages fail together when a server hiccups; spread the retries.
                await asyncio.sleep(random.uniform(0, delay) if delay else 0)
                continue
            self._note_success()
            if stream:
                return ChatResult(
                    text=streamed.text,
                    finish_reason=streamed.finish_reason,
                    prompt_tokens=streamed.prompt_tokens,
                    completion_tokens=streamed.completion_tokens,
                    latency_s=time.monotonic() - sent,
                    attempts=attempt + free_retries,
                    loop=streamed.loop,
                    tokens_estimated=streamed.tokens_estimated,
                )
            return _answer(response, latency_s=time.monotonic() - sent, attempts=attempt + free_retries)
        raise RequestFailed(last_error, opts.max_attempts)

    @contextlib.contextmanager
    def _on_the_wire(self, generation: object) -> Iterator[None]:
        """Counts a request in :attr:`sending` while it is sent and answered (not while it
        waits for a retry); tells ``request_ended`` when it is over."""
        if self.sending == 0:
            self._busy_since = time.monotonic()
        self.sending += 1
        answered = False
        try:
            yield
            answered = True
        finally:
            self.sending -= 1
            if self.sending == 0 and self._busy_since is not None:
                self._busy_s += time.monotonic() - self._busy_since
                self._busy_since = None
            self._ended(generation, answered)

    def _ended(self, generation: object, answered: bool) -> None:
        if self._gate is not None and self._request_ended is not None:
            self._request_ended(generation, answered)

    async def _wait_gate(self) -> object:
        if self._gate is None:
            return 0
        try:
            passed = await self._gate()
        except Exception as exc:  # the managed server is gone for good
            self._down = EndpointDown(f"model server failed: {exc}")
            raise self._down from exc
        self._follow()
        return passed

    def _follow(self) -> None:
        """Send to where the managed server listens now (see ``locate``)."""
        if self._locate is None:
            return
        url = self._locate().rstrip("/")
        if url != self.base_url:
            log.warning("the model server moved from %s to %s; sending there", self.display_url, display_url(url))
            self.base_url, self.display_url = url, display_url(url)
            self._client.retarget(url)

    def _note_success(self) -> None:
        self._last_success = time.monotonic()
        self._failing_since = None
        self._failed_attempts = 0

    def _endpoint_failing_since(self, sent: float, exc: BaseException) -> bool:
        """Note a transient failure; True when no request has succeeded since ``sent``.

        Timeouts never count as the endpoint failing: one slow page is not a dead server.
        But an endpoint that accepts connections and then answers nothing (a wedged server, a
        black-holing proxy) only ever produces timeouts: once nothing at all has succeeded for
        --dead-after, it is down like one that refuses connections (else every page would burn
        its attempts and become an error row).
        """
        if isinstance(exc, ApiTimeoutError):
            if self._last_success < sent:
                self._mark_down_if_silent(exc, sent)
            return False
        if self._last_success >= sent:
            return False
        self._mark_down_if_silent(exc, sent)
        return True

    def _mark_down_if_silent(self, exc: BaseException, sent: float) -> None:
        """Call the endpoint down once it has failed for --dead-after, counted from the sending of
        the first request that failed (not from the last success: on a loaded machine the run's
        first request can go out after --dead-after, and one refusal would then stop the run),
        and only after two failed attempts (one answer is not a pattern), or one timeout (an
        attempt that waited the whole request timeout is evidence enough)."""
        self._failed_attempts += 1
        if self._failing_since is None or sent < self._failing_since:
            self._failing_since = max(sent, self._last_success)
        silent_for = time.monotonic() - self._failing_since
        enough = self._failed_attempts >= 2 or isinstance(exc, ApiTimeoutError)
        if silent_for >= self.options.dead_after and enough and self._down is None:
            self._down = EndpointDown(
                f"endpoint {self.display_url} has answered nothing successfully for {silent_for:.0f}s "
                f"(--dead-after {self.options.dead_after:g}); last error: {describe_error(exc, self._secrets)}"
            )
