"""The service against ``llm-ocr run`` on one simulated server: pages/s and latency (docs/service.md).

::

    python scripts/bench_service.py --docs 32 --rates 2,4,8,inf              # one process, SQLite
    python scripts/bench_service.py --docs 16 --pages 4 --rates 2,inf --postgres  # apart, PostgreSQL

It makes documents of ``--pages`` PNG-image pages (one page: a PNG; more: a PDF), starts one
simulated server, and measures, at each rate:

1. ``llm_ocr.run`` over the folder of documents (the batch): pages/s over the call; timed after
   an untimed warm-up run, again just before each rate (back to back on a shared machine), with
   the worker's in-flight limit (``--in-flight``), and dedup off for both (a run's dedup looks
   across its documents, the worker's within one);
2. the service fed one document at a time, open loop, at the rate in documents/s: pages/s over
   the stream (pages over the time from the first submission to the last document's end), and
   each document's latency from submission to its end (the service's own ``created`` and
   ``finished``), p50 and p95, over the model's own time for its pages (their rows'
   ``latency_s``: for a one-page document, that page's). The service is a gateway and one worker
   in this process on SQLite, or (``--postgres``) a gateway and a worker as two services on a
   private PostgreSQL (Debian's package, as the tests start theirs), a fresh database per rate:
   the worker learns of a submission from the database alone.

The documents are submitted by a client process of their own (``--client process``, the default),
as other systems submit to a service; ``--client thread`` submits from threads of this process
instead, as before 2026-11-27: the client's work (building each upload, reading the answers) then
shares this process's interpreter with the gateway and the worker, which a real client does not.

Beside each rate it prints CPU-seconds a page, service against batch: this process's user + system
time over the stream (gateway and worker, and the client with ``--client thread``; with
``--postgres`` not the database's) and
over the batch's call (the simulator, a process of its own, is on neither side). Pages/s moves
with the load of a shared machine far more than CPU a page does.

The worker holds ``--in-flight`` requests at once, shared by ``--concurrency`` documents open
(default: twice the limit), as the batch holds ``--in-flight`` for all its pages. A rate the
service cannot keep up with shows as pages/s below the rate and latencies that grow with the
queue: that is where it saturates.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import dataclasses
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from PIL import Image, ImageDraw

# The package beside this script, installed or not.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import llm_ocr
from llm_ocr.service.config import ServiceConfig
from llm_ocr.service.postgres import PostgresQueue
from llm_ocr.service.queue import DocumentQueue
from llm_ocr.service.server import BackgroundService
from llm_ocr.service.spool import Spool
from llm_ocr.service.sqlite import SQLiteQueue
from llm_ocr.service.worker import WorkerSettings
from llm_ocr.testing import SimulatedServer


def make_documents(folder: Path, count: int, pages: int = 1) -> list[Path]:
    """``count`` documents of ``pages`` pages with a few lines of text each: a PNG for one page,
    else a PDF of page images."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(count):
        images = []
        for number in range(pages):
            image = Image.new("RGB", (1240, 1754), "white")
            draw = ImageDraw.Draw(image)
            for line in range(12):
                draw.text((100, 120 + line * 60), f"Document {i} page {number} line {line}: the quick brown fox",
                          fill="black")
            images.append(image)
        path = folder / (f"doc{i:04d}.png" if pages == 1 else f"doc{i:04d}.pdf")
        if pages == 1:
            images[0].save(path)
        else:
            images[0].save(path, save_all=True, append_images=images[1:], resolution=150)
        paths.append(path)
    return paths


