"""The gateway: the service's HTTP API (FastAPI; its schema at ``/openapi.json``).

Every route but ``/healthz`` and ``/readyz`` requires the token when one is set
(``Authorization: Bearer TOKEN``); :mod:`.server` refuses to listen beyond loopback without one.
The review pages (``/review``) also take it from a cookie a browser gets by posting the token to
``/review/login`` (HttpOnly, SameSite=Strict, holding an HMAC of the token, never the token), and
refuse a form posted from another origin.
Blocking work (the database, storage, counting a document's pages) runs in threads, off the event loop.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import math
import os
import re
import tempfile
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, RedirectResponse, Response
from pydantic import ValidationError
from starlette.datastructures import UploadFile

from llm_ocr.options import RouteOptions
from llm_ocr.service.callback import CallbackSettings, deliver
from llm_ocr.service.config import Limits
from llm_ocr.service.metrics import exposition
from llm_ocr.service.queue import Document, DocumentQueue, QueueFull, QueueUnavailable, new_id, summary
from llm_ocr.service.review import CSP, document_page, login_page, queue_page
from llm_ocr.service.reviews import BadCorrection, check_path, fields_view, typed
from llm_ocr.service.spool import Spool, Unreadable, count_document, suffix_of
from llm_ocr.sources.render import PDFIUM_LOCK, close_documents
from llm_ocr.storage.stores import protocol_of

log = logging.getLogger("llm_ocr.service")

#: Options a submission may set: ``model`` and ``route`` as ``llm_ocr.run``'s keywords; ``schema``,
#: the name of a Fields schema the service offers (``--schemas``); ``classes``, the name of a
#: classes file it offers there (several kinds of document, each its schema); ``callback``, a URL
#: called when the document ends; ``escalate``, ``off`` to read the document without the workers'
#: stronger model (``llm-ocr worker --escalate-to``), ``on`` to insist on it.
SUBMIT_OPTIONS = ("model", "route", "schema", "classes", "escalate", "callback")
#: The suffixes of a classes file in the schemas folder (a schema is ``NAME.json``).
CLASSES_SUFFIXES = (".classes.yaml", ".classes.yml", ".classes.json")
#: What a schema's name may be: a file name of the schemas folder without ``.json``, never a path.
SCHEMA_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")
#: Routes that need no token: a load balancer's probes, and the review's login form.
OPEN_PATHS = frozenset({"/healthz", "/readyz", "/review/login"})
#: The review pages' cookie (an HMAC of the token: the cookie never holds the token itself).
COOKIE = "llm_ocr_review"
#: What a document's status says of each page (columns of its Extract rows).
PAGE_COLUMNS = ("page", "status", "error", "latency_s", "attempts", "route", "model", "finish_reason")
#: Bytes read from an upload at a time.
CHUNK = 1 << 20


@dataclass
class Gateway:
    """What the routes use."""

    queue: DocumentQueue
    spool: Spool
    limits: Limits = field(default_factory=Limits)
    token: str | None = None
    #: Called after a document is queued (the in-process worker's wake-up).
    on_submit: Callable[[], None] | None = None
    #: Whether the workers this process runs are ready (None: it runs none).
    workers_ready: Callable[[], bool] | None = None
    #: The folder of the Fields schemas a submission may name (``NAME.json``); None: none.
    schemas: str | None = None
    #: How a document cancelled while queued (ended here, not by a worker) calls its callback.
    callbacks: CallbackSettings = field(default_factory=CallbackSettings)


class Refused(Exception):
    """A submission answered with ``status`` and ``message`` (4xx)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def parse_since(value: str) -> float:
    """``since``: epoch seconds, or an ISO 8601 time (UTC when it names no zone)."""
    try:
        return float(value)
    except ValueError:
        pass
    moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    return (moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)).timestamp()


