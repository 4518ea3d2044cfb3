"""The requests Fields sends, and reading the answers.

Structured outputs, as vLLM's OpenAI server accepts them (``vllm/entrypoints/openai/
chat_completion/protocol.py``: ``ChatCompletionRequest.response_format`` and
``structured_outputs``; ``vllm/entrypoints/generate/base/protocol.py``:
``structured_outputs_from_response_format`` turns ``response_format`` into
``StructuredOutputsParams(json=schema)`` of ``vllm/sampling_params.py``):

* ``json_schema`` (the default): ``response_format = {"type": "json_schema", "json_schema":
  {"name": ..., "schema": ...}}``: constrained decoding, the answer follows the schema. OpenAI's
  own form, so any server that has structured outputs understands it. (vLLM's old
  ``guided_json`` request field was removed in 0.12 and is silently ignored: never sent.)
* ``json_object``: ``response_format = {"type": "json_object"}``: valid JSON, shape not enforced.
* ``instruction``: no ``response_format`` at all, for endpoints that have neither.

Whatever the mode, the prompt states the schema, the answer is validated, and an answer that is
not valid gets one repair request that shows the model its answer and the errors.
"""

from __future__ import annotations

import base64
import json
import re
from dataclasses import dataclass, field
from typing import Any

from llm_ocr.stages.fields.validate import Problem

MODES = ("json_schema", "json_object", "instruction")

DEFAULT_INSTRUCTION = (
    "Extract the fields of the document below as one JSON object that follows this JSON Schema. "
    "Copy every value exactly as the document writes it; give numbers without currency symbols or "
    "thousands separators, and dates as YYYY-MM-DD. Use null for a field the document does not give. "
    "Answer with the JSON object only."
)
CLASSIFY_INSTRUCTION = (
    "Which kind of document is this? Answer with a JSON object {{\"class\": NAME}}, NAME being one of:\n"
    "{choices}\nAnswer \"other\" when it is none of them."
)
REPAIR_INSTRUCTION = (
    "Your answer does not follow the schema:\n{problems}\n"
    "Answer again with the corrected JSON object only. Use null where the document gives no value."
)
#: Characters of a document's text the classification request shows (its beginning).
CLASSIFY_CHARS = 6000
_FENCE = re.compile(r"^```[a-zA-Z]*\s*\n?(.*?)\n?\s*```$", re.DOTALL)
_SCHEMA_NAME = re.compile(r"[^A-Za-z0-9_-]+")


@dataclass
class Chunk:
    """The part of a document one request carries: pages, their text and/or their images."""

    pages: list[int]
    text: str | None = None
    images: list[tuple[bytes, str]] = field(default_factory=list)  # (encoded image, mime type)
    #: Why the text was cut to fit the context (None: it was not).
    cut: str | None = None

    def describe(self, num_pages: int) -> str:
        """``pages 3-4 of 9`` (or ``page 2 of 9``)."""
        if not self.pages:
            return f"{num_pages} page(s)"
        first, last = self.pages[0], self.pages[-1]
        span = f"page {first}" if first == last else f"pages {first}-{last}"
        return f"{span} of {num_pages}"


def schema_name(name: str) -> str:
    """A ``json_schema.name`` OpenAI accepts (``[A-Za-z0-9_-]{1,64}``)."""
    return (_SCHEMA_NAME.sub("_", name).strip("_") or "fields")[:64]


def response_format(mode: str, schema: dict[str, Any], name: str) -> dict[str, Any] | None:
    """The ``response_format`` of a request in ``mode`` (None: send none)."""
    if mode == "json_schema":
        return {"type": "json_schema", "json_schema": {"name": schema_name(name), "schema": schema}}
    if mode == "json_object":
        return {"type": "json_object"}
    return None


