"""Measure ``llm-ocr launch hf-jobs ... --wait`` from start to done against the fake Jobs API.

    python -m tests.launchers.measure_fake_launch [--shards 4] [--documents 8] [--pages 2] [--repeat 1]

A corpus of PDFs goes to a fake Hub, then the launch runs as a user would type it (a subprocess,
``--wait --interval 0.5``); every job really runs on this machine (wheel install, llm-ocr, the
fake ``vllm`` with the simulated server answering at ``--instant`` speed). Printed: the wall time
from typing the command to its exit with every shard done, how long the launch took to submit
(checks, wheel build and upload, N ``run_job`` calls), the jobs' own running times, and the load
average (the machine may be shared) and the CPU seconds the launcher and the jobs used (a figure
the load does not change: on an idle machine the wall time is at least that over the cores).
What it measures is the launcher's and the jobs' fixed
overhead, not OCR speed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
from pathlib import Path

from tests.docs import make_corpus
from tests.launchers.common import fake_jobs, launch_args, launcher_env, measured, stage_rows


def measure(shards: int, documents: int, pages: int) -> dict[str, float]:
    """One launch to done; timings in seconds."""
    tmp = Path(tempfile.mkdtemp(prefix="measure-hf-jobs-"))
    try:
        corpus = tmp / "docs"
        make_corpus(corpus, documents=documents, pages=pages)
        with fake_jobs(tmp / "jobs", corpus) as hub:
            timing = measured(launch_args("--wait", "--interval", "0.5", shards=shards), launcher_env(hub, tmp),
                              settle=lambda: hub.wait_all(60))
            rows = stage_rows(hub, "extract")
            if len(rows) != documents * pages:
                raise SystemExit(f"expected {documents * pages} pages, found {len(rows)}")
            jobs = list(hub.jobs.values())
            running = [j.finished - j.started for j in jobs if j.started and j.finished]
            started, ended = timing["started"], timing["ended"]
            return {
                "launch_to_done_s": timing["launch_to_done_s"],
                "submitted_after_s": max(j.created for j in jobs) - started,
                "last_job_done_after_s": max(j.finished or ended for j in jobs) - started,
                "job_running_s_min": min(running),
                "job_running_s_max": max(running),
                # Launcher + every job's processes (the fake server's own threads excluded).
                "cpu_s": timing["cpu_s"],
            }
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--documents", type=int, default=8)
    parser.add_argument("--pages", type=int, default=2, help="pages per document")
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    print(f"{args.shards} shards, {args.documents} PDFs x {args.pages} pages, fake Jobs API, {os.cpu_count()} cores")
    for run in range(1, args.repeat + 1):
        load = os.getloadavg()[0]
        result = measure(args.shards, args.documents, args.pages)
        print(f"run {run}: launch to done {result['launch_to_done_s']:.1f} s "
              f"(all {args.shards} jobs submitted after {result['submitted_after_s']:.1f} s, last job done after "
              f"{result['last_job_done_after_s']:.1f} s; each job ran {result['job_running_s_min']:.1f}-"
              f"{result['job_running_s_max']:.1f} s); CPU {result['cpu_s']:.1f} s; load average before: {load:.2f}")


if __name__ == "__main__":
    main()
