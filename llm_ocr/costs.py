"""What a shard's GPU time cost, from a price table of the platforms' GPUs.

Prices are on-demand US$ per GPU-hour from FACTS.md (Hugging Face Jobs flavors: ``l4x1`` 0.80,
``l40sx1`` 1.80, ``a100-large`` 2.50, ``h200`` 5.00; there is no H100 flavor). They are
estimates for planning, not invoices: pass ``--gpu-price-per-hour`` for your own rate.
"""

from __future__ import annotations

import re
from typing import Any

#: US$ per GPU-hour by GPU preset name (llm_ocr.servers.presets).
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