def check_options(given: dict[str, Any], schemas: str | None = None) -> dict[str, Any]:
    """The submission's options, checked; :class:`Refused` (422) names a bad one. A ``schema``
    name becomes the schema itself (``fields_schema``, inline JSON): a worker on another machine
    needs no copy of the folder, and a schema changed later does not change a queued document."""
    unknown = sorted(set(given) - set(SUBMIT_OPTIONS))
    if unknown:
        raise Refused(422, f"unknown option {unknown[0]!r}: a submission may set {', '.join(SUBMIT_OPTIONS)}")
    options = {key: value for key, value in given.items() if value not in (None, "")}
    if "schema" in options and "classes" in options:
        raise Refused(422, "a submission names a schema (one kind of document) or classes (several), not both")
    if "schema" in options:
        options["fields_schema"] = _schema_named(options["schema"], schemas)
    if "classes" in options:
        options["fields_classes"] = _classes_named(options["classes"], schemas)
    if "callback" in options:
        callback = options["callback"]
        if not isinstance(callback, str) or not callback.startswith(("http://", "https://")):
            raise Refused(422, "callback must be an http:// or https:// URL")
    if "escalate" in options and options["escalate"] not in ("on", "off"):
        raise Refused(422, f"escalate must be 'on' or 'off', not {options['escalate']!r}")
    if "model" in options and not isinstance(options["model"], str):
        raise Refused(422, "model must be a string (a served model name)")
    if "route" in options:
        try:
            RouteOptions(route=options["route"])
        except ValidationError:
            raise Refused(422, f"route must be 'model' or 'text-layer', not {options['route']!r}") from None
    return options


def _offered_file(name: Any, folder: str, kind: str, suffixes: tuple[str, ...]) -> str:
    """The path of the file ``name`` names in ``folder`` (``NAME`` plus one of ``suffixes``);
    :class:`Refused` names the ones offered. The name is looked up among the folder's files, never
    joined into a path as given. A classes file is never offered as a schema, though its
    ``.classes.json`` ends as a schema's ``.json`` does."""
    offered: dict[str, str] = {}
    for entry in sorted(os.listdir(folder)):
        suffix = next((s for s in CLASSES_SUFFIXES + (".json",) if entry.endswith(s)), None)
        if suffix in suffixes:
            offered.setdefault(entry[: -len(suffix)], entry)
    if not isinstance(name, str) or not SCHEMA_NAME.fullmatch(name) or name not in offered:
        raise Refused(422, f"unknown {kind} {name!r}: this service offers {', '.join(offered) or 'none'}")
    return os.path.join(folder, offered[name])


def _schema_named(name: Any, folder: str | None) -> str:
    """The text of the schema ``name`` offers in ``folder``; :class:`Refused` says why not."""
    if folder is None:
        raise Refused(422, "this service offers no Fields schemas (start it with --schemas FOLDER)")
    with open(_offered_file(name, folder, "schema", (".json",)), encoding="utf-8") as handle:
        text = handle.read()
    try:
        json.loads(text)
    except json.JSONDecodeError as exc:
        raise Refused(422, f"the service's schema {name!r} is not valid JSON ({exc})") from None
    return text


def _classes_named(name: Any, folder: str | None) -> str:
    """The classes file ``name`` offers in ``folder`` (``NAME.classes.yaml``), loaded and checked,
    as inline JSON with each class's schema inline (what the worker's run reads as ``classes``);
    :class:`Refused` says why not. Loaded here, not by the worker: a class whose schema cannot be
    read is refused at submission, and a file changed later does not change a queued document."""
    from llm_ocr.stages.fields.classes import inline_classes, load_classes
    from llm_ocr.stages.fields.schema import SchemaError

    if folder is None:
        raise Refused(422, "this service offers no document classes (start it with --schemas FOLDER holding "
                           "NAME.classes.yaml)")
    path = _offered_file(name, folder, "classes", CLASSES_SUFFIXES)
    try:
        return inline_classes(load_classes(path))
    except SchemaError as exc:
        raise Refused(422, f"the service's classes {name!r} cannot be used: {exc}") from None


