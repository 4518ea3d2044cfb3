"""The chat completion request as vLLM serving DeepSeek-OCR sees it: validation, error JSON,
prompt token estimate and request-log redaction (shared by the simulator and the CPU engine).

Validation mirrors vLLM's OpenAI server with DeepSeek-OCR's n-gram logits processor loaded
(docs/facts.md#deepseek-ocr, docs/facts.md#vllms-openai-compatible-server); where it is stricter
than vLLM a comment says so, so that client mistakes show up in tests.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import math
import re
from dataclasses import dataclass
from typing import Any

from aiohttp import web

#: Prompt texts (after stripping a leading ``<image>``) and the kind of answer they get.
PROMPT_KINDS = {
    "<|grounding|>Convert the document to markdown.": "markdown",
    "<|grounding|>OCR this image.": "ocr",
    "Free OCR.": "free",
    "Describe this image in detail.": "describe",
    "Parse the figure.": "figure",
}

#: Request fields this server understands or knowingly ignores (vLLM accepts them); anything
#: else is reported under ``ignored_fields`` in the request log, as vLLM silently drops it.
KNOWN_FIELDS = frozenset(
    """model messages max_tokens max_completion_tokens temperature top_p top_k min_p n seed
    stop stop_token_ids stream stream_options skip_special_tokens spaces_between_special_tokens
    vllm_xargs structured_outputs response_format frequency_penalty presence_penalty
    repetition_penalty logprobs top_logprobs user include_stop_str_in_output ignore_eos
    min_tokens logit_bias request_id priority stream_interval""".split()
)

_DATA_URI = re.compile(r"^data:(image/[\w.+-]+);base64,", re.IGNORECASE)
class ApiError(Exception):
    """An error answered as OpenAI error JSON, the way vLLM answers it."""

    def __init__(self, status: int, message: str, type_: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type_ or {400: "BadRequestError", 404: "NotFoundError"}.get(status, "InternalServerError")


def error_response(status: int, message: str, type_: str | None = None) -> web.Response:
    """OpenAI-shaped error JSON: ``{"error": {"message", "type", "param", "code"}}``."""
    err = ApiError(status, message, type_)
    body = {"error": {"message": message, "type": err.type, "param": None, "code": status}}
    return web.json_response(body, status=status)


def tile_grid(width: int, height: int) -> tuple[int, int]:
    """``(across, down)``: the grid of 640-pixel crops vLLM's DeepSeek-OCR processor cuts an
    image into in "Gundam" mode, ``(0, 0)`` for an image that gets the global view only.

    From vLLM ``deepseek_ocr.py``: images over 640 px get 2..6 crops of 640, the grid whose
    aspect ratio is closest to the image's (on a tie, the larger one if the image is big enough).
    """
    if width <= 640 and height <= 640:
        return 0, 0
    aspect = width / height
    ratios = sorted(
        {(i, j) for n in range(2, 7) for i in range(1, n + 1) for j in range(1, n + 1) if 2 <= i * j <= 6},
        key=lambda r: r[0] * r[1],
    )
    best, best_diff = (1, 1), float("inf")
    for i, j in ratios:  # i tiles across, j down
        diff = abs(aspect - i / j)
        if diff < best_diff:
            best, best_diff = (i, j), diff
        elif diff == best_diff and width * height > 0.5 * 640 * 640 * i * j:
            best = (i, j)
    return best


def image_prompt_tokens(width: int, height: int) -> int:
    """Image tokens vLLM's DeepSeek-OCR processor spends on an image in "Gundam" mode.

    From vLLM ``deepseek_ocr.py`` ``get_num_image_tokens``: a 1024 global view (16x16 tokens
    plus a newline column) plus, for images over 640 px, the crops of :func:`tile_grid` (10x10
    tokens each plus newline columns), plus one separator.
    """
    global_tokens = 16 * 17
    nw, nh = tile_grid(width, height)
    if nw == 0:
        return global_tokens + 1
    return global_tokens + (nh * 10) * (nw * 10 + 1) + 1


def text_scale(width: int, height: int) -> float:
    """How large the image's text is where the model reads it best: the scale of its crops
    (the page resized onto the tile grid), or of the 1024 global view without crops."""
    nw, nh = tile_grid(width, height)
    if nw == 0:
        return 1024 / max(width, height)
    return min(nw * 640 / width, nh * 640 / height)


@dataclass
class ChatRequest:
    """A validated chat completion request."""

    model: str
    prompt: str
    kind: str
    image: bytes
    media_type: str
    max_tokens: int | None
    skip_special_tokens: bool
    schema: Any = None
    structured: str | None = None  # "json", "json_object" or "choice"
    choices: list[Any] | None = None
    ngram_enabled: bool = False
    ngram_window: int | None = None  # the n-gram processor's window_size, in tokens
    stream: bool = False
    include_usage: bool = False  # stream_options.include_usage: a last chunk with the usage
    continuous_usage: bool = False  # stream_options.continuous_usage_stats: usage in every chunk
    stream_interval: int | None = None  # tokens per streamed chunk (vLLM's per-request field)
    temperature: float = 0.0
    #: A conversation (``kind == "conversation"``): system and user text, and whether it goes on
    #: after an answer of the model's (a repair request).
    system: str = ""
    user_text: str = ""
    follows_answer: bool = False


def is_json_int(v: Any) -> bool:
    """Whether ``v`` is a JSON integer (Python bool is an int subclass but not one)."""
    return isinstance(v, int) and not isinstance(v, bool)


def parse_chat_request(
    body: Any, served: list[str], server_name: str = "the simulated server", *, conversations: bool = False
) -> ChatRequest:
    """Validate a chat completion body; raise :class:`ApiError` like vLLM would.

    ``server_name`` names the server in the messages about what it does not support (the CPU
    engine reuses this validation). With ``conversations``, a request that is not one user
    message with an image (text only, a system message, several turns) is a ``conversation``
    (vLLM takes those for any model); without, it is refused as before.
    """
    if not isinstance(body, dict):
        raise ApiError(400, "Request body must be a JSON object.")
    model = body.get("model") or served[0]  # vLLM serves the first name when none is given
    if model not in served:
        raise ApiError(404, f"The model `{model}` does not exist.")
    stream, include_usage, continuous_usage = _parse_stream(body)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
        raise ApiError(400, "`messages` must be a non-empty list of message objects.")
    n_images = sum(
        1
        for m in messages
        if isinstance(m.get("content"), list)
        for p in m["content"]
        if isinstance(p, dict) and p.get("type") == "image_url"
    )
    if n_images > 1:  # --limit-mm-per-prompt '{"image": 1}'
        raise ApiError(400, f"At most 1 image(s) may be provided in one prompt, got {n_images}.")
    if conversations and (len(messages) > 1 or n_images == 0):
        req = _parse_conversation(messages, model, server_name)
        req.max_tokens = _max_tokens(body)
        req.stream, req.include_usage, req.continuous_usage = stream, include_usage, continuous_usage
        req.stream_interval, req.temperature = _stream_interval(body), _temperature(body)
        _parse_structured(body, req)
        return req
    parts = messages[-1].get("content")
    if not isinstance(parts, list):
        raise ApiError(400, "The last message must carry a list of content parts with one image_url part.")
    texts: list[str] = []
    url = None
    for part in parts:
        ptype = part.get("type") if isinstance(part, dict) else None
        if ptype == "text" and isinstance(part.get("text"), str):
            texts.append(part["text"])
        elif ptype == "image_url":
            iu = part.get("image_url")
            url = iu.get("url") if isinstance(iu, dict) else None
        else:
            raise ApiError(400, f"Unsupported content part: {json.dumps(part)[:200]}")
    if url is None:
        raise ApiError(400, "The last message must contain exactly one image_url part with a url.")
    m = _DATA_URI.match(url) if isinstance(url, str) else None
    if not m:
        raise ApiError(400, f"image_url.url must be a data:image/...;base64, URI ({server_name} fetches nothing).")
    # No text part is a valid request: vLLM renders the image alone (LightOnOCR's plain mode
    # sends nothing else; the real-vLLM tier serves it). The prompt is then empty.
    try:
        image = base64.b64decode(url[m.end():], validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ApiError(400, f"Invalid base64 image data: {exc}") from None

    xargs = body.get("vllm_xargs")
    ngram_enabled = False
    window = None
    if xargs is not None:
        if not isinstance(xargs, dict):
            raise ApiError(400, "`vllm_xargs` must be an object.")
        # Messages as in vLLM's NGramPerReqLogitsProcessor.validate_params.
        ngram = xargs.get("ngram_size")
        if ngram is not None and (not is_json_int(ngram) or ngram <= 0):
            raise ApiError(400, f"`ngram_size` has to be a strictly positive integer, got {ngram}.")
        ngram_enabled = ngram is not None
        window = xargs.get("window_size")
        # vLLM checks window_size only when ngram_size is set; checking it always is stricter.
        if window is not None and (not is_json_int(window) or window <= 0):
            raise ApiError(400, f"`window_size` has to be a strictly positive integer, got {window}.")
        wl = xargs.get("whitelist_token_ids")
        # vLLM accepts any iterable (a string passes); a list of ints is required here.
        if wl is not None and (not isinstance(wl, list) or not all(is_json_int(t) for t in wl)):
            raise ApiError(400, f"`whitelist_token_ids` has to be a sequence of integers, got {wl!r}.")

    max_tokens = _max_tokens(body)

    prompt = "\n".join(texts)
    stripped = prompt.strip()
    while stripped.startswith("<image>"):
        stripped = stripped[len("<image>"):].lstrip()
    req = ChatRequest(
        model=model,
        prompt=prompt,
        kind=PROMPT_KINDS.get(stripped, "other"),
        image=image,
        media_type=m.group(1).lower(),
        max_tokens=max_tokens,
        skip_special_tokens=body.get("skip_special_tokens", True) is not False,
        ngram_enabled=ngram_enabled,
        ngram_window=window if ngram_enabled and is_json_int(window) else None,
        stream=stream,
        include_usage=include_usage,
        continuous_usage=continuous_usage,
        stream_interval=_stream_interval(body),
        temperature=_temperature(body),
    )
    _parse_structured(body, req)
    return req


def _max_tokens(body: dict[str, Any]) -> int | None:
    max_tokens = body.get("max_completion_tokens") or body.get("max_tokens")
    if max_tokens is not None and (not is_json_int(max_tokens) or max_tokens < 1):
        raise ApiError(400, f"max_tokens must be a positive integer, got {max_tokens!r}.")
    return max_tokens


def _parse_conversation(messages: list[dict[str, Any]], model: str, server_name: str) -> ChatRequest:
    """A request of several messages and/or no image: its texts by role, and its image if any."""
    system: list[str] = []
    user: list[str] = []
    image, media_type = b"", ""
    answered = False
    for message in messages:
        role = message.get("role")
        if role not in ("system", "user", "assistant"):
            raise ApiError(400, f"Unsupported message role: {role!r}.")
        content = message.get("content")
        parts = [{"type": "text", "text": content}] if isinstance(content, str) else content
        if not isinstance(parts, list):
            raise ApiError(400, "A message's content must be a string or a list of content parts.")
        for part in parts:
            ptype = part.get("type") if isinstance(part, dict) else None
            if ptype == "text" and isinstance(part.get("text"), str):
                if role == "system":
                    system.append(part["text"])
                elif role == "user" and not answered:
                    user.append(part["text"])
            elif ptype == "image_url":
                url = part.get("image_url", {}).get("url") if isinstance(part.get("image_url"), dict) else None
                m = _DATA_URI.match(url) if isinstance(url, str) else None
                if m is None or not isinstance(url, str):
                    raise ApiError(400, f"image_url.url must be a data:image/...;base64, URI ({server_name} fetches "
                                        "nothing).")
                try:
                    image = base64.b64decode(url[m.end():], validate=True)
                except (binascii.Error, ValueError) as exc:
                    raise ApiError(400, f"Invalid base64 image data: {exc}") from None
                media_type = m.group(1).lower()
            else:
                raise ApiError(400, f"Unsupported content part: {json.dumps(part)[:200]}")
        if role == "assistant":
            answered = True
    return ChatRequest(
        model=model, prompt="\n".join(system + user), kind="conversation", image=image, media_type=media_type,
        max_tokens=None, skip_special_tokens=True, system="\n".join(system), user_text="\n".join(user),
        follows_answer=answered,
    )


def _parse_stream(body: dict[str, Any]) -> tuple[bool, bool, bool]:
    """``(stream, include_usage, continuous_usage)`` as vLLM reads them (``should_include_usage``
    in ``vllm/entrypoints/serve/utils/api_utils.py``: continuous usage needs include_usage)."""
    stream = body.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise ApiError(400, f"`stream` must be a boolean, got {stream!r}.")
    options = body.get("stream_options")
    if options is not None:
        if not stream:
            # vLLM's ChatCompletionRequest.validate_stream_options.
            raise ApiError(400, "Stream options can only be defined when `stream=True`.")
        if not isinstance(options, dict):
            raise ApiError(400, "`stream_options` must be an object.")
    options = options or {}
    include = bool(options.get("include_usage"))
    return bool(stream), include, include and bool(options.get("continuous_usage_stats"))


def _stream_interval(body: dict[str, Any]) -> int | None:
    value = body.get("stream_interval")
    if value is not None and (not is_json_int(value) or value < 1):
        raise ApiError(400, f"stream_interval must be an integer of at least 1, got {value!r}.")
    return value


def _temperature(body: dict[str, Any]) -> float:
    value = body.get("temperature")
    if value is None:
        return 1.0  # OpenAI's (and vLLM's) default
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0:
        raise ApiError(400, f"temperature must be a non-negative number, got {value!r}.")
    return float(value)


def _parse_structured(body: dict[str, Any], req: ChatRequest) -> None:
    so = body.get("structured_outputs")
    if isinstance(so, dict):
        if "json" in so:
            schema = so["json"]
            if isinstance(schema, str):
                try:
                    schema = json.loads(schema)
                except json.JSONDecodeError as exc:
                    raise ApiError(400, f"structured_outputs.json is not valid JSON: {exc}") from None
            req.structured, req.schema = "json", schema
        elif isinstance(so.get("choice"), list) and so["choice"]:
            req.structured, req.choices = "choice", so["choice"]
        elif so.get("json_object"):
            req.structured = "json_object"
    rf = body.get("response_format")
    if req.structured is None and isinstance(rf, dict):
        if rf.get("type") == "json_schema":
            js = rf.get("json_schema")
            if not isinstance(js, dict) or not isinstance(js.get("schema"), dict):
                raise ApiError(400, "response_format.json_schema.schema must be an object.")
            req.structured, req.schema = "json", js["schema"]
        elif rf.get("type") == "json_object":
            req.structured = "json_object"


def redact(value: Any) -> Any:
    """A copy of a request body with every base64 data URI replaced by its digest and size."""
    if isinstance(value, dict):
        return {k: redact(v) for k, v in value.items()}
    if isinstance(value, list):
        return [redact(v) for v in value]
    if isinstance(value, str) and value.startswith("data:") and ";base64," in value[:100]:
        head, _, payload = value.partition(",")
        try:
            data = base64.b64decode(payload, validate=True)
        except (binascii.Error, ValueError):
            data = payload.encode()
        return {
            "data_uri": head[len("data:"):].split(";")[0],
            "sha256": hashlib.sha256(data).hexdigest(),
            "bytes": len(data),
        }
    return value


def estimate_prompt_tokens(width: int, height: int, prompt: str, tokens_per_char: float) -> int:
    """Prompt tokens of a request: the image's tokens, the prompt text and the chat template."""
    return image_prompt_tokens(width, height) + math.ceil(len(prompt) * tokens_per_char) + 8


def admit_max_tokens(prompt_tokens: int, max_tokens: int | None, max_model_len: int) -> int:
    """The request's output budget, or :class:`ApiError` 400 with vLLM's messages when prompt
    plus ``max_tokens`` exceed the context. Without ``max_tokens`` vLLM grants the rest of the
    context."""
    if prompt_tokens >= max_model_len:
        raise ApiError(
            400,
            f"This model's maximum context length is {max_model_len} tokens. However, your request "
            f"has {prompt_tokens} input tokens. Please reduce the length of the input messages.",
        )
    if max_tokens is None:
        return max_model_len - prompt_tokens
    if prompt_tokens + max_tokens > max_model_len:
        raise ApiError(
            400,
            f"'max_tokens' or 'max_completion_tokens' is too large: {max_tokens}. This model's "
            f"maximum context length is {max_model_len} tokens and your request has {prompt_tokens} "
            f"input tokens ({max_tokens} > {max_model_len} - {prompt_tokens}).",
        )
    return max_tokens
