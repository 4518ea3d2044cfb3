"""Fields for one document: classify → split → ask (structured) → validate, repair once → merge →
validate → look every value up in the text.

:func:`document_fields` turns one Assemble row into one ``OUT/fields`` row; the runner feeds it
documents and writes the rows. A document's problems never raise: they become its row's
``status`` (``ok`` | ``invalid`` | ``error``) and ``error``; only :class:`EndpointDown` stops the run.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any, Literal

from llm_ocr.stages.fields.chunks import PageText, estimate_tokens, image_chunks, pages_text, split_pages, text_chunks
from llm_ocr.stages.fields.classes import OTHER, Classes, Decision
from llm_ocr.stages.fields.columns import TypedColumn
from llm_ocr.stages.fields.evidence import Evidence, check_values
from llm_ocr.stages.fields.merge import PartAnswer, merge_answers
from llm_ocr.stages.fields.prompts import (
    DEFAULT_INSTRUCTION,
    Chunk,
    classify_request,
    classify_schema,
    fields_request,
    parse_json,
    repair_request,
)
from llm_ocr.stages.fields.schema import FieldsSchema, partial_schema
from llm_ocr.stages.fields.validate import Problem, schema_problems, validate_answer
from llm_ocr.vlm.client import ChatResult, EndpointDown, RequestFailed, VlmClient

log = logging.getLogger("llm_ocr")

FieldsStatus = Literal["ok", "invalid", "error"]
#: Words of an HTTP 400 that mean "this endpoint has no structured outputs" (not "too long").
_UNSUPPORTED_FORMAT_WORDS = ("response_format", "json_schema", "json_object", "structured", "guided", "grammar")


@dataclass
class FieldsCounts:
    """What Fields did over a run (recorded in the completion marker)."""

    requests: int = 0
    repairs: int = 0
    classified_by_model: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0

    def add(self, result: ChatResult) -> None:
        """Count one answered request."""
        self.requests += 1
        self.prompt_tokens += result.prompt_tokens or 0
        self.completion_tokens += result.completion_tokens or 0


PageImage = Callable[[dict[str, Any], int], Awaitable[tuple[bytes, str]]]


@dataclass
class FieldsContext:
    """What every document of a run shares."""

    client: VlmClient
    classes: Classes
    single: bool  # one --schema: no classification
    columns: list[TypedColumn]
    source: str = "markdown"
    mode: str = "json_schema"
    fallback: bool = True  # --fields-structured auto: fall back when the endpoint refuses a mode
    classify: str = "auto"
    max_tokens: int = 4096
    max_input_tokens: int | None = None
    context_tokens: int | None = None  # the server's max_model_len, when it says
    pages_per_request: int = 1
    instruction: str | None = None
    temperature: float = 0.0
    repair: bool = True
    #: Held by each request while it is at the model: the run's own semaphore, or a limit its
    #: caller shares with other work on the same server (the service's worker: its pages' limit).
    limit: AbstractAsyncContextManager[Any] = field(default_factory=lambda: asyncio.Semaphore(16))
    page_image: PageImage | None = None
    counts: FieldsCounts = field(default_factory=FieldsCounts)


@dataclass
class FieldsResult:
    """One ``OUT/fields`` row."""

    doc_id: str
    doc_index: int
    source: str | None
    num_pages: int
    class_: str | None = None
    class_by: str | None = None
    fields: Any = None
    status: FieldsStatus = "error"
    error: str | None = None
    validation_errors: list[Problem] = field(default_factory=list)
    unsupported_values: list[dict[str, str]] = field(default_factory=list)
    value_pages: list[dict[str, Any]] = field(default_factory=list)
    conflicts: list[dict[str, Any]] = field(default_factory=list)
    document_status: str | None = None
    requests: int = 0
    repaired: bool = False
    structured: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_s: float = 0.0
    model: str | None = None

    def to_row(self, columns: list[TypedColumn]) -> dict[str, Any]:
        """The Parquet row, with the typed columns filled from ``fields``."""
        values = self.fields if isinstance(self.fields, dict) else {}
        row: dict[str, Any] = {
            "doc_id": self.doc_id, "doc_index": self.doc_index, "source": self.source, "num_pages": self.num_pages,
            "class": self.class_, "class_by": self.class_by,
            "fields": json.dumps(self.fields, ensure_ascii=False) if self.fields is not None else None,
        }  # fmt: skip
        for column in columns:
            row[column.column] = column.convert(values.get(column.field))
        row.update(
            status=self.status, error=self.error,
            validation_errors=[p.as_row() for p in self.validation_errors],
            unsupported_values=list(self.unsupported_values), value_pages=list(self.value_pages),
            conflicts=list(self.conflicts), document_status=self.document_status, requests=self.requests,
            repaired=self.repaired, structured=self.structured, prompt_tokens=self.prompt_tokens,
            completion_tokens=self.completion_tokens, latency_s=round(self.latency_s, 3), model=self.model,
        )  # fmt: skip
        return row

    def note(self, text: str) -> None:
        """Add a note to ``error`` (kept on ok rows too: what the row's values rest on)."""
        self.error = f"{self.error}; {text}" if self.error else text

    def count(self, result: ChatResult) -> None:
        """Account one answered request on this row."""
        self.requests += 1
        self.prompt_tokens += result.prompt_tokens or 0
        self.completion_tokens += result.completion_tokens or 0
        self.latency_s += result.latency_s


class _Failed(Exception):
    """A document's request failed for good: the row becomes ``error``."""


@dataclass
class _Answer:
    value: Any
    problems: list[Problem]
    repaired: bool = False


async def document_fields(row: dict[str, Any], ctx: FieldsContext) -> FieldsResult:
    """The fields row of one Assemble row. Never raises for a document problem."""
    result = FieldsResult(
        doc_id=row["doc_id"], doc_index=row["doc_index"], source=row.get("source"),
        num_pages=int(row.get("num_pages") or 0), document_status=row.get("status"), model=ctx.client.model,
    )  # fmt: skip
    markdown = row.get("markdown") or ""
    pages = split_pages(markdown, row.get("page_starts"), result.num_pages)
    has_text = row.get("status") != "error" and markdown.strip() != ""
    if not has_text and (ctx.source == "markdown" or result.num_pages == 0):
        result.error = f"the document has no text to read: {row.get('error') or 'Assemble status ' + str(row.get('status'))}"  # noqa: E501 - not wrapped yet
        return result
    if row.get("status") == "partial":
        result.note(f"fields from the pages OCR read: {row.get('error') or 'some pages failed'}")
    try:
        decision = await _classify(row, pages, ctx, result)
        result.class_, result.class_by = decision.name, decision.by
        if decision.name == OTHER:
            result.status = "ok"
            return result
        klass = ctx.classes.get(decision.name)
        assert klass is not None
        await _extract(row, pages, klass.schema, ctx, result)
    except _Failed as exc:
        result.status, result.fields = "error", None
        result.note(str(exc))
    return result


# ---------------------------------------------------------------------------------------------
# Classification


async def _classify(row: dict[str, Any], pages: list[PageText], ctx: FieldsContext, result: FieldsResult) -> Decision:
    if ctx.single:
        return Decision(ctx.classes.names[0], "schema")
    text = row.get("markdown") or ""
    if ctx.classify != "model":
        decided = ctx.classes.by_rules(row["doc_id"], text)
        if decided is not None:
            return decided
        if ctx.classify == "rules":
            return Decision(OTHER, "rules", "no rule matched")
    choices = [(c.name, c.description) for c in ctx.classes.classes] + [(OTHER, "none of the above")]
    names = [n for n, _ in choices]
    chunk = await _first_chunk(row, pages, ctx)
    answer = await _ask(
        lambda mode: classify_request(doc_id=row["doc_id"], chunk=chunk, num_pages=result.num_pages, choices=choices,
                                      mode=mode),
        classify_schema(names), None, ctx, result, what="classification",
    )
    ctx.counts.classified_by_model += 1
    if answer.problems or not isinstance(answer.value, dict):
        raise _Failed(f"the model's classification is not one of {', '.join(names)}: "
                      f"{'; '.join(map(str, answer.problems))}")
    return Decision(str(answer.value["class"]), "model")


async def _first_chunk(row: dict[str, Any], pages: list[PageText], ctx: FieldsContext) -> Chunk:
    first = pages[0] if pages else PageText((1,), "")
    chunk = Chunk(list(first.pages[:1]), first.text if ctx.source != "images" else None)
    if ctx.source != "markdown":
        chunk.images = [await _image(row, 1, ctx)]
        chunk.pages = [1]
    return chunk


# ---------------------------------------------------------------------------------------------
# Extraction


async def _chunks(row: dict[str, Any], pages: list[PageText], schema: FieldsSchema, ctx: FieldsContext,
                  result: FieldsResult) -> list[Chunk]:
    if ctx.source == "markdown":
        overhead = estimate_tokens((ctx.instruction or DEFAULT_INSTRUCTION) + json.dumps(schema.wire)) + 64
        budget = ctx.max_input_tokens
        if budget is None and ctx.context_tokens:
            budget = max(256, ctx.context_tokens - ctx.max_tokens - overhead)
        chunks = text_chunks(pages, budget)
        for chunk in chunks:
            if chunk.cut:
                result.note(chunk.cut)
        return chunks
    chunks = []
    for numbers in image_chunks(result.num_pages, ctx.pages_per_request):
        images = [await _image(row, n, ctx) for n in numbers]
        text = pages_text(pages, numbers) if ctx.source == "both" else None
        chunks.append(Chunk(numbers, text, images))
    return chunks


async def _image(row: dict[str, Any], page: int, ctx: FieldsContext) -> tuple[bytes, str]:
    if ctx.page_image is None:
        raise _Failed("no page images: this run cannot re-render the document's pages")
    try:
        return await ctx.page_image(row, page)
    except Exception as exc:  # any render failure is this document's error
        raise _Failed(f"page {page} image: {exc}") from exc


async def _extract(row: dict[str, Any], pages: list[PageText], schema: FieldsSchema, ctx: FieldsContext,
                   result: FieldsResult) -> None:
    chunks = await _chunks(row, pages, schema, ctx, result)
    whole = len(chunks) == 1
    wire = schema.wire if whole else partial_schema(schema.schema)

    async def one(chunk: Chunk) -> _Answer:
        return await _ask(
            lambda mode: fields_request(
                doc_id=row["doc_id"], chunk=chunk, num_pages=result.num_pages, schema=wire, name=schema.name,
                mode=mode, max_tokens=_answer_budget(ctx, chunk, wire), temperature=ctx.temperature,
                instruction=ctx.instruction,
            ),
            wire, schema if whole else None, ctx, result, what="fields",
        )

    answers = await asyncio.gather(*(one(c) for c in chunks))
    parts = [PartAnswer(c.pages, a.value) for c, a in zip(chunks, answers) if isinstance(a.value, dict)]
    if not parts:
        result.status, result.fields = "invalid", answers[0].value
        result.validation_errors = answers[0].problems
        return
    merged = merge_answers(parts, schema)
    result.fields = merged.value
    result.conflicts = merged.conflicts
    result.repaired = any(a.repaired for a in answers)
    problems = answers[0].problems if whole else validate_answer(merged.value, schema)
    if not whole and len(parts) < len(chunks):
        lost = [p for c, a in zip(chunks, answers) if not isinstance(a.value, dict) for p in c.pages]
        problems = [Problem("", f"no usable answer for page(s) {', '.join(map(str, lost))}"), *problems]
    result.validation_errors = problems
    result.status = "invalid" if problems else "ok"
    evidence = Evidence([(p.pages[0] if len(p.pages) == 1 else 0, p.text) for p in pages])
    found = check_values(merged.value, schema.schema, evidence, merged.origins)
    result.unsupported_values = found.unsupported
    result.value_pages = [p for p in found.pages if p["page"]]


def _answer_budget(ctx: FieldsContext, chunk: Chunk, schema: dict[str, Any]) -> int:
    """``--fields-max-tokens``, lowered so that prompt plus answer fit the server's context."""
    if not ctx.context_tokens or chunk.images:
        return ctx.max_tokens
    prompt = estimate_tokens((chunk.text or "") + (ctx.instruction or DEFAULT_INSTRUCTION) + json.dumps(schema)) + 64
    return max(16, min(ctx.max_tokens, ctx.context_tokens - prompt))


async def _ask(
    build: Callable[[str], dict[str, Any]],
    wire: dict[str, Any],
    schema: FieldsSchema | None,
    ctx: FieldsContext,
    result: FieldsResult,
    *,
    what: str,
) -> _Answer:
    """Send a request built for the current mode, validate its answer, and repair it once.

    ``schema`` (the whole document's) adds the pydantic model and the cross-field checks to the
    validation; without it, the answer is checked against ``wire`` only.
    """
    body = build(ctx.mode)
    text, chat = await _send(build, body, ctx, result, what)
    answer = _judge(text, chat, wire, schema, ctx)
    if not answer.problems or not ctx.repair:
        return answer
    ctx.counts.repairs += 1
    _, chat2 = await _send(build, repair_request(body, text, answer.problems), ctx, result, f"{what} repair")
    second = _judge(chat2.text, chat2, wire, schema, ctx)
    if not second.problems:
        return _Answer(second.value, [], repaired=True)
    # Keep the answer that parsed (the repaired one if both did), with its problems.
    return second if second.value is not None or answer.value is None else answer


async def _send(build: Callable[[str], dict[str, Any]], body: dict[str, Any], ctx: FieldsContext,
                result: FieldsResult, what: str) -> tuple[str, ChatResult]:
    while True:
        try:
            async with ctx.limit:
                chat = await ctx.client.chat(body)
        except RequestFailed as exc:
            fallback = _fallback_mode(ctx.mode) if ctx.fallback and _refuses_format(str(exc)) else None
            if fallback is None:
                raise _Failed(f"{what} request failed after {exc.attempts} attempt(s): {exc}") from exc
            log.warning("the fields endpoint refused %s requests (%s); using %s from now on", ctx.mode, exc, fallback)
            ctx.mode = fallback
            body = build(fallback) if "assistant" not in [m.get("role") for m in body["messages"]] else _reformat(body,
                fallback, build)
            continue
        except EndpointDown:
            raise
        result.count(chat)
        ctx.counts.add(chat)
        result.structured = ctx.mode
        return chat.text, chat


def _reformat(body: dict[str, Any], mode: str, build: Callable[[str], dict[str, Any]]) -> dict[str, Any]:
    fresh = build(mode)
    reformatted = {k: v for k, v in body.items() if k != "response_format"}
    if "response_format" in fresh:
        reformatted["response_format"] = fresh["response_format"]
    return reformatted


def _refuses_format(message: str) -> bool:
    lowered = message.lower()
    return "http 400" in lowered and any(word in lowered for word in _UNSUPPORTED_FORMAT_WORDS)


def _fallback_mode(mode: str) -> str | None:
    return {"json_schema": "json_object", "json_object": "instruction"}.get(mode)


def _judge(text: str, chat: ChatResult, wire: dict[str, Any], schema: FieldsSchema | None,
           ctx: FieldsContext) -> _Answer:
    value, error = parse_json(text)
    if error is not None:
        if chat.finish_reason == "length":
            error = f"the answer was cut at {ctx.max_tokens} tokens (--fields-max-tokens); {error}"
        return _Answer(None, [Problem("", error)])
    problems = validate_answer(value, schema) if schema is not None else schema_problems(value, wire)
    return _Answer(value, problems)
