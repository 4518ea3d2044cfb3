"""The service against ``llm-ocr run`` on one simulated server: pages/s and latency (docs/service.md).

::

    python scripts/bench_service.py                      # 24 one-page documents per rate
    python scripts/bench_service.py --docs 40 --rates 0.5,1,2,4,8 --concurrency 8 --sim-args '--slots 16'

It makes one-page PNG documents, starts one simulated server, and measures:

1. ``llm_ocr.run`` over the folder of documents (the batch): pages/s;
   timed after an untimed warm-up run, just before each rate (back to back on a shared machine),
   with the worker's in-flight pages (``--concurrency``: one page per one-page document), and
   dedup off for both (a run's dedup looks across its documents, the worker's within one);
2. the service (gateway and one worker with ``--concurrency`` documents at once, in this process)
   fed one document at a time, open loop, at each rate in documents/s: pages/s over the stream
   (pages over the time from the first submission to the last document's end), and each
   document's latency from submission to its end (the service's own ``created`` and ``finished``),
   p50 and p95, beside the model's own time for the page (its row's ``latency_s``).

A rate the service cannot keep up with shows as pages/s below the rate and latencies that grow
with the queue: that is where it saturates.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path

from PIL import Image, ImageDraw

# The package beside this script, installed or not.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import llm_ocr
from llm_ocr.service.config import ServiceConfig
from llm_ocr.service.server import BackgroundService
from llm_ocr.service.spool import Spool
from llm_ocr.service.sqlite import SQLiteQueue
from llm_ocr.service.worker import WorkerSettings
from llm_ocr.testing import SimulatedServer


def make_documents(folder: Path, count: int) -> list[Path]:
    """``count`` one-page PNG documents with a few lines of text each."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(count):
        image = Image.new("RGB", (1240, 1754), "white")
        draw = ImageDraw.Draw(image)
        for line in range(12):
            draw.text((100, 120 + line * 60), f"Document {i} line {line}: the quick brown fox jumps", fill="black")
        path = folder / f"doc{i:04d}.png"
        image.save(path)
        paths.append(path)
    return paths