def percentile(values: list[float], share: float) -> float:
    """The ``share`` quantile (nearest rank)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(share * len(ordered)) - 1))]


def cpu_seconds() -> float:
    """This process's CPU-seconds so far (user + system, every thread): the batch's run, or the
    service's gateway, worker and the benchmark's client (the simulator is a process of its own)."""
    times = os.times()
    return times.user + times.system


def batch(documents: Path, out: Path, endpoint: str, in_flight: int | None) -> tuple[float, float]:
    """``llm_ocr.run`` over ``documents`` with at most ``in_flight`` requests at the server (None:
    the run's default): pages/s over the call, and CPU-seconds a page, in this process (warm once
    :func:`warm_up` ran), rendering in a thread of it, as the worker does."""
    start, cpu = time.monotonic(), cpu_seconds()
    result = llm_ocr.run(documents, out, endpoint=endpoint, progress="off", workers=0, max_in_flight=in_flight,
                         dedup=False)
    seconds, cpu = time.monotonic() - start, cpu_seconds() - cpu
    assert result.ok, result
    pages = sum(result.pages.get(k, 0) for k in ("ok", "truncated"))
    return pages / seconds, cpu / pages


def warm_up(documents: list[Path], out: Path, endpoint: str) -> None:
    """One untimed run of two documents: what the first run in a process pays once (imports,
    Arrow's first conversion, PDFium's start) is paid before the batch is timed, as the service
    pays it before its stream (the worker warms up when it starts)."""
    folder = out / "docs"
    folder.mkdir(parents=True)
    for path in documents[:2]:
        (folder / path.name).write_bytes(path.read_bytes())
    assert llm_ocr.run(folder, out / "out", endpoint=endpoint, progress="off", workers=0, dedup=False).ok


#: The client of ``--client process``: :func:`submit` with threads, in a process of its own.
CLIENT = ("import json, sys; sys.path.insert(0, sys.argv[1]); from bench_service import submit; "
          "url, rate, paths = json.loads(sys.argv[2]); print(json.dumps(submit(url, paths, rate, apart=False)))")


def submit(url: str, paths: list[Path] | list[str], rate: float, apart: bool) -> list[str]:
    """Submit ``paths`` at ``rate`` documents/s to the service at ``url`` and wait until each has
    ended; their ids. ``apart``: from a client process of its own, else from threads of this one."""
    if apart:
        argument = json.dumps([url, rate, [str(path) for path in paths]])  # inf as JSON's Infinity
        done = subprocess.run([sys.executable, "-c", CLIENT, str(Path(__file__).resolve().parent), argument],
                              capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, done.stderr[-3000:]
        return list(json.loads(done.stdout.splitlines()[-1]))
    client = llm_ocr.Service(url)
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        start = time.monotonic()
        submitted = []
        for i, path in enumerate(paths):
            delay = start + i / rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)  # open loop: the next document arrives on schedule, answered or not
            submitted.append(pool.submit(client.submit, path))
        docs = [future.result() for future in submitted]
    for doc in docs:
        assert doc.wait(timeout=600)["status"] == "done", doc.status()
    return [doc.id for doc in docs]


def stream(paths: list[Path], rate: float, data: Path, endpoint: str, worker: WorkerSettings,
           database_url: str | None = None, client_apart: bool = True) -> dict[str, float]:
    """Submit ``paths`` at ``rate`` documents/s to a fresh service; its pages/s and latencies.
    ``database_url``: the gateway and the worker apart, on that PostgreSQL database;
    ``client_apart``: the documents submitted by a process of their own (:func:`submit`)."""
    worker = dataclasses.replace(worker, endpoint=endpoint)
    with contextlib.ExitStack() as services:
        if database_url is None:
            gateway = services.enter_context(BackgroundService(ServiceConfig(data=str(data), port=0, worker=worker)))
        else:
            gateway = services.enter_context(BackgroundService(
                ServiceConfig(data=str(data), database_url=database_url, port=0, worker=None)))
            services.enter_context(BackgroundService(
                ServiceConfig(data=str(data), database_url=database_url, port=0, worker=worker)))
        cpu = cpu_seconds()
        ids = submit(gateway.url, paths, rate, client_apart)
        cpu = cpu_seconds() - cpu
    queue: DocumentQueue = SQLiteQueue(data / "service.db") if database_url is None else PostgresQueue(database_url)
    spool = Spool(str(data))
    rows = [queue.get(doc_id) for doc_id in ids]
    queue.close()
    ended = [(doc_id, row) for doc_id, row in zip(ids, rows) if row and row.finished]
    latencies = [row.finished - row.created for _, row in ended]
    first = min(row.created for row in rows if row)
    last = max(row.finished for _, row in ended)
    pages = {doc_id: spool.rows(doc_id, "extract") for doc_id, _ in ended}
    model = [page["latency_s"] for rows_ in pages.values() for page in rows_]
    # Each document's latency over the model's own time for its pages (one page: that page's):
    # the simulator's times vary from page to page, so latency over the median model time would
    # count the model's own spread as the service's.
    ratios = [(row.finished - row.created) / sum(page["latency_s"] for page in pages[doc_id]) for doc_id, row in ended]
    return {"pages_s": sum(len(rows_) for rows_ in pages.values()) / (last - first),
            "p50": percentile(latencies, 0.5), "p95": percentile(latencies, 0.95),
            "model_p50": statistics.median(model), "model_p95": percentile(model, 0.95),
            "ratio_p50": percentile(ratios, 0.5), "ratio_p95": percentile(ratios, 0.95),
            "cpu_page": cpu / max(1, sum(len(rows_) for rows_ in pages.values()))}


def main() -> None:
    """Run the benchmark and print a table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", type=int, default=24, help="documents per rate (default: 24)")
    parser.add_argument("--pages", type=int, default=1, help="pages per document (default: 1)")
    parser.add_argument("--rates", default="0.5,1,2,4,8", help="documents/s, comma-separated (inf: all at once)")
    parser.add_argument("--in-flight", type=int, default=8,
                        help="requests in flight: the worker's limit, shared by its documents, and the batch's")
    parser.add_argument("--concurrency", type=int, default=None,
                        help="documents the worker has open at once (default: twice --in-flight)")
    parser.add_argument("--client", choices=("process", "thread"), default="process",
                        help="submit from a process of its own (default), or from threads of the service's process")
    parser.add_argument("--postgres", action="store_true",
                        help="the gateway and the worker as two services on a private PostgreSQL")
    parser.add_argument("--sim-args", default="--decode-ms-per-token 2",
                        help="the simulated server's timing flags (default: about a second a page)")
    args = parser.parse_args()
    rates = [float(rate) for rate in args.rates.split(",")]
    concurrency = args.concurrency or 2 * args.in_flight
    # Dedup off on both sides: a run's dedup looks across its documents (on these look-alike pages
    # it cost the batch about a second a page at load 12), the worker's runs each within one.
    worker = WorkerSettings(concurrency=concurrency, run_options={"dedup": False, "max_in_flight": args.in_flight})
    with contextlib.ExitStack() as stack:
        cluster = None
        if args.postgres:
            from tests.fixtures.postgres import PostgresCluster

            cluster = PostgresCluster()
            cluster.start()
            stack.callback(cluster.remove)
        root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="llm-ocr-bench-service-")))
        paths = make_documents(root / "docs", args.docs, args.pages)
        sim = stack.enter_context(SimulatedServer(*shlex.split(args.sim_args)))
        warm_up(paths, root / "warm-up", sim.base_url)
        where = "apart on PostgreSQL" if args.postgres else "in one process on SQLite"
        print(f"{args.docs} documents of {args.pages} page(s); the batch: llm-ocr run, at most {args.in_flight} "
              f"in flight, run just before each rate; the service ({where}): one worker, at most {args.in_flight} "
              f"in flight shared by {concurrency} documents open; the client: {args.client}")
        print(" rate (docs/s)  pages/s  batch  of batch  p50 latency (s)  p95 latency (s)  model's time p50/p95 (s)"
              "  latency/model p50/p95  CPU-s/page service/batch  load (1 min)")
        for i, rate in enumerate(rates):
            # Back to back, so that both see the same load on a shared machine.
            batch_rate, batch_cpu = batch(root / "docs", root / f"batch-{i}", sim.base_url, args.in_flight)
            url = _database(cluster.url) if cluster is not None else None
            found = stream(paths, rate, root / f"service-{i}", sim.base_url, worker, url, args.client == "process")
            print(f" {rate:13.2f}  {found['pages_s']:7.2f}  {batch_rate:5.2f}  {found['pages_s'] / batch_rate:8.2f}"
                  f"  {found['p50']:15.2f}  {found['p95']:15.2f}"
                  f"  {found['model_p50']:13.2f}/{found['model_p95']:.2f}"
                  f"  {found['ratio_p50']:15.2f}/{found['ratio_p95']:.2f}"
                  f"  {found['cpu_page']:17.3f}/{batch_cpu:.3f}  {_load():12s}", flush=True)


def _database(cluster_url: str) -> str:
    """A fresh database on the cluster at ``cluster_url``: its URL."""
    import psycopg

    name = f"bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(cluster_url, autocommit=True) as db:
        db.execute(f"CREATE DATABASE {name}")
    return cluster_url.rsplit("/", 1)[0] + "/" + name


def _load() -> str:
    """The 1-minute load average, where the platform says (Linux)."""
    try:
        return Path("/proc/loadavg").read_text().split()[0]
    except OSError:
        return "?"


if __name__ == "__main__":
    main()
