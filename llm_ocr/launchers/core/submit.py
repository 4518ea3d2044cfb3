"""Submit a planned launch: ship the code and the local files, submit every job, save the record."""

from __future__ import annotations

from llm_ocr.launchers.core.adapter import Platform
from llm_ocr.launchers.core.files import upload
from llm_ocr.launchers.core.plan import write_launch_manifest
from llm_ocr.launchers.core.record import LaunchRecord, save_record
from llm_ocr.launchers.core.spec import LaunchError, LaunchPlan
from llm_ocr.storage import Storage
from llm_ocr.storage.stores import StorageError


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
    write_launch_manifest(plan)  # after every check: a refused launch writes nothing
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
