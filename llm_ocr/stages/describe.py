"""Describe: every figure crop without a description → a VLM caption stored on the figure.

The per-page work is :func:`describe_page`; the runners feed it pages (read back from
``OUT/extract``, or straight from Extract in ``llm-ocr run``) and write its rows. A figure that
cannot be described keeps an ``error`` and never fails its page.
"""

from __future__ import annotations

import asyncio
import json
import re
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field, replace
from typing import Any

import fsspec

from llm_ocr.records import Figure, PageResult
from llm_ocr.storage.stores import store_options
from llm_ocr.vlm.client import ChatResult, EndpointDown, RequestFailed, VlmClient
from llm_ocr.vlm.grounding import EOS
from llm_ocr.vlm.recipes import image_messages, recipe_for

#: Longest excerpt of a rejected answer kept in a figure's error (enough to see what went wrong).
_ERROR_EXCERPT = 300
#: Fields whose string value leads the readable form of a structured description.
_LEAD_FIELDS = ("description", "caption", "summary", "alt", "alt_text", "text")
_FENCE = re.compile(r"^```[a-zA-Z]*\s*\n?(.*?)\n?\s*```$", re.DOTALL)


class SchemaError(Exception):
    """The ``--describe-schema`` value cannot be read or is not a valid JSON schema."""


def load_schema(value: str, storage_options: dict[str, Any] | None = None) -> dict[str, Any]:
    """The JSON schema given inline (``{...}``) or as a file path/URL; checked against its metaschema."""
    from jsonschema.exceptions import SchemaError as MetaSchemaError
    from jsonschema.validators import validator_for

    text = value.strip()
    if not text.startswith("{"):
        try:
            # The same option resolution as every other read (per-protocol entries, env fixes).
            with fsspec.open(text, "rt", encoding="utf-8", **store_options(text, storage_options)) as handle:
                text = handle.read()
        except (OSError, ValueError) as exc:
            raise SchemaError(f"--describe-schema: cannot read {value!r}: {exc}") from exc
    try:
        schema = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SchemaError(f"--describe-schema is not valid JSON: {exc}") from exc
    if not isinstance(schema, dict):
        raise SchemaError("--describe-schema must be a JSON object (a JSON schema)")
    try:
        validator_for(schema).check_schema(schema)
    except MetaSchemaError as exc:
        raise SchemaError(f"--describe-schema is not a valid JSON schema: {exc.message}") from exc
    return schema


@dataclass
class FigureCounts:
    """What Describe did with the figures of a run (recorded in the completion marker)."""

    described: int = 0
    failed: int = 0
    skipped: int = 0  # no image to describe (the crop failed in Extract)
    already: int = 0  # described before (by an earlier run or another tool)
    prompt_tokens: int = 0
    completion_tokens: int = 0

    def as_dict(self) -> dict[str, int]:
        """The figure counts as a JSON-ready dict (tokens are reported separately)."""
        return {"described": self.described, "failed": self.failed, "skipped": self.skipped, "already": self.already}


@dataclass
class DescribeContext:
    """What every figure of a run shares."""

    client: VlmClient
    prompt: str
    max_tokens: int
    temperature: float = 0.0
    extra_body: dict[str, Any] = field(default_factory=dict)
    schema: dict[str, Any] | None = None
    #: Describe figures that arrive with a description (from the OCR model's page answer) again.
    redescribe: bool = False
    #: Bounds figure requests in flight; each request takes a slot on its own (no batches). A
    #: runner passes a limit sized for its endpoint (it may change while the run goes).
    limit: AbstractAsyncContextManager[Any] = field(default_factory=lambda: asyncio.Semaphore(64))
    counts: FigureCounts = field(default_factory=FigureCounts)
    _validator: Any = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.schema is not None:
            from jsonschema.validators import validator_for

            self._validator = validator_for(self.schema)(self.schema)


def describe_extra_body(model: str) -> dict[str, Any]:
    """vLLM fields of a describe request: the model family's, without ``skip_special_tokens``.

    Extract keeps special tokens because the grounding tags are special tokens; a description
    has none, and vLLM's default (skip them) keeps the end-of-sentence token out of the text.
    The n-gram repetition blocker stays: descriptions can loop too.
    """
    extra = dict(recipe_for(model).extra_body)
    extra.pop("skip_special_tokens", None)
    return extra


def _mime(image: bytes) -> str:
    if image.startswith(b"\xff\xd8"):
        return "image/jpeg"
    if image[:4] == b"RIFF" and image[8:12] == b"WEBP":
        return "image/webp"
    return "image/png"  # Extract crops are PNG


