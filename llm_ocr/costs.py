"""What a shard's GPU time cost, from a price table of the platforms' GPUs and machines.

Prices are on-demand US$ per GPU-hour (docs/facts.md#hugging-face-jobs; Hugging Face Jobs flavors:
``l4x1`` 0.80, ``l40sx1`` 1.80, ``a100-large`` 2.50, ``h200`` 5.00; there is no H100 flavor). They
are estimates for planning, not invoices: pass ``--gpu-price-per-hour`` for your own rate.

:data:`HF_JOBS_HARDWARE` maps each Hugging Face Jobs flavor to its GPUs, the vLLM sizing preset
of one of its GPUs (:mod:`llm_ocr.serving.vllm.presets`) and its hourly price. The launcher prefers the
live prices of ``HfApi.list_jobs_hardware()``; this table is the fallback when that is not
reachable. Prices of single-GPU flavors are the listed ones (docs/facts.md#hugging-face-jobs);
multi-GPU flavors are priced here as the single-GPU price times the GPU count, an estimate marked
``listed=False``; flavors with no listed price have ``None`` (unknown) until the live list says
otherwise.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

#: US$ per GPU-hour by GPU preset name (llm_ocr.serving.vllm.presets).
PRICE_PER_GPU_HOUR: dict[str, float] = {
    "l4-24gb": 0.80,
    "l40s-48gb": 1.80,
    "a100-80gb": 2.50,
    "a100-40gb": 2.50,
    "h200-141gb": 5.00,
}


def gpu_cost(
    wall_time_s: float, preset: str | None, price_per_hour: float | None = None, gpus: int | None = None
) -> dict[str, Any]:
    """GPU-seconds and the estimated cost of holding ``gpus`` GPUs (default: as many as the
    preset has) for ``wall_time_s``.

    The GPU is paid for from server start to stop whether or not it is busy, so wall time is
    the honest basis; the price is the explicit one, else the preset's list price, else unknown.
    """
    # A multi-GPU preset ("a100-80gb-x4") holds that many GPUs, each at its GPU's price.
    multi = re.search(r"-x(\d+)$", preset or "")
    if gpus is None:
        gpus = int(multi.group(1)) if multi else 1
    base = preset[: multi.start()] if preset and multi else preset or ""
    price = price_per_hour if price_per_hour is not None else PRICE_PER_GPU_HOUR.get(base)
    gpu_seconds = wall_time_s * gpus
    return {
        "preset": preset,
        "gpus": gpus,
        "gpu_seconds": round(gpu_seconds, 2),
        "price_per_gpu_hour": price,
        "estimated_cost_usd": round(gpu_seconds / 3600 * price, 4) if price is not None else None,
    }


@dataclass(frozen=True)
class Hardware:
    """One machine type a platform rents: what it holds and what an hour of it costs."""

    name: str
    gpus: int
    #: The vLLM sizing preset of one of its GPUs (llm_ocr.serving.vllm.presets), None when there is no
    #: named preset (the job sizes vLLM from the GPU it finds) or no GPU.
    gpu_preset: str | None
    #: US$ per hour for the whole machine, None when unknown.
    price_per_hour: float | None
    #: True when the price is a published one, False when estimated (GPU price x GPU count).
    listed: bool = True
    #: The accelerator as people call it, for messages ("A100 80GB").
    accelerator: str = ""
    #: Where the price comes from and when it was found, for the plan's notes ("" when not said).
    price_note: str = ""


def _flavor(name: str, gpus: int, preset: str | None, unit_price: float | None, accelerator: str,
            listed: bool = True) -> Hardware:
    price = None if unit_price is None else round(unit_price * max(gpus, 1), 2)
    return Hardware(name, gpus, preset, price, listed and gpus <= 1, accelerator)


#: Hugging Face Jobs flavors (huggingface_hub 2.4 ``JobHardware``), by name.
HF_JOBS_HARDWARE: dict[str, Hardware] = {
    h.name: h
    for h in (
        _flavor("cpu-basic", 0, None, None, "2 vCPU"),
        _flavor("cpu-upgrade", 0, None, None, "8 vCPU"),
        _flavor("t4-small", 1, None, None, "T4 16GB"),
        _flavor("t4-medium", 1, None, None, "T4 16GB"),
        _flavor("l4x1", 1, "l4-24gb", 0.80, "L4 24GB"),
        _flavor("l4x4", 4, "l4-24gb", 0.80, "4x L4 24GB"),
        _flavor("a10g-small", 1, None, 1.00, "A10G 24GB"),
        _flavor("a10g-large", 1, None, None, "A10G 24GB"),
        _flavor("a10g-largex2", 2, None, None, "2x A10G 24GB"),
        _flavor("a10g-largex4", 4, None, None, "4x A10G 24GB"),
        _flavor("l40sx1", 1, "l40s-48gb", 1.80, "L40S 48GB"),
        _flavor("l40sx4", 4, "l40s-48gb", 1.80, "4x L40S 48GB"),
        _flavor("l40sx8", 8, "l40s-48gb", 1.80, "8x L40S 48GB"),
        _flavor("a100-large", 1, "a100-80gb", 2.50, "A100 80GB"),
        _flavor("a100x4", 4, "a100-80gb", 2.50, "4x A100 80GB"),
        _flavor("a100x8", 8, "a100-80gb", 2.50, "8x A100 80GB"),
        _flavor("h200", 1, "h200-141gb", 5.00, "H200 141GB"),
        _flavor("h200x2", 2, "h200-141gb", 5.00, "2x H200 141GB"),
        _flavor("h200x4", 4, "h200-141gb", 5.00, "4x H200 141GB"),
        _flavor("h200x8", 8, "h200-141gb", 5.00, "8x H200 141GB"),
    )
}


def machine_cost(wall_time_s: float, hardware: Hardware) -> dict[str, Any]:
    """GPU-hours and the estimated cost of holding ``hardware`` for ``wall_time_s``.

    The whole machine is billed whether or not llm-ocr uses every GPU on it.
    """
    price = hardware.price_per_hour
    return {
        "hardware": hardware.name,
        "gpu_hours": round(wall_time_s * hardware.gpus / 3600, 4),
        "price_per_hour": price,
        "estimated_cost_usd": round(wall_time_s / 3600 * price, 4) if price is not None else None,
    }


# --------------------------------------------------------------------------------------------
# SageMaker Processing instance types

#: When the SageMaker prices below were looked up. They are **estimates**: on-demand US$ per
#: instance-hour in us-east-1, other regions cost more or less; AWS's price pages could not be
#: read from here, so each comes from a public copy of AWS's price list or a public cost table
#: (:data:`SAGEMAKER_PRICE_SOURCES`). ``llm-ocr launch sagemaker --price-per-hour X`` replaces
#: them with your own figure; unknown prices show as unknown, never as a guess.
SAGEMAKER_PRICES_AS_OF = "2026-11-23"
SAGEMAKER_PRICE_SOURCES: dict[str, str] = {
    "price-list": "the real-time hosting rows (USE1-Host:ml.*) of AWS's Price List file for SageMaker in us-east-1 "
                  "(published 2026-09/10), as quoted in public research notes; Processing may be priced differently",
    "public-table": "public SageMaker hourly price tables in open-source cost estimators (us-east-1)",
    "public-table-ohio": "a public SageMaker instance price table for us-east-2 (Ohio)",
}


#: SageMaker Processing instance types llm-ocr sizes for: GPUs per instance (the whole machine is
#: billed: a multi-GPU instance must use every GPU, which llm-ocr's multi-GPU serving does from
#: what nvidia-smi lists), the vLLM preset of one GPU (None: sized from the GPU found), the
#: estimated price (None: not found) and where it was found (a key of
#: :data:`SAGEMAKER_PRICE_SOURCES`). Which of them SageMaker Processing accepts is read from the
#: installed botocore's ``ProcessingInstanceType`` enum, not from here.
_SAGEMAKER_ROWS: tuple[tuple[str, int, str | None, float | None, str, str], ...] = (
    # NVIDIA L40S 48 GB
    ("ml.g6e.xlarge", 1, "l40s-48gb", 2.61, "L40S 48GB", "public-table"),
    ("ml.g6e.2xlarge", 1, "l40s-48gb", 2.8026, "L40S 48GB", "price-list"),
    ("ml.g6e.4xlarge", 1, "l40s-48gb", None, "L40S 48GB", ""),
    ("ml.g6e.8xlarge", 1, "l40s-48gb", None, "L40S 48GB", ""),
    ("ml.g6e.16xlarge", 1, "l40s-48gb", None, "L40S 48GB", ""),
    ("ml.g6e.12xlarge", 4, "l40s-48gb", 13.1158, "4x L40S 48GB", "price-list"),
    ("ml.g6e.24xlarge", 4, "l40s-48gb", None, "4x L40S 48GB", ""),
    ("ml.g6e.48xlarge", 8, "l40s-48gb", None, "8x L40S 48GB", ""),
    # NVIDIA L4 24 GB
    ("ml.g6.xlarge", 1, "l4-24gb", 1.1267, "L4 24GB", "price-list"),
    ("ml.g6.2xlarge", 1, "l4-24gb", 1.222, "L4 24GB", "price-list"),
    ("ml.g6.4xlarge", 1, "l4-24gb", None, "L4 24GB", ""),
    ("ml.g6.8xlarge", 1, "l4-24gb", None, "L4 24GB", ""),
    ("ml.g6.16xlarge", 1, "l4-24gb", 4.246, "L4 24GB", "price-list"),
    ("ml.g6.12xlarge", 4, "l4-24gb", 5.752, "4x L4 24GB", "public-table"),
    ("ml.g6.24xlarge", 4, "l4-24gb", 8.344, "4x L4 24GB", "public-table"),
    ("ml.g6.48xlarge", 8, "l4-24gb", None, "8x L4 24GB", ""),
    # NVIDIA A10G 24 GB (no named preset: vLLM is sized from the GPU's memory)
    ("ml.g5.xlarge", 1, None, 1.408, "A10G 24GB", "public-table"),
    ("ml.g5.2xlarge", 1, None, 1.515, "A10G 24GB", "price-list"),
    ("ml.g5.4xlarge", 1, None, 2.03, "A10G 24GB", "public-table"),
    ("ml.g5.8xlarge", 1, None, None, "A10G 24GB", ""),
    ("ml.g5.16xlarge", 1, None, 5.12, "A10G 24GB", "public-table-ohio"),
    ("ml.g5.12xlarge", 4, None, 7.09, "4x A10G 24GB", "public-table"),
    ("ml.g5.24xlarge", 4, None, 10.18, "4x A10G 24GB", "public-table"),
    ("ml.g5.48xlarge", 8, None, 20.36, "8x A10G 24GB", "public-table"),
    # NVIDIA H100 80 GB
    ("ml.p5.4xlarge", 1, "h100-80gb", None, "H100 80GB", ""),
    # CPU only: Assemble, or a stage given --endpoint
    ("ml.m5.large", 0, None, 0.115, "2 vCPU, 8 GiB", "public-table"),
    ("ml.m5.xlarge", 0, None, 0.23, "4 vCPU, 16 GiB", "public-table"),
    ("ml.m5.2xlarge", 0, None, 0.46, "8 vCPU, 32 GiB", "public-table"),
)
SAGEMAKER_HARDWARE: dict[str, Hardware] = {
    name: Hardware(name, gpus, preset, price, True, accelerator) for name, gpus, preset, price, accelerator,
    _ in _SAGEMAKER_ROWS
}


#: The region the built-in SageMaker prices are for.
SAGEMAKER_PRICE_REGION = "us-east-1"


def sagemaker_price_note(instance_type: str, region: str = SAGEMAKER_PRICE_REGION) -> str:
    """Where the built-in price of ``instance_type`` comes from, and when it was found; for a
    ``region`` other than the one priced, that the figure is that region's estimate only."""
    row = next((r for r in _SAGEMAKER_ROWS if r[0] == instance_type), None)
    if row is None or row[3] is None:
        return f"no built-in price for {instance_type}"
    where = (f"on-demand in {SAGEMAKER_PRICE_REGION}" if region == SAGEMAKER_PRICE_REGION else
             f"on-demand in {SAGEMAKER_PRICE_REGION}, NOT {region}: prices differ by region, so for {region} it is "
             "only an estimate")
    return (f"{instance_type}: ${row[3]:g}/h, an estimate ({where}) from "
            f"{SAGEMAKER_PRICE_SOURCES[row[5]]}, as found on {SAGEMAKER_PRICES_AS_OF}")


