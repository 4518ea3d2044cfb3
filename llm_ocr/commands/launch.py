"""``llm-ocr launch PLATFORM ...`` and ``llm-ocr jobs {status,wait,logs,cancel} ...``."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from typing import Any

log = logging.getLogger("llm_ocr")

LAUNCH_HELP = """Everything after PLATFORM: INPUT... --output OUT --num-shards N plus the launch options
below; any other option is an option of `llm-ocr STAGE` and is passed to the jobs unchanged
(checked against that command first). `llm-ocr launch PLATFORM --help` lists a platform's options."""


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``launch`` and ``jobs`` sub-commands."""
    from llm_ocr.launchers import PLATFORMS

    parser = sub.add_parser(
        "launch",
        help=f"run a stage as N shard jobs on a cloud platform ({', '.join(sorted(PLATFORMS))}), optionally waiting with a live table",
        description="Launch `llm-ocr STAGE INPUT... --output OUT` as N shard jobs. " + LAUNCH_HELP,
    )
    parser.add_argument("platform", choices=sorted(PLATFORMS), help="where to run the jobs")
    parser.add_argument("rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    parser.set_defaults(handler=run_launch)

    jobs = sub.add_parser("jobs", help="status, live wait, logs and cancel of launched jobs (by OUT or launch id)")
    jsub = jobs.add_subparsers(dest="jobs_command", required=True)
    for name, helptext in (
        ("status", "the table of the latest launch: shards, pages, elapsed time, cost, totals"),
        ("wait", "a live table until every shard ends (exit 0 when all have their completion markers)"),
        ("logs", "one shard's job logs"),
        ("cancel", "cancel the jobs that have not ended"),
    ):
        p = jsub.add_parser(name, help=helptext, description=helptext)
        p.add_argument("target", metavar="OUT", help="the launch's --output, or its launch id (on the machine that launched)")
        p.add_argument("--launch", dest="launch_id", default=None, help="a launch id (default: the latest launch to OUT)")
        p.add_argument("--storage-options", default=None, help="JSON object of fsspec storage options for OUT")
        if name == "status":
            p.add_argument("--json", action="store_true", help="print the table as JSON")
            p.add_argument("--count", action="store_true",
                           help="count rows by status in the Parquet parts (exact over resumed runs; reads every part)")
        if name == "wait":
            p.add_argument("--interval", type=float, default=15.0, help="seconds between polls (default 15)")
            p.add_argument("--timeout", type=float, default=None, help="give up after this many seconds (exit 3)")
        if name == "logs":
            p.add_argument("--shard", type=int, default=0, help="shard index (default 0)")
            p.add_argument("-f", "--follow", action="store_true", help="stream until the job ends")
            p.add_argument("--tail", type=int, default=None, help="only the last N lines")
        if name == "cancel":
            p.add_argument("--shard", type=int, action="append", default=None, help="only this shard (repeatable)")
        p.set_defaults(handler=run_jobs)


def _launch_parser(platform: str, adapter: Any) -> argparse.ArgumentParser:
    from llm_ocr.launchers.spec import STAGES

    parser = argparse.ArgumentParser(
        prog=f"llm-ocr launch {platform}",
        usage=f"llm-ocr launch {platform} INPUT... --output OUT --num-shards N [options] [stage options]",
        description=LAUNCH_HELP,
        allow_abbrev=False,  # a stage option must never be taken for an abbreviated launch option
    )
    group = parser.add_argument_group("launch")
    group.add_argument("--output", required=True, help="output URL the jobs can write (hf://, s3://, gs://)")
    group.add_argument("--num-shards", type=int, required=True, help="number of shards (jobs on hf-jobs, tasks on cloud-run)")
    group.add_argument("--stage", choices=STAGES, default="run", help="stage each job runs (default run: all three)")
    group.add_argument("--image", default=None, help="prebuilt image with llm-ocr (default: a stock pinned image + the llm-ocr wheel)")
    group.add_argument("--timeout", default=None, help="per job, seconds or 90m/6h (default: sized from --pages, else 6h)")
    group.add_argument("--attempts", type=int, default=None,
                       help="tries per job (a task on cloud-run) including the first (default 3; 4 on cloud-run); retries resume")
    group.add_argument("--env", action="append", default=[], metavar="NAME=VALUE", help="plain environment variable for the jobs")
    group.add_argument("--secret", action="append", default=[], metavar="NAME",
                       help="pass local environment variable NAME to the jobs as a secret (repeatable)")
    group.add_argument("--pages", type=int, default=None, help="pages in the whole input, to size the timeout")
    group.add_argument("--pages-per-s", type=float, default=None, help="pages/s one job does, to size the timeout")
    group.add_argument("--retry-errors", action="store_true", help="also relaunch finished shards that have failed pages")
    group.add_argument("--wait", action="store_true", help="then show a live table until every shard ends")
    group.add_argument("--interval", type=float, default=15.0, help="seconds between polls with --wait (default 15)")
    group.add_argument("--dry-run", action="store_true", help="print the job specs and API requests as JSON; submit nothing")
    group.add_argument("--offline", action="store_true",
                       help="with --dry-run: check nothing over the network (credentials, the platform's lists, inputs, "
                            "output); the notes name every check skipped")
    adapter.add_arguments(parser)
    return parser


def run_launch(args: argparse.Namespace) -> int:
    """Handle ``llm-ocr launch``."""
    from llm_ocr.launchers import api
    from llm_ocr.launchers import platform_class
    from llm_ocr.launchers.spec import LaunchError

    cls = platform_class(args.platform)
    parser = _launch_parser(args.platform, cls)
    known, stage_tokens = parser.parse_known_args(args.rest)
    try:
        env = dict(_pair(item) for item in known.env)
        result = api.launch(
            args.platform,
            stage_tokens,
            output=known.output,
            num_shards=known.num_shards,
            stage=known.stage,
            hardware=getattr(known, cls.hardware_option, None),
            image=known.image,
            timeout=known.timeout,
            attempts=known.attempts,
            env=env,
            secrets=known.secret,
            pages=known.pages,
            pages_per_s=known.pages_per_s,
            retry_errors=known.retry_errors,
            dry_run=known.dry_run,
            offline=known.offline,
            **cls.options_from_args(known),
        )
    except LaunchError as exc:
        log.error("%s", exc)
        return 2
    from llm_ocr.launchers.core import describe_plan

    if known.dry_run:
        print(json.dumps(result.plan.to_json(), indent=2))
        for line in describe_plan(result.plan):
            log.info("%s", line)
        return 0
    if result.record is None:
        print(f"nothing to launch: every shard of {known.output} is done or still running")
        for line in describe_plan(result.plan):
            print(f"  {line}")
        return 0
    print(result)
    print(f"follow: llm-ocr jobs status {known.output}   (or: llm-ocr jobs wait / logs --shard I / cancel)")
    if not known.wait:
        return 0
    return _wait(known.output, None, known.interval, None)


def run_jobs(args: argparse.Namespace) -> int:
    """Handle ``llm-ocr jobs ...``."""
    from llm_ocr.launchers import api
    from llm_ocr.launchers.spec import LaunchError

    options = json.loads(args.storage_options) if args.storage_options else None
    try:
        if args.jobs_command == "status":
            table = api.status(args.target, launch_id=args.launch_id, count=args.count, storage_options=options)
            print(json.dumps(table.to_dict(), indent=2, sort_keys=True) if args.json else table)
            return 0
        if args.jobs_command == "wait":
            return _wait(args.target, args.launch_id, args.interval, args.timeout, options)
        if args.jobs_command == "logs":
            for line in api.logs(args.target, args.shard, follow=args.follow, tail=args.tail, launch_id=args.launch_id,
                                 storage_options=options):
                print(line, flush=True)
            return 0
        cancelled = api.cancel(args.target, shards=args.shard, launch_id=args.launch_id, storage_options=options)
        print(f"cancel sent to {len(cancelled)} job(s)" + (f": {', '.join(cancelled)}" if cancelled else " (none was running)"))
        return 0
    except LaunchError as exc:
        log.error("%s", exc)
        return 2


def _wait(target: str, launch_id: str | None, interval: float, timeout: float | None, options: dict | None = None) -> int:
    from llm_ocr.launchers import api

    try:
        final = api.wait(target, launch_id=launch_id, interval=interval, timeout=timeout, storage_options=options)
    except TimeoutError as exc:
        log.error("%s; the jobs keep running (llm-ocr jobs status %s)", exc, target)
        return 3
    except KeyboardInterrupt:
        print(f"\nstopped waiting; the jobs keep running: llm-ocr jobs status {target} / llm-ocr jobs cancel {target}", file=sys.stderr)
        return 130
    print(final)
    if not final.succeeded:
        print(f"not every shard finished: see `llm-ocr jobs logs {target} --shard I`; relaunch the same command to "
              "run only the unfinished shards (add --retry-errors to rerun a shard whose pages failed)")
        return 1
    print(f"every shard finished; check every page with `llm-ocr status {target}`")
    return 0


def _pair(item: str) -> tuple[str, str]:
    from llm_ocr.launchers.spec import LaunchError

    name, sep, value = item.partition("=")
    if not sep or not name:
        raise LaunchError(f"--env {item!r}: write NAME=VALUE")
    return name, value
