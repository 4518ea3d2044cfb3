"""The service on a real PostgreSQL (tests/fixtures/postgres.py): two gateways and two workers
sharing one database and one results folder, each document read by one worker and each page
stored once; and the database restarted mid-run, after which every accepted document still ends
(docs/service.md#postgresql-several-machines).

Gateways and workers run in threads of this process, each service with its own connection pool,
as separate machines would have (the killed worker, a process, is test_worker_kill.py's). The
simulator holds one page's request (a ``hang`` fault) so that a document is certainly in
progress while the test acts; nothing sleeps.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

import llm_ocr
from llm_ocr.service.config import ServiceConfig
from llm_ocr.service.server import BackgroundService
from llm_ocr.service.spool import Spool
from llm_ocr.service.worker import WorkerSettings
from llm_ocr.testing import SimulatedServer
from tests.docs import make_pdf
from tests.fixtures.postgres import PostgresCluster
from tests.waiting import wait_until

PAGES = 2
DOCS = 6


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("corpus")
    for n in range(DOCS):
        make_pdf(folder / f"doc{n}.pdf", PAGES, seed=n, figures=False)
    return folder


@pytest.fixture(scope="module")
def sim(corpus: Path) -> Iterator[SimulatedServer]:
    with SimulatedServer(corpus=str(corpus)) as server:
        yield server


def service(data: Path, database: str, sim: SimulatedServer) -> BackgroundService:
    """A gateway and one worker (one document at a time) on ``database``, results under ``data``."""
    return BackgroundService(ServiceConfig(data=str(data), database_url=database, port=0,
                                           worker=WorkerSettings(endpoint=sim.base_url, poll=0.1, lease=5)))


def each_page_once(data: Path, doc_id: str) -> None:
    spool = Spool(str(data))
    for stage in ("extract", "describe"):
        pages = Counter(row["page"] for row in spool.rows(doc_id, stage))
        assert pages == dict.fromkeys(range(1, PAGES + 1), 1), (doc_id, stage, pages)


def test_two_gateways_and_two_workers_share_one_database(tmp_path: Path, corpus: Path, sim: SimulatedServer,
                                                          postgres_url: str) -> None:
    """One document is held in whichever worker takes it first; the other worker must read the
    other five meanwhile. Every document then ends done, delivered once, each page stored once,
    and both gateways answer for documents submitted to either."""
    data = tmp_path / "shared"
    sim.inject("hang", count=1)
    with service(data, postgres_url, sim) as one, service(data, postgres_url, sim) as two:
        gateways = [llm_ocr.Service(one.url), llm_ocr.Service(two.url)]
        docs = [gateways[n % 2].submit(corpus / f"doc{n}.pdf") for n in range(DOCS)]
        # Five ended while the sixth is held in one worker: the other worker read them.
        wait_until(lambda: len(gateways[0].documents(status="done")) == DOCS - 1, "five documents done")
        assert len(gateways[1].documents(status="running")) == 1
        sim.release()
        finals = [gateways[(n + 1) % 2].document(doc.id).wait(timeout=120) for n, doc in enumerate(docs)]
    assert [(final["status"], final["deliveries"]) for final in finals] == [("done", 1)] * DOCS, finals
    for doc in docs:
        each_page_once(data, doc.id)


def test_a_database_restarted_mid_run_loses_no_document(tmp_path: Path, corpus: Path, sim: SimulatedServer,
                                                        postgres: PostgresCluster, postgres_url: str) -> None:
    """PostgreSQL stops (every connection ended) while a document is being read, and the worker
    finishes reading it while the database is down; once it is back, the document is ended, a
    document submitted just after is taken, and each ends done with each page once."""
    data = tmp_path / "restart"
    spool = Spool(str(data))
    sim.inject("hang", count=1)
    with service(data, postgres_url, sim) as running:
        client = llm_ocr.Service(running.url)
        first = client.submit(corpus / "doc0.pdf")
        wait_until(lambda: (s := first.status())["status"] == "running"
                   and sum(p["status"] == "ok" for p in s["pages"]) == PAGES - 1, "one page of two stored")
        postgres.stop()
        sim.release()
        # The run ended (its Markdown is stored): the worker now needs the database to end it.
        wait_until(lambda: spool.rows(first.id, "assemble"), "the document assembled while the database is down")
        postgres.start()
        second = client.submit(corpus / "doc1.pdf")
        finals = [first.wait(timeout=120), second.wait(timeout=120)]
    assert [final["status"] for final in finals] == ["done", "done"], finals
    # Ended by the worker that read it, or, had the database been away longer than the worker
    # waits, by the next delivery (which finds every page stored).
    assert finals[0]["deliveries"] in (1, 2)
    for doc in (first, second):
        each_page_once(data, doc.id)


def test_a_worker_behind_another_gateway_is_woken_by_the_submission(tmp_path: Path, corpus: Path, sim: SimulatedServer,
                                                                      postgres_url: str) -> None:
    """A worker that looks at the queue once an hour on its own takes a document submitted to a
    gateway it does not share a process with: the submission's notification wakes it. (The first
    document, queued before the worker starts, is taken by its first look; the second arrives
    while it idles.)"""
    data = tmp_path / "notified"
    lazy = WorkerSettings(endpoint=sim.base_url, poll=3600)
    with BackgroundService(ServiceConfig(data=str(data), database_url=postgres_url, port=0, worker=None)) as gateway:
        client = llm_ocr.Service(gateway.url)
        first = client.submit(corpus / "doc0.pdf")
        with BackgroundService(ServiceConfig(data=str(data), database_url=postgres_url, port=0, worker=lazy)):
            assert first.wait(timeout=120)["status"] == "done"
            second = client.submit(corpus / "doc1.pdf")
            final = second.wait(timeout=120)
    assert (final["status"], final["deliveries"]) == ("done", 1), final
    each_page_once(data, second.id)
