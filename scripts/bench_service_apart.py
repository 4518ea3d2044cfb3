"""One-page documents to a gateway whose worker is in another service, on PostgreSQL (docs/service.md).

::

    python scripts/bench_service_apart.py --docs 16 --rate 0.5

The gateway (no worker) and the worker (``--poll`` 1 s, 8 documents at once) share a private
PostgreSQL started as the tests start theirs (``tests/fixtures/postgres.py``: Debian's
``postgresql`` package) but nothing in-process: the worker learns of a submission from the
database alone. Prints pages/s over the stream beside the batch's (``bench_service.py``'s, run just
before), p50/p95 latency (submission to end, the service's clock), the model's time
(Extract's ``latency_s``) and each document's latency over its page's model time.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import psycopg
from bench_service import batch, make_documents, percentile, warm_up

import llm_ocr
from llm_ocr.service.config import ServiceConfig
from llm_ocr.service.postgres import PostgresQueue
from llm_ocr.service.server import BackgroundService
from llm_ocr.service.spool import Spool
from llm_ocr.service.worker import WorkerSettings
from llm_ocr.testing import SimulatedServer
from tests.fixtures.postgres import PostgresCluster


def main() -> None:
    """Run it and print one line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", type=int, default=16)
    parser.add_argument("--rate", type=float, default=0.5, help="documents/s, open loop (inf: all at once)")
    args = parser.parse_args()
    cluster = PostgresCluster()
    cluster.start()
    try:
        name = f"bench_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(cluster.url, autocommit=True) as db:
            db.execute(f"CREATE DATABASE {name}")
        url = cluster.url.rsplit("/", 1)[0] + "/" + name
        with tempfile.TemporaryDirectory(prefix="llm-ocr-bench-apart-") as tmp:
            root = Path(tmp)
            paths, data = make_documents(root / "docs", args.docs), root / "service"
            worker = WorkerSettings(concurrency=8, run_options={"dedup": False})  # as bench_service.py
            with SimulatedServer("--decode-ms-per-token", "2") as sim, \
                    BackgroundService(ServiceConfig(data=str(data), database_url=url, port=0, worker=None)) as gateway:
                worker.endpoint = sim.base_url
                # The batch (llm-ocr run, as many pages in flight as the worker keeps), warm, just before.
                warm_up(paths, root / "warm-up", sim.base_url)
                batch_rate = batch(root / "docs", root / "batch", sim.base_url, worker.concurrency)
                with BackgroundService(ServiceConfig(data=str(data), database_url=url, port=0, worker=worker)):
                    client = llm_ocr.Service(gateway.url)
                    start, docs = time.monotonic(), []
                    for i, path in enumerate(paths):
                        delay = start + i / args.rate - time.monotonic()
                        if delay > 0:
                            time.sleep(delay)
                        docs.append(client.submit(path))
                    for doc in docs:
                        assert doc.wait(timeout=600)["status"] == "done", doc.status()
            queue, spool = PostgresQueue(url), Spool(str(data))
            rows = [queue.get(doc.id) for doc in docs]
            queue.close()
            latency = [row.finished - row.created for row in rows if row and row.finished]
            model = [spool.rows(doc.id, "extract")[0]["latency_s"] for doc in docs]
            ratio = [a / b for a, b in zip(latency, model)]
            pages_s = len(latency) / (max(row.finished for row in rows if row and row.finished)
                                      - min(row.created for row in rows if row))
            load = Path("/proc/loadavg").read_text().split()[0] if Path("/proc/loadavg").exists() else "?"
            print(f"pages/s {pages_s:.2f}, batch {batch_rate:.2f} ({pages_s / batch_rate:.2f} of it); "
                  f"latency p50/p95 {percentile(latency, .5):.2f}/{percentile(latency, .95):.2f} s, model's time "
                  f"p50/p95 {percentile(model, .5):.2f}/{percentile(model, .95):.2f} s, latency/model p50/p95 "
                  f"{percentile(ratio, .5):.2f}/{percentile(ratio, .95):.2f}, load {load}")
    finally:
        cluster.remove()


if __name__ == "__main__":
    main()
