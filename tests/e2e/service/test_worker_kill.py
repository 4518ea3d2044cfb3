"""A worker killed with SIGKILL mid-document loses nothing: the document is delivered again when
its lease lapses, a second worker resumes it from the pages already stored, and every page is
in the results exactly once (docs/service.md#how-a-document-is-read-and-what-a-crash-costs).

The first worker is ``llm-ocr worker`` as a subprocess (what is killed must be a process); the
gateway and the second worker run in this process. Both backends: the SQLite file, and a real
PostgreSQL (tests/fixtures/postgres.py) named to the worker by ``LLM_OCR_SERVICE_DATABASE``, whose
password the worker's log must not show. The simulator holds one page's request
(a ``hang`` fault) so the kill is certainly mid-document; the test waits for the other pages
to be stored before it kills.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from reportlab.lib.pagesizes import letter
from reportlab.pdfgen import canvas

import llm_ocr
from llm_ocr.service.config import ServiceConfig
from llm_ocr.service.queue import DATABASE_VARIABLE
from llm_ocr.service.server import BackgroundService
from llm_ocr.service.spool import Spool
from llm_ocr.service.worker import WorkerSettings
from llm_ocr.storage import Storage
from llm_ocr.storage.state import read_marker
from llm_ocr.testing import SimulatedServer
from tests.docs import WORDS
from tests.fixtures.postgres import PASSWORD

PAGES = 4


def first_page_longest(path: Path) -> None:
    """A PDF whose first page holds far more text than the others: the run sends the page it
    expects to take longest first once it ranks pages, so the request the simulator holds is
    usually page 1's, and the pages after it finish while an earlier page is still in flight (a
    reorder window would hold them back). Which page is held is not asserted: on a loaded machine
    the first page rendered may go out before the ranking starts."""
    pdf = canvas.Canvas(str(path), pagesize=letter)
    for number in range(1, PAGES + 1):
        pdf.setFont("Helvetica", 10)
        for line in range(40 if number == 1 else 2):
            pdf.drawString(60, 740 - line * 16, f"page {number} line {line} " + " ".join(WORDS[line % 7:][:12]))
        pdf.showPage()
    pdf.save()


def wait_for(check, what: str, timeout: float = 120.0):  # type: ignore[no-untyped-def]
    """Poll ``check`` until it returns something true (the event), or fail naming ``what``."""
    deadline = time.monotonic() + timeout
    delay = 0.02
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(delay)
        delay = min(delay * 2, 0.5)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_a_killed_worker_loses_nothing(tmp_path: Path, backend: str, request: pytest.FixtureRequest) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    first_page_longest(corpus / "long.pdf")
    data = tmp_path / "service"
    database = request.getfixturevalue("postgres_url") if backend == "postgresql" else None
    env = {k: v for k, v in os.environ.items() if k != DATABASE_VARIABLE}
    if database is not None:
        env[DATABASE_VARIABLE] = database
    with SimulatedServer(corpus=str(corpus)) as sim, \
            BackgroundService(ServiceConfig(data=str(data), database_url=database, port=0, worker=None)) as gateway:
        client = llm_ocr.Service(gateway.url)
        sim.inject("hang", count=1)  # the first page request is held until released
        first = subprocess.Popen(
            [sys.executable, "-m", "llm_ocr.cli", "worker", "--data", str(data), "--endpoint", sim.base_url,
             "--lease", "3", "--poll", "0.2"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True, env=env,
        )
        try:
            doc = client.submit(corpus / "long.pdf")
            # The three pages not held are stored (each its own checkpoint) while the fourth is in flight.
            status = wait_for(lambda: (s := doc.status())["pages_done"] == 0
                              and sum(p["status"] == "ok" for p in s["pages"]) == PAGES - 1 and s,
                              "three pages stored")
            assert status["status"] == "running" and status["deliveries"] == 1
            # One page is held (which one is the run's order: the longest first once pages are
            # ranked, else the first rendered, a race on a loaded machine); the rest are stored.
            assert sorted(p["status"] for p in status["pages"]) == ["ok"] * (PAGES - 1) + ["pending"], status
            os.kill(first.pid, signal.SIGKILL)
            assert first.wait(timeout=30) == -signal.SIGKILL
        finally:
            if first.poll() is None:
                first.kill()
            first.wait()
            log = first.stderr.read().decode(errors="replace")  # type: ignore[union-attr]
            first.stderr.close()  # type: ignore[union-attr]
        if database is not None:  # the worker named its database, without the password
            assert "postgresql://***@127.0.0.1:" in log and PASSWORD not in log, log
        sim.release()  # its answer goes to a closed connection
        with BackgroundService(ServiceConfig(data=str(data), database_url=database, port=0,
                                             worker=WorkerSettings(endpoint=sim.base_url, poll=0.2))):
            final = doc.wait(timeout=120)
    assert final["status"] == "done" and final["deliveries"] == 2, final
    assert [p["status"] for p in final["pages"]] == ["ok"] * PAGES
    spool = Spool(str(data))
    for stage in ("extract", "describe"):
        pages = Counter(row["page"] for row in spool.rows(doc.id, stage))
        assert pages == dict.fromkeys(range(1, PAGES + 1), 1), (stage, pages)
    # The second delivery read only the page the first one had not stored (its run's marker).
    marker = read_marker(Storage(spool.results_url(doc.id)), "extract", 0, 1)
    assert marker is not None and (marker["pages"]["ok"], marker["pages"]["skipped"]) == (1, PAGES - 1)
