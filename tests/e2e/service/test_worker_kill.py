"""A worker killed with SIGKILL mid-document loses nothing: the document is delivered again when
its lease lapses, a second worker resumes it from the pages already stored, and every page is
in the results exactly once (docs/service.md#faults).

The first worker is ``llm-ocr worker`` as a subprocess (what is killed must be a process); the
gateway and the second worker run in this process. The simulator holds one page's request
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

import llm_ocr
from llm_ocr.service.config import ServiceConfig
from llm_ocr.service.server import BackgroundService
from llm_ocr.service.spool import Spool
from llm_ocr.service.worker import WorkerSettings
from llm_ocr.storage import Storage
from llm_ocr.storage.state import read_marker
from llm_ocr.testing import SimulatedServer
from tests.docs import make_pdf

PAGES = 4


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


def test_a_killed_worker_loses_nothing(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    make_pdf(corpus / "long.pdf", PAGES, seed=5, figures=False)
    data = tmp_path / "service"
    with SimulatedServer(corpus=str(corpus)) as sim, \
            BackgroundService(ServiceConfig(data=str(data), port=0, worker=None)) as gateway:
        client = llm_ocr.Service(gateway.url)
        sim.inject("hang", count=1)  # the first page request is held until released
        first = subprocess.Popen(
            [sys.executable, "-m", "llm_ocr.cli", "worker", "--data", str(data), "--endpoint", sim.base_url,
             "--lease", "3", "--poll", "0.2"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True,
        )
        try:
            doc = client.submit(corpus / "long.pdf")
            # The three pages not held are stored (each its own checkpoint) while the fourth is in flight.
            status = wait_for(lambda: (s := doc.status())["pages_done"] == 0
                              and sum(p["status"] == "ok" for p in s["pages"]) == PAGES - 1 and s,
                              "three pages stored")
            assert status["status"] == "running" and status["deliveries"] == 1
            os.kill(first.pid, signal.SIGKILL)
            assert first.wait(timeout=30) == -signal.SIGKILL
        finally:
            if first.poll() is None:
                first.kill()
            first.wait()
            first.stderr.close()  # type: ignore[union-attr]
        sim.release()  # its answer goes to a closed connection
        with BackgroundService(ServiceConfig(data=str(data), port=0,
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
