"""``llm_ocr.Service``: a small client of the service's HTTP API (standard library only)::

    import llm_ocr

    service = llm_ocr.Service("http://ocr-box:8080", token="...")   # or LLM_OCR_SERVICE_TOKEN
    doc = service.submit("scan.pdf")            # or service.submit_url("s3://bucket/scan.pdf")
    doc.wait()                                  # the status once it ended: done, failed, cancelled
    print(doc.markdown())

A full queue (429) and a database that is not answering (503: restarting, failing over) are
retried after the ``Retry-After`` they name, up to ``retries`` times. A gateway that cannot be
reached, or that closed the connection before answering (restarting, redeployed, behind a load
balancer that dropped it), is tried again for up to ``reconnect`` seconds when the request is
safe to repeat: reads, a cancel, and a submission, which always carries an ``Idempotency-Key``
(one is made when none is given) so that a submission whose answer was lost returns the same
document when it is sent again, never a second one.
"""

from __future__ import annotations

import http.client
import json
import mimetypes
import os
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from typing import Any

#: Statuses a document never leaves.
FINAL = frozenset({"done", "failed", "cancelled"})

#: Methods a lost connection may repeat as they are; a POST only with an Idempotency-Key.
REPEATABLE = frozenset({"GET", "HEAD", "DELETE"})


class ServiceError(Exception):
    """The service answered with an error: ``status`` (the HTTP status) and its message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status


class Service:
    """The service at ``url``."""

    def __init__(self, url: str, token: str | None = None, *, timeout: float = 60.0, retries: int = 5,
                 reconnect: float = 30.0) -> None:
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"the service's URL starts with http:// or https://, not {url!r}")
        self.url = url.rstrip("/")
        self._token = token if token is not None else os.environ.get("LLM_OCR_SERVICE_TOKEN")
        self.timeout = timeout
        self.retries = retries
        self.reconnect = reconnect

    def __repr__(self) -> str:
        return f"Service({self.url!r})"  # never the token

    def request(self, method: str, path: str, body: bytes | None = None, headers: dict[str, str] | None = None,
                ) -> tuple[int, dict[str, str], bytes]:
        """One request; ``(status, headers, body)``; :class:`ServiceError` for a 4xx or 5xx
        (a 429 or 503 is retried after its ``Retry-After`` first). A gateway that refused or
        dropped the connection is tried again for up to ``reconnect`` seconds if the request is
        safe to repeat (see the module's docstring); else the connection error is raised."""
        headers = dict(headers or {})
        if self._token:
            headers["Authorization"] = f"Bearer {self._token}"
        repeatable = method in REPEATABLE or "Idempotency-Key" in headers
        deadline = time.monotonic() + self.reconnect
        pause = 0.05
        attempt = 0
        while True:
            # The URL was checked to be http(s) in __init__.
            request = urllib.request.Request(self.url + path, data=body, headers=headers, method=method)  # noqa: S310
            try:
                with urllib.request.urlopen(request, timeout=self.timeout) as response:  # noqa: S310
                    return response.status, dict(response.headers), response.read()
            except urllib.error.HTTPError as exc:
                text = exc.read().decode("utf-8", "replace")
                if exc.code in (429, 503) and attempt < self.retries:
                    attempt += 1
                    time.sleep(float(exc.headers.get("Retry-After") or 1))
                    continue
                try:
                    text = json.loads(text).get("detail", text)
                except (ValueError, AttributeError):
                    pass
                raise ServiceError(exc.code, str(text)) from None
            except (urllib.error.URLError, ConnectionError, http.client.BadStatusLine) as exc:
                # Refused or reset while connecting arrives as a URLError; closed before the answer
                # (http.client.RemoteDisconnected) or reset while reading it as itself. A timeout is
                # neither: the gateway may still be working on it, and it is raised.
                reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
                lost = isinstance(reason, (ConnectionError, http.client.BadStatusLine))
                if not (lost and repeatable) or time.monotonic() + pause > deadline:
                    raise
                time.sleep(pause)
                pause = min(pause * 2, 2.0)

    def _json(self, method: str, path: str, body: bytes | None = None,
              headers: dict[str, str] | None = None) -> dict[str, Any]:
        result: dict[str, Any] = json.loads(self.request(method, path, body, headers)[2])
        return result

    def submit(self, path: str | os.PathLike[str], *, idempotency_key: str | None = None,
               **options: str) -> Document:
        """Upload the file at ``path``; ``options``: ``model``, ``route``, ``schema`` (the name of a
        schema the service offers) or ``classes`` (the name of a classes file it offers), ``callback``
        (a URL called when the document ends)."""
        name = os.path.basename(os.fspath(path))
        with open(path, "rb") as handle:
            data = handle.read()
        boundary = uuid.uuid4().hex
        parts = [
            f'--{boundary}\r\nContent-Disposition: form-data; name="{key}"\r\n\r\n{value}\r\n'.encode()
            for key, value in options.items()
        ]
        kind = mimetypes.guess_type(name)[0] or "application/octet-stream"
        safe = name.replace('"', "%22").replace("\r", "").replace("\n", "")
        parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{safe}"\r\n'
                     f"Content-Type: {kind}\r\n\r\n".encode() + data + b"\r\n")
        body = b"".join(parts) + f"--{boundary}--\r\n".encode()
        headers = {"Content-Type": f"multipart/form-data; boundary={boundary}"}
        return self._submitted(body, headers, idempotency_key)

    def submit_url(self, url: str, *, idempotency_key: str | None = None, **options: str) -> Document:
        """Queue the document at ``url`` (a store the service reads); ``options`` as :meth:`submit`."""
        body = json.dumps({"url": url, **options}).encode()
        return self._submitted(body, {"Content-Type": "application/json"}, idempotency_key)

    def _submitted(self, body: bytes, headers: dict[str, str], key: str | None) -> Document:
        # Always a key: a submission sent again after its answer was lost (a gateway restarting)
        # must return the document the first one made.
        headers["Idempotency-Key"] = key if key is not None else uuid.uuid4().hex
        answer = self._json("POST", "/v1/documents", body, headers)
        return Document(self, answer["id"])

    def document(self, doc_id: str) -> Document:
        """The document ``doc_id`` (submitted earlier, perhaps by another client)."""
        return Document(self, doc_id)

    def documents(self, status: str | None = None, since: str | float | None = None) -> list[dict[str, Any]]:
        """Every document (of ``status``, submitted since ``since``), following the pages of the list."""
        found: list[dict[str, Any]] = []
        after: int | None = 0
        while after is not None:
            query = urllib.parse.urlencode({k: v for k, v in (("status", status), ("since", since), ("after", after))
                                            if v is not None})
            answer = self._json("GET", f"/v1/documents?{query}")
            found += answer["documents"]
            after = answer["next"]
        return found