# --------------------------------------------------------------------------------------------
# AWS Batch: the EC2 instance types a compute environment runs shards on, on-demand and Spot

#: When the EC2 prices below were read, and the region they are for.
EC2_PRICES_AS_OF = "2026-11-26"
EC2_PRICE_REGION = "us-east-1"
#: Where each EC2 price comes from (Linux, shared tenancy). AWS's price pages could not be read from
#: here; the catalog is a public copy of AWS's price list API and Spot price history, and its
#: on-demand figures of g5.xlarge, g6.xlarge and g6e.xlarge agree with public 2026 price notes.
EC2_PRICE_SOURCES: dict[str, str] = {
    "catalog": "on-demand, from AWS's EC2 price list as copied in skypilot-org/skypilot-catalog "
               "(catalogs/v7/aws/vms.csv, commit 001367d)",
    "catalog-spot": "Spot, the lowest zone's price in the same copy: one observation; Spot prices move with "
                    "supply and demand, by zone and hour (https://aws.amazon.com/ec2/spot/pricing/, "
                    "aws ec2 describe-spot-price-history)",
    "public-table": "on-demand, from an open-source cost table quoting instances.vantage.sh (March 2026, after "
                    "AWS's June 2025 P4d/P5 price cut): unverified against AWS's price list",
    "unverified": "Spot: unverified, no observed price here (aws ec2 describe-spot-price-history has yours)",
}

