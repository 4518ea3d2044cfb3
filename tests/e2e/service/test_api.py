"""The service's HTTP API through a real HTTP client, against a real uvicorn server on a free port
and the simulated model server: submit, poll, Markdown, idempotency, a full queue, bad uploads,
cancel, and the token beyond loopback (docs/service.md).

One simulated server and one service (gateway and worker in a thread of this process) serve the
module; the tests that need other limits or no worker start a service of their own on the same
model server. Nothing here sleeps: tests wait for a document's status.
"""

from __future__ import annotations

import hmac
import json
import logging
import os
import shutil
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from hashlib import sha256
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pytest

import llm_ocr
from llm_ocr.service.callback import CallbackSettings
from llm_ocr.service.client import ServiceError
from llm_ocr.service.config import Limits, ServiceConfig
from llm_ocr.service.server import BackgroundService
from llm_ocr.service.worker import WorkerSettings
from llm_ocr.testing import SimulatedServer
from tests.conftest import REPO
from tests.docs import make_pdf

TOKEN = "s3cret-token-for-the-test"
CALLBACK_SECRET = "the-callbacks-shared-secret"
INVOICE = "invoice-2024-0017.pdf"
RECEIPT = "receipt-0381.pdf"


def wait_for(check, what: str, timeout: float = 60.0):  # type: ignore[no-untyped-def]
    """Poll ``check`` until it returns something true (the event), or fail naming ``what``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if found := check():
            return found
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, list[list[str]]]]:
    folder = tmp_path_factory.mktemp("corpus")
    texts = {name: make_pdf(folder / name, pages, seed=seed, figures=False)
             for name, pages, seed in (("two.pdf", 2, 1), ("one.pdf", 1, 2), ("five.pdf", 5, 3))}
    texts["figure.pdf"] = make_pdf(folder / "figure.pdf", 1, seed=4, figures=True)
    shutil.copy(REPO / "samples" / INVOICE, folder)  # the simulator answers its fields from examples/
    shutil.copy(REPO / "samples" / RECEIPT, folder)
    return folder, texts


@pytest.fixture(scope="module")
def sim(corpus: tuple[Path, dict]) -> Iterator[SimulatedServer]:
    # The corpus: the simulator reads these PDFs' text layers, so the Markdown holds their words.
    with SimulatedServer(corpus=str(corpus[0])) as server:
        yield server


def start(tmp: Path, sim: SimulatedServer, *, worker: bool = True, **config: object) -> BackgroundService:
    settings = WorkerSettings(endpoint=sim.base_url, poll=0.2) if worker else None
    return BackgroundService(ServiceConfig(data=str(tmp), port=0, worker=settings, **config))  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory, sim: SimulatedServer) -> Iterator[llm_ocr.Service]:
    limits = Limits(max_upload=200_000, max_pages=4)
    schemas = tmp_path_factory.mktemp("schemas")
    shutil.copy(REPO / "examples" / "invoice.schema.json", schemas / "invoice.json")
    # Classes offered as "kinds": the example's classes file, its schemas in a folder of their own
    # (the folder's top-level NAME.json files are the schemas a submission may name).
    (schemas / "kinds").mkdir()
    for kind in ("invoice", "receipt"):
        shutil.copy(REPO / "examples" / f"{kind}.schema.json", schemas / "kinds")
    (schemas / "kinds.classes.yaml").write_text(
        (REPO / "examples" / "classes.yaml").read_text().replace("schema: ", "schema: kinds/"))
    callbacks = CallbackSettings(secret=CALLBACK_SECRET, base_delay=0.05, max_delay=0.2)
    with start(tmp_path_factory.mktemp("service"), sim, limits=limits, schemas=str(schemas),
               callbacks=callbacks) as running:
        yield llm_ocr.Service(running.url)


def test_submit_poll_markdown(service: llm_ocr.Service, corpus: tuple[Path, dict]) -> None:
    folder, texts = corpus
    doc = service.submit(folder / "two.pdf")
    status = doc.wait(timeout=120)
    assert status["status"] == "done", status
    assert [(page["page"], page["status"]) for page in status["pages"]] == [(1, "ok"), (2, "ok")]
    assert all(page["latency_s"] > 0 for page in status["pages"])
    assert status["name"] == "two.pdf" and status["pages_done"] == 2 and status["run_s"] > 0
    markdown = doc.markdown()
    for lines in texts["two.pdf"]:  # every page's heading, in page order
        assert lines[0] in markdown
    assert markdown.index(texts["two.pdf"][0][0]) < markdown.index(texts["two.pdf"][1][0])
    rows = doc.pages()
    assert [row["page"] for row in rows] == [1, 2] and texts["two.pdf"][1][1] in rows[1]["markdown"]
    listed = service.documents(status="done")
    assert doc.id in [entry["id"] for entry in listed]
    metrics = service.request("GET", "/metrics")[2].decode()
    assert 'llm_ocr_service_documents{status="done"}' in metrics and "llm_ocr_service_queue_depth 0" in metrics
    ended = {line.split()[0]: float(line.split()[1]) for line in metrics.splitlines()
             if line.startswith("llm_ocr_service_stage_seconds_count")}
    assert ended['llm_ocr_service_stage_seconds_count{stage="total"}'] >= 1
    schema = json.loads(service.request("GET", "/openapi.json")[2])
    assert {"/v1/documents", "/v1/documents/{doc_id}/markdown", "/metrics"} <= set(schema["paths"])


def test_fields_by_schema_name_and_a_figure_by_its_markdown_link(service: llm_ocr.Service,
                                                                 corpus: tuple[Path, dict]) -> None:
    folder = corpus[0]
    invoice = service.submit(folder / INVOICE, schema="invoice")
    figured = service.submit(folder / "figure.pdf")
    assert invoice.wait(timeout=120)["status"] == "done"
    truth = json.loads((REPO / "examples" / "fields-truth.json").read_text())[INVOICE]["fields"]
    fields = invoice.fields()
    assert fields["status"] == "ok" and fields["fields"] == truth
    assert invoice.status()["options"] == {"schema": "invoice"}  # the schema's name, not its text
    for name in ("../invoice", "receipt"):  # never a path; only what the folder offers
        with pytest.raises(ServiceError) as refused:
            service.submit(folder / "one.pdf", schema=name)
        assert refused.value.status == 422 and "this service offers invoice" in str(refused.value)
    assert figured.wait(timeout=120)["status"] == "done"
    with pytest.raises(ServiceError) as none:
        figured.fields()
    assert none.value.status == 409 and "submitted without a schema" in str(none.value)
    markdown = figured.markdown()
    assert "](figure:" in markdown
    figure_id = markdown.split("](figure:", 1)[1].split(")", 1)[0]
    image = figured.figure(figure_id)
    assert image.startswith(b"\x89PNG\r\n\x1a\n") and len(image) > 100
    with pytest.raises(ServiceError) as unknown:
        figured.figure("p9-f9")
    assert unknown.value.status == 404 and "no figure 'p9-f9'" in str(unknown.value)


class Receiver(BaseHTTPRequestHandler):
    """A callback's receiver: answers the first call 503, the next ones 204; keeps what came."""

    calls: ClassVar[list[tuple[dict[str, str], bytes]]] = []
    delivered = threading.Event()

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.calls.append((dict(self.headers), body))
        self.send_response(503 if len(self.calls) == 1 else 204)
        self.end_headers()
        if len(self.calls) > 1:
            self.delivered.set()

    def log_message(self, *args: object) -> None:
        pass