def percentile(values: list[float], share: float) -> float:
    """The ``share`` quantile (nearest rank)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(share * len(ordered)) - 1))]


def batch(documents: Path, out: Path, endpoint: str, in_flight: int | None) -> float:
    """``llm_ocr.run`` over ``documents`` with at most ``in_flight`` requests at the server (None:
    the run's default): pages/s over the call, in this process (warm once :func:`warm_up` ran),
    rendering in a thread of it, as the worker does."""
    start = time.monotonic()
    result = llm_ocr.run(documents, out, endpoint=endpoint, progress="off", workers=0, max_in_flight=in_flight,
                         dedup=False)
    seconds = time.monotonic() - start
    assert result.ok, result
    return sum(result.pages.get(k, 0) for k in ("ok", "truncated")) / seconds


def warm_up(documents: list[Path], out: Path, endpoint: str) -> None:
    """One untimed run of two documents: what the first run in a process pays once (imports,
    Arrow's first conversion, PDFium's start) is paid before the batch is timed, as the service
    pays it before its stream (the worker warms up when it starts)."""
    folder = out / "docs"
    folder.mkdir(parents=True)
    for path in documents[:2]:
        (folder / path.name).write_bytes(path.read_bytes())
    assert llm_ocr.run(folder, out / "out", endpoint=endpoint, progress="off", workers=0, dedup=False).ok


def stream(paths: list[Path], rate: float, data: Path, endpoint: str, concurrency: int) -> dict[str, float]:
    """Submit ``paths`` at ``rate`` documents/s to a fresh service; its pages/s and latencies."""
    # Dedup off on both sides: a run's dedup looks across its documents (on these PNGs it cost the
    # batch about a second a page at load 12), the worker's runs each within one document.
    settings = WorkerSettings(endpoint=endpoint, concurrency=concurrency, run_options={"dedup": False})
    with BackgroundService(ServiceConfig(data=str(data), port=0, worker=settings)) as running, \
            concurrent.futures.ThreadPoolExecutor(8) as pool:
        client = llm_ocr.Service(running.url)
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
    queue, spool = SQLiteQueue(data / "service.db"), Spool(str(data))
    rows = [queue.get(doc.id) for doc in docs]
    latencies = [row.finished - row.created for row in rows if row and row.finished]
    first = min(row.created for row in rows if row)
    last = max(row.finished for row in rows if row and row.finished)
    model = [page["latency_s"] for doc in docs for page in spool.rows(doc.id, "extract")]
    # Each one-page document's latency over the model's own time for its page: the simulator's
    # times vary from page to page, so p95 latency over the median model time would count the
    # model's own spread as the service's.
    ratios = [(row.finished - row.created) / spool.rows(doc.id, "extract")[0]["latency_s"]
              for doc, row in zip(docs, rows) if row and row.finished]
    return {"pages_s": len(latencies) / (last - first), "p50": percentile(latencies, 0.5),
            "p95": percentile(latencies, 0.95), "model_p50": statistics.median(model),
            "model_p95": percentile(model, 0.95), "ratio_p50": percentile(ratios, 0.5),
            "ratio_p95": percentile(ratios, 0.95)}


def main() -> None:
    """Run the benchmark and print a table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", type=int, default=24, help="one-page documents per rate (default: 24)")
    parser.add_argument("--rates", default="0.5,1,2,4,8", help="documents/s, comma-separated")
    parser.add_argument("--concurrency", type=int, default=8, help="documents the worker reads at once")
    parser.add_argument("--sim-args", default="--decode-ms-per-token 2",
                        help="the simulated server's timing flags (default: about a second a page)")
    parser.add_argument("--batch-in-flight", type=int, default=None,
                        help="the batch's --max-in-flight (default: --concurrency, the pages the worker keeps "
                             "in flight with one-page documents; 0: the run's own default)")
    args = parser.parse_args()
    rates = [float(rate) for rate in args.rates.split(",")]  # "inf": every document at once
    in_flight = args.concurrency if args.batch_in_flight is None else (args.batch_in_flight or None)
    with tempfile.TemporaryDirectory(prefix="llm-ocr-bench-service-") as tmp:
        root = Path(tmp)
        paths = make_documents(root / "docs", args.docs)
        with SimulatedServer(*shlex.split(args.sim_args)) as sim:
            warm_up(paths, root / "warm-up", sim.base_url)
            print(f"{args.docs} one-page documents; the batch: llm-ocr run, at most {in_flight or 'its default'} "
                  f"in flight, run just before each rate; the service: one worker reading {args.concurrency} "
                  "documents at once")
            print(" rate (docs/s)  pages/s  batch  of batch  p50 latency (s)  p95 latency (s)  model's time p50/p95 (s)"
                  "  latency/model p50/p95  load (1 min)")
            for i, rate in enumerate(rates):
                # Back to back, so that both see the same load on a shared machine.
                batch_rate = batch(root / "docs", root / f"batch-{i}", sim.base_url, in_flight)
                found = stream(paths, rate, root / f"service-{i}", sim.base_url, args.concurrency)
                print(f" {rate:13.2f}  {found['pages_s']:7.2f}  {batch_rate:5.2f}  {found['pages_s'] / batch_rate:8.2f}"
                      f"  {found['p50']:15.2f}  {found['p95']:15.2f}"
                      f"  {found['model_p50']:13.2f}/{found['model_p95']:.2f}"
                      f"  {found['ratio_p50']:15.2f}/{found['ratio_p95']:.2f}  {_load():12s}")


def _load() -> str:
    """The 1-minute load average, where the platform says (Linux)."""
    try:
        return Path("/proc/loadavg").read_text().split()[0]
    except OSError:
        return "?"


if __name__ == "__main__":
    main()