#: The instance types llm-ocr sizes AWS Batch jobs for: GPUs, the vLLM preset of one GPU (None:
#: sized from the GPU found), the accelerator, US$ per instance-hour on-demand and on Spot in
#: :data:`EC2_PRICE_REGION` (None: not found), each with its source (a key of
#: :data:`EC2_PRICE_SOURCES`). Their vCPUs and memory are the launcher's
#: (:mod:`llm_ocr.launchers.aws_batch.request`).
_AWS_BATCH_ROWS: tuple[tuple[str, int, str | None, str, float | None, str, float | None, str], ...] = (
    ("g6e.xlarge", 1, "l40s-48gb", "L40S 48GB", 1.861, "catalog", 0.787, "catalog-spot"),
    ("g6e.2xlarge", 1, "l40s-48gb", "L40S 48GB", 2.24208, "catalog", 0.7381, "catalog-spot"),
    ("g6.xlarge", 1, "l4-24gb", "L4 24GB", 0.8048, "catalog", 0.3879, "catalog-spot"),
    ("g6.2xlarge", 1, "l4-24gb", "L4 24GB", 0.9776, "catalog", 0.3689, "catalog-spot"),
    ("g5.xlarge", 1, None, "A10G 24GB", 1.006, "catalog", 0.397, "catalog-spot"),
    ("g5.2xlarge", 1, None, "A10G 24GB", 1.212, "catalog", 0.4288, "catalog-spot"),
    ("p4d.24xlarge", 8, "a100-40gb", "8x A100 40GB", 21.96, "public-table", None, "unverified"),
    ("p5.48xlarge", 8, "h100-80gb", "8x H100 80GB", 55.04, "public-table", None, "unverified"),
    # CPU only: assemble, or a stage given --endpoint (not priced here).
    ("m5.large", 0, None, "2 vCPU, 8 GiB", None, "", None, ""),
    ("m5.xlarge", 0, None, "4 vCPU, 16 GiB", None, "", None, ""),
)


