"""Escalation through the service (docs/service.md): a worker started with a stronger model
(``--escalate-to``, ``--escalate-endpoint``) reads again each page whose first reading trips the
signals, as ``llm-ocr run --escalate-to`` does; a submission says ``escalate=off`` to go without it,
or ``escalate=on`` to insist on it (a worker without one fails the document, saying why).

Two simulated models: the weak one garbles named pages letter by letter; the strong one reads
every page right, each answer taking at least ``STRONG_MS``. One gateway and worker (in this
process) over real HTTP.

The stronger model's requests take slots of the worker's own limit for it, shared by every
document the worker reads at once: documents escalating together send it no more than that
limit at once (when each document's Escalate stage sized its own, four documents of two pages
could send it eight).
"""

from __future__ import annotations

from pathlib import Path

import llm_ocr
from llm_ocr.service.config import ServiceConfig
from llm_ocr.service.server import BackgroundService
from llm_ocr.service.worker import WorkerSettings
from llm_ocr.testing import SimulatedServer
from tests.docs import make_corpus

STRONG = "allenai/olmOCR-2-7B-1025"
WEAK = "deepseek-ai/DeepSeek-OCR"
#: The strong model's least time an answer (its prefill): long enough that the escalations of
#: documents read at once overlap at the server on a busy machine (at 500 ms their runs' start-ups,
#: under load, spaced them out: a per-document limit never showed more than 2 at once; at 3 s, 8).
STRONG_MS = 3000
#: The worker's requests in flight (each model's), and the documents it reads at once.
IN_FLIGHT, DOCUMENTS_AT_ONCE = 2, 4


def _most_at_once(server: SimulatedServer) -> int:
    """The most requests the server was answering at one moment (from its log: each answered
    request's arrival and time taken)."""
    edges = sorted(edge for r in server.requests() if r.get("status") == 200
                   for edge in ((r["time"], 1), (r["time"] + r["latency_s"], -1)))
    most = now = 0
    for _, step in edges:  # at a tie, an end (-1) sorts before a start: touching is not overlapping
        now += step
        most = max(most, now)
    return most


def _read_pages(server: SimulatedServer) -> list[tuple[str, int]]:
    """The corpus pages a server answered."""
    return [(Path(r["known_page"]["source"]).name, r["known_page"]["page"])
            for r in server.requests() if r.get("status") == 200 and r.get("known_page")]


def test_a_workers_stronger_model_reads_the_garbled_page_unless_a_submission_says_off(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    truth = make_corpus(docs, documents=1 + DOCUMENTS_AT_ONCE, pages=2)
    garbled_line = truth["doc000.pdf"][1][1]  # a line of page 2, which the weak model garbles
    together = sorted(name for name in truth if name != "doc000.pdf")  # every page garbled
    garbled = ["doc000.pdf:2"] + [f"{name}:{page}" for name in together for page in (1, 2)]
    with SimulatedServer(*(arg for page in garbled for arg in ("--garble-page", page)), corpus=docs) as weak, \
            SimulatedServer("--served-model-name", STRONG, "--prefill-ms", str(STRONG_MS), corpus=docs,
                            request_log=True) as strong:
        escalating = WorkerSettings(endpoint=weak.base_url, poll=0.2, concurrency=DOCUMENTS_AT_ONCE,
                                    run_options={"escalate_to": STRONG, "escalate_endpoint": strong.base_url,
                                                 "max_in_flight": IN_FLIGHT})
        with BackgroundService(ServiceConfig(data=str(tmp_path / "service"), port=0, worker=escalating)) as running:
            service = llm_ocr.Service(running.url)
            doc = service.submit(docs / "doc000.pdf")
            status = doc.wait(timeout=120)
            assert status["status"] == "done", status
            # Page 2 is the strong model's reading, page 1 the weak one's, and the Markdown has it right.
            assert [(p["page"], p["route"], p["model"]) for p in status["pages"]] == [
                (1, "model", WEAK), (2, "escalated", STRONG)], status["pages"]
            assert _read_pages(strong) == [("doc000.pdf", 2)]
            assert garbled_line in doc.markdown()
            assert [row["model"] for row in doc.pages()] == [WEAK, STRONG]

            off = service.submit(docs / "doc000.pdf", escalate="off")
            status = off.wait(timeout=120)
            assert status["status"] == "done" and status["options"] == {"escalate": "off"}, status
            assert [(p["page"], p["route"], p["model"]) for p in status["pages"]] == [
                (1, "model", WEAK), (2, "model", WEAK)], status["pages"]
            assert _read_pages(strong) == [("doc000.pdf", 2)]  # nothing more sent to it
            assert garbled_line not in off.markdown()

            # Documents escalating at once share the worker's slots at the stronger model.
            submitted = [service.submit(docs / name) for name in together]
            for doc in submitted:
                status = doc.wait(timeout=300)
                assert status["status"] == "done", status
                assert [(p["route"], p["model"]) for p in status["pages"]] == [("escalated", STRONG)] * 2, status
            assert sorted(_read_pages(strong)) == sorted([("doc000.pdf", 2), *((n, p) for n in together for p in (1, 2))])
            assert _most_at_once(strong) <= IN_FLIGHT, _most_at_once(strong)
        plain = WorkerSettings(endpoint=weak.base_url, poll=0.2)
        with BackgroundService(ServiceConfig(data=str(tmp_path / "plain"), port=0, worker=plain)) as running:
            insisted = llm_ocr.Service(running.url).submit(docs / "doc000.pdf", escalate="on")
            status = insisted.wait(timeout=120)
            assert status["status"] == "failed", status
            assert "no stronger model to escalate to" in str(status.get("error")), status