def create_app(gateway: Gateway) -> FastAPI:
    """The gateway's FastAPI application."""
    app = FastAPI(title="llm-ocr service", version="1", summary="OCR of documents that keep arriving")
    queue, spool, limits = gateway.queue, gateway.spool, gateway.limits
    calls: set[asyncio.Task[bool]] = set()  # callbacks under way (a reference keeps each task alive)

    @app.middleware("http")
    async def require_token(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        path = request.url.path
        reviewing = path == "/review" or path.startswith("/review/")
        if reviewing and request.method == "POST" and not _same_origin(request):
            # A form another site posts (the browser sends our cookie along): refused.
            return JSONResponse({"detail": "a review form must be posted from the review page"}, status_code=403)
        if gateway.token is not None and path not in OPEN_PATHS:
            given = request.headers.get("authorization", "")
            scheme, _, value = given.partition(" ")
            bearer = scheme.lower() == "bearer" and hmac.compare_digest(value.strip().encode(), gateway.token.encode())
            cookie = reviewing and hmac.compare_digest(request.cookies.get(COOKIE, "").encode(),
                                                       _cookie_value(gateway.token).encode())
            if not (bearer or cookie):
                if reviewing and request.method == "GET":
                    return HTMLResponse(login_page(), status_code=401, headers={"Content-Security-Policy": CSP})
                return JSONResponse({"detail": "a token is required: Authorization: Bearer TOKEN"}, status_code=401,
                                    headers={"WWW-Authenticate": "Bearer"})
        return await call_next(request)

    @app.exception_handler(Refused)
    async def refused(request: Request, exc: Refused) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=exc.status)

    @app.exception_handler(QueueFull)
    async def full(request: Request, exc: QueueFull) -> JSONResponse:
        return JSONResponse({"detail": f"{exc}; retry later"}, status_code=429,
                            headers={"Retry-After": str(limits.retry_after)})

    @app.exception_handler(QueueUnavailable)
    async def unavailable(request: Request, exc: QueueUnavailable) -> JSONResponse:
        # The database is away (restarting, failing over): nothing was changed; ask again later.
        return JSONResponse({"detail": f"the service's database is not answering; retry later ({exc})"},
                            status_code=503, headers={"Retry-After": str(limits.retry_after)})

    @app.post("/v1/documents", status_code=202, responses={
        202: {"description": "queued (or, with a known Idempotency-Key, the document submitted with it)"},
        413: {"description": "the upload is larger than the limit"},
        422: {"description": "unreadable or unsupported document, too many pages, or a bad option"},
        429: {"description": "the queue is full: retry after Retry-After seconds"},
        503: {"description": "the database is not answering: retry after Retry-After seconds"},
    })
    async def submit(request: Request) -> JSONResponse:
        """Queue a document: a multipart upload (field ``file``; ``model``, ``route`` as fields)
        or JSON ``{"url": ..., "model": ..., "route": ...}`` naming a document on a store."""
        key = request.headers.get("idempotency-key")
        if key is not None:
            earlier = await asyncio.to_thread(queue.by_key, key)
            if earlier is not None:
                return _accepted(earlier, replayed=True)
        # A full queue is said before the upload is read.
        if await asyncio.to_thread(queue.depth) >= limits.queue_length:
            raise QueueFull(limits.queue_length)
        doc_id = new_id()
        if request.headers.get("content-type", "").startswith("multipart/form-data"):
            name, input_url, pages, options = await _take_upload(request, doc_id)
        else:
            name, input_url, pages, options = await _take_url(request)
        doc, created = await asyncio.to_thread(queue.submit, doc_id, name=name, input_url=input_url, options=options,
                                               pages=pages, key=key, limit=limits.queue_length)
        if created and gateway.on_submit is not None:
            gateway.on_submit()
        return _accepted(doc, replayed=not created)

    async def _take_upload(request: Request, doc_id: str) -> tuple[str, str, int, dict[str, Any]]:
        length = request.headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > limits.max_upload + CHUNK:
            raise Refused(413, f"the upload is {int(length):,} bytes, over the limit of {limits.max_upload:,}")
        form = await request.form(max_files=1, max_fields=len(SUBMIT_OPTIONS))
        upload = form.get("file")
        if not isinstance(upload, UploadFile):
            raise Refused(422, "no document: send it as the multipart field 'file'")
        options = check_options({key: value for key, value in form.items() if key != "file"}, gateway.schemas)
        name = (upload.filename or "document")[-255:]
        ext = _checked(suffix_of, name)
        pages, input_url = await asyncio.to_thread(_keep_upload, upload, doc_id, name, ext)
        await upload.close()
        return name, input_url, pages, options

    def _keep_upload(upload: UploadFile, doc_id: str, name: str, ext: str) -> tuple[int, str]:
        # Copied to a temporary file of ours first: counted there, then stored in the spool.
        with tempfile.TemporaryDirectory(prefix="llm-ocr-upload-") as scratch:
            local = os.path.join(scratch, f"document{ext}")
            size = 0
            with open(local, "wb") as out:
                while chunk := upload.file.read(CHUNK):
                    size += len(chunk)
                    if size > limits.max_upload:
                        raise Refused(413, f"the upload is over the limit of {limits.max_upload:,} bytes")
                    out.write(chunk)
            if size == 0:
                raise Refused(422, f"{name!r} is empty (0 bytes)")
            pages = _checked(count_document, local, name, limits.max_pages)
            with open(local, "rb") as handle:
                return pages, spool.store_upload(doc_id, ext, handle.read())

    async def _take_url(request: Request) -> tuple[str, str, int, dict[str, Any]]:
        try:
            body = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise Refused(422, 'send a multipart upload (field "file") or JSON {"url": ...}') from None
        if not isinstance(body, dict) or not isinstance(body.get("url"), str):
            raise Refused(422, 'JSON submissions name the document: {"url": "s3://bucket/scan.pdf"}')
        url = body.pop("url")
        options = check_options(body, gateway.schemas)
        if protocol_of(url) in ("file", "local") and not limits.allow_local_urls:
            raise Refused(422, "documents on this machine's disk are not read by URL (start the service with "
                               "--allow-local-urls to allow it); upload the file instead")
        name = url.rstrip("/").rsplit("/", 1)[-1]
        pages = await asyncio.to_thread(_checked, count_document, url, name, limits.max_pages)
        return name, url, pages, options

    @app.get("/v1/documents/{doc_id}")
    def status(doc_id: str) -> dict[str, Any]:
        """A document's status, each page's status and timings, and its errors."""
        doc = _known(doc_id)
        rows = spool.rows(doc_id, "extract", list(PAGE_COLUMNS)) if doc.started is not None else []
        seen = {row["page"]: row for row in rows}
        if rows and doc.options.get("escalate") != "off":
            # A page the stronger model read again: its reading is the page's (route "escalated").
            seen.update((row["page"], row) for row in spool.rows(doc_id, "escalate", list(PAGE_COLUMNS)))
        total = doc.pages or max(seen, default=0)
        unread = "pending" if doc.status in ("queued", "running") else "not read"
        pages = [_page(seen[page]) if page in seen else {"page": page, "status": unread}
                 for page in range(1, total + 1)]
        return {
            **summary(doc),
            "deliveries": doc.deliveries, "cancel_requested": doc.cancel,
            "queued_s": _span(doc.created, doc.started), "run_s": _span(doc.started, doc.finished),
            "options": {key: value for key, value in doc.options.items()
                        if key not in ("fields_schema", "fields_classes")}, "pages": pages,
        }

    @app.get("/v1/documents/{doc_id}/markdown", response_class=PlainTextResponse,
             responses={409: {"description": "the document has no Markdown yet"}})
    def markdown(doc_id: str) -> PlainTextResponse:
        """The document's Markdown (once it is assembled: done, or failed with pages read)."""
        doc = _known(doc_id)
        rows = spool.rows(doc_id, "assemble") if doc.status in ("done", "failed") else []
        if not rows:
            raise Refused(409, f"document {doc_id} is {doc.status}: it has no Markdown"
                               + (" yet" if doc.status in ("queued", "running") else "")
                               + ("; the pages it read are at /pages" if doc.status == "cancelled" else ""))
        return PlainTextResponse(rows[0]["markdown"], media_type="text/markdown; charset=utf-8")

    @app.get("/v1/documents/{doc_id}/fields", responses={409: {"description": "the document has no fields (yet)"}})
    def fields(doc_id: str) -> dict[str, Any]:
        """The fields extracted from the document (submitted with a ``schema``): the Fields row,
        ``fields`` as an object, with its validation errors and the pages each value came from."""
        doc = _known(doc_id)
        rows = spool.rows(doc_id, "fields") if doc.status in ("done", "failed") else []
        if not rows:
            asked = "fields_schema" in doc.options or "fields_classes" in doc.options
            why = "it was submitted without a schema or classes" if not asked else (
                f"it is {doc.status}" + (" (fields come once its pages are read)" if doc.status in
                                         ("queued", "running") else ""))
            raise Refused(409, f"document {doc_id} has no fields: {why}")
        row = rows[0]
        if isinstance(row.get("fields"), str):
            row["fields"] = json.loads(row["fields"])
        # The model's values stay as the worker wrote them (``fields``); a reviewer's are beside them.
        review = fields_view(row.get("fields"), queue.corrections(doc_id), queue.approved(doc_id))
        return {"id": doc_id, **row, **review}

    @app.get("/v1/documents/{doc_id}/figures/{figure_id}", response_class=Response,
             responses={200: {"content": {"image/png": {}}, "description": "the figure's image"},
                        404: {"description": "no such document or figure"}})
    def figure(doc_id: str, figure_id: str) -> Response:
        """A figure's image, by the id the Markdown links to (``![...](figure:ID)``)."""
        doc = _known(doc_id)
        image = spool.figure(doc_id, figure_id) if doc.status in ("done", "failed") else None
        if image is None:
            raise Refused(404, f"document {doc_id} has no figure {figure_id!r}"
                               + (" yet" if doc.status in ("queued", "running") else ""))
        return Response(image, media_type=_image_type(image))

    @app.get("/v1/documents/{doc_id}/pages")
    def pages(doc_id: str) -> dict[str, Any]:
        """The document's page rows (as ``llm_ocr.load(out, "describe")`` holds them, image bytes left out)."""
        _known(doc_id)
        return {"id": doc_id, "pages": list(spool.page_rows(doc_id))}

    @app.delete("/v1/documents/{doc_id}", status_code=202)
    async def cancel(doc_id: str) -> dict[str, Any]:
        """Cancel: a queued document never starts; a running one stops after its pages in flight
        (what was read is kept). A document that ended is left as it is."""
        before = await asyncio.to_thread(queue.get, doc_id)
        doc = await asyncio.to_thread(queue.cancel, doc_id)
        if doc is None:
            raise Refused(404, f"no document {doc_id}")
        if before is not None and before.status == "queued" and doc.status == "cancelled" and \
                isinstance(doc.options.get("callback"), str):
            # Ended here, not by a worker: the call is made from here, in the background.
            task = asyncio.create_task(deliver(doc.options["callback"], summary(doc), gateway.callbacks))
            calls.add(task)
            task.add_done_callback(calls.discard)
        return {"id": doc.id, "status": doc.status, "cancel_requested": doc.cancel or doc.status == "cancelled"}

    @app.get("/v1/documents")
    def documents(status: str | None = None, since: str | None = None, after: int = 0,
                  limit: int = 50) -> dict[str, Any]:
        """Documents in submission order; ``next`` is the ``after`` of the next page (null: the last)."""
        if status is not None and status not in ("queued", "running", "done", "failed", "cancelled"):
            raise Refused(422, f"status must be queued, running, done, failed or cancelled, not {status!r}")
        try:
            moment = parse_since(since) if since else None
        except ValueError:
            raise Refused(422, f"since must be epoch seconds or an ISO 8601 time, not {since!r}") from None
        limit = max(1, min(limit, 500))
        found = queue.list(status=status, since=moment, after=after, limit=limit + 1)
        return {"documents": [summary(doc) for doc in found[:limit]],
                "next": found[limit - 1].seq if len(found) > limit else None}

    @app.get("/healthz")
    def healthz() -> dict[str, str]:
        """The gateway answers."""
        return {"status": "ok"}

    @app.get("/readyz")
    def readyz() -> JSONResponse:
        """The database answers, and this process's workers (if any) have their model endpoint."""
        try:
            queue.ping()
        except Exception as exc:  # noqa: BLE001 - any failure means not ready; the reason is the answer
            return JSONResponse({"status": "not ready", "reason": f"database: {exc}"}, status_code=503)
        if gateway.workers_ready is not None and not gateway.workers_ready():
            return JSONResponse({"status": "not ready", "reason": "the worker's model endpoint is not open yet"},
                                status_code=503)
        return JSONResponse({"status": "ready"})

    @app.get("/metrics", response_class=PlainTextResponse)
    def metrics() -> PlainTextResponse:
        """Prometheus text: queue depth, documents by status, pages read, failures by cause."""
        return PlainTextResponse(exposition(queue), media_type="text/plain; version=0.0.4; charset=utf-8")

    @app.get("/v1/export", response_class=PlainTextResponse,
             responses={200: {"content": {"application/x-ndjson": {}}}})
    def export() -> PlainTextResponse:
        """Every reviewed document (corrected or approved), one JSON object a line: its fields as
        the model gave them, its corrections beside the model's values, the corrected fields, and
        the approval."""
        lines = []
        for doc_id in queue.reviewed():
            doc = queue.get(doc_id)
            if doc is None:
                continue
            rows = spool.rows(doc_id, "fields") if doc.status in ("done", "failed") else []
            model = json.loads(rows[0]["fields"]) if rows and isinstance(rows[0].get("fields"), str) else None
            lines.append(json.dumps({"id": doc.id, "name": doc.name, "status": doc.status, "fields": model,
                                     **fields_view(model, queue.corrections(doc_id), queue.approved(doc_id))},
                                    ensure_ascii=False))
        return PlainTextResponse("".join(line + "\n" for line in lines), media_type="application/x-ndjson")

    @app.get("/review", response_class=HTMLResponse, include_in_schema=False)
    def review_queue() -> HTMLResponse:
        """The queue and the recent documents (newest first)."""
        return _html(queue_page(queue.counts(), queue.depth(), queue.recent(100)))

    @app.post("/review/login", include_in_schema=False)
    async def review_login(request: Request) -> Response:
        """Take the token from the login form; the review pages then know the browser by a cookie."""
        form = await request.form(max_files=0, max_fields=1)
        given = str(form.get("token") or "")
        if gateway.token is not None and not hmac.compare_digest(given.encode(), gateway.token.encode()):
            return _html(login_page("That is not the service's token."), status=401)
        answer = RedirectResponse("/review", status_code=303)
        if gateway.token is not None:
            answer.set_cookie(COOKIE, _cookie_value(gateway.token), httponly=True, samesite="strict", path="/review",
                              secure=request.url.scheme == "https")
        return answer

    @app.get("/review/{doc_id}", response_class=HTMLResponse, include_in_schema=False)
    def review_document(doc_id: str) -> HTMLResponse:
        """One document to review: pages (flagged first), Markdown, figures, fields and their corrections."""
        doc = _known(doc_id)
        ended = doc.status in ("done", "failed", "cancelled")
        rows = list(spool.page_rows(doc_id, keep_bytes=True)) if doc.started is not None else []
        assembled = spool.rows(doc_id, "assemble", keep_bytes=True) if ended else []
        fields_rows = spool.rows(doc_id, "fields") if ended else []
        with PDFIUM_LOCK:  # the page images are re-rendered; pypdfium2 is not thread-safe
            try:
                page = document_page(doc, rows, assembled=assembled[0] if assembled else None,
                                     fields=fields_rows[0] if fields_rows else None,
                                     corrections=queue.corrections(doc_id), approved=queue.approved(doc_id),
                                     storage_options=spool.storage_options)
            finally:
                close_documents()
        return _html(page)

    @app.post("/review/{doc_id}/fields", include_in_schema=False)
    async def review_correct(doc_id: str, request: Request) -> Response:
        """Keep a reviewer's value of one field (form fields ``path`` and ``value``)."""
        form = await request.form(max_files=0, max_fields=2)
        path, value = str(form.get("path") or ""), str(form.get("value") or "")
        doc = await asyncio.to_thread(_known, doc_id)
        rows = await asyncio.to_thread(spool.rows, doc_id, "fields") if doc.status in ("done", "failed") else []
        if not rows:
            raise Refused(409, f"document {doc_id} has no fields to correct")
        try:
            model_value = check_path(json.loads(rows[0].get("fields") or "null"), path)
        except BadCorrection as exc:
            raise Refused(422, str(exc)) from None
        await asyncio.to_thread(queue.correct, doc_id, path, typed(model_value, value))
        return RedirectResponse(f"/review/{doc_id}", status_code=303)

    @app.post("/review/{doc_id}/approve", include_in_schema=False)
    async def review_approve(doc_id: str) -> Response:
        """Approve the document (its fields as corrected)."""
        doc = await asyncio.to_thread(_known, doc_id)
        if doc.status not in ("done", "failed"):
            raise Refused(409, f"document {doc_id} is {doc.status}: only a document that ended can be approved")
        await asyncio.to_thread(queue.approve, doc_id)
        return RedirectResponse(f"/review/{doc_id}", status_code=303)

    def _known(doc_id: str) -> Document:
        doc = queue.get(doc_id)
        if doc is None:
            raise Refused(404, f"no document {doc_id}")
        return doc

    return app