def _ec2_label(source: str) -> str:
    """A price source's label for the plan: what, where and when."""
    if not source:
        return ""
    return f"{EC2_PRICE_SOURCES[source]}; {EC2_PRICE_REGION}, read {EC2_PRICES_AS_OF}"


#: On-demand, by instance type.
AWS_BATCH_HARDWARE: dict[str, Hardware] = {
    name: Hardware(name, gpus, preset, price, True, accelerator, _ec2_label(source))
    for name, gpus, preset, accelerator, price, source, _, _ in _AWS_BATCH_ROWS
}
#: On Spot, by instance type (the plan's rows are named "TYPE Spot").
AWS_BATCH_SPOT_HARDWARE: dict[str, Hardware] = {
    name: Hardware(f"{name} Spot", gpus, preset, spot, True, accelerator, _ec2_label(source))
    for name, gpus, preset, accelerator, _, _, spot, source in _AWS_BATCH_ROWS if gpus
}


def aws_batch_price_note(instance_type: str, region: str = EC2_PRICE_REGION) -> str:
    """The built-in on-demand and Spot prices of ``instance_type``, where they come from and when;
    for a ``region`` other than the one priced, that they are that region's estimate only."""
    on_demand, spot = AWS_BATCH_HARDWARE.get(instance_type), AWS_BATCH_SPOT_HARDWARE.get(instance_type)
    if on_demand is None or on_demand.price_per_hour is None:
        return f"no built-in price for {instance_type}"
    where = (EC2_PRICE_REGION if region == EC2_PRICE_REGION else
             f"{EC2_PRICE_REGION}, NOT {region}: prices differ by region, so for {region} they are only estimates")
    spot_text = (f"${spot.price_per_hour:g}/h on Spot ({spot.price_note})" if spot and spot.price_per_hour is not None
                 else f"Spot {EC2_PRICE_SOURCES['unverified']}")
    return (f"{instance_type}: ${on_demand.price_per_hour:g}/h on-demand ({on_demand.price_note}), {spot_text}; "
            f"prices for {where}; the cost table uses the on-demand price")


