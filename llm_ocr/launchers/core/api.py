"""Launch llm-ocr as N shard jobs on a cloud platform, from Python (``llm_ocr.launch``).

::

    import llm_ocr

    job = llm_ocr.launch("hf-jobs", "hf://datasets/me/scans", output="hf://datasets/me/scans-ocr",
                         num_shards=8, flavor="l4x1", describe_model="X")
    job.wait()                          # a live table until every shard ends
    job.status(); job.logs(shard=3); job.cancel()
    job.costs()                         # GPU-hours and cost per shard, from the completion markers
    job = llm_ocr.Launch.attach("hf://datasets/me/scans-ocr")   # later, from any machine

Keyword arguments are the long options of ``llm-ocr launch PLATFORM`` in snake_case: the
launch's own (:class:`~llm_ocr.launchers.core.spec.LaunchOptions`), the platform's (its adapter's
``options`` model, e.g. ``flavor``) and the launched stage's (``describe_model``...), each checked
against its typed model before anything is uploaded or submitted; a bad one raises
:class:`LaunchError` naming it (and the closest option, for a misspelt name).

Relaunching the same call starts only the shards without completion markers (and not those whose
job is still running). ``llm-ocr launch`` and ``llm-ocr jobs`` are these functions on the
command line; :func:`status`, :func:`wait`, :func:`logs`, :func:`cancel` and :func:`costs` take
an output URL or a launch id made on this machine.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from llm_ocr.config import OptionError, as_flags, check_names, expand_aliases, resolve_options
from llm_ocr.launchers import platform_class
from llm_ocr.launchers.core.follow import cancel_jobs, collect_status, shard_logs, storage_for, wait_for
from llm_ocr.launchers.core.record import LaunchRecord, load_record, looks_like_launch_id, output_of_launch
from llm_ocr.launchers.core.spec import LaunchError, LaunchOptions, LaunchPlan, LaunchRequest
from llm_ocr.launchers.core.table import LaunchStatus, marker_costs
from llm_ocr.options import DatasetOptions, JobOptions
from llm_ocr.stage_table import STAGES
from llm_ocr.storage.state import markers_by_shard
from llm_ocr.storage.stores import redact

# Planning, shipping, submitting and the estimate are imported by the functions that launch: they
# load the input listing, PDF rendering and the model families (pyarrow, numpy, PIL, pypdfium2),
# which `llm-ocr jobs status`, `logs` and `cancel`, run often while jobs run, have no use for
# (tests/launchers/test_launch_units.py checks that status does not load them).
if TYPE_CHECKING:
    from typing_extensions import Unpack

    from llm_ocr.keywords import LaunchKeywords

__all__ = ["Launch", "LaunchError", "cancel", "costs", "launch", "logs", "status", "wait"]

#: Stage options the launcher sets itself, or that would put a secret in the command line.
REFUSED = {
    "num_shards": "the launcher sets the shard count (--num-shards of `llm-ocr launch`)",
    "shard_index": "the launcher gives each job its shard",
    "api_key": "a key in the command line is visible to anyone who can see the job: pass --secret LLM_OCR_API_KEY",
    "describe_api_key": "a key in the command line is visible to anyone who can see the job: pass --secret "
                        "LLM_OCR_DESCRIBE_API_KEY",
}


class Launch:
    """A launch's jobs, followed through their output: :meth:`status`, :meth:`wait`, :meth:`logs`,
    :meth:`cancel`, :meth:`costs`. Made by :func:`launch`, or by :meth:`attach` from the output
    alone (the launch record kept beside it), later and from any machine."""

    def __init__(
        self,
        output: str,
        *,
        plan: LaunchPlan | None = None,
        record: LaunchRecord | None = None,
        launch_id: str | None = None,
        storage_options: Mapping[str, Any] | None = None,
    ) -> None:
        self.output = output
        #: What :func:`launch` planned (None for an attached launch).
        self.plan = plan
        #: The launch record (None on a dry run, or when every shard was already done).
        self.record = record
        self.launch_id = launch_id or (plan.launch_id if plan else record.launch_id if record else None)
        self.storage_options = dict(storage_options or (plan.request.storage_options if plan else {}))
        #: The final table, when :func:`launch` waited for the jobs.
        self.final: LaunchStatus | None = None

    @classmethod
    def attach(
        cls, output: str, *, launch_id: str | None = None, storage_options: Mapping[str, Any] | None = None
    ) -> Launch:
        """The latest launch to ``output`` (or launch ``launch_id``), from its launch record."""
        out, record = _resolve(output, launch_id, storage_options)
        if record is None:
            raise LaunchError(f"{out.url} has no launch record: nothing was launched to it")
        return cls(record.output, record=record, launch_id=record.launch_id, storage_options=storage_options)

    @property
    def jobs(self) -> list[dict[str, Any]]:
        """The jobs this launch submitted (launch-record entries)."""
        return [j for j in (self.record.jobs if self.record else []) if j.get("launch_id") == self.launch_id]

    def status(self, *, count: bool = False) -> LaunchStatus:
        """The table of this launch's shards (see :func:`status`)."""
        return status(self.output, launch_id=self._id(), count=count, storage_options=self.storage_options)

    def wait(self, *, interval: float = 15.0, timeout: float | None = None, live: bool = True) -> LaunchStatus:
        """A live table until every shard ends; the final table (see :func:`wait`)."""
        return wait(self.output, launch_id=self._id(), interval=interval, timeout=timeout, live=live,
                    storage_options=self.storage_options)

    def logs(self, shard: int = 0, *, follow: bool = False, tail: int | None = None) -> Iterator[str]:
        """Log lines of one shard's job (see :func:`logs`)."""
        return logs(self.output, shard, follow=follow, tail=tail, launch_id=self._id(),
                    storage_options=self.storage_options)

    def cancel(self, *, shards: Sequence[int] | None = None) -> list[str]:
        """Cancel the jobs that have not ended (see :func:`cancel`)."""
        return cancel(self.output, shards=shards, launch_id=self._id(), storage_options=self.storage_options)

    def costs(self) -> Any:
        """GPU-hours and cost per finished shard (see :func:`costs`)."""
        return costs(self.output, launch_id=self._id(), storage_options=self.storage_options)

    def _id(self) -> str | None:
        # A launch that submitted nothing has no record of its own: follow the output's latest.
        return self.launch_id if self.jobs else None

    def __str__(self) -> str:
        if self.plan is None:
            return f"launch {self.launch_id} to {self.output}: {len(self.jobs)} job(s)"
        lines = [f"launch {self.launch_id} on {self.plan.platform}: {len(self.jobs)} job(s) submitted"]
        for job in self.jobs:
            shards = ",".join(str(s) for s in job["shards"])
            follow = f"  (logs: {job['follow']})" if job.get("follow") else ""
            lines.append(f"  shard {shards}: job {job['job_id']}  {job['url']}{follow}")
        from llm_ocr.launchers.core.plan import describe_plan

        return "\n".join(lines + [f"  {line}" for line in describe_plan(self.plan)])

    def __repr__(self) -> str:
        return f"<Launch {self.launch_id} -> {self.output}>"

    def _repr_html_(self) -> str:
        import html

        return f"<pre>{html.escape(str(self))}</pre>"