def _cookie_value(token: str) -> str:
    """What the review cookie holds: an HMAC of the token (a stolen cookie is not the API's token)."""
    return hmac.new(token.encode(), b"llm-ocr review cookie", hashlib.sha256).hexdigest()


def _same_origin(request: Request) -> bool:
    """Whether a posted form came from this origin (a browser sends ``Origin`` with every POST;
    a client that sends none is not a browser posting another site's form)."""
    origin = request.headers.get("origin")
    if origin is None:
        return True
    return origin.split("://", 1)[-1].rstrip("/") == request.headers.get("host", "")


def _html(page: str, status: int = 200) -> HTMLResponse:
    return HTMLResponse(page, status_code=status, headers={"Content-Security-Policy": CSP,
                                                           "X-Content-Type-Options": "nosniff"})


def _checked(fn: Callable[..., Any], *args: Any) -> Any:
    try:
        return fn(*args)
    except Unreadable as exc:
        raise Refused(422, str(exc)) from None


def _accepted(doc: Document, *, replayed: bool) -> JSONResponse:
    headers = {"Location": f"/v1/documents/{doc.id}"}
    if replayed:
        headers["Idempotent-Replayed"] = "true"
    return JSONResponse({"id": doc.id, "status": doc.status}, status_code=202, headers=headers)


def _image_type(data: bytes) -> str:
    """The media type of an encoded figure (figures are cropped as PNG; JPEG from other producers)."""
    return "image/jpeg" if data[:3] == b"\xff\xd8\xff" else "image/png"


def _page(row: dict[str, Any]) -> dict[str, Any]:
    return {key: row.get(key) for key in PAGE_COLUMNS}


def _span(start: float | None, end: float | None) -> float | None:
    if start is None:
        return None
    seconds = (end if end is not None else datetime.now(timezone.utc).timestamp()) - start
    return math.floor(seconds * 1000) / 1000