@dataclass(frozen=True)
class CloudRunPrices:
    """Cloud Run Jobs' per-second prices: a task is billed for its GPU, vCPUs and memory."""

    l4_per_s: float
    vcpu_per_s: float
    gib_per_s: float
    region: str
    source: str
    recorded: str


#: From https://cloud.google.com/run/pricing (docs/facts.md#google-cloud-run-jobs): an L4 without
#: zonal redundancy (the launcher disables it), vCPU and memory, us-east4. Recorded here on
#: 2026-11-23 without re-checking the page (no network): check it for your region.
CLOUD_RUN_PRICES = CloudRunPrices(
    l4_per_s=0.0001867,
    vcpu_per_s=0.000018,
    gib_per_s=0.000002,
    region="us-east4",
    source="https://cloud.google.com/run/pricing",
    recorded="2026-11-23",
)


def cloud_run_hardware(gpus: int, cpu: int, memory_gib: float, prices: CloudRunPrices = CLOUD_RUN_PRICES) -> Hardware:
    """A Cloud Run task's resources as :class:`Hardware`, priced per hour from ``prices``."""
    per_s = gpus * prices.l4_per_s + cpu * prices.vcpu_per_s + memory_gib * prices.gib_per_s
    sizing = f"{cpu} vCPU, {memory_gib:g} GiB"
    name = f"nvidia-l4, {sizing}" if gpus else sizing
    return Hardware(name, gpus, "l4-24gb" if gpus else None, round(per_s * 3600, 4), True,
                    f"L4 24GB, {sizing}" if gpus else sizing)


def cloud_run_usage(
    seconds: float, *, gpus: int, cpu: int, memory_gib: float, prices: CloudRunPrices = CLOUD_RUN_PRICES
) -> list[dict[str, Any]]:
    """What ``seconds`` of task time bill on Cloud Run: one row each for L4-seconds,
    vCPU-seconds and GiB-seconds (``resource``, ``units``, ``price_per_unit``, ``cost_usd``)."""
    rows = [("L4-seconds", seconds * gpus, prices.l4_per_s), ("vCPU-seconds", seconds * cpu, prices.vcpu_per_s),
            ("GiB-seconds", seconds * memory_gib, prices.gib_per_s)]
    return [{"resource": name, "units": round(units, 1), "price_per_unit": price, "cost_usd": round(units * price, 4)}
            for name, units, price in rows]
