"""Plan a launch, whatever the platform: every check before a job exists, and one spec per shard.

:func:`plan_launch` checks everything that can be checked before a job exists (shard count,
where inputs and output live, secrets, the platform's credentials and hardware, that every INPUT
can be read, that OUT can be written, that OUT's completion markers are for the same shard
count) and returns the specs of the shards that still need a job: shards with their completion
markers are done, shards whose job from an earlier launch is still pending or running are left
to it. :mod:`.submit` then ships the code, submits and writes the launch record; :mod:`.follow`
reads it back.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from fsspec.core import split_protocol

from llm_ocr.container.cuda import IMAGE_ENV
from llm_ocr.container.shard_index import format_ranges
from llm_ocr.launchers.core.adapter import Platform
from llm_ocr.launchers.core.command import llm_ocr_command
from llm_ocr.launchers.core.files import LOCAL_PROTOCOLS
from llm_ocr.launchers.core.follow import follower
from llm_ocr.launchers.core.record import LaunchRecord, load_record, new_launch_id
from llm_ocr.launchers.core.sizing import fit_timeout, plan_pages, planning_rate
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
from llm_ocr.outcomes import stage_stats
from llm_ocr.redaction import is_secret_name
from llm_ocr.sources import InputError, InputPlan, plan_inputs
from llm_ocr.sources.listing import _FilesPlan
from llm_ocr.sources.manifest_write import MANIFEST_FOLDER, manifest_inputs, write_manifest
from llm_ocr.stage_table import STAGES
from llm_ocr.storage import Storage
from llm_ocr.storage.access import check_output
from llm_ocr.storage.state import STATE_DIR, marker_layouts, marker_paths, markers_by_shard
from llm_ocr.storage.stores import StorageError

#: Tries per job when neither ``--attempts`` nor the platform (``default_attempts``) says.
DEFAULT_ATTEMPTS = 3
#: What an offline dry run does not check here (the platform adds its own skipped checks).
OFFLINE_NOTE = ("offline: not checked: that the INPUTs can be read (and their page count), that OUT can be written, "
                "OUT's completion markers and launch record (every shard is planned)")


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
    if request.offline:
        # OUT is not even opened: opening a gs:// folder asks Google's metadata server for
        # credentials (gcsfs), which an offline machine answers only after google-auth's retries
        # (about 15 s of backoff, measured).
        found = _Found(None, "not read: --offline", notes=[OFFLINE_NOTE])
    else:
        out = Storage(request.output, request.storage_options)
        found = _read_inputs_and_output(request, out, check_writable=check_writable)
    launch_id = launch_id or new_launch_id()
    timeout, attempts, sizing = _timeout(request, target, platform, found)
    notes = [*found.notes, *target.notes, *_notes(request, target), *sizing]
    specs = [
        _spec(request, target, launch_id, shard, timeout, attempts, user_secrets, shard_env=platform.shard_env)
        for shard in range(request.num_shards)
        if shard not in found.skipped
    ]
    jobs = platform.plan_jobs(specs, target) if specs else []
    plan = LaunchPlan(platform.name, launch_id, request, target, specs, jobs, found.skipped, notes, found.previous)
    if found.listing is not None and found.manifest is not None and check_writable:
        # The commands still name the INPUTs (a dry run's run as they are: kubectl apply); each
        # job finds the manifest in OUT and reads it instead of listing them (llm_ocr.runners.inputs).
        plan.manifest = (found.listing, found.manifest)
    text_of = getattr(platform, "dry_run_text", None)  # an adapter with a form of its own (optional)
    if text_of is not None:
        plan.text = text_of(jobs, target)
    secrets = secret_values(specs, {**target.secrets, **user_secrets})
    assert_no_secret(secrets, "a job spec", [spec.public() for spec in specs])
    assert_no_secret(secrets, "an API request body", [job.body for job in jobs])
    assert_no_secret(secrets, "the dry run", plan.text or "")
    assert_no_secret(secrets, "the launch record", target.info)
    return plan


@dataclass
class _Found:
    """What the INPUTs and OUT say before a launch (nothing, offline)."""

    pages: int | None
    pages_how: str
    previous: LaunchRecord | None = None
    #: shard -> why it is not launched.
    skipped: dict[int, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    #: The manifest the shards read instead of the folder INPUTs (None: they read the INPUTs),
    #: and the listing to write there at submission (None: an earlier launch wrote it).
    manifest: str | None = None
    listing: InputPlan | None = None


def _read_inputs_and_output(request: LaunchRequest, out: Storage, *, check_writable: bool) -> _Found:
    """Every INPUT readable (and its page count, when known), OUT writable (unless a dry run) and
    laid out for this shard count, its latest launch record, and the shards not to launch: done,
    or still running in an earlier launch's job."""
    listed, pages, pages_how = _check_inputs(request)
    if check_writable:
        try:
            check_output(out)
        except StorageError as exc:
            raise LaunchError(str(exc)) from exc
    _check_layout(out, request)
    previous = load_record(out)
    skipped = _finished_shards(out, request)
    skipped.update(_running_shards(previous, request, skipped))
    found = _Found(pages, pages_how, previous, skipped)
    if listed is not None:
        found.manifest, found.listing, note = _manifest(request, out, listed)
        found.notes += [note] if note else []
    return found