def test_callback_is_retried_after_a_failure_and_signed(service: llm_ocr.Service, corpus: tuple[Path, dict]) -> None:
    receiver = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{receiver.server_address[1]}/hooks/ocr?key=abc"
        doc = service.submit(corpus[0] / "one.pdf", callback=url)
        assert doc.wait(timeout=120)["status"] == "done"
        assert Receiver.delivered.wait(timeout=60), "the callback was not delivered again after a 503"
    finally:
        receiver.shutdown()
    assert len(Receiver.calls) == 2
    for headers, body in Receiver.calls:
        stamp = headers["X-LLM-OCR-Timestamp"]
        expected = hmac.new(CALLBACK_SECRET.encode(), stamp.encode() + b"." + body, sha256).hexdigest()
        assert headers["X-LLM-OCR-Signature"] == f"sha256={expected}"
        sent = json.loads(body)
        assert (sent["id"], sent["status"], sent["pages_done"]) == (doc.id, "done", 1)


def test_idempotency_key_returns_the_same_document(service: llm_ocr.Service, corpus: tuple[Path, dict]) -> None:
    path = corpus[0] / "one.pdf"
    first = service.submit(path, idempotency_key="order-17")
    again = service.submit(path, idempotency_key="order-17")
    other = service.submit(path, idempotency_key="order-18")
    assert again.id == first.id and other.id != first.id
    assert first.wait(timeout=120)["status"] == "done"
    assert other.wait(timeout=120)["status"] == "done"
    names = [entry["id"] for entry in service.documents()]
    assert names.count(first.id) == 1


