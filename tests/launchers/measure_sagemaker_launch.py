"""Measure ``llm-ocr launch sagemaker ... --wait`` from start to done against moto + the fake Processing.

    python -m tests.launchers.measure_sagemaker_launch [--hosts 2 4] [--documents 8] [--pages 2] [--repeat 1]

A corpus of PDFs goes to moto's S3, then the launch runs as a user would type it (a subprocess,
``--wait --interval 0.5``): checks against moto's STS/IAM/S3, the wheel built and uploaded to S3,
one ``CreateProcessingJob`` with ``InstanceCount = N``, then every host really runs on this
machine (wheel install, llm-ocr, the fake ``vllm`` running the simulated server at ``--instant``
speed, output to moto's S3, logs to moto's CloudWatch). Printed per run: launch to done, when the
job was submitted, how long the hosts ran, the CPU seconds of the launcher and the hosts, and the
load average before (the machine may be shared). It measures fixed overhead, not OCR speed.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import tempfile
import time
from pathlib import Path

from tests.docs import make_corpus
from tests.launchers.common import llm_ocr
from tests.launchers.sagemaker_common import aws_world, sm_args


def measure(hosts: int, documents: int, pages: int) -> dict[str, float]:
    """One launch to done; timings in seconds."""
    tmp = Path(tempfile.mkdtemp(prefix="measure-sagemaker-"))
    try:
        corpus = tmp / "docs"
        make_corpus(corpus, documents=documents, pages=pages)
        with aws_world(tmp / "jobs", corpus) as world:
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            started = time.time()
            done = llm_ocr(*sm_args("--wait", "--interval", "0.5", shards=hosts), env=world.env(tmp), timeout=1800)
            ended = time.time()
            world.sagemaker.wait_all(60)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            if done.returncode != 0:
                raise SystemExit(f"launch failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
            if len(world.rows("extract")) != documents * pages:
                raise SystemExit(f"expected {documents * pages} pages, found {len(world.rows('extract'))}")
            (job,) = world.sagemaker.jobs.values()
            assert job.started and job.ended
            return {
                "launch_to_done_s": ended - started,
                "submitted_after_s": job.created - started,
                "job_ran_s": job.ended - job.started,
                "cpu_s": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
            }
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, nargs="+", default=[2, 4], help="InstanceCount values to measure")
    parser.add_argument("--documents", type=int, default=8)
    parser.add_argument("--pages", type=int, default=2, help="pages per document")
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    print(f"{args.documents} PDFs x {args.pages} pages, moto + fake SageMaker Processing, {os.cpu_count()} cores")
    for hosts in args.hosts:
        for run in range(1, args.repeat + 1):
            load = os.getloadavg()[0]
            r = measure(hosts, args.documents, args.pages)
            print(f"{hosts} host(s), run {run}: launch to done {r['launch_to_done_s']:.1f} s (job submitted after "
                  f"{r['submitted_after_s']:.1f} s, hosts ran {r['job_ran_s']:.1f} s); CPU {r['cpu_s']:.1f} s; "
                  f"load average before: {load:.2f}")


if __name__ == "__main__":
    main()
