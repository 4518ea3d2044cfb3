"""The CUDA-versus-driver check a job runs before vLLM starts, with fake ``nvidia-smi`` programs
(printing the header real drivers print) and stand-in images (a ``torch/version.py`` on the
image Python's path, or the ``CUDA_VERSION`` NVIDIA's base images set)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from llm_ocr.container.cuda import CudaMismatch, check_cuda, driver_cuda, interpreter_of
from llm_ocr.launchers.core.command import BOOTSTRAP, VLLM_IMAGE
from llm_ocr.launchers.core.wheel import build_wheel
from tests.conftest import REPO, run_cli
from tests.docs import make_corpus
from tests.fakes.container import FAKES

#: nvidia-smi's header on Cloud Run's L4 (driver and CUDA from Cloud Run's "Configure GPUs for jobs").
CLOUD_RUN_L4 = """+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI 535.216.03             Driver Version: 535.216.03   CUDA Version: 12.2     |
|-----------------------------------------+------------------------+----------------------+
|   0  NVIDIA L4                      Off |   00000000:00:03.0 Off |                    0 |
+-----------------------------------------+------------------------+----------------------+
"""
#: A 470 driver (SageMaker Inference's for ml.g5, CUDA 11.4), its header without the CUDA column.
OLD_DRIVER = "| NVIDIA-SMI 470.256.02   Driver Version: 470.256.02 |\n"


def fake_smi(folder: Path, header: str) -> Path:
    """A bin folder whose ``nvidia-smi`` prints ``header`` (and fails on any query option)."""
    folder.mkdir(parents=True, exist_ok=True)
    smi = folder / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\n[ $# -eq 0 ] || exit 6\ncat <<'EOF'\n{header}EOF\n")
    smi.chmod(0o755)
    return folder


def fake_torch(folder: Path, cuda: str | None) -> Path:
    """A site folder with a ``torch`` whose version.py says ``cuda = ...`` as torch's wheels do."""
    package = folder / "torch"
    package.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text("raise ImportError('a stand-in: read version.py, never import torch')\n")
    (package / "version.py").write_text(f"__version__ = '2.13.0'\ncuda: Optional[str] = {cuda!r}\n")
    return folder


def environ(tmp_path: Path, header: str | None, cuda: str | None, **extra: str) -> dict[str, str]:
    path = [str(fake_smi(tmp_path / "bin", header))] if header is not None else []
    env = {"PATH": os.pathsep.join([*path, os.path.dirname(sys.executable), "/usr/bin", "/bin"]), **extra}
    if cuda is not None:
        env["PYTHONPATH"] = str(fake_torch(tmp_path / "site", cuda))
    return env


def test_a_cuda_13_image_on_cloud_runs_l4_driver_is_refused_naming_both_and_the_image_to_use(tmp_path: Path) -> None:
    with pytest.raises(CudaMismatch) as info:
        check_cuda(sys.executable, environ(tmp_path, CLOUD_RUN_L4, "13.0", LLM_OCR_IMAGE="docker.io/vllm/vllm-openai:v0.29.0"))
    message = str(info.value)
    assert "driver 535.216.03 runs CUDA up to 12.2" in message
    assert "docker.io/vllm/vllm-openai:v0.29.0's vLLM is built for CUDA 13.0" in message
    assert "vllm/vllm-openai:v0.29.0-cu129" in message and "VLLM_ENABLE_CUDA_COMPATIBILITY=1" in message


def test_the_default_image_runs_on_cloud_runs_driver_through_minor_version_compatibility(tmp_path: Path) -> None:
    # The launchers' default image is the CUDA 12.9 build: the same major version as the driver.
    assert VLLM_IMAGE.endswith("-cu129")
    note = check_cuda(sys.executable, environ(tmp_path, CLOUD_RUN_L4, "12.9"))
    assert "minor version compatibility" in note and "12.2" in note and "12.9" in note


def test_forward_compatibility_asked_for_is_allowed_with_a_warning(tmp_path: Path) -> None:
    note = check_cuda(sys.executable, environ(tmp_path, CLOUD_RUN_L4, "13.0", VLLM_ENABLE_CUDA_COMPATIBILITY="1"))
    assert "forward compatibility" in note and "not tested" in note