def _manifest(request: LaunchRequest, out: Storage, listed: InputPlan) -> tuple[str | None, InputPlan | None, str]:
    """The manifest of folder INPUTs the shards read (:mod:`llm_ocr.sources.manifest_write`),
    ``OUT/_state/manifest/``, and the listing to write there when the launch submits: none when
    an earlier launch wrote it for the same INPUTs (its shards may be reading it, and a resumed
    output keeps its documents' numbers). ``(None, None, "")`` when an INPUT is a file, a dataset
    or a manifest."""
    plans = listed.plans
    if not plans or not all(isinstance(p, _FilesPlan) for p in plans) or \
            not any(isinstance(p, _FilesPlan) and p.is_dir for p in plans):
        return None, None, ""
    url = out.display(out.path(STATE_DIR, MANIFEST_FOLDER))
    try:
        kept = manifest_inputs(url, request.storage_options)
    except (OSError, StorageError) as exc:
        raise LaunchError(f"cannot read {url}: {exc}") from exc
    if kept is not None:
        if kept != list(request.inputs):
            raise LaunchError(f"{url} lists other INPUTs ({', '.join(kept)}): launch these to another --output, or "
                              "remove that manifest if no shard of OUT is running")
        return url, None, f"INPUT: the jobs read the listing an earlier launch wrote, {url}, not the folders"
    count = listed.shard_size(1, 0) or 0
    note = f"INPUT: the folders' listing ({count:,} documents) is written to {url} at launch; the jobs read it"
    # (the jobs find it there: their commands still name the INPUTs)
    return url, listed, note


def write_launch_manifest(plan: LaunchPlan) -> None:
    """Write the manifest :func:`plan_launch` planned (before any job is submitted)."""
    if plan.manifest is None:
        return
    listing, url = plan.manifest
    try:
        write_manifest(listing, url, inputs=list(plan.request.inputs), storage_options=plan.request.storage_options)
    except (OSError, StorageError) as exc:
        raise LaunchError(f"cannot write the INPUTs' manifest to {url}: {exc}") from exc


def _timeout(request: LaunchRequest, target: Target, platform: Platform, found: _Found) -> tuple[int, int, list[str]]:
    """``(timeout, attempts, notes)`` of each job: the notes say how the timeout was sized."""
    rate = request.pages_per_s or planning_rate(target.hardware.gpu_preset, request.stage) * (
        max(target.hardware.gpus, 1) if request.needs_model else 1
    )  # a job serves the model on each of its GPUs
    pages, pages_how = (request.pages, "--pages") if request.pages is not None else (found.pages, found.pages_how)
    attempts = request.attempts if request.attempts is not None else getattr(platform, "default_attempts",
                                                                             DEFAULT_ATTEMPTS)
    try:
        timeout, too_long = fit_timeout(pages, request.num_shards, rate, limit_s=target.max_timeout_s,
                                        attempts=attempts,
                                        requested_s=request.timeout_s)
    except ValueError as exc:
        raise LaunchError(f"{platform.name}: {exc}") from exc
    notes = list(too_long)
    if request.timeout_s is None:
        basis = (f"{pages} pages ({pages_how}) at {rate:g} pages/s per job" if pages is not None
                 else f"page count unknown ({pages_how}); pass --pages N to size it")
        notes.append(f"timeout {timeout // 60} min per job: {basis}")
    return timeout, attempts, notes


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
    if not shared_filesystem:
        _check_no_local_paths(request)
    for name in request.env:
        if is_secret_name(name):
            raise LaunchError(f"--env {name}=... looks like a secret: pass it with --secret {name} (its value is read "
                              "from your environment)")


def _check_no_local_paths(request: LaunchRequest) -> None:
    """Refuse an INPUT or OUT on this machine, which jobs elsewhere cannot see."""
    for url, what in [(request.output, "--output"), *((u, "INPUT") for u in request.inputs)]:
        if split_protocol(url)[0] in LOCAL_PROTOCOLS:
            hint = ("upload it first, e.g. `hf upload OWNER/NAME FOLDER --repo-type dataset`, and pass "
                    "hf://datasets/OWNER/NAME/FOLDER") if what == "INPUT" else "e.g. --output hf://datasets/OWNER/NAME"
            raise LaunchError(
                f"{what} {url!r} is a path on this machine, which the jobs on {request.platform} cannot see; use a URL "
                f"they can reach (hf://datasets/OWNER/NAME[/FOLDER], s3://..., gs://...): {hint}"
            )


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


def _check_inputs(request: LaunchRequest) -> tuple[InputPlan | None, int | None, str]:
    if not request.inputs:
        return None, None, "the stage reads OUT"
    try:
        listed = plan_inputs(request.inputs, dataset=request.dataset, storage_options=request.storage_options)
        return listed, *plan_pages(listed, request.inputs, request.dataset)
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
        platform = follower(previous)
        states = platform.states(candidates)
    except Exception as exc:
        raise LaunchError(
            f"cannot check whether the jobs of launch {previous.launch_id} ({previous.platform}) still run: {exc}; "
            "cancel them (llm-ocr jobs cancel OUT) or wait until they end, then relaunch"
        ) from exc
    running = {}
    for job in candidates:
        state = states.get(job["job_id"])
        for shard in job["shards"]:
            phase = platform.shard_phase(state, shard) if state else None
            if phase is not None and phase.phase in ("pending", "running") and shard not in skipped:
                running[shard] = f"{phase.phase} in job {job['job_id']} (launch {job.get('launch_id')})"
    return running


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


def describe_plan(plan: LaunchPlan) -> list[str]:
    """Human lines about a plan: which shards are not launched and why, and the notes."""
    done = sorted(shard for shard, why in plan.skipped.items() if why == "done")
    lines = [f"not launched: {len(done)} shard(s) already done ({format_ranges(done, ', ')})"] if done else []
    lines += [f"not launched: shard {shard} {why}" for shard, why in sorted(plan.skipped.items()) if why != "done"]
    return lines + [f"note: {note}" for note in plan.notes]
