"""Measure ``llm-ocr launch cloud-run`` against the fake Cloud Run API and the GCS emulator.

    python -m tests.launchers.measure_fake_cloud_run [--shards 4] [--documents 8] [--pages 2] [--repeat 1] [--skip-kill]

1. **Launch to done**: a corpus of PDFs goes to the GCS emulator, then ``llm-ocr launch cloud-run
   ... --wait --interval 0.5`` runs as a user would type it; every task really runs on this
   machine (wheel install from the mounted bucket, llm-ocr, the fake ``vllm`` with the simulated
   server at ``--instant`` speed). Printed: the wall time from typing the command to its exit with
   every shard done, when the execution was submitted, the tasks' running times, the load average
   and the CPU seconds of the launcher and the tasks (which the load does not change).
2. **Stop and retry**: one shard of slow pages, one in flight at a time; once its first part is
   in the bucket, the task's attempt is stopped as the 1-hour limit stops it (SIGTERM, SIGKILL 10 s
   later). Printed: how long the attempt took to save its parts and exit after SIGTERM (and its
   exit code), the retry's running time, and the pages each attempt did.

What it measures is the launcher's and the tasks' fixed overhead, not OCR speed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.docs import make_corpus
from tests.launchers.cloud_run_common import OUTPUT, fake_cloud_run, launch_args, launcher_env, llm_ocr, stage_rows
from tests.launchers.common import measured, wait_until


def launch_to_done(shards: int, documents: int, pages: int) -> dict[str, float]:
    """One launch to done; timings in seconds."""
    tmp = Path(tempfile.mkdtemp(prefix="measure-cloud-run-"))
    try:
        corpus = tmp / "docs"
        make_corpus(corpus, documents=documents, pages=pages)
        with fake_cloud_run(tmp / "api", corpus) as api:
            timing = measured(launch_args("--wait", "--interval", "0.5", shards=shards), launcher_env(api, tmp),
                              settle=lambda: api.wait_all(60))
            if len(stage_rows(api.gcs, "extract")) != documents * pages:
                raise SystemExit("not every page was done once")
            (execution,) = api.executions.values()
            running = [t.completed - t.started for t in execution.tasks if t.started and t.completed]
            started = timing["started"]
            return {
                "launch_to_done_s": timing["launch_to_done_s"],
                "submitted_after_s": execution.created - started,
                "tasks_done_after_s": (execution.completed or timing["ended"]) - started,
                "task_running_s_min": min(running),
                "task_running_s_max": max(running),
                "cpu_s": timing["cpu_s"],  # the launcher and every task's processes
            }
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def stop_and_retry(documents: int, pages: int) -> dict[str, Any]:
    """One shard stopped mid-run at its "time limit" and finished by the retry."""
    tmp = Path(tempfile.mkdtemp(prefix="measure-cloud-run-stop-"))
    try:
        corpus = tmp / "docs"
        make_corpus(corpus, documents=documents, pages=pages)
        with fake_cloud_run(tmp / "api", corpus, sim_args="--prefill-ms 1500 --slots 1") as api:
            env = launcher_env(api, tmp)
            started = time.time()
            first = llm_ocr(*launch_args("--part-rows", "1", "--max-in-flight", "1", shards=1), env=env)
            if first.returncode != 0:
                raise SystemExit(first.stderr)
            (name,) = api.executions
            wait_until(lambda: any("/part-00000-of-00001" in n for n in api.gcs.list("ocr", "out/extract/")), period=0.1)
            stopped_at = time.time()
            api.stop_attempt(name, 0, "timeout")
            final = llm_ocr("jobs", "wait", OUTPUT, "--interval", "0.5", env=env)
            ended = time.time()
            if final.returncode != 0:
                raise SystemExit(final.stdout + final.stderr)
            stopped, retry = api.executions[name].tasks[0].attempts
            marker = json.loads(api.gcs.read("ocr", "out/_state/extract/done-00000-of-00001.json"))
            return {
                "launch_to_done_s": ended - started,
                "sigterm_to_exit_s": (stopped.ended or ended) - stopped_at,
                "exit_code": stopped.exit_code,
                "term_signal": stopped.term_signal,
                "retry_running_s": (retry.ended or ended) - retry.started,
                "pages_before_stop": marker["pages"]["skipped"],
                "pages_by_retry": marker["pages"]["total"],
                "rows": len(stage_rows(api.gcs, "extract")),
            }
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--documents", type=int, default=8)
    parser.add_argument("--pages", type=int, default=2, help="pages per document")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--skip-kill", action="store_true", help="only the launch to done")
    args = parser.parse_args()
    print(f"{args.shards} shards, {args.documents} PDFs x {args.pages} pages, fake Cloud Run API, {os.cpu_count()} cores")
    for run in range(1, args.repeat + 1):
        load = os.getloadavg()[0]
        r = launch_to_done(args.shards, args.documents, args.pages)
        print(f"run {run}: launch to done {r['launch_to_done_s']:.1f} s (execution submitted after {r['submitted_after_s']:.1f} s, "
              f"tasks done after {r['tasks_done_after_s']:.1f} s; each task ran {r['task_running_s_min']:.1f}-"
              f"{r['task_running_s_max']:.1f} s); CPU {r['cpu_s']:.1f} s; load average before: {load:.2f}")
    if not args.skip_kill:
        for run in range(1, args.repeat + 1):
            load = os.getloadavg()[0]
            r = stop_and_retry(4, 2)
            print(f"stop and retry {run}: SIGTERM to exit {r['sigterm_to_exit_s']:.1f} s (exit code {r['exit_code']}, "
                  f"signal {r['term_signal']}), {r['pages_before_stop']} of {r['rows']} pages saved before the stop, "
                  f"{r['pages_by_retry']} by the retry, which ran {r['retry_running_s']:.1f} s; launch to done "
                  f"{r['launch_to_done_s']:.1f} s; load average before: {load:.2f}")


if __name__ == "__main__":
    main()
