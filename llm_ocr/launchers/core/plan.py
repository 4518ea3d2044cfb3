"""Plan, submit, follow and cancel a launch, whatever the platform.

:func:`plan_launch` checks everything that can be checked before a job exists (shard count,
where inputs and output live, secrets, the platform's credentials and hardware, that every INPUT
can be read, that OUT can be written, that OUT's completion markers are for the same shard
count) and returns the specs of the shards that still need a job: shards with their completion
markers are done, shards whose job from an earlier launch is still pending or running are left
to it. :func:`submit_plan` ships the code, submits, and writes the launch record. The rest reads
the record, the markers and the progress files back: :func:`collect_status`, :func:`wait_for`,
:func:`cancel_jobs`, :func:`shard_logs`.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterator
from typing import Any

from fsspec.core import split_protocol

from llm_ocr.container.cuda import IMAGE_ENV
from llm_ocr.container.shard_index import format_ranges
from llm_ocr.launchers.core.adapter import JobState, Platform
from llm_ocr.launchers.core.command import llm_ocr_command
from llm_ocr.launchers.core.files import LOCAL_PROTOCOLS, upload
from llm_ocr.launchers.core.record import LaunchRecord, load_record, new_launch_id, save_record
from llm_ocr.launchers.core.sizing import fit_timeout, input_pages, planning_rate
from llm_ocr.launchers.core.spec import (
    LAUNCH_LABEL,
    SHARD_LABEL,
    LaunchError,
    LaunchPlan,
    LaunchRequest,
    ShardSpec,
    Target,
    assert_no_secret,
    secret_values,
)
from llm_ocr.launchers.core.table import LaunchStatus, shard_status
from llm_ocr.outcomes import stage_stats
from llm_ocr.redaction import is_secret_name
from llm_ocr.sources import InputError
from llm_ocr.stage_table import STAGE_FOLDERS, STAGES
from llm_ocr.storage import Storage
from llm_ocr.storage.access import check_output
from llm_ocr.storage.state import marker_layouts, marker_paths, markers_by_shard, read_progress
from llm_ocr.storage.stores import StorageError

log = logging.getLogger("llm_ocr")

#: Names that must go through --secret, never --env.
#: Tries per job when neither ``--attempts`` nor the platform (``default_attempts``) says.
DEFAULT_ATTEMPTS = 3
#: What an offline dry run does not check here (the platform adds its own skipped checks).
OFFLINE_NOTE = ("offline: not checked: that the INPUTs can be read (and their page count), that OUT can be written, "
                "OUT's completion markers and launch record (every shard is planned)")


# --------------------------------------------------------------------------------------------
# Planning


def plan_launch(
    request: LaunchRequest, platform: Platform, *, launch_id: str | None = None, check_writable: bool = True
) -> LaunchPlan:
    """The launch ``request`` would make, after every check; :class:`LaunchError` otherwise.

    ``check_writable=False`` (``--dry-run``) skips the output write check, which may create the
    output repo or write a probe: a dry run changes nothing anywhere. ``request.offline`` skips
    every check that needs the network, here and in the platform's ``resolve``, and says which.
    """
    _check_request(request, shared_filesystem=getattr(platform, "shared_filesystem", False))
    # The platform first: it may refuse --secret (and say what it takes instead) before the
    # local values are looked up.
    target = platform.resolve(request)
    user_secrets = _user_secrets(request)
    out = Storage(request.output, request.storage_options)
    previous, skipped = None, {}
    if request.offline:
        pages, pages_how = None, "not read: --offline"
        offline_notes = [OFFLINE_NOTE]
    else:
        pages, pages_how = _check_inputs(request)
        if check_writable:
            try:
                check_output(out)
            except StorageError as exc:
                raise LaunchError(str(exc)) from exc
        _check_layout(out, request)
        previous = load_record(out)
        skipped = _finished_shards(out, request)
        skipped.update(_running_shards(previous, request, skipped))
        offline_notes = []
    launch_id = launch_id or new_launch_id()
    notes = [*offline_notes, *target.notes, *_notes(request, target)]

    rate = request.pages_per_s or planning_rate(target.hardware.gpu_preset, request.stage) * (
        max(target.hardware.gpus, 1) if request.needs_model else 1
    )  # a job serves the model on each of its GPUs
    if request.pages is not None:
        pages, pages_how = request.pages, "--pages"
    attempts = request.attempts if request.attempts is not None else getattr(platform, "default_attempts",
                                                                             DEFAULT_ATTEMPTS)
    try:
        timeout, too_long = fit_timeout(pages, request.num_shards, rate, limit_s=target.max_timeout_s,
                                        attempts=attempts,
                                        requested_s=request.timeout_s)
    except ValueError as exc:
        raise LaunchError(f"{platform.name}: {exc}") from exc
    notes += too_long
    if request.timeout_s is None:
        basis = (f"{pages} pages ({pages_how}) at {rate:g} pages/s per job" if pages is not None
                 else f"page count unknown ({pages_how}); pass --pages N to size it")
        notes.append(f"timeout {timeout // 60} min per job: {basis}")

    specs = [
        _spec(request, target, launch_id, shard, timeout, attempts, user_secrets, shard_env=platform.shard_env)
        for shard in range(request.num_shards)
        if shard not in skipped
    ]
    jobs = platform.plan_jobs(specs, target) if specs else []
    plan = LaunchPlan(platform.name, launch_id, request, target, specs, jobs, skipped, notes, previous)
    text_of = getattr(platform, "dry_run_text", None)  # an adapter with a form of its own (optional)
    if text_of is not None:
        plan.text = text_of(jobs, target)
    secrets = secret_values(specs, {**target.secrets, **user_secrets})
    assert_no_secret(secrets, "a job spec", [spec.public() for spec in specs])
    assert_no_secret(secrets, "an API request body", [job.body for job in jobs])
    assert_no_secret(secrets, "the dry run", plan.text or "")
    assert_no_secret(secrets, "the launch record", target.info)
    return plan


def _check_request(request: LaunchRequest, *, shared_filesystem: bool = False) -> None:
    """Refuse what no platform can run; local paths only where the jobs share this machine's
    file system (a Slurm cluster's)."""
    if request.num_shards < 1:
        raise LaunchError(f"--num-shards must be at least 1 (got {request.num_shards})")
    if request.stage not in STAGES:
        raise LaunchError(f"--stage must be one of {', '.join(STAGES)} (got {request.stage!r})")
    reads_inputs = STAGES[request.stage].reads_inputs
    if request.attempts is not None and request.attempts < 1:
        raise LaunchError(f"--attempts must be at least 1 (got {request.attempts})")
    if request.timeout_s is not None and request.timeout_s <= 0:
        raise LaunchError(f"--timeout must be positive (got {request.timeout_s})")
    if reads_inputs and not request.inputs:
        raise LaunchError(f"llm-ocr {request.stage} needs at least one INPUT (a URL the jobs can read)")
    if not reads_inputs and request.inputs:
        raise LaunchError(f"llm-ocr {request.stage} takes no INPUT: it reads OUT ({request.inputs[0]!r} given)")
    paths = [] if shared_filesystem else [(request.output, "--output"), *((u, "INPUT") for u in request.inputs)]
    for url, what in paths:
        if split_protocol(url)[0] in LOCAL_PROTOCOLS:
            hint = ("upload it first, e.g. `hf upload OWNER/NAME FOLDER --repo-type dataset`, and pass "
                    "hf://datasets/OWNER/NAME/FOLDER") if what == "INPUT" else "e.g. --output hf://datasets/OWNER/NAME"
            raise LaunchError(
                f"{what} {url!r} is a path on this machine, which the jobs on {request.platform} cannot see; use a URL "
                f"they can reach (hf://datasets/OWNER/NAME[/FOLDER], s3://..., gs://...): {hint}"
            )
    for name in request.env:
        if is_secret_name(name):
            raise LaunchError(f"--env {name}=... looks like a secret: pass it with --secret {name} (its value is read "
                              "from your environment)")


def _user_secrets(request: LaunchRequest) -> dict[str, str]:
    values = {}
    for name in request.secret_names:
        if name in request.env:
            raise LaunchError(f"{name} is given both as --env and --secret; keep it a secret only")
        value = os.environ.get(name)
        if not value:
            raise LaunchError(f"--secret {name}: {name} is not set in this environment; export it first")
        values[name] = value
    return values


def _check_inputs(request: LaunchRequest) -> tuple[int | None, str]:
    if not request.inputs:
        return None, "the stage reads OUT"
    try:
        return input_pages(request.inputs, request.dataset, request.storage_options)
    except InputError as exc:
        raise LaunchError(f"{exc} (checked with this machine's credentials before submitting anything)") from exc


def _check_layout(out: Storage, request: LaunchRequest) -> None:
    for stage in STAGES[request.stage].markers:
        other = marker_layouts(out, stage) - {request.num_shards}
        if other:
            raise LaunchError(
                f"{out.url} already has {stage} completion markers for --num-shards {min(other)}; relaunch with "
                f"--num-shards {min(other)} to finish that run, or write to a new --output"
            )


def _finished_shards(out: Storage, request: LaunchRequest) -> dict[int, str]:
    """Shards with every completion marker of the stage (from listings: no marker is read unless
    ``--retry-errors`` needs their failed-page counts)."""
    needed = request.markers  # `llm-ocr run --schema ...`: a shard without Fields' marker is not done
    paths = {stage: marker_paths(out, stage, request.num_shards) for stage in needed}
    done = {shard: "done" for shard in range(request.num_shards) if all(shard in paths[s] for s in needed)}
    if request.retry_errors:
        primary = STAGES[request.stage].primary
        for shard, marker in markers_by_shard(out, primary, request.num_shards).items():
            stats = stage_stats(marker)
            if shard in done and stats is not None and stats.errors:
                del done[shard]
    return done


def _running_shards(previous: LaunchRecord | None, request: LaunchRequest, skipped: dict[int, str]) -> dict[int, str]:
    """Shards whose job from the previous launch is still pending or running: a second job would
    write the same shard's parts twice."""
    if previous is None or (previous.num_shards, previous.stage) != (request.num_shards, request.stage):
        return {}
    candidates = [j for j in previous.current_jobs() if any(s not in skipped for s in j["shards"])]
    if not candidates:
        return {}
    try:
        follower = _follower(previous)
        states = follower.states(candidates)
    except Exception as exc:
        raise LaunchError(
            f"cannot check whether the jobs of launch {previous.launch_id} ({previous.platform}) still run: {exc}; "
            "cancel them (llm-ocr jobs cancel OUT) or wait until they end, then relaunch"
        ) from exc
    running = {}
    for job in candidates:
        state = states.get(job["job_id"])
        for shard in job["shards"]:
            phase = follower.shard_phase(state, shard) if state else None
            if phase is not None and phase.phase in ("pending", "running") and shard not in skipped:
                running[shard] = f"{phase.phase} in job {job['job_id']} (launch {job.get('launch_id')})"
    return running


def _follower(record: LaunchRecord) -> Platform:
    from llm_ocr.launchers import platform_class

    return platform_class(record.platform).from_record(record.info)


def _notes(request: LaunchRequest, target: Target) -> list[str]:
    hardware = target.hardware
    notes = []
    if hardware.gpus > 1 and request.needs_model:
        notes.append(f"{hardware.name} has {hardware.gpus} GPUs: each job runs one vLLM server per GPU (LLM_OCR_GPUS)")
    notes += [f"{file.source} is copied to {file.url} for the jobs to read" for file in request.shipped]
    if hardware.price_per_hour is None:
        notes.append(f"no price known for {hardware.name}: costs will show as unknown")
    elif not hardware.listed:
        notes.append(f"{hardware.name} price ${hardware.price_per_hour:.2f}/h is an estimate (GPU price x "
                     f"{hardware.gpus})")
    return notes


def _spec(
    request: LaunchRequest,
    target: Target,
    launch_id: str,
    shard: int,
    timeout: int,
    attempts: int,
    user_secrets: dict[str, str],
    *,
    shard_env: bool,
) -> ShardSpec:
    n = request.num_shards
    env = {"LLM_OCR_LAUNCH_ID": launch_id, "LLM_OCR_PROGRESS": "log", "PYTHONUNBUFFERED": "1"}
    if shard_env:
        env.update({"LLM_OCR_NUM_SHARDS": str(n), "LLM_OCR_SHARD_INDEX": str(shard)})
    hardware = target.hardware
    if request.needs_model and hardware.gpus:
        env["LLM_OCR_ENGINE"] = "vllm"
        if target.image:
            env[IMAGE_ENV] = target.image  # named by the start-up CUDA check when the driver cannot run it
        if hardware.gpu_preset:
            env["LLM_OCR_GPU_PRESET"] = hardware.gpu_preset  # the preset of one GPU
        if hardware.gpus > 1:
            env["LLM_OCR_GPUS"] = str(hardware.gpus)  # one vLLM server per GPU: the whole machine is billed
    if hardware.price_per_hour is not None:
        # The markers then record the machine's own price (the whole machine is billed).
        env["LLM_OCR_GPU_PRICE_PER_HOUR"] = f"{hardware.price_per_hour:g}"
    env.update(target.env)
    env.update(request.env)
    return ShardSpec(
        shard_index=shard,
        num_shards=n,
        name=f"llm-ocr-{request.stage}-{shard:05d}-of-{n:05d}",
        image=target.image,
        command=[*target.run_prefix, *llm_ocr_command(request.stage, request.stage_args, request.output)],
        env=env,
        secrets={**target.secrets, **user_secrets},
        hardware=hardware.name,
        timeout_s=timeout,
        attempts=attempts,
        labels={LAUNCH_LABEL: launch_id, SHARD_LABEL: f"{shard:05d}-of-{n:05d}"},
        secret_refs=dict(target.secret_refs),
    )


# --------------------------------------------------------------------------------------------
# Submitting


def submit_plan(plan: LaunchPlan, platform: Platform) -> LaunchRecord | None:
    """Ship the code, submit every job, and save the launch record; None if nothing to launch.

    The record is saved even when a submission fails half-way, with the jobs accepted so far,
    so they can be followed and cancelled; the error then says to relaunch for the rest.
    """
    if not plan.specs:
        return None
    request, target = plan.request, plan.target
    try:
        upload(request.shipped, request.output, request.storage_options)
    except (OSError, StorageError) as exc:
        raise LaunchError(f"could not copy {', '.join(f.source for f in request.shipped)} beside {request.output} for "
                          f"the jobs to read: {exc}") from exc
    platform.deliver(target)
    out = Storage(request.output, request.storage_options)
    record = LaunchRecord(
        launch_id=plan.launch_id,
        platform=plan.platform,
        output=request.output,
        stage=request.stage,
        num_shards=request.num_shards,
        hardware=target.hardware.name,
        gpus=max(target.hardware.gpus, 1),
        price_per_hour=target.hardware.price_per_hour,
        image=target.image,
        info=dict(target.info),
        skipped={str(k): v for k, v in plan.skipped.items()},
        markers=list(request.markers),
    )
    previous = plan.previous
    if previous is not None and (previous.num_shards, previous.stage) == (request.num_shards, request.stage):
        record.carry_over(previous, set(plan.skipped))
    try:
        for submission in platform.submit(plan.jobs, target):
            record.add({
                "job_id": submission.job_id,
                "shards": submission.shards,
                "name": submission.name,
                "url": submission.url,
                "follow": submission.follow_hint,
                "launch_id": plan.launch_id,
            })
    except Exception as exc:
        submitted = sum(1 for j in record.jobs if j.get("launch_id") == plan.launch_id)
        if submitted:
            save_record(out, record)
        raise LaunchError(
            f"submitting to {plan.platform} failed after {submitted} of {len(plan.jobs)} job(s): {exc}"
            + ("; those are recorded (llm-ocr jobs status OUT): relaunch the same command to submit the rest"
               if submitted else "")
        ) from exc
    save_record(out, record)
    return record


# --------------------------------------------------------------------------------------------
# Following


def collect_status(
    out: Storage,
    record: LaunchRecord | None,
    *,
    num_shards: int | None = None,
    stage: str | None = None,
    platform: Platform | None = None,
    cache: dict[str, dict[str, Any]] | None = None,
) -> LaunchStatus:
    """The table of a launch (or, without a record, of whatever OUT's markers and progress say).

    ``cache`` keeps the markers read so far (a poller passes the same dict every time)."""
    if record is not None:
        num_shards, stage = record.num_shards, record.stage
    stage = stage or "run"
    if num_shards is None:
        layouts = set().union(*(marker_layouts(out, s) for s in STAGE_FOLDERS))
        if len(layouts) != 1:
            raise LaunchError(
                f"{out.url} has no launch record"
                + (f" and markers for several shard counts {sorted(layouts)}" if layouts else " and no completion markers")  # noqa: E501 - not wrapped yet
                + ": nothing to show (was it launched with `llm-ocr launch`?)"
            )
        num_shards = layouts.pop()
    if record is not None:
        needed = record.needed_markers()
    else:  # no record: a `run` whose shards have Fields markers ran with a schema
        needed = STAGES[stage].markers
        if stage == "run" and num_shards in marker_layouts(out, "fields"):
            needed = (*needed, "fields")
    # Escalate's markers say how a run's pages were routed and escalated, even where not needed.
    read = (*needed, *(("escalate",) if stage == "run" and "escalate" not in needed else ()))
    markers = {s: markers_by_shard(out, s, num_shards, cache) for s in read}
    progress = {shard: data for (name, shard),
                data in read_progress(out, num_shards).items() if name == STAGES[stage].primary}
    states: dict[str, JobState] = {}
    if record is not None:
        try:
            platform = platform or _follower(record)
            states = platform.states(record.current_jobs())
        except Exception as exc:  # noqa: BLE001 - markers and progress still tell a lot
            log.warning("could not read the jobs' states from %s: %s", record.platform, exc)
    rows = []
    for shard in range(num_shards):
        job = record.job_of_shard(shard) if record else None
        state = None
        if job is not None:
            known = states.get(job["job_id"])
            state = platform.shard_phase(known, shard) if (known and platform) else JobState(job["job_id"], "unknown")
        rows.append(shard_status(
            shard, stage, {s: m[shard] for s, m in markers.items() if shard in m}, progress.get(shard), state,
            gpus=record.gpus if record else 1, price_per_hour=record.price_per_hour if record else None, needed=needed,
        ))
    return LaunchStatus(
        output=out.url,
        stage=stage,
        num_shards=num_shards,
        shards=rows,
        launch_id=record.launch_id if record else None,
        platform=record.platform if record else None,
        hardware=record.hardware if record else None,
        gpus=record.gpus if record else 1,
        price_per_hour=record.price_per_hour if record else None,
        fields="fields" in needed and stage != "fields",
    )


def wait_for(
    out: Storage,
    record: LaunchRecord,
    *,
    interval: float = 15.0,
    timeout: float | None = None,
    on_update: Callable[[LaunchStatus], None] | None = None,
) -> LaunchStatus:
    """Poll until every shard is final (done, failed, cancelled); ``TimeoutError`` after ``timeout``."""
    platform = _follower(record)
    deadline = None if timeout is None else time.monotonic() + timeout
    cache: dict[str, dict[str, Any]] = {}
    while True:
        status = collect_status(out, record, platform=platform, cache=cache)
        if on_update is not None:
            on_update(status)
        if status.finished:
            return status
        if deadline is not None and time.monotonic() >= deadline:
            raise TimeoutError(f"launch {record.launch_id} still running after {timeout:.0f}s")
        time.sleep(interval)


def shard_logs(record: LaunchRecord, shard: int, *, follow: bool = False, tail: int | None = None) -> Iterator[str]:
    """Log lines of ``shard``'s latest job."""
    if not 0 <= shard < record.num_shards:
        raise LaunchError(
            f"--shard {shard} is out of range: launch {record.launch_id} has {record.num_shards} shard(s)"
        )
    job = record.job_of_shard(shard)
    if job is None:
        raise LaunchError(f"shard {shard} has no job in launch {record.launch_id} "
                          f"({record.skipped.get(str(shard), 'not launched')})")
    return _follower(record).logs(job, shard, follow=follow, tail=tail)


def cancel_jobs(record: LaunchRecord, shards: set[int] | None = None) -> list[str]:
    """Cancel the latest jobs of ``shards`` (default: all) that have not ended; their ids."""
    platform = _follower(record)
    jobs = [j for j in record.current_jobs() if shards is None or shards & set(j["shards"])]
    wider = [j for j in jobs if shards is not None and set(j["shards"]) - shards]
    if wider:  # a job array (one Cloud Run execution for all shards) stops as a whole
        raise LaunchError(
            f"job {wider[0]['job_id']} runs shards {format_ranges(sorted(wider[0]['shards']), ', ')} together and "
            f"cannot stop only some of them: cancel it whole with `llm-ocr jobs cancel {record.output}`"
        )
    states = platform.states(jobs)
    live = [j for j in jobs if (s := states.get(j["job_id"])) is None or s.phase in ("pending", "running", "unknown")]
    return platform.cancel(live) if live else []


def describe_plan(plan: LaunchPlan) -> list[str]:
    """Human lines about a plan: which shards are not launched and why, and the notes."""
    done = sorted(shard for shard, why in plan.skipped.items() if why == "done")
    lines = [f"not launched: {len(done)} shard(s) already done ({format_ranges(done, ', ')})"] if done else []
    lines += [f"not launched: shard {shard} {why}" for shard, why in sorted(plan.skipped.items()) if why != "done"]
    return lines + [f"note: {note}" for note in plan.notes]


def storage_for(output: str, storage_options: dict[str, Any] | None = None) -> Storage:
    """The output location as a :class:`Storage`."""
    return Storage(output, storage_options or {})
