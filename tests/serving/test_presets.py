"""GPU presets and nvidia-smi detection (with a fake nvidia-smi on PATH)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from llm_ocr.gpu_presets import (
    DEEPSEEK_OCR_CONTEXT,
    GENERIC_PRESET,
    KV_BYTES_PER_TOKEN,
    PRESETS,
    TYPICAL_SEQ_TOKENS,
    kv_cache_tokens,
    sized_preset,
)
from llm_ocr.serving.vllm.presets import GpuInfo, client_in_flight, detect_gpu, preset_for


def fake_smi(tmp_path: Path, output: str, *, exit_code: int = 0, sleep: float = 0) -> Path:
    """A fake ``nvidia-smi`` in its own directory; returns that directory (for PATH)."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    data = tmp_path / "smi-output.txt"
    data.write_text(output)
    args = tmp_path / "smi-args.txt"
    script = bindir / "nvidia-smi"
    script.write_text(
        "#!/bin/sh\n"
        f'echo "$@" > "{args}"\n'
        + (f"sleep {sleep}\n" if sleep else "")
        + f'cat "{data}"\n'
        f"exit {exit_code}\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return bindir


@pytest.fixture
def smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Install a fake nvidia-smi printing the given text; returns its argv file."""

    def install(output: str, **kwargs) -> Path:
        bindir = fake_smi(tmp_path, output, **kwargs)
        monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}")
        return tmp_path / "smi-args.txt"

    return install


# Lines as nvidia-smi --query-gpu=name,memory.total --format=csv,noheader,nounits prints them.
@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("NVIDIA A100-SXM4-80GB, 81920", "a100-80gb"),
        ("NVIDIA A100 80GB PCIe, 81920", "a100-80gb"),
        ("NVIDIA A100-SXM4-40GB, 40960", "a100-40gb"),
        ("NVIDIA A100-PCIE-40GB, 40536", "a100-40gb"),
        ("NVIDIA H100 80GB HBM3, 81559", "h100-80gb"),
        ("NVIDIA H100 PCIe, 81559", "h100-80gb"),
        ("NVIDIA H200, 143771", "h200-141gb"),
        ("NVIDIA L40S, 46068", "l40s-48gb"),
        ("NVIDIA L4, 23034", "l4-24gb"),
    ],
)
def test_detect_and_match_named_gpus(smi, line: str, expected: str) -> None:
    args_file = smi(line + "\n")
    gpu = detect_gpu()
    assert gpu is not None
    assert gpu.name == line.rsplit(",", 1)[0]
    assert gpu.memory_mib == int(line.rsplit(",", 1)[1])
    assert gpu.count == 1
    assert args_file.read_text().split() == ["--query-gpu=name,memory.total", "--format=csv,noheader,nounits"]
    assert preset_for(gpu).name == expected


def test_several_gpus_first_one_counted(smi) -> None:
    smi("NVIDIA L4, 23034\nNVIDIA L4, 23034\nNVIDIA L4, 23034\nNVIDIA L4, 23034\n")
    gpu = detect_gpu()
    assert gpu == GpuInfo(name="NVIDIA L4", memory_mib=23034, count=4)


@pytest.mark.parametrize(
    "line",
    [
        "NVIDIA A10G, 23028",  # no named preset: sized from memory
        "NVIDIA GH200 480GB, 97871",  # contains "H200" but is not one
        "NVIDIA L40S, 20000",  # a name whose preset assumes more memory than there is
    ],
)
def test_unknown_or_smaller_gpus_are_sized_from_memory(smi, line: str) -> None:
    smi(line + "\n")
    gpu = detect_gpu()
    assert gpu is not None
    preset = preset_for(gpu)
    assert preset.name.startswith("generic-")
    assert preset.max_num_seqs * TYPICAL_SEQ_TOKENS <= preset.kv_cache_tokens(gpu.memory_gib)


def test_missing_binary_means_no_gpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty directory: no nvidia-smi
    assert detect_gpu() is None
    assert detect_gpu(nvidia_smi=str(tmp_path / "nope")) is None
    assert preset_for(None) == GENERIC_PRESET


def test_failing_smi_means_no_gpu(smi) -> None:
    smi("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n", exit_code=9)
    assert detect_gpu() is None


def test_hanging_smi_times_out(smi) -> None:
    smi("NVIDIA L4, 23034\n", sleep=10)
    assert detect_gpu(timeout=0.5) is None


def test_unparsable_output_means_no_gpu(smi) -> None:
    smi("No devices were found\n")
    assert detect_gpu() is None
    smi("NVIDIA L4, [N/A]\n")
    assert detect_gpu() is None


def test_kv_arithmetic() -> None:
    # 12 layers x 10 KV heads x 128 dims, K and V, bf16: 60 KiB per token.
    assert KV_BYTES_PER_TOKEN == 60 * 1024
    assert kv_cache_tokens(80, 0.92) == pytest.approx(1_128_000, rel=0.01)
    assert kv_cache_tokens(8, 0.9) == 0  # the model alone does not fit


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_presets_fit_their_kv_cache(name: str) -> None:
    preset = PRESETS[name]
    assert preset.max_model_len == DEEPSEEK_OCR_CONTEXT
    # Every running sequence of an ordinary page fits in the KV cache: no preemption churn.
    assert preset.max_num_seqs * TYPICAL_SEQ_TOKENS <= preset.kv_cache_tokens()
    # ...and at least a few full-context pages fit (a page may hit max_tokens).
    assert preset.kv_cache_tokens() >= 8 * DEEPSEEK_OCR_CONTEXT
    # A step can hold one whole page's prefill next to the decode batch.
    assert preset.max_num_batched_tokens >= 2048
    assert 0.8 <= preset.gpu_memory_utilization <= 0.95


def test_presets_are_ordered_by_memory() -> None:
    seqs = {name: p.max_num_seqs for name, p in PRESETS.items()}
    assert seqs["l4-24gb"] < seqs["a100-40gb"] < seqs["l40s-48gb"] < seqs["a100-80gb"]
    assert seqs["a100-80gb"] <= seqs["h100-80gb"] < seqs["h200-141gb"]
    # vLLM's default of 256 would overcommit an L4's KV cache several times.
    assert seqs["l4-24gb"] <= 64


def test_sized_preset_grows_with_memory_and_is_capped() -> None:
    small, mid, big = sized_preset(16), sized_preset(32), sized_preset(500)
    assert small.max_num_seqs < mid.max_num_seqs < big.max_num_seqs == 256
    assert small.max_num_seqs >= 8


def test_client_in_flight_adds_a_queue() -> None:
    assert client_in_flight(PRESETS["a100-80gb"]) == 256 + 64
    assert client_in_flight(PRESETS["l4-24gb"]) == 64 + 16
    assert client_in_flight(GENERIC_PRESET) == 32 + 8  # at least 8 extra
    tiny = GENERIC_PRESET.model_copy(update={"max_num_seqs": 4})
    assert client_in_flight(tiny) == 12
