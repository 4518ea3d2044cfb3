"""Pages per second of a model family on a GPU: where a plan's figure comes from, and saying so.

In order of preference, for a family on a GPU:

1. **measured by you** on that GPU: ``llm-ocr bench-accuracy ... --gpu GPU`` appends its
   pages/s to :func:`measurements_path` (one JSON line per measurement; the latest wins);
2. **published** for that GPU by the family's authors (:data:`PUBLISHED`, each with its source);
3. **scaled** from a measured or published figure on another GPU by the ratio of the two GPUs'
   memory bandwidth (:data:`BANDWIDTH_GBPS`, NVIDIA's datasheets). Decoding a few thousand
   tokens a page is mostly limited by how fast the weights and the KV cache stream from memory,
   so this is the first-order difference between GPUs; batch size, compute and the client's
   feed also count, so a scaled figure is a rough guide, and says so;
4. nothing: "no published figure", and how to measure one. No figure is made up.

Families without a published figure (checked for each in docs/planning.md): olmOCR (its paper
gives a cost per million pages, not a rate on a named GPU), Chandra, dots.ocr, MinerU,
PaddleOCR-VL, Nanonets-OCR2, GLM-OCR (its card gives 1.86 pages/s without naming the GPU),
granite-docling, Qwen-VL.
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

#: The GPUs a plan knows (the vLLM presets' names, llm_ocr.serving.vllm.presets), with their
#: memory bandwidth in GB/s: NVIDIA's datasheets (L4 300, L40S 864, A100 40GB SXM 1,555, A100
#: 80GB SXM 2,039, H100 SXM 3,350, H200 4,800).
BANDWIDTH_GBPS: dict[str, float] = {
    "l4-24gb": 300.0,
    "l40s-48gb": 864.0,
    "a100-40gb": 1555.0,
    "a100-80gb": 2039.0,
    "h100-80gb": 3350.0,
    "h200-141gb": 4800.0,
}
#: How each GPU is named in a plan.
GPU_NAMES: dict[str, str] = {
    "l4-24gb": "L4 24GB",
    "l40s-48gb": "L40S 48GB",
    "a100-40gb": "A100 40GB",
    "a100-80gb": "A100 80GB",
    "h100-80gb": "H100 80GB",
    "h200-141gb": "H200 141GB",
}


@dataclass(frozen=True)
class Published:
    """A throughput its authors published: the family, the GPU, the rate, what they wrote, where."""

    family: str
    gpu: str
    pages_per_s: float
    claim: str
    source: str


#: Published pages/s, by family (the names of ``llm-ocr models``); docs/planning.md cites each.
PUBLISHED: tuple[Published, ...] = (
    Published("deepseek-ocr", "a100-40gb", 200_000 / 86_400, "200k+ pages per day on one A100-40G",
              "DeepSeek-OCR paper (arXiv 2510.18234), abstract"),
    Published("lightonocr", "h100-80gb", 5.71, "5.71 pages/s on a single H100",
              "lightonai/LightOnOCR-1B-1025 model card (the first LightOnOCR)"),
    Published("lightonocr-bbox", "h100-80gb", 5.71, "5.71 pages/s on a single H100",
              "lightonai/LightOnOCR-1B-1025 model card (the first LightOnOCR)"),
)


@dataclass(frozen=True)
class Measured:
    """One pages/s you measured with ``llm-ocr bench-accuracy --gpu``."""

    family: str
    model: str
    gpu: str
    pages_per_s: float
    pages: int
    concurrency: int
    measured_at: str

    def claim(self) -> str:
        return (f"{self.pages_per_s:.2f} pages/s measured by you ({self.model}, {self.pages} pages at concurrency "
                f"{self.concurrency}, {self.measured_at})")


@dataclass(frozen=True)
class Rate:
    """A family's pages/s on one GPU, what kind of figure it is, and where it comes from."""

    pages_per_s: float
    kind: Literal["measured", "published", "scaled", "given"]
    #: Said beside the figure: the claim and its source, or how it was scaled from one.
    label: str

    def to_dict(self) -> dict[str, Any]:
        return {"pages_per_s": round(self.pages_per_s, 4), "kind": self.kind, "label": self.label}


