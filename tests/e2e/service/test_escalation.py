"""Escalation through the service (docs/service.md): a worker started with a stronger model
(``--escalate-to``, ``--escalate-endpoint``) reads again each page whose first reading trips the
signals, as ``llm-ocr run --escalate-to`` does; a submission says ``escalate=off`` to go without it,
or ``escalate=on`` to insist on it (a worker without one fails the document, saying why).

Two simulated models: the weak one garbles one named page letter by letter; the strong one reads
every page right. One gateway and worker (in this process) over real HTTP.
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


def _read_pages(server: SimulatedServer) -> list[tuple[str, int]]:
    """The corpus pages a server answered."""
    return [(Path(r["known_page"]["source"]).name, r["known_page"]["page"])
            for r in server.requests() if r.get("status") == 200 and r.get("known_page")]


def test_a_workers_stronger_model_reads_the_garbled_page_unless_a_submission_says_off(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    truth = make_corpus(docs, documents=1, pages=2)
    garbled_line = truth["doc000.pdf"][1][1]  # a line of page 2, which the weak model garbles
    with SimulatedServer("--garble-page", "doc000.pdf:2", corpus=docs) as weak, \
            SimulatedServer("--served-model-name", STRONG, corpus=docs, request_log=True) as strong:
        escalating = WorkerSettings(endpoint=weak.base_url, poll=0.2,
                                    run_options={"escalate_to": STRONG, "escalate_endpoint": strong.base_url})
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
        plain = WorkerSettings(endpoint=weak.base_url, poll=0.2)
        with BackgroundService(ServiceConfig(data=str(tmp_path / "plain"), port=0, worker=plain)) as running:
            insisted = llm_ocr.Service(running.url).submit(docs / "doc000.pdf", escalate="on")
            status = insisted.wait(timeout=120)
            assert status["status"] == "failed", status
            assert "no stronger model to escalate to" in str(status.get("error")), status