def figure_request(image: bytes, ctx: DescribeContext) -> dict[str, Any]:
    """The chat-completion arguments for one figure (model is added by the client)."""
    body: dict[str, Any] = {
        "messages": image_messages(image, _mime(image), ctx.prompt),
        "max_tokens": ctx.max_tokens,
        "temperature": ctx.temperature,
        "extra_body": ctx.extra_body,
    }
    if ctx.schema is not None:
        # docs/facts.md#vllms-openai-compatible-server: structured output is requested with
        # extra_body.structured_outputs.json or OpenAI's response_format json_schema; the old
        # guided_json is silently ignored since vLLM 0.12. response_format is the OpenAI form,
        # so a separate captioning server that is not vLLM understands it too.
        body["response_format"] = {
            "type": "json_schema",
            "json_schema": {"name": "figure_description", "schema": ctx.schema},
        }
    return body


def readable(value: Any) -> str:
    """A one-paragraph human reading of a structured description.

    A leading ``description``/``caption``/``summary``... string comes first as it is; the other
    fields follow as ``key: value`` pairs separated by ``;`` (lists joined by commas, nested
    objects in parentheses).
    """
    if isinstance(value, str):
        return value.strip()
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, list):
        return ", ".join(text for text in (readable(v) for v in value) if text)
    if isinstance(value, dict):
        lead = next((k for k in _LEAD_FIELDS if isinstance(value.get(k), str) and value[k].strip()), None)
        parts = [value[lead].strip()] if lead else []
        for key, item in value.items():
            if key == lead:
                continue
            text = readable(item)
            if text:
                parts.append(f"{key}: ({text})" if isinstance(item, dict) else f"{key}: {text}")
        return "; ".join(parts)
    return str(value)


def _excerpt(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _ERROR_EXCERPT else text[: _ERROR_EXCERPT - 1] + "…"


def parse_structured(text: str, validator: Any) -> tuple[Any, str | None]:
    """``(value, None)`` for an answer that is JSON valid against the schema, else ``(None, why)``."""
    body = text.strip()
    fenced = _FENCE.match(body)
    if fenced:  # a model not constrained by the server may wrap its JSON in a code fence
        body = fenced.group(1).strip()
    try:
        value = json.loads(body)
    except json.JSONDecodeError as exc:
        return None, f"description is not valid JSON ({exc.msg} at char {exc.pos}): {_excerpt(text)!r}"
    errors = sorted(validator.iter_errors(value), key=lambda e: list(e.absolute_path))
    if errors:
        first = errors[0]
        where = "/".join(str(p) for p in first.absolute_path) or "(root)"
        more = f" (+{len(errors) - 1} more)" if len(errors) > 1 else ""
        return None, f"description does not match --describe-schema at {where}: {_excerpt(first.message)}{more}"
    return value, None


def _apply(figure: Figure, result: ChatResult, ctx: DescribeContext) -> Figure:
    text = result.text.replace(EOS, "").strip()
    truncated = result.finish_reason == "length"
    if ctx.schema is not None:
        value, error = parse_structured(text, ctx._validator)
        if error is not None:
            if truncated:
                error = f"hit --describe-max-tokens ({ctx.max_tokens}); {error}"
            return replace(figure, error=error)
        return replace(
            figure,
            description=readable(value),
            description_json=json.dumps(value, ensure_ascii=False, sort_keys=False),
            error=None,
        )
    if not text:
        return replace(figure, error="model returned an empty description")
    # A truncated caption is still worth keeping (it is read by humans); the note says why it ends.
    error = f"description hit --describe-max-tokens ({ctx.max_tokens}) and is cut short" if truncated else None
    return replace(figure, description=text, error=error)


async def describe_figure(figure: Figure, ctx: DescribeContext) -> Figure:
    """A copy of ``figure`` with its description (or an ``error``). Never raises for a figure problem.

    :class:`EndpointDown` propagates: the run stops rather than failing every remaining figure.
    """
    if figure.description and not ctx.redescribe:
        # Extract's family described it inline (olmOCR-2's alt text, Chandra's alt): kept.
        ctx.counts.already += 1
        return figure
    if figure.image is None:
        # Nothing to look at (the crop failed in Extract): keep the figure and its error as is.
        ctx.counts.skipped += 1
        return figure
    try:
        async with ctx.limit:
            result = await ctx.client.chat(figure_request(figure.image, ctx))
    except RequestFailed as exc:
        ctx.counts.failed += 1
        return replace(figure, error=f"describe request failed after {exc.attempts} attempt(s): {exc}")
    except EndpointDown:
        raise
    ctx.counts.prompt_tokens += result.prompt_tokens or 0
    ctx.counts.completion_tokens += result.completion_tokens or 0
    described = _apply(figure, result, ctx)
    if described.description:
        ctx.counts.described += 1
    else:
        ctx.counts.failed += 1
    return described


async def describe_page(page: PageResult, ctx: DescribeContext) -> PageResult:
    """The page's row with every describable figure described; status and text unchanged.

    Failed pages pass through as they are. The figures of a page are described concurrently,
    each request taking its own slot of ``ctx.limit``.
    """
    if page.status == "error" or not page.figures:
        return page
    figures = await asyncio.gather(*(describe_figure(f, ctx) for f in page.figures))
    return replace(page, figures=list(figures))