def launch(
    platform: str,
    inputs: Sequence[str] | str = (),
    *,
    output: str,
    num_shards: int,
    live: bool = True,
    **options: Unpack[LaunchKeywords],
) -> Launch:
    """Launch ``llm-ocr STAGE INPUT... --output OUT`` as ``num_shards`` jobs on ``platform``.

    ``options`` are the long options of ``llm-ocr launch PLATFORM`` in snake_case (see the module
    docstring): ``stage``, ``image``, ``timeout`` (seconds, or ``"90m"``), ``attempts``, ``env``
    (a dict), ``secret`` (names of local variables passed as secrets), ``pages``, ``dry_run``,
    ``wait``...; the platform's (``flavor=`` on hf-jobs, ``instance_type=`` and ``role=`` on
    sagemaker, ``project=`` on cloud-run...); and the stage's (``config="..."``,
    ``describe_model="..."``, ``max_in_flight=128``...), which go to every job's command line.
    With ``dry_run`` nothing is uploaded or submitted: ``Launch.plan.to_json()`` is the dry-run
    JSON; with ``offline`` too, nothing is checked over the network either (the plan's notes say
    what was not checked). ``wait``: follow the jobs until they end (a live table unless ``live``
    is False).
    """
    from llm_ocr.launchers.core.estimate import estimate_launch
    from llm_ocr.launchers.core.plan import plan_launch
    from llm_ocr.launchers.core.submit import submit_plan

    cls = _platform(platform)
    launch_options, platform_options, stage_options = split_options(cls, options)
    try:
        given = LaunchOptions.model_validate({**launch_options, "output": output, "num_shards": num_shards})
    except ValueError as exc:
        raise LaunchError(_brief(exc)) from exc
    if given.offline and not given.dry_run:
        raise LaunchError("--offline plans without checking anything over the network: use it with --dry-run")
    request = build_request(platform, given, inputs, stage_options, hardware=platform_options.get(cls.hardware_option))
    try:
        adapter = cls(**platform_options)
    except ValueError as exc:
        raise LaunchError(_brief(exc)) from exc
    plan = plan_launch(request, adapter, check_writable=not given.dry_run)
    if given.dry_run:
        plan.estimate = estimate_launch(plan)
        return Launch(output, plan=plan)
    record = submit_plan(plan, adapter)
    result = Launch(output, plan=plan, record=record)
    if given.wait and record is not None:
        result.final = _wait_record(storage_for(output, request.storage_options), record, interval=given.interval,
                                    timeout=None, live=live)
    return result


