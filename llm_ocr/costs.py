"""What a shard's GPU time cost, from a price table of the platforms' GPUs and machines.

Prices are on-demand US$ per GPU-hour from FACTS.md (Hugging Face Jobs flavors: ``l4x1`` 0.80,
``l40sx1`` 1.80, ``a100-large`` 2.50, ``h200`` 5.00; there is no H100 flavor). They are
estimates for planning, not invoices: pass ``--gpu-price-per-hour`` for your own rate.

:data:`HF_JOBS_HARDWARE` maps each Hugging Face Jobs flavor to its GPUs, the vLLM sizing preset
of one of its GPUs (:mod:`llm_ocr.servers.presets`) and its hourly price. The launcher prefers the
live prices of ``HfApi.list_jobs_hardware()``; this table is the fallback when that is not
reachable. Prices of single-GPU flavors are from FACTS.md; multi-GPU flavors are priced here as
the single-GPU price times the GPU count, an estimate marked ``listed=False``; flavors FACTS.md
gives no price for have ``None`` (unknown) until the live list says otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

#: US$ per GPU-hour by GPU preset name (llm_ocr.servers.presets).
PRICE_PER_GPU_HOUR: dict[str, float] = {
    "l4-24gb": 0.80,
    "l40s-48gb": 1.80,
    "a100-80gb": 2.50,
    "a100-40gb": 2.50,
    "h200-141gb": 5.00,
}


def gpu_cost(wall_time_s: float, preset: str | None, price_per_hour: float | None = None, gpus: int = 1) -> dict[str, Any]:
    """GPU-seconds and the estimated cost of holding ``gpus`` GPUs for ``wall_time_s``.

    The GPU is paid for from server start to stop whether or not it is busy, so wall time is
    the honest basis; the price is the explicit one, else the preset's list price, else unknown.
    """
    price = price_per_hour if price_per_hour is not None else PRICE_PER_GPU_HOUR.get(preset or "")
    gpu_seconds = wall_time_s * gpus
    return {
        "preset": preset,
        "gpu_seconds": round(gpu_seconds, 2),
        "price_per_gpu_hour": price,
        "estimated_cost_usd": round(gpu_seconds / 3600 * price, 4) if price is not None else None,
    }


@dataclass(frozen=True)
class Hardware:
    """One machine type a platform rents: what it holds and what an hour of it costs."""

    name: str
    gpus: int
    #: The vLLM sizing preset of one of its GPUs (llm_ocr.servers.presets), None when there is no
    #: named preset (the job sizes vLLM from the GPU it finds) or no GPU.
    gpu_preset: str | None
    #: US$ per hour for the whole machine, None when unknown.
    price_per_hour: float | None
    #: True when the price is a published one, False when estimated (GPU price x GPU count).
    listed: bool = True
    #: The accelerator as people call it, for messages ("A100 80GB").
    accelerator: str = ""


def _flavor(name: str, gpus: int, preset: str | None, unit_price: float | None, accelerator: str, listed: bool = True) -> Hardware:
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


@dataclass(frozen=True)
class CloudRunPrices:
    """Cloud Run Jobs' per-second prices: a task is billed for its GPU, vCPUs and memory."""

    l4_per_s: float
    vcpu_per_s: float
    gib_per_s: float
    region: str
    source: str
    recorded: str


#: From https://cloud.google.com/run/pricing as the seed's notebook copied it (FACTS.md): an L4
#: without zonal redundancy (the launcher disables it), vCPU and memory, us-east4. Recorded here
#: on 2026-11-23 without re-checking the page (no network): check it for your region.
CLOUD_RUN_PRICES = CloudRunPrices(
    l4_per_s=0.0001867,
    vcpu_per_s=0.000018,
    gib_per_s=0.000002,
    region="us-east4",
    source="https://cloud.google.com/run/pricing (via the seed notebook, FACTS.md)",
    recorded="2026-11-23",
)


def cloud_run_hardware(gpus: int, cpu: int, memory_gib: float, prices: CloudRunPrices = CLOUD_RUN_PRICES) -> Hardware:
    """A Cloud Run task's resources as :class:`Hardware`, priced per hour from ``prices``."""
    per_s = gpus * prices.l4_per_s + cpu * prices.vcpu_per_s + memory_gib * prices.gib_per_s
    sizing = f"{cpu} vCPU, {memory_gib:g} GiB"
    name = f"nvidia-l4, {sizing}" if gpus else sizing
    return Hardware(name, gpus, "l4-24gb" if gpus else None, round(per_s * 3600, 4), True, f"L4 24GB, {sizing}" if gpus else sizing)


def cloud_run_usage(
    seconds: float, *, gpus: int, cpu: int, memory_gib: float, prices: CloudRunPrices = CLOUD_RUN_PRICES
) -> list[dict[str, Any]]:
    """What ``seconds`` of task time bill on Cloud Run: one row each for L4-seconds,
    vCPU-seconds and GiB-seconds (``resource``, ``units``, ``price_per_unit``, ``cost_usd``)."""
    rows = [("L4-seconds", seconds * gpus, prices.l4_per_s), ("vCPU-seconds", seconds * cpu, prices.vcpu_per_s),
            ("GiB-seconds", seconds * memory_gib, prices.gib_per_s)]
    return [{"resource": name, "units": round(units, 1), "price_per_unit": price, "cost_usd": round(units * price, 4)}
            for name, units, price in rows]