def _user_content(doc_id: str, chunk: Chunk, num_pages: int, text: str | None) -> list[dict[str, Any]] | str:
    head = f"Document {doc_id!r}, {chunk.describe(num_pages)}."
    if not chunk.images:
        return f"{head}\n\n{text or ''}"
    parts: list[dict[str, Any]] = [{"type": "text", "text": head}]
    for image, mime in chunk.images:
        parts.append({"type": "image_url",
                      "image_url": {"url": f"data:{mime};base64,{base64.b64encode(image).decode()}"}})
    if text:
        parts.append({"type": "text", "text": f"The text of these pages, as read by OCR:\n\n{text}"})
    return parts


def fields_request(
    *,
    doc_id: str,
    chunk: Chunk,
    num_pages: int,
    schema: dict[str, Any],
    name: str,
    mode: str,
    max_tokens: int,
    temperature: float = 0.0,
    instruction: str | None = None,
) -> dict[str, Any]:
    """The chat-completion arguments for one part of a document (the client adds the model)."""
    system = f"{instruction or DEFAULT_INSTRUCTION}\n\nJSON Schema:\n```json\n{json.dumps(schema, ensure_ascii=False)}\n```"  # noqa: E501 - not wrapped yet
    body: dict[str, Any] = {
        "messages": [
            {"role": "system", "content": system},
            {"role": "user", "content": _user_content(doc_id, chunk, num_pages, chunk.text)},
        ],
        "max_tokens": max_tokens,
        "temperature": temperature,
    }
    fmt = response_format(mode, schema, name)
    if fmt is not None:
        body["response_format"] = fmt
    return body


def repair_request(body: dict[str, Any], answer: str, problems: list[Problem] | str) -> dict[str, Any]:
    """``body`` continued: the model's answer, then the errors and a request to correct them."""
    listed = problems if isinstance(problems, str) else "\n".join(f"- {p}" for p in problems[:20])
    repaired = dict(body)
    repaired["messages"] = [
        *body["messages"],
        {"role": "assistant", "content": answer},
        {"role": "user", "content": REPAIR_INSTRUCTION.format(problems=listed)},
    ]
    return repaired


def classify_schema(names: list[str]) -> dict[str, Any]:
    """The answer of a classification request: one of ``names`` (``other`` included)."""
    return {
        "type": "object",
        "properties": {"class": {"type": "string", "enum": names}},
        "required": ["class"],
        "additionalProperties": False,
    }


def classify_request(
    *,
    doc_id: str,
    chunk: Chunk,
    num_pages: int,
    choices: list[tuple[str, str]],
    mode: str,
    max_tokens: int = 32,
) -> dict[str, Any]:
    """A request whose answer is one of the class names (``choices``: name, description)."""
    names = [n for n, _ in choices]
    listed = "\n".join(f"- {n}" + (f": {d}" if d else "") for n, d in choices)
    text = chunk.text[:CLASSIFY_CHARS] if chunk.text else None
    body: dict[str, Any] = {
        "messages": [
            {"role": "system", "content": CLASSIFY_INSTRUCTION.format(choices=listed)},
            {"role": "user", "content": _user_content(doc_id, chunk, num_pages, text)},
        ],
        "max_tokens": max_tokens,
        "temperature": 0.0,
    }
    fmt = response_format(mode, classify_schema(names), "document_class")
    if fmt is not None:
        body["response_format"] = fmt
    return body


def parse_json(text: str) -> tuple[Any, str | None]:
    """``(value, None)`` for an answer holding JSON, else ``(None, why)``.

    Tolerates what unconstrained models add: a Markdown code fence, words around the object.
    """
    body = text.strip()
    fenced = _FENCE.match(body)
    if fenced:
        body = fenced.group(1).strip()
    try:
        return json.loads(body), None
    except json.JSONDecodeError as exc:
        start, end = body.find("{"), body.rfind("}")
        if 0 <= start < end:
            try:
                return json.loads(body[start : end + 1]), None
            except json.JSONDecodeError:
                pass
        excerpt = " ".join(text.split())
        excerpt = excerpt if len(excerpt) <= 200 else excerpt[:199] + "…"
        return None, f"the answer is not valid JSON ({exc.msg} at character {exc.pos}): {excerpt!r}"
