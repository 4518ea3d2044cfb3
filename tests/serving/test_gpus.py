"""How many vLLM servers a machine gets: presets for multi-GPU machines and platform hardware
names, and the choice between one server per GPU and the user's own vLLM parallelism."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from llm_ocr.gpu_presets import HARDWARE_PRESETS, PRESETS, named_preset, with_gpus
from llm_ocr.serving.open import EndpointError, ServerOptions, choose_engine
from llm_ocr.serving.vllm.fleet import gpu_devices
from llm_ocr.serving.vllm.presets import client_in_flight
from tests.serving.test_presets import fake_smi


@pytest.mark.parametrize(
    ("hardware", "preset", "gpus"),
    [
        ("a100x4", "a100-80gb-x4", 4), ("l40sx4", "l40s-48gb-x4", 4), ("h200x8", "h200-141gb-x8", 8),
        ("ml.g6e.12xlarge", "l40s-48gb-x4", 4), ("ml.g6e.48xlarge", "l40s-48gb-x8", 8), ("l4x1", "l4-24gb", 1),
    ],
)  # fmt: skip
def test_platform_hardware_names_map_to_presets(hardware: str, preset: str, gpus: int) -> None:
    found = named_preset(hardware)
    assert found is not None and found.name == preset and found.gpus == gpus
    # Each server of a multi-GPU preset is sized exactly like the one-GPU preset.
    single = PRESETS[found.per_gpu]
    assert (found.max_num_seqs, found.gpu_memory_utilization) == (single.max_num_seqs, single.gpu_memory_utilization)
    assert client_in_flight(found) == gpus * client_in_flight(single)


def test_every_hardware_name_resolves() -> None:
    assert all(named_preset(name) is not None for name in HARDWARE_PRESETS)
    assert named_preset("a100x3") is None


def test_with_gpus_round_trips() -> None:
    four = with_gpus(PRESETS["a100-80gb"], 4)
    assert four.name == "a100-80gb-x4" and with_gpus(four, 1) == PRESETS["a100-80gb"]
    assert with_gpus(four, 2).name == "a100-80gb-x2"


def test_cuda_visible_devices_narrows_the_gpus() -> None:
    assert gpu_devices(4, visible="") == ["0", "1", "2", "3"]
    assert gpu_devices(2, visible="3, 5,7") == ["3", "5"]


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({}, "l4-24gb-x4"),  # detected: every GPU
        ({"gpus": 2}, "l4-24gb-x2"),
        ({"gpus": 1}, "l4-24gb"),
        ({"server_args": "-tp 4"}, "l4-24gb"),  # vLLM's own parallelism: one server
        ({"gpu_preset": "l40sx8"}, "l40s-48gb-x4"),  # the preset wants 8, nvidia-smi lists 4
        ({"gpu_preset": "a100-80gb"}, "a100-80gb"),
    ],
)
def test_choose_engine_starts_one_server_per_detected_gpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, options, expected) -> None:
    bindir = fake_smi(tmp_path, "NVIDIA L4, 23034\n" * 4)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    engine, _, preset = choose_engine(ServerOptions(engine="vllm", **options))
    assert engine == "vllm" and preset is not None and preset.name == expected


def test_unknown_preset_names_the_hardware_names_too() -> None:
    with pytest.raises(EndpointError, match=re.escape("ml.g6e.12xlarge")):
        choose_engine(ServerOptions(engine="vllm", gpu_preset="tpu-v5"))