class Document:
    """A submitted document."""

    def __init__(self, service: Service, doc_id: str) -> None:
        self.service = service
        self.id = doc_id

    def __repr__(self) -> str:
        return f"Document({self.id!r})"

    def status(self) -> dict[str, Any]:
        """Its status, pages and errors (``GET /v1/documents/ID``)."""
        return self.service._json("GET", f"/v1/documents/{self.id}")

    def wait(self, timeout: float | None = None, poll: float = 0.5) -> dict[str, Any]:
        """Poll its status until it ends (``done``, ``failed``, ``cancelled``); that status.
        :class:`TimeoutError` after ``timeout`` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        delay = min(0.05, poll)
        while True:
            status = self.status()
            if status["status"] in FINAL:
                return status
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"document {self.id} is still {status['status']} after {timeout} s")
            time.sleep(delay)
            delay = min(delay * 2, poll)  # quick for a one-page document, then every `poll` seconds

    def markdown(self) -> str:
        """Its Markdown."""
        return self.service.request("GET", f"/v1/documents/{self.id}/markdown")[2].decode("utf-8")

    def pages(self) -> list[dict[str, Any]]:
        """Its page rows."""
        pages: list[dict[str, Any]] = self.service._json("GET", f"/v1/documents/{self.id}/pages")["pages"]
        return pages

    def fields(self) -> dict[str, Any]:
        """Its fields (submitted with ``schema=NAME``): the Fields row, ``fields`` as an object."""
        return self.service._json("GET", f"/v1/documents/{self.id}/fields")

    def figure(self, figure_id: str) -> bytes:
        """The image of its figure ``figure_id`` (the id its Markdown links to: ``figure:ID``)."""
        return self.service.request("GET", f"/v1/documents/{self.id}/figures/{urllib.parse.quote(figure_id)}")[2]

    def cancel(self) -> dict[str, Any]:
        """Cancel it (``DELETE``)."""
        return self.service._json("DELETE", f"/v1/documents/{self.id}")
