"""``llm-ocr launch PLATFORM ...`` and ``llm-ocr jobs {status,wait,logs,cancel} ...``."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from typing import Any, NoReturn

log = logging.getLogger("llm_ocr")

LAUNCH_HELP = """Everything after PLATFORM: INPUT... --output OUT --num-shards N plus the launch options
below; any other option is an option of `llm-ocr STAGE` and is passed to the jobs unchanged
(checked against that command first). `llm-ocr launch PLATFORM --help` lists a platform's options."""


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``launch`` and ``jobs`` sub-commands."""
    from llm_ocr.launchers import PLATFORMS

    parser = sub.add_parser(
        "launch",
        help=f"run a stage as N shard jobs on a cloud platform ({', '.join(sorted(PLATFORMS))}), optionally waiting "
             "with a live table",
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
        p.add_argument("target", metavar="OUT", help="the launch's --output, or its launch id (on the machine that "
                                                     "launched)")
        p.add_argument("--launch", dest="launch_id", default=None, help="a launch id (default: the latest launch to "
                                                                        "OUT)")
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
    from llm_ocr.config import add_options, plain_help
    from llm_ocr.launchers.core.spec import LaunchOptions

    parser = argparse.ArgumentParser(
        prog=f"llm-ocr launch {platform}",
        usage=f"llm-ocr launch {platform} INPUT... --output OUT --num-shards N [options] [stage options]",
        description=LAUNCH_HELP,
        allow_abbrev=False,  # a stage option must never be taken for an abbreviated launch option
    )
    add_options(parser, LaunchOptions, adapter.options, environment=False)
    return plain_help(parser)


class _StageParser(argparse.ArgumentParser):
    """The launched stage's own options (those of ``llm-ocr STAGE``), raising instead of exiting."""

    def error(self, message: str) -> NoReturn:
        from llm_ocr.launchers.core.spec import LaunchError

        stage = self.prog.split()[-1]
        raise LaunchError(
            f"{message}: not a launch option nor an option of `llm-ocr {stage}` "
            f"(see `llm-ocr launch PLATFORM --help` and `llm-ocr {stage} --help`)"
        )


def _stage_options(stage: str, tokens: list[str]) -> tuple[list[str], dict[str, Any]]:
    """The INPUTs and the options given (as typed) among the tokens of ``llm-ocr STAGE``."""
    from llm_ocr.commands.stage import add_stage_options
    from llm_ocr.stage_table import STAGES

    parser = _StageParser(prog=f"llm-ocr {stage}", allow_abbrev=False)
    add_stage_options(parser, stage)  # with --schema, --from for a stage that runs Fields, as `llm-ocr run|fields`
    if not STAGES[stage].reads_inputs:
        parser.add_argument("inputs", nargs="*", help=argparse.SUPPRESS)  # refused with a message by the launcher
    given = {name: value for name, value in vars(parser.parse_args(tokens)).items() if value is not None}
    inputs = given.pop("inputs", [])
    return [str(i) for i in inputs], given


def run_launch(args: argparse.Namespace) -> int:
    """Handle ``llm-ocr launch``."""
    from llm_ocr.config import OptionError, fragment_flags, join_fragments, resolve_options
    from llm_ocr.launchers import platform_class
    from llm_ocr.launchers.core import api
    from llm_ocr.launchers.core.plan import describe_plan
    from llm_ocr.launchers.core.spec import LaunchError, LaunchOptions

    cls = platform_class(args.platform)
    parser = _launch_parser(args.platform, cls)
    known, stage_tokens = parser.parse_known_args(join_fragments(args.rest, fragment_flags(parser)))
    try:
        options = {name: value for name, value in vars(known).items() if value is not None}
        # Checked here for the message's sake (the flag names); launch() checks them again.
        launch_options = resolve_options(LaunchOptions, options, environment=False)
        inputs, stage_options = _stage_options(launch_options.stage, stage_tokens)
        options.pop("wait", None)  # waited for below, with the command line's messages
        job = api.launch(args.platform, inputs, **options, **stage_options)
    except (LaunchError, OptionError) as exc:
        log.error("%s", exc)
        return 2
    if launch_options.dry_run:
        assert job.plan is not None
        # One document on stdout: the platform's own form when it has one (k8s --yaml), else the JSON.
        print(job.plan.text if job.plan.text is not None else json.dumps(job.plan.to_json(), indent=2))
        for line in describe_plan(job.plan):
            log.info("%s", line)
        if job.plan.estimate is not None:
            for line in job.plan.estimate.lines():
                log.info("plan: %s", line)
        return 0
    if job.record is None:
        print(f"nothing to launch: every shard of {job.output} is done or still running")
        for line in describe_plan(job.plan):  # type: ignore[arg-type]
            print(f"  {line}")
        return 0
    print(job)
    print(f"follow: llm-ocr jobs status {job.output}   (or: llm-ocr jobs wait / logs --shard I / cancel)")
    if not launch_options.wait:
        return 0
    return _wait(job.output, None, launch_options.interval, None)


def run_jobs(args: argparse.Namespace) -> int:
    """Handle ``llm-ocr jobs ...``."""
    from llm_ocr.launchers.core import api
    from llm_ocr.launchers.core.spec import LaunchError

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
        which = f": {', '.join(cancelled)}" if cancelled else " (none was running)"
        print(f"cancel sent to {len(cancelled)} job(s){which}")
        return 0
    except LaunchError as exc:
        log.error("%s", exc)
        return 2


def _wait(target: str, launch_id: str | None, interval: float, timeout: float | None,
          options: dict | None = None) -> int:
    from llm_ocr.launchers.core import api

    try:
        final = api.wait(target, launch_id=launch_id, interval=interval, timeout=timeout, storage_options=options)
    except TimeoutError as exc:
        log.error("%s; the jobs keep running (llm-ocr jobs status %s)", exc, target)
        return 3
    except KeyboardInterrupt:
        print(f"\nstopped waiting; the jobs keep running: llm-ocr jobs status {target} / llm-ocr jobs cancel {target}",
              file=sys.stderr)
        return 130
    print(final)
    if not final.succeeded:
        print(f"not every shard finished: see `llm-ocr jobs logs {target} --shard I`; relaunch the same command to "
              "run only the unfinished shards (add --retry-errors to rerun a shard whose pages failed)")
        return 1
    print(f"every shard finished; check every page with `llm-ocr status {target}`")
    return 0
