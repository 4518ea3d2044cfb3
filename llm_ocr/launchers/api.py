"""Launch llm-ocr as N shard jobs on a cloud platform, from Python (the notebooks use this).

::

    from llm_ocr.launchers import api as launch

    job = launch.launch("hf-jobs", ["hf://datasets/me/scans/pdfs"], output="hf://datasets/me/scans-ocr",
                        num_shards=8, flavor="l4x1")
    launch.wait(job.output)             # a live table until every shard ends
    launch.status("hf://datasets/me/scans-ocr")
    for line in launch.logs(job.output, shard=3): print(line)
    launch.cancel(job.output)
    launch.costs(job.output)            # GPU-hours and cost per shard, from the completion markers

Relaunching the same call starts only the shards without completion markers (and not those whose
job is still running). ``llm-ocr launch`` and ``llm-ocr jobs`` are the same functions on the
command line. Everything is checked before anything is submitted: bad input raises
:class:`LaunchError` with what to change.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from llm_ocr.config import JobOptions, OptionError, resolve_options
from llm_ocr.launchers import platform_class
from llm_ocr.launchers.core import (
    cancel_jobs,
    collect_status,
    describe_plan,
    plan_launch,
    shard_logs,
    storage_for,
    submit_plan,
    wait_for,
)
from llm_ocr.launchers.record import LaunchRecord, load_record, looks_like_launch_id, output_of_launch
from llm_ocr.launchers.spec import PRIMARY_STAGE, STAGE_MARKERS, LaunchError, LaunchPlan, LaunchRequest
from llm_ocr.launchers.table import LaunchStatus, marker_costs
from llm_ocr.sources import DatasetOptions
from llm_ocr.storage.state import markers_by_shard
from llm_ocr.storage.stores import redact

__all__ = ["Launch", "LaunchError", "cancel", "costs", "launch", "logs", "status", "wait"]

#: Stage options the launcher sets itself, or that would put a secret in the command line.
_REFUSED = {
    "num_shards": "the launcher sets the shard count (--num-shards of `llm-ocr launch`)",
    "shard_index": "the launcher gives each job its shard",
    "api_key": "a key in the command line is visible to anyone who can see the job: pass --secret LLM_OCR_API_KEY",
    "describe_api_key": "a key in the command line is visible to anyone who can see the job: pass --secret LLM_OCR_DESCRIBE_API_KEY",
}


@dataclass
class Launch:
    """What :func:`launch` did: the plan, and the record of the submitted jobs (None on a dry run
    or when every shard was already done)."""

    plan: LaunchPlan
    record: LaunchRecord | None
    status: LaunchStatus | None = None

    @property
    def launch_id(self) -> str:
        return self.plan.launch_id

    @property
    def output(self) -> str:
        return self.plan.request.output

    @property
    def jobs(self) -> list[dict[str, Any]]:
        """The jobs submitted by this launch."""
        return [j for j in (self.record.jobs if self.record else []) if j.get("launch_id") == self.launch_id]

    def __str__(self) -> str:
        lines = [f"launch {self.launch_id} on {self.plan.platform}: {len(self.jobs)} job(s) submitted"]
        for job in self.jobs:
            shards = ",".join(str(s) for s in job["shards"])
            lines.append(f"  shard {shards}: job {job['job_id']}  {job['url']}" + (f"  (logs: {job['follow']})" if job.get("follow") else ""))
        return "\n".join(lines + [f"  {line}" for line in describe_plan(self.plan)])

    def _repr_html_(self) -> str:
        import html

        return f"<pre>{html.escape(str(self))}</pre>"


def launch(
    platform: str,
    inputs: Sequence[str] | str = (),
    *,
    output: str,
    num_shards: int,
    stage: str = "run",
    stage_args: Sequence[str] = (),
    stage_options: Mapping[str, Any] | None = None,
    hardware: str | None = None,
    image: str | None = None,
    timeout: int | str | None = None,
    attempts: int | None = None,
    env: Mapping[str, str] | None = None,
    secrets: Sequence[str] = (),
    pages: int | None = None,
    pages_per_s: float | None = None,
    retry_errors: bool = False,
    dry_run: bool = False,
    wait: bool = False,
    interval: float = 15.0,
    live: bool = True,
    **platform_options: Any,
) -> Launch:
    """Launch ``llm-ocr STAGE INPUT... --output OUT`` as ``num_shards`` jobs on ``platform``.

    ``stage_args`` are ``llm-ocr STAGE`` options as typed (``["--describe-model", "X"]``);
    ``stage_options`` the same as a mapping (``{"describe_model": "X"}``). ``hardware`` is the
    platform's machine type, also accepted under its own name (``flavor=`` on ``hf-jobs``).
    ``secrets`` names local environment variables passed to the jobs as secrets. ``attempts``:
    tries per job including the first (default: the platform's, 3; 4 on Cloud Run). With
    ``dry_run`` nothing is uploaded or submitted; ``Launch.plan.to_json()`` is the dry-run JSON.
    """
    cls = _platform(platform)
    named = platform_options.pop(cls.hardware_option, None)  # e.g. flavor= on hf-jobs
    hardware = hardware or named
    tokens = [*([inputs] if isinstance(inputs, str) else inputs), *stage_args, *_flags(stage_options or {})]
    request = build_request(
        platform, stage, tokens, output, num_shards,
        hardware=hardware, image=image, timeout_s=_seconds(timeout), attempts=attempts, env=dict(env or {}),
        secret_names=list(secrets), pages=pages, pages_per_s=pages_per_s, retry_errors=retry_errors,
    )
    adapter = cls(**platform_options)
    plan = plan_launch(request, adapter, check_writable=not dry_run)
    if dry_run:
        return Launch(plan, None)
    record = submit_plan(plan, adapter)
    result = Launch(plan, record)
    if wait and record is not None:
        result.status = _wait_record(storage_for(output, request.storage_options), record, interval=interval, timeout=None, live=live)
    return result


def build_request(
    platform: str, stage: str, tokens: Sequence[str], output: str, num_shards: int, **fields: Any
) -> LaunchRequest:
    """A :class:`LaunchRequest` from ``llm-ocr STAGE`` tokens (INPUTs and options, in order),
    checked by the stage's own parser so a mistyped option fails before any job exists."""
    if stage not in STAGE_MARKERS:
        raise LaunchError(f"--stage must be one of {', '.join(STAGE_MARKERS)} (got {stage!r})")
    args = _parse_stage(stage, list(tokens), output)
    for name, why in _REFUSED.items():
        if getattr(args, name, None) is not None:
            raise LaunchError(f"--{name.replace('_', '-')} cannot be passed to launched jobs: {why}")
    try:
        job = resolve_options(JobOptions, args)
        dataset = resolve_options(DatasetOptions, args) if stage in ("run", "extract") else DatasetOptions()
    except OptionError as exc:
        raise LaunchError(str(exc)) from exc
    if redact(job.storage_options) != job.storage_options:
        raise LaunchError(
            "--storage-options holds credentials, which would be visible in the job's command line: pass them "
            "as secrets in the store's own variables (e.g. --secret AWS_ACCESS_KEY_ID --secret AWS_SECRET_ACCESS_KEY)"
        )
    endpoint = getattr(args, "endpoint", None) or (stage == "describe" and getattr(args, "describe_endpoint", None)) \
        or (stage == "fields" and getattr(args, "fields_endpoint", None))
    return LaunchRequest(
        platform=platform,
        inputs=list(getattr(args, "inputs", None) or []),
        output=output,
        num_shards=num_shards,
        stage=stage,  # type: ignore[arg-type]
        stage_args=list(tokens),
        needs_model=stage != "assemble" and not endpoint,
        dataset=dataset,
        storage_options=job.storage_options,
        **fields,
    )


def status(
    target: str, *, launch_id: str | None = None, count: bool = False, storage_options: Mapping[str, Any] | None = None
) -> LaunchStatus:
    """The table of the latest launch to ``target`` (an output URL, or a launch id made here).

    ``count``: count every shard's rows by status in the Parquet parts (exact over resumed runs,
    and checks for duplicates; reads one column of every part) instead of using the markers'
    and progress files' counts of each shard's last run.
    """
    out, record = _resolve(target, launch_id, storage_options)
    table = collect_status(out, record)
    if count:
        _count_rows(out, table)
    return table


def wait(
    target: str,
    *,
    launch_id: str | None = None,
    interval: float = 15.0,
    timeout: float | None = None,
    live: bool = True,
    storage_options: Mapping[str, Any] | None = None,
) -> LaunchStatus:
    """Show a live table until every shard of the launch ends; the final table (with totals)."""
    out, record = _resolve(target, launch_id, storage_options)
    if record is None:
        raise LaunchError(f"{out.url} has no launch record to wait for")
    return _wait_record(out, record, interval=interval, timeout=timeout, live=live)


def logs(
    target: str, shard: int = 0, *, follow: bool = False, tail: int | None = None, launch_id: str | None = None,
    storage_options: Mapping[str, Any] | None = None,
) -> Iterator[str]:
    """Log lines of one shard's latest job (``follow``: until the job ends)."""
    out, record = _resolve(target, launch_id, storage_options)
    if record is None:
        raise LaunchError(f"{out.url} has no launch record")
    return shard_logs(record, shard, follow=follow, tail=tail)


def cancel(
    target: str, *, shards: Sequence[int] | None = None, launch_id: str | None = None,
    storage_options: Mapping[str, Any] | None = None,
) -> list[str]:
    """Cancel the launch's jobs that have not ended (only those of ``shards`` if given); their ids."""
    out, record = _resolve(target, launch_id, storage_options)
    if record is None:
        raise LaunchError(f"{out.url} has no launch record")
    return cancel_jobs(record, set(shards) if shards is not None else None)


def costs(target: str, *, launch_id: str | None = None, storage_options: Mapping[str, Any] | None = None) -> Any:
    """GPU-hours and cost per finished shard, from the completion markers' wall times and the
    launch's hardware price (not from constants)."""
    out, record = _resolve(target, launch_id, storage_options)
    if record is None:
        raise LaunchError(f"{out.url} has no launch record: the hardware and its price are unknown")
    markers = {s: markers_by_shard(out, s, record.num_shards) for s in STAGE_MARKERS[record.stage]}
    return marker_costs(record.stage, markers, hardware=record.hardware, gpus=record.gpus, price_per_hour=record.price_per_hour)


# --------------------------------------------------------------------------------------------


def _platform(name: str) -> Any:
    try:
        return platform_class(name)
    except ValueError as exc:
        raise LaunchError(str(exc)) from exc


class _StageParser(argparse.ArgumentParser):
    """The stage's own parser, raising instead of exiting."""

    stage = ""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise LaunchError(
            f"{message}: not a launch option nor an option of `llm-ocr {self.stage}` "
            f"(see `llm-ocr launch PLATFORM --help` and `llm-ocr {self.stage} --help`)"
        )


def _parse_stage(stage: str, tokens: list[str], output: str) -> argparse.Namespace:
    parser = _StageParser(prog="llm-ocr")
    _StageParser.stage = stage
    sub = parser.add_subparsers(dest="command")
    importlib.import_module(f"llm_ocr.commands.{stage}").register(sub)
    if "--output" in tokens or any(t.startswith("--output=") for t in tokens):
        raise LaunchError("give --output once, as the launch's own option")
    return parser.parse_args([stage, *tokens, "--output", output])


def _flags(options: Mapping[str, Any]) -> list[str]:
    flags: list[str] = []
    for key, value in options.items():
        flag = "--" + key.replace("_", "-")
        if value is True:
            flags.append(flag)
        elif value is False:
            flags.append("--no-" + key.replace("_", "-"))
        elif value is not None:
            flags += [flag, json.dumps(value) if isinstance(value, (dict, list)) else str(value)]
    return flags


def _seconds(value: int | str | None) -> int | None:
    """``3600``, ``"90m"``, ``"2h"`` -> seconds (Hugging Face Jobs' own notation)."""
    if value is None or isinstance(value, int):
        return value
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    text = str(value).strip()
    try:
        return int(float(text[:-1]) * units[text[-1]]) if text[-1:] in units else int(float(text))
    except ValueError:
        raise LaunchError(f"--timeout {value!r}: give seconds or a duration like 90m or 6h") from None


def _resolve(target: str, launch_id: str | None, storage_options: Mapping[str, Any] | None) -> tuple[Any, LaunchRecord | None]:
    output = target
    if looks_like_launch_id(target):
        output = output_of_launch(target) or ""
        if not output:
            raise LaunchError(f"launch {target} was not made from this machine: pass its output URL instead")
        launch_id = launch_id or target
    out = storage_for(output, dict(storage_options or {}))
    record = load_record(out, launch_id)
    if launch_id and record is None:
        raise LaunchError(f"{out.url} has no record of launch {launch_id}")
    return out, record


def _wait_record(out: Any, record: LaunchRecord, *, interval: float, timeout: float | None, live: bool) -> LaunchStatus:
    display = _display(live)
    try:
        final = wait_for(out, record, interval=interval, timeout=timeout, on_update=display.update)
        _count_rows(out, final)
        display.update(final)
    finally:
        display.close()
    return final


def _count_rows(out: Any, table: LaunchStatus) -> None:
    from llm_ocr.storage.reconcile import stage_status

    report = stage_status(out, PRIMARY_STAGE[table.stage])
    suffix = f"-of-{table.num_shards:05d}"
    counts = {int(key[:5]): value for key, value in report["shards"].items() if key.endswith(suffix)}
    table.count_rows(counts, report["duplicates"])


class _Display:
    """Where the live table goes: a notebook output, a terminal (rich), or plain lines."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self._handle: Any = None
        self._live: Any = None
        self._last = ""
        self._status: LaunchStatus | None = None

    def update(self, status: LaunchStatus) -> None:
        self._status = status
        if self.mode == "notebook":
            from IPython.display import display

            if self._handle is None:
                self._handle = display(status, display_id=True)
            else:
                self._handle.update(status)
        elif self.mode == "terminal":
            if self._live is None:
                from rich.console import Console
                from rich.live import Live

                # Transient: the caller prints the final table once the wait is over.
                self._live = Live(status.rich(), console=Console(stderr=True), refresh_per_second=1, transient=True)
                self._live.start()
            else:
                self._live.update(status.rich())
        elif self.mode == "lines":
            # In logs, print when a shard changes state or pages, not every poll.
            key = json.dumps([(r.state, r.counts) for r in status.shards])
            if key != self._last:
                self._last = key
                print(str(status), file=sys.stderr, flush=True)

    def close(self) -> None:
        if self._live is not None:
            self._live.stop()


def _display(live: bool) -> _Display:
    if not live:
        return _Display("off")
    try:
        from IPython import get_ipython

        if get_ipython() is not None and hasattr(get_ipython(), "kernel"):
            return _Display("notebook")
    except ImportError:
        pass
    return _Display("terminal" if sys.stderr.isatty() else "lines")