@pytest.mark.parametrize(("name", "content", "status", "words"), [
    ("notes.txt", b"plain text", 422, "is not a kind of document"),
    ("broken.pdf", b"%PDF-1.4 this is not really a PDF", 422, "cannot read 'broken.pdf'"),
    ("big.pdf", b"%PDF" + b"0" * 300_000, 413, "over the limit of 200,000 bytes"),
])
def test_bad_uploads_are_refused_with_why(service: llm_ocr.Service, tmp_path: Path, name: str, content: bytes,
                                          status: int, words: str) -> None:
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(ServiceError) as refused:
        service.submit(path)
    assert refused.value.status == status and words in str(refused.value)


def test_too_many_pages_and_local_urls_are_refused(service: llm_ocr.Service, corpus: tuple[Path, dict]) -> None:
    with pytest.raises(ServiceError) as refused:
        service.submit(corpus[0] / "five.pdf")
    assert refused.value.status == 422 and "5 pages, over the limit of 4" in str(refused.value)
    with pytest.raises(ServiceError) as refused:
        service.submit_url(str(corpus[0] / "one.pdf"))
    assert refused.value.status == 422 and "--allow-local-urls" in str(refused.value)


def test_full_queue_429_and_a_cancelled_document_never_starts(tmp_path: Path, sim: SimulatedServer,
                                                              corpus: tuple[Path, dict]) -> None:
    path = corpus[0] / "one.pdf"
    limits = Limits(queue_length=2, retry_after=7)
    with start(tmp_path, sim, worker=False, limits=limits) as gateway:  # no worker: documents stay queued
        client = llm_ocr.Service(gateway.url, retries=0)
        cancelled, waiting = client.submit(path), client.submit(path)
        with pytest.raises(ServiceError) as full:
            client.submit(path)
        assert full.value.status == 429
        request = urllib.request.Request(f"{gateway.url}/v1/documents", data=b'{"url": "s3://b/x.pdf"}',
                                         headers={"Content-Type": "application/json"}, method="POST")
        with pytest.raises(urllib.error.HTTPError) as raw:
            urllib.request.urlopen(request)
        assert raw.value.code == 429 and raw.value.headers["Retry-After"] == "7"
        assert cancelled.cancel()["status"] == "cancelled"
    # A worker on the same database: it reads the document still queued, never the cancelled one.
    with start(tmp_path, sim) as service:
        client = llm_ocr.Service(service.url)
        assert client.document(waiting.id).wait(timeout=120)["status"] == "done"
        status = client.document(cancelled.id).status()
    assert status["status"] == "cancelled" and status["started"] is None and status["deliveries"] == 0
    assert not (tmp_path / "results" / cancelled.id).exists()