def test_a_driver_without_the_cuda_column_is_read_from_nvidias_table(tmp_path: Path) -> None:
    assert driver_cuda("470.256.02") == (11, 4) and driver_cuda("535.216.03") == (12, 2)
    assert driver_cuda("580.95.05") == (13, 0) and driver_cuda("440.33.01") is None
    with pytest.raises(CudaMismatch, match=r"driver 470\.256\.02 runs CUDA up to 11\.4.*No vLLM image that serves "
                                           r"DeepSeek-OCR is built for CUDA 11"):
        check_cuda(sys.executable, environ(tmp_path, OLD_DRIVER, "12.9"))


def test_the_images_cuda_version_variable_is_read_without_torch(tmp_path: Path) -> None:
    with pytest.raises(CudaMismatch, match=r"CUDA 13\.0 \(the image's CUDA_VERSION\)"):
        check_cuda(sys.executable, environ(tmp_path, CLOUD_RUN_L4, None, CUDA_VERSION="13.0.2"))


@pytest.mark.parametrize("header, cuda, expected", [
    (None, "13.0", "no NVIDIA driver found"),  # no nvidia-smi: nothing to check
    (CLOUD_RUN_L4, None, "unknown"),  # no torch, no CUDA_VERSION
])
def test_nothing_to_compare_is_said_not_guessed(tmp_path: Path, header: str | None, cuda: str | None, expected: str) -> None:
    env = environ(tmp_path, header, cuda)
    env["PATH"] = env["PATH"].replace(os.path.dirname(sys.executable) + os.pathsep, "")
    assert expected in check_cuda(sys.executable if cuda else "/nonexistent/python", env)


def test_a_cpu_build_of_torch_has_nothing_to_check(tmp_path: Path) -> None:
    assert "unknown" in check_cuda(sys.executable, environ(tmp_path, CLOUD_RUN_L4, None))
    env = environ(tmp_path, CLOUD_RUN_L4, None, CUDA_VERSION="13.0.2")
    env["PYTHONPATH"] = str(fake_torch(tmp_path / "cpu", None))
    assert "unknown" in check_cuda(sys.executable, env)  # torch without CUDA wins over the variable


def test_the_interpreter_of_a_console_script_is_its_shebang(tmp_path: Path) -> None:
    script = tmp_path / "vllm"
    script.write_text(f"#!{sys.executable}\nprint('hi')\n")
    script.chmod(0o755)
    assert interpreter_of(str(script)) == sys.executable
    assert interpreter_of(str(FAKES / "vllm")) is None  # a bash wrapper: not a Python


def test_the_jobs_bootstrap_refuses_at_once_before_installing_anything(tmp_path: Path) -> None:
    wheel = build_wheel()
    (tmp_path / wheel.filename).write_bytes(wheel.data)
    env = environ(tmp_path, CLOUD_RUN_L4, "13.0", LLM_OCR_ENGINE="vllm", TMPDIR=str(tmp_path), HOME=str(tmp_path))
    done = subprocess.run([sys.executable, "-c", BOOTSTRAP, f"{tmp_path / wheel.filename}[s3]", "llm-ocr", "run", "x",
                           "--output", "y"], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert "535.216.03" in done.stderr and "CUDA 13.0" in done.stderr and "v0.29.0-cu129" in done.stderr
    assert not (tmp_path / "llm-ocr-venv").exists()  # nothing installed


def test_llm_ocr_checks_before_it_starts_vllm(tmp_path: Path) -> None:
    make_corpus(tmp_path / "in", documents=1, pages=1)
    argv_file = tmp_path / "argv.json"
    env = environ(tmp_path, CLOUD_RUN_L4, None, CUDA_VERSION="13.0.2")
    env.update(PATH=f"{FAKES}{os.pathsep}{env['PATH']}", LLM_OCR_TEST_PYTHON=sys.executable,
               FAKE_VLLM_ARGV_FILE=str(argv_file), PYTHONPATH=str(REPO))
    done = run_cli("run", str(tmp_path / "in"), "--output", str(tmp_path / "out"), "--engine", "vllm", "--workers", "0",
                   env=env)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "driver 535.216.03 runs CUDA up to 12.2" in done.stderr and "CUDA 13.0" in done.stderr
    assert not argv_file.exists()  # vLLM was never started