def measurements_path() -> Path:
    """Where measured rates are kept: ``$LLM_OCR_RATES_FILE``, else
    ``$XDG_CACHE_HOME/llm-ocr/rates.jsonl`` (``~/.cache/llm-ocr/rates.jsonl``)."""
    given = os.environ.get("LLM_OCR_RATES_FILE")
    if given:
        return Path(given)
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "llm-ocr" / "rates.jsonl"


def record_measurement(family: str, model: str, gpu: str, pages_per_s: float, pages: int, concurrency: int,
                       path: Path | None = None) -> Path:
    """Append one measurement (``llm-ocr bench-accuracy --gpu``) for later plans; returns the file."""
    target = path or measurements_path()
    target.parent.mkdir(parents=True, exist_ok=True)
    record = {"family": family, "model": model, "gpu": gpu, "pages_per_s": pages_per_s, "pages": pages,
              "concurrency": concurrency, "measured_at": time.strftime("%Y-%m-%d")}
    with target.open("a", encoding="utf-8") as fh:
        fh.write(json.dumps(record) + "\n")
    return target


def read_measurements(path: Path | None = None) -> list[Measured]:
    """Every measurement recorded, oldest first (unreadable lines are skipped)."""
    source = path or measurements_path()
    if not source.exists():
        return []
    found = []
    for line in source.read_text(encoding="utf-8").splitlines():
        try:
            r = json.loads(line)
            found.append(Measured(str(r["family"]), str(r["model"]), str(r["gpu"]), float(r["pages_per_s"]),
                                  int(r["pages"]), int(r["concurrency"]), str(r["measured_at"])))
        except (ValueError, KeyError, TypeError):
            continue
    return [m for m in found if m.pages_per_s > 0 and math.isfinite(m.pages_per_s)]


def rate_for(family: str, gpu: str | None, measured: list[Measured] | None = None) -> Rate | None:
    """The pages/s of ``family`` on one ``gpu`` (a preset name), the best figure there is (see
    the module docstring), or None."""
    mine = [m for m in (measured or []) if m.family == family]
    published = [p for p in PUBLISHED if p.family == family]
    if gpu is not None:
        here = [m for m in mine if m.gpu == gpu]
        if here:
            return Rate(here[-1].pages_per_s, "measured", here[-1].claim())
        for p in published:
            if p.gpu == gpu:
                return Rate(p.pages_per_s, "published", f"published: {p.claim} ({p.source})")
    if gpu not in BANDWIDTH_GBPS:
        return None
    bases: list[tuple[str, float, str]] = [(m.gpu, m.pages_per_s, m.claim()) for m in reversed(mine)]
    bases += [(p.gpu, p.pages_per_s, f"published: {p.claim} ({p.source})") for p in published]
    for base_gpu, rate, claim in bases:
        if base_gpu in BANDWIDTH_GBPS and base_gpu != gpu:
            to, by = BANDWIDTH_GBPS[gpu], BANDWIDTH_GBPS[base_gpu]
            return Rate(rate * to / by, "scaled", f"scaled by memory bandwidth ({to:,.0f} / {by:,.0f} GB/s, a rough "
                                                  f"guide) from {GPU_NAMES.get(base_gpu, base_gpu)}: {claim}")
    return None


def no_figure(family: str) -> str:
    """What a plan says where there is no figure for ``family``."""
    return (f"no published figure for {family}: measure one with `llm-ocr bench-accuracy YOUR.pdf ... --engine-url "
            "URL --concurrency 64 --gpu GPU`, or pass --pages-per-s")


def run_estimate(family: str, preset: str | None, path: Path | None = None) -> dict[str, Any]:
    """What a plan would have estimated for a run of ``family`` on the GPUs of vLLM preset
    ``preset`` (``a100-80gb-x4``: four of them; None: not known, e.g. an ``--endpoint`` given
    without ``--gpu-preset``): recorded in the run's completion marker beside the pages/s it achieved."""
    if preset is None:
        return {"family": family, "pages_per_s": None,
                "label": "no GPU preset: say which GPUs serve an --endpoint with --gpu-preset"}
    base, _, count = preset.partition("-x")
    gpus = int(count) if count.isdigit() else 1
    rate = rate_for(family, base, read_measurements(path))
    if rate is None:
        return {"family": family, "gpu": base, "gpus": gpus, "pages_per_s": None, "label": no_figure(family)}
    return {"family": family, "gpu": base, "gpus": gpus, "pages_per_s": round(rate.pages_per_s * gpus, 4),
            "kind": rate.kind, "label": rate.label}