def split_options(cls: Any, options: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """``options`` of a launch on the platform of adapter ``cls``, split by whose they are: the
    launch's, the platform's, the launched stage's. A name none of them takes raises
    :class:`LaunchError` naming the closest one."""
    stage = options.get("stage", "run")
    if stage not in STAGES:
        raise LaunchError(f"--stage must be one of {', '.join(STAGES)} (got {stage!r})")
    try:
        options = expand_aliases(stage, options, f"llm_ocr.launch({cls.name!r}, stage={stage!r})")
    except OptionError as exc:
        raise LaunchError(str(exc)) from exc
    launch_names = set(LaunchOptions.model_fields) - {"output", "num_shards"}
    platform_names = set(cls.options.model_fields)
    stage_names = set(STAGES[stage].option_names()) - {"output"}
    try:
        check_names(options, launch_names | platform_names | stage_names, f"llm-ocr launch {cls.name} --stage {stage}")
    except OptionError as exc:
        raise LaunchError(str(exc)) from exc
    split: tuple[dict[str, Any], dict[str, Any], dict[str, Any]] = ({}, {}, {})
    for name, value in options.items():
        part = 0 if name in launch_names else 1 if name in platform_names else 2
        split[part][name] = value
    return split


def build_request(
    platform: str,
    options: LaunchOptions,
    inputs: Sequence[str] | str,
    stage_options: Mapping[str, Any],
    *,
    hardware: str | None = None,
) -> LaunchRequest:
    """A :class:`LaunchRequest` of ``options`` whose jobs run ``llm-ocr STAGE INPUT...`` with
    ``stage_options``, each checked by the stage's own models so a bad one fails before any job
    exists; the options a launch must not pass on are refused."""
    from llm_ocr.launchers.core.files import ShipError, ship_local_files
    from llm_ocr.vlm.families import family_for

    stage = options.stage
    for name, why in REFUSED.items():
        if stage_options.get(name) is not None:
            raise LaunchError(f"--{name.replace('_', '-')} cannot be passed to launched jobs: {why}")
    given = {**stage_options, "output": options.output}
    try:
        # The launching machine's LLM_OCR_* variables are not the jobs': only what is given counts.
        checked = {name: resolve_options(model, given, naming="flag", environment=False)
                   for name, model in STAGES[stage].models().items()}
    except OptionError as exc:
        raise LaunchError(f"{exc} (an option of `llm-ocr {stage}`)") from exc
    job: JobOptions = checked["job"]  # type: ignore[assignment]
    dataset = checked.get("dataset") or DatasetOptions()
    try:
        stage_options, shipped = ship_local_files(stage_options, options.output)
    except ShipError as exc:
        raise LaunchError(str(exc)) from exc
    if redact(job.storage_options) != job.storage_options:
        raise LaunchError(
            "--storage-options holds credentials, which would be visible in the job's command line: pass them "
            "as secrets in the store's own variables (e.g. --secret AWS_ACCESS_KEY_ID --secret AWS_SECRET_ACCESS_KEY)"
        )
    listed = [inputs] if isinstance(inputs, str) else [str(i) for i in inputs]
    if not STAGES[stage].reads_inputs and listed:
        raise LaunchError(f"llm-ocr {stage} takes no INPUT: it reads OUT ({listed[0]!r} given)")
    # A stage whose model is served elsewhere needs no GPU of its own.
    own_endpoint = {"describe": "describe_endpoint", "fields": "fields_endpoint"}.get(stage)
    describe_endpoint = own_endpoint is not None and stage_options.get(own_endpoint)
    return LaunchRequest(
        **options.model_dump(),
        platform=platform,
        model=job.model,
        recipe=job.recipe,
        gpu_preset=getattr(checked.get("server"), "gpu_preset", None),
        inputs=listed,
        stage_args=[*listed, *as_flags(stage_options)],
        needs_model=stage != "assemble" and not (job.endpoint or describe_endpoint),
        family=family_for(job.model, job.recipe).name,
        hardware=hardware,
        dataset=dataset,
        storage_options=job.storage_options,
        shipped=shipped,
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
    needed = record.needed_markers()
    markers = {s: markers_by_shard(out, s, record.num_shards) for s in needed}
    return marker_costs(record.stage, markers, hardware=record.hardware, gpus=record.gpus,
                        price_per_hour=record.price_per_hour, needed=needed)


# --------------------------------------------------------------------------------------------


def _platform(name: str) -> Any:
    try:
        return platform_class(name)
    except ValueError as exc:
        raise LaunchError(str(exc)) from exc


def _brief(exc: ValueError) -> str:
    """A validation error as one line naming the options (``--attempts: Input should be...``)."""
    errors = getattr(exc, "errors", None)
    if errors is None:
        return str(exc)
    return "; ".join(f"--{'.'.join(str(p) for p in e['loc']).replace('_', '-')}: {e['msg']}" for e in errors())


def _resolve(target: str, launch_id: str | None, storage_options: Mapping[str, Any] | None) -> tuple[Any,
    LaunchRecord | None]:
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

    suffix = f"-of-{table.num_shards:05d}"

    def by_shard(report: dict[str, Any]) -> dict[int, dict[str, int]]:
        return {int(key[:5]): value for key, value in report["shards"].items() if key.endswith(suffix)}

    report = stage_status(out, STAGES[table.stage].primary)
    # A `run` with a schema: Fields' rows too (its duplicates are reported by `llm-ocr status`).
    fields = by_shard(stage_status(out, "fields")) if table.fields else None
    table.count_rows(by_shard(report), report["duplicates"], fields)


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
