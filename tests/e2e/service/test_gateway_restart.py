"""A gateway restarted loses no submission (docs/service.md#postgresql-several-machines): a
submission whose answer was lost is sent again with its Idempotency-Key and returns the same
document, never a second one; a client waiting on a document through the gateway's restart
keeps waiting; the document, read meanwhile by a worker elsewhere, ends once, each page once.

The gateway is ``llm-ocr service --no-worker`` as a process (what is killed must be one), on a
real PostgreSQL (tests/fixtures/postgres.py) shared with a worker in this process. A proxy in
front of the gateway (tests/storage_servers.py) throws away one answer after the gateway made
the document, as a gateway that died before answering would, and counts the connections the
dead gateway refused, so the test knows the client met the restart; nothing sleeps.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

import llm_ocr
from llm_ocr.service.config import ServiceConfig
from llm_ocr.service.queue import DATABASE_VARIABLE
from llm_ocr.service.server import BackgroundService
from llm_ocr.service.spool import Spool
from llm_ocr.service.worker import WorkerSettings
from llm_ocr.testing import SimulatedServer
from tests.docs import make_pdf
from tests.storage_servers import CuttableProxy, free_port
from tests.waiting import wait_until

PAGES = 2


def start_gateway(port: int, data: Path, database: str) -> subprocess.Popen[bytes]:
    """``llm-ocr service --no-worker`` on ``port``; returns once ``/readyz`` answers (its database
    is named by the environment, never the command line)."""
    env = {**os.environ, DATABASE_VARIABLE: database}
    gateway = subprocess.Popen(
        [sys.executable, "-m", "llm_ocr.cli", "service", "--no-worker", "--port", str(port), "--data", str(data)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True, env=env)

    def ready() -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as answer:
                return bool(answer.status == 200)
        except OSError:
            return False

    wait_until(ready, "the gateway ready", process=gateway)
    return gateway


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def test_a_gateway_restarted_loses_no_submission(tmp_path: Path, postgres_url: str) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for n in range(2):
        make_pdf(corpus / f"doc{n}.pdf", PAGES, seed=n, figures=False)
    data = tmp_path / "service"
    port = free_port()
    with SimulatedServer(corpus=str(corpus)) as sim, \
            BackgroundService(ServiceConfig(data=str(data), database_url=postgres_url, port=0,
                                            worker=WorkerSettings(endpoint=sim.base_url, poll=0.1, lease=5))) as elsewhere:
        gateway = start_gateway(port, data, postgres_url)
        proxy = CuttableProxy(port)
        try:
            # Long enough for a gateway's start-up on a loaded machine (the default is 30 s).
            client = llm_ocr.Service(proxy.url, reconnect=300)
            sim.inject("hang", count=1)  # one page is held: the document is certainly running
            proxy.swallow(1)  # the gateway makes the document; its answer never arrives
            doc = client.submit(corpus / "doc0.pdf")
            # The client sent it again with the same key: one document, the one it was told of.
            assert [d["id"] for d in llm_ocr.Service(elsewhere.url).documents()] == [doc.id]
            wait_until(lambda: (s := doc.status())["status"] == "running"
                       and sum(p["status"] == "ok" for p in s["pages"]) == PAGES - 1, "one page of two stored")

            os.killpg(gateway.pid, signal.SIGKILL)
            assert gateway.wait(timeout=30) == -signal.SIGKILL
            waited: dict[str, Any] = {}
            waiter = threading.Thread(target=lambda: waited.update(final=doc.wait(timeout=120)), daemon=True)
            waiter.start()
            wait_until(lambda: proxy.unreached >= 1, "the waiting client refused by the dead gateway")
            gateway = start_gateway(port, data, postgres_url)
            sim.release()
            waiter.join(timeout=150)
            second = client.submit(corpus / "doc1.pdf").wait(timeout=120)
        finally:
            proxy.close()
            stop(gateway)
    assert "final" in waited, "the client's wait did not survive the restart"
    assert (waited["final"]["status"], waited["final"]["deliveries"]) == ("done", 1), waited
    assert (second["status"], second["deliveries"]) == ("done", 1), second
    spool = Spool(str(data))
    for doc_id in (doc.id, second["id"]):
        for stage in ("extract", "describe"):
            pages = Counter(row["page"] for row in spool.rows(doc_id, stage))
            assert pages == dict.fromkeys(range(1, PAGES + 1), 1), (doc_id, stage, pages)
