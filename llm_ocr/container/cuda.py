"""Can the model image's CUDA run on this machine's GPU driver? Checked before vLLM starts.

A job's image carries its own CUDA runtime (inside torch's wheels); the driver is the
platform's, and platforms document it (Cloud Run: L4 with 535.216.03, CUDA 12.2). A CUDA 13
build of vLLM on a CUDA 12 driver fails deep in vLLM's start-up (torch: "The NVIDIA driver on
your system is too old"), after minutes of image pull and model download. This module reads
both versions and says at once, naming both and the image to use instead.

The rules are NVIDIA's (https://docs.nvidia.com/deploy/cuda-compatibility/):

- a driver runs every CUDA up to the version it reports (``nvidia-smi``'s "CUDA Version");
- *minor version compatibility*: within one major version, a newer runtime runs on an older
  driver of that major (CUDA 12.9 on a CUDA 12.2 driver), except for features that need the
  newer driver (PTX JIT of newer PTX): allowed, with a note;
- across major versions only *forward compatibility* helps (the ``cuda-compat`` libraries in the
  image, data-center GPUs only); vLLM loads them when ``VLLM_ENABLE_CUDA_COMPATIBILITY=1``
  (``vllm/env_override.py``). Without it the pair is refused; with it, allowed with a warning.

The image's CUDA is torch's, read from ``torch/version.py`` of the interpreter that runs vLLM
without importing torch (as ``vllm/env_override.py`` does); else the image's ``CUDA_VERSION``
(set by NVIDIA's base images); else ``/usr/local/cuda/version.json``. No GPU, no driver, a CPU
build of torch, or nothing readable: nothing to check.

Standard library only: the job's bootstrap (:mod:`.bootstrap`) runs it in the image's own
Python before installing llm-ocr, and llm-ocr runs it again before it starts vLLM.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

#: Images that serve DeepSeek-OCR, by the CUDA major version they are built for (vLLM v0.29.0
#: release notes, "Docker Images": the default tag is CUDA 13.0, ``-cu129`` is CUDA 12.9).
VLLM_IMAGES: dict[int, str] = {12: "vllm/vllm-openai:v0.29.0-cu129", 13: "vllm/vllm-openai:v0.29.0"}

#: The oldest Linux driver of each CUDA release (CUDA Toolkit release notes, "CUDA Toolkit and
#: Corresponding Driver Versions"): what a driver supports when ``nvidia-smi`` does not say.
MIN_DRIVER: dict[tuple[int, int], tuple[int, ...]] = {
    (11, 0): (450, 36, 6),
    (11, 4): (470, 42, 1),
    (11, 8): (520, 61, 5),
    (12, 0): (525, 60, 13),
    (12, 1): (530, 30, 2),
    (12, 2): (535, 54, 3),
    (12, 3): (545, 23, 6),
    (12, 4): (550, 54, 14),
    (12, 5): (555, 42, 2),
    (12, 6): (560, 28, 3),
    (12, 8): (570, 26),
    (12, 9): (575, 51, 3),
    (13, 0): (580, 65, 6),
}

#: Set to 1 to skip the check (a platform whose nvidia-smi lies, an image this module misreads).
SKIP_ENV = "LLM_OCR_SKIP_CUDA_CHECK"
#: vLLM's switch for the image's forward-compatibility libraries (vllm/env_override.py).
FORWARD_COMPAT_ENV = "VLLM_ENABLE_CUDA_COMPATIBILITY"
#: The image the job runs, when the launcher knows it (named in the message).
IMAGE_ENV = "LLM_OCR_IMAGE"

#: Run by the image's interpreter: torch's CUDA version from torch/version.py without importing
#: torch (which would initialise CUDA and take seconds). Prints ``cuda:12.9``, ``cpu`` (a torch
#: without CUDA) or ``absent``.
TORCH_CUDA_SNIPPET = """\
import importlib.util, os, re
s = importlib.util.find_spec('torch')
r = (os.path.dirname(s.origin) if s.origin else list(s.submodule_search_locations)[0]) if s else ''
p = os.path.join(r, 'version.py') if r else ''
t = open(p).read() if p and os.path.exists(p) else ''
m = re.search(r"^cuda\\s*(?::[^=]*)?=\\s*['\\"]([0-9.]+)['\\"]", t, re.M)
print(('cuda:' + m.group(1)) if m else ('cpu' if s else 'absent'))
"""

_VERSION = re.compile(r"(\d+)\.(\d+)")
_PYTHON = re.compile(r"^python[0-9.]*$")


class CudaMismatch(Exception):
    """The image's CUDA cannot run on this driver; the message names both and what to use."""


@dataclass(frozen=True)
class Driver:
    """The GPU driver as ``nvidia-smi`` reports it."""

    version: str
    #: The newest CUDA the driver runs ("CUDA Version" in nvidia-smi's header, else from the table).
    cuda: tuple[int, int]


@dataclass(frozen=True)
class ImageCuda:
    """The CUDA the image's vLLM is built for, and where that was read."""

    cuda: tuple[int, int]
    source: str


def read_driver(nvidia_smi: str = "nvidia-smi", timeout: float = 15.0, path: str | None = None) -> Driver | None:
    """The driver from ``nvidia-smi``'s header, or None (no nvidia-smi, it failed, unreadable)."""
    binary = shutil.which(nvidia_smi, path=path)
    if binary is None:
        return None
    try:
        proc = subprocess.run([binary], capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if proc.returncode != 0:
        return None
    return parse_driver(proc.stdout)


def parse_driver(text: str) -> Driver | None:
    """``Driver Version: 535.216.03   CUDA Version: 12.2`` (nvidia-smi's header) -> Driver."""
    found = re.search(r"Driver Version:\s*([0-9][0-9.]*)", text)
    if found is None:
        return None
    version = found.group(1)
    cuda = re.search(r"CUDA Version:\s*(\d+)\.(\d+)", text)
    if cuda is not None:
        return Driver(version, (int(cuda.group(1)), int(cuda.group(2))))
    supported = driver_cuda(version)
    return Driver(version, supported) if supported else None


def driver_cuda(version: str) -> tuple[int, int] | None:
    """The newest CUDA a driver version runs, from :data:`MIN_DRIVER`."""
    number = _numbers(version)
    fits = [cuda for cuda, least in MIN_DRIVER.items() if number >= least]
    return max(fits) if fits else None


def image_cuda(python: str | None = None, environ: Mapping[str, str] | None = None) -> ImageCuda | None:
    """The image's CUDA: torch's (run with ``python``, the interpreter that starts vLLM; None: the
    ``python3`` on PATH), else ``CUDA_VERSION``, else ``/usr/local/cuda/version.json``."""
    env = os.environ if environ is None else environ
    interpreter = python or shutil.which("python3", path=env.get("PATH"))
    if interpreter:
        try:
            proc = subprocess.run([interpreter, "-c", TORCH_CUDA_SNIPPET], capture_output=True, text=True,
                                  timeout=60, check=False, env=dict(env))
            answer = proc.stdout.strip() if proc.returncode == 0 else ""
        except (OSError, subprocess.TimeoutExpired):
            answer = ""
        found = _VERSION.match(answer.removeprefix("cuda:")) if answer.startswith("cuda:") else None
        if found:
            return ImageCuda((int(found.group(1)), int(found.group(2))), f"torch in {interpreter}")
        if answer == "cpu":
            return None  # a torch without CUDA (a CPU build): nothing to check
    found = _VERSION.match(env.get("CUDA_VERSION", ""))
    if found:
        return ImageCuda((int(found.group(1)), int(found.group(2))), "the image's CUDA_VERSION")
    try:
        version = json.loads(Path("/usr/local/cuda/version.json").read_text())["cuda"]["version"]
        found = _VERSION.match(str(version))
    except (OSError, ValueError, KeyError, TypeError):
        found = None
    if found:
        return ImageCuda((int(found.group(1)), int(found.group(2))), "/usr/local/cuda/version.json")
    return None


def verdict(driver: Driver, image: ImageCuda, *, forward_compat: bool = False, image_name: str = "") -> str:
    """Why ``image`` runs on ``driver`` (a note to log); :class:`CudaMismatch` when it cannot."""
    have, need = driver.cuda, image.cuda
    both = (f"the GPU driver {driver.version} runs CUDA up to {_dotted(have)}; {image_name or 'this image'}'s vLLM is "
            f"built for CUDA {_dotted(need)} ({image.source})")
    if need <= have:
        return f"CUDA check: {both}: fine"
    if need[0] == have[0]:
        return f"CUDA check: {both}: runs through CUDA minor version compatibility"
    if forward_compat:
        return (f"CUDA check: {both}: relying on CUDA forward compatibility ({FORWARD_COMPAT_ENV}=1; data-center "
                "GPUs only, not tested by llm-ocr)")
    better = VLLM_IMAGES.get(have[0])
    remedy = (f"use an image built for CUDA {have[0]}, e.g. {better} (llm-ocr launch ... --image {better}, or the "
              "launcher's default image)") if better else (
              f"no vLLM image that serves DeepSeek-OCR is built for CUDA {have[0]}: choose hardware with a newer "
              "driver")
    raise CudaMismatch(
        f"{both}, and a CUDA {need[0]} runtime cannot run on a CUDA {have[0]} driver. {remedy[0].upper()}{remedy[1:]}; "
        f"or, on a data-center GPU, set {FORWARD_COMPAT_ENV}=1 to load the image's CUDA forward-compatibility "
        f"libraries (not tested by llm-ocr). {SKIP_ENV}=1 skips this check."
    )


def check_cuda(python: str | None = None, environ: Mapping[str, str] | None = None) -> str:
    """Read the driver and the image's CUDA and judge them (:func:`verdict`); a line saying what
    was found. :class:`CudaMismatch` when they cannot work together."""
    env = os.environ if environ is None else environ
    if env.get(SKIP_ENV, "").strip().lower() in ("1", "true", "yes"):
        return f"CUDA check skipped ({SKIP_ENV} is set)"
    driver = read_driver(path=env.get("PATH"))
    if driver is None:
        return "CUDA check: no NVIDIA driver found (nvidia-smi absent, failing or unreadable): nothing to check"
    image = image_cuda(python, env)
    if image is None:
        return f"CUDA check: driver {driver.version} (CUDA {_dotted(driver.cuda)}); the image's CUDA is unknown: nothing to check"  # noqa: E501 - not wrapped yet
    forward = env.get(FORWARD_COMPAT_ENV, "").strip().lower() in ("1", "true")
    return verdict(driver, image, forward_compat=forward, image_name=env.get(IMAGE_ENV, ""))


def interpreter_of(program: str) -> str | None:
    """The Python that runs ``program`` (a Python itself, or a console script's ``#!`` line);
    None when it is not found or not run by a Python."""
    path = shutil.which(program)
    if path is None:
        return None
    if _PYTHON.search(Path(path).name):
        return path
    try:
        with open(path, "rb") as script:
            first = script.readline(512).decode(errors="replace").strip()
    except OSError:
        return None
    words = first[2:].split() if first.startswith("#!") else []
    if words and Path(words[0]).name == "env" and len(words) > 1:
        words = [shutil.which(words[1]) or words[1]]
    return words[0] if words and _PYTHON.search(Path(words[0]).name) else None


def _numbers(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", version))


def _dotted(version: tuple[int, int]) -> str:
    return f"{version[0]}.{version[1]}"