def test_cancel_stops_a_running_document_after_its_pages_in_flight(
        tmp_path: Path, sim: SimulatedServer, corpus: tuple[Path, dict], caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="llm_ocr.service")
    settings = WorkerSettings(endpoint=sim.base_url, poll=0.1, run_options={"max_in_flight": 1})
    with BackgroundService(ServiceConfig(data=str(tmp_path), port=0, worker=settings)) as running:
        client = llm_ocr.Service(running.url)
        sim.inject("hang", count=1)  # one page at a time, and the first is held: four wait behind it
        doc = client.submit(corpus[0] / "five.pdf")
        wait_for(lambda: sim.stats()["faults_applied"].get("hang"), "the first page held")
        assert doc.cancel() == {"id": doc.id, "status": "running", "cancel_requested": True}
        wait_for(lambda: "cancelled: stopping" in caplog.text, "the worker to see the cancel")
        sim.release()
        final = doc.wait(timeout=120)
        rows = doc.pages()
    assert final["status"] == "cancelled"
    # The page in flight was finished and kept; the four behind it were never read.
    assert sorted(p["status"] for p in final["pages"]) == ["not read"] * 4 + ["ok"]
    assert [row["status"] for row in rows] == ["ok"]


def test_a_token_is_required_beyond_loopback(tmp_path: Path, sim: SimulatedServer,
                                             caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    with start(tmp_path, sim, worker=False, host="0.0.0.0", token=TOKEN) as running:
        url = running.url.replace("0.0.0.0", "127.0.0.1")
        with pytest.raises(ServiceError) as refused:
            llm_ocr.Service(url, token="").documents()
        assert refused.value.status == 401
        with pytest.raises(ServiceError):
            llm_ocr.Service(url, token="wrong").documents()
        assert llm_ocr.Service(url, token=TOKEN).documents() == []
        with urllib.request.urlopen(f"{url}/healthz") as probe:  # the probes stay open
            assert probe.status == 200
    assert TOKEN not in caplog.text
    # Without a token the command refuses to listen beyond loopback.
    command = [sys.executable, "-m", "llm_ocr.cli", "service", "--host", "0.0.0.0", "--port", "0",
               "--data", str(tmp_path / "refused"), "--endpoint", sim.base_url]
    env = {key: value for key, value in os.environ.items() if key != "LLM_OCR_SERVICE_TOKEN"}
    ended = subprocess.run(command, capture_output=True, text=True, timeout=120, env=env)
    assert ended.returncode == 2 and "LLM_OCR_SERVICE_TOKEN" in ended.stderr, ended.stderr


def test_fields_by_classes_name_each_document_its_class(service: llm_ocr.Service, corpus: tuple[Path, dict]) -> None:
    folder = corpus[0]
    documents = {name: service.submit(folder / name, classes="kinds") for name in (INVOICE, RECEIPT)}
    truth = json.loads((REPO / "examples" / "fields-truth.json").read_text())
    for name, doc in documents.items():
        assert doc.wait(timeout=120)["status"] == "done"
        fields = doc.fields()
        # Each document read with its own class's schema (the file-name rules decide here).
        assert (fields["status"], fields["class"], fields["fields"]) == ("ok", truth[name]["class"],
                                                                          truth[name]["fields"]), fields
        assert doc.status()["options"] == {"classes": "kinds"}  # the name, not the inlined classes
    for options, said in ((dict(classes="../kinds"), "this service offers kinds"),
                          (dict(classes="invoice"), "this service offers kinds"),  # a schema is not classes
                          (dict(classes="kinds", schema="invoice"), "a schema (one kind of document) or classes")):
        with pytest.raises(ServiceError) as refused:
            service.submit(folder / "one.pdf", **options)
        assert refused.value.status == 422 and said in str(refused.value), refused.value
