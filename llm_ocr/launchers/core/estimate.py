"""What a launch would take, shown with its dry run (``llm-ocr launch ... --dry-run``).

The launch's inputs are counted as ``llm-ocr plan`` counts them (nothing rendered), and the run
of its model on its shards is estimated on the machine it picked (marked ``*``, first) and on
every other machine of its platform (:mod:`llm_ocr.planning`). Only stages that read pages with
a model of their own are estimated: the rates are pages read.
"""

from __future__ import annotations

from dataclasses import replace

from llm_ocr.launchers.core.spec import LaunchPlan
from llm_ocr.planning.estimate import PLATFORMS, Plan, plan_rows
from llm_ocr.sources import InputError
from llm_ocr.sources.counting import PageCount, count_input_pages
from llm_ocr.vlm.families import family_for
from llm_ocr.vlm.recipes import DEFAULT_MODEL

#: Stages whose jobs read pages with a model.
READS_PAGES = frozenset({"run", "extract", "escalate"})


def estimate_launch(plan: LaunchPlan) -> Plan | None:
    """The estimate of ``plan``'s run on each machine of its platform; None (with a note on the
    plan saying why) for a stage that reads no pages with a model, or pages that cannot be known."""
    request = plan.request
    if request.stage not in READS_PAGES or not request.needs_model:
        return None
    if request.pages is not None:
        count = PageCount(pages=request.pages, given=True)
    elif request.offline:
        plan.notes.append("plan: not estimated (--offline reads no input): pass --pages N for an estimate")
        return None
    else:
        try:
            count = count_input_pages(request.inputs, dataset=request.dataset, storage_options=request.storage_options)
        except InputError as exc:  # listed once already by the launch's checks: a change since
            plan.notes.append(f"plan: not estimated ({exc})")
            return None
    model = request.model or DEFAULT_MODEL
    family = family_for(model, request.recipe).name
    platforms = [plan.platform] if plan.platform in PLATFORMS else []
    hardware = plan.target.hardware
    if hardware.gpu_preset is None and request.gpu_preset:  # a cluster's GPUs, named with --gpu-preset
        hardware = replace(hardware, gpu_preset=request.gpu_preset.partition("-x")[0])
    rows = plan_rows(family, count.pages, request.num_shards, platforms=platforms,
                     pages_per_s=request.pages_per_s, chosen=(plan.platform, hardware))
    return Plan(count, model, family, request.num_shards, rows)
