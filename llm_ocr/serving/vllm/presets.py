"""The preset a machine's vLLM gets: its GPU found with ``nvidia-smi``, the preset of that GPU
(the table: :mod:`llm_ocr.gpu_presets`), fitted to a model family, and the requests a client keeps
in flight for it.
"""

from __future__ import annotations

import logging
import math
import re
import shutil
import subprocess

from pydantic import BaseModel, ConfigDict, Field

from llm_ocr.gpu_presets import (
    ENGINE_OVERHEAD_GIB,
    GENERIC_PRESET,
    GIB,
    KV_BYTES_PER_TOKEN,
    PRESETS,
    TYPICAL_SEQ_TOKENS,
    GpuPreset,
    sized_preset,
)
from llm_ocr.vlm.families.base import Serving

log = logging.getLogger(__name__)


class GpuInfo(BaseModel):
    """One GPU as ``nvidia-smi`` reports it (the first one when the machine has several)."""

    model_config = ConfigDict(frozen=True)

    name: str = Field(description="Product name, e.g. 'NVIDIA A100-SXM4-80GB'.")
    memory_mib: int = Field(ge=0, description="Total memory in MiB.")
    count: int = Field(default=1, ge=1, description="How many GPUs nvidia-smi listed.")

    @property
    def memory_gib(self) -> float:
        """Total memory in GiB."""
        return self.memory_mib / 1024


# Product-name patterns; the lookarounds keep "L4" from matching "L40S" and "H200" from "GH200".
_NAME_RULES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"(?<![A-Z0-9])H200(?![0-9])"), "h200-141gb"),
    (re.compile(r"(?<![A-Z0-9])H100(?![0-9])"), "h100-80gb"),
    (re.compile(r"(?<![A-Z0-9])A100(?![0-9])"), "a100"),
    (re.compile(r"(?<![A-Z0-9])L40S?(?![0-9A-Z])"), "l40s-48gb"),
    (re.compile(r"(?<![A-Z0-9])L4(?![0-9A-Z])"), "l4-24gb"),
)


def preset_for(gpu: GpuInfo | None) -> GpuPreset:
    """The preset for ``gpu``: by product name, else sized from its memory, else generic.

    A named preset is only used when the GPU has (nearly) the memory it was sized for, so a
    smaller variant or a MIG slice gets a preset sized from its real memory instead.
    """
    if gpu is None:
        return GENERIC_PRESET
    upper = gpu.name.upper()
    for pattern, key in _NAME_RULES:
        if not pattern.search(upper):
            continue
        if key == "a100":
            key = "a100-80gb" if gpu.memory_gib >= 60 else "a100-40gb"
        preset = PRESETS[key]
        if gpu.memory_gib >= 0.95 * preset.gpu_memory_gb:
            return preset
        log.info("GPU %s has %.1f GiB, less than preset %s assumes; sizing from memory",
                 gpu.name, gpu.memory_gib, preset.name)
        break
    if gpu.memory_gib <= ENGINE_OVERHEAD_GIB:
        log.warning("GPU %s has only %.1f GiB; DeepSeek-OCR needs ~7 GB before any KV cache",
                    gpu.name, gpu.memory_gib)
        return GENERIC_PRESET
    return sized_preset(gpu.memory_gib)


def detect_gpu(nvidia_smi: str = "nvidia-smi", timeout: float = 15.0) -> GpuInfo | None:
    """The machine's GPU from ``nvidia-smi``, or None when there is none (or no driver).

    Runs ``nvidia-smi --query-gpu=name,memory.total --format=csv,noheader,nounits``; with
    several GPUs the first is returned with ``count`` set (one server is started per GPU).
    """
    binary = shutil.which(nvidia_smi)
    if binary is None:
        log.debug("%s not found: no NVIDIA GPU", nvidia_smi)
        return None
    cmd = [binary, "--query-gpu=name,memory.total", "--format=csv,noheader,nounits"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        # A wedged driver can hang nvidia-smi; treat it as "no usable GPU" rather than block.
        log.warning("%s did not answer within %.0fs", nvidia_smi, timeout)
        return None
    except OSError as exc:
        log.warning("could not run %s: %s", nvidia_smi, exc)
        return None
    if proc.returncode != 0:
        # E.g. "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver".
        log.warning("%s exited with %d: %s", nvidia_smi, proc.returncode,
                    (proc.stderr or proc.stdout).strip()[:300])
        return None
    gpus: list[tuple[str, int]] = []
    for line in proc.stdout.splitlines():
        name, sep, memory = line.rpartition(",")
        if not sep:
            continue
        try:
            mib = int(float(memory.strip()))
        except ValueError:  # "[N/A]" and the like
            continue
        gpus.append((name.strip(), mib))
    if not gpus:
        log.warning("%s listed no GPU: %r", nvidia_smi, proc.stdout[:300])
        return None
    name, mib = gpus[0]
    return GpuInfo(name=name, memory_mib=mib, count=len(gpus))


def for_family(preset: GpuPreset, serving: Serving) -> GpuPreset:
    """``preset`` sized for a model family: its context as ``--max-model-len``, and as many
    sequences as that family's KV cache holds at its typical page (the same arithmetic as the
    DeepSeek-OCR presets, with the family's weights and KV bytes per token), never more than the
    preset's own. DeepSeek-OCR's figures give the preset back unchanged."""
    same = (
        serving.weights_gib == ENGINE_OVERHEAD_GIB
        and serving.kv_bytes_per_token == KV_BYTES_PER_TOKEN
        and serving.typical_seq_tokens == TYPICAL_SEQ_TOKENS
    )
    update: dict[str, object] = {"max_model_len": serving.context}
    if not same and preset.gpu_memory_gb > 0:
        kv_gib = preset.gpu_memory_gb * preset.gpu_memory_utilization - serving.weights_gib
        tokens = max(0, int(kv_gib * GIB // serving.kv_bytes_per_token))
        seqs = tokens // serving.typical_seq_tokens
        # Multiples of 16 keep the batch aligned with vLLM's CUDA-graph capture sizes.
        seqs = max(8, min(preset.max_num_seqs, (seqs // 16) * 16 or seqs))
        update["max_num_seqs"] = seqs
        update["notes"] = (
            f"{preset.notes} For this family: {preset.gpu_memory_gb:g} x {preset.gpu_memory_utilization:g} - "
            f"{serving.weights_gib:g} GiB = {kv_gib:.1f} GiB KV = ~{tokens} tokens of "
            f"{serving.kv_bytes_per_token // 1024} KiB = ~{tokens // serving.typical_seq_tokens} pages of "
            f"{serving.typical_seq_tokens} tokens -> {seqs}."
        )
    if all(getattr(preset, k) == v for k, v in update.items() if k != "notes"):
        return preset
    return preset.model_copy(update=update)


def client_in_flight(preset: GpuPreset) -> int:
    """Requests the client should keep in flight for ``preset`` (all its GPUs' servers).

    ``max_num_seqs`` keeps every decode slot busy; the extra quarter (at least 8) waits in
    vLLM's queue so a finished sequence is replaced at the next step instead of after a
    client round trip (image encoding and upload take milliseconds; a step takes tens).
    """
    return preset.gpus * (preset.max_num_seqs + max(8, math.ceil(preset.max_num_seqs * 0.25)))
