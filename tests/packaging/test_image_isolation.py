"""A job's bootstrap leaves the model image's Python exactly as it was.

The stand-in "image" is a virtualenv holding what AWS's vLLM DLC pins (transformers 4.57.6,
which requires ``huggingface-hub<1.0``) and a ``vllm`` program of its own (the fake vLLM, which
notes that it was the image's that ran). The job's real command, as the launcher builds it
(:func:`llm_ocr.launchers.core.command.install_then_run`), runs with that image's ``python3`` first on
``PATH``: it installs llm-ocr with the extras an ``s3://``/``hf://`` run needs (``datasets`` wants
hub >= 1.31), starts the image's vLLM and OCRs a PDF. Afterwards the image's ``pip freeze`` is
what it was and ``pip check`` is clean. Installing into the image instead (the launcher's command
before llm-ocr had a venv of its own) upgraded huggingface-hub there and broke transformers.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from llm_ocr.launchers.core.command import install_then_run, llm_ocr_command, with_extras
from llm_ocr.launchers.core.wheel import build_wheel
from tests.conftest import read_stage
from tests.docs import make_corpus
from tests.fakes.container import FAKES

#: What the stand-in image pins: AWS's vLLM 0.14.0 DLC (aws/deep-learning-containers release notes).
IMAGE_PINS = ["transformers==4.57.6", "huggingface-hub<1.0"]


def _pip(python: Path, *args: str, timeout: float = 1800) -> str:
    done = subprocess.run([str(python), "-m", "pip", "--disable-pip-version-check", *args], capture_output=True,
                          text=True, timeout=timeout)
    assert done.returncode == 0 or args[0] == "check", done.stdout + done.stderr
    return done.stdout


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The stand-in image: a venv with the DLC's pins, and a ``vllm`` that records who ran it."""
    root = tmp_path_factory.mktemp("image")
    subprocess.run([sys.executable, "-m", "venv", str(root)], check=True)
    # --no-compile: byte-compiling transformers' files was most of this install's CPU (the same
    # install alone under /usr/bin/time: 29.8 CPU-s with, 12.8 without; the image runs none of them).
    _pip(root / "bin" / "python", "install", "--quiet", "--no-compile", *IMAGE_PINS)
    vllm = root / "bin" / "vllm"
    vllm.write_text(
        "#!/bin/sh\n"
        "# The image's own vLLM: note that it ran, then serve as the fake vLLM does.\n"
        'echo "$0" >> "$IMAGE_VLLM_RUNS"\n'
        f'exec "{FAKES / "vllm"}" "$@"\n'
    )
    vllm.chmod(0o755)
    return root


@pytest.mark.timeout(3 * 1800)  # for hangs: on a shared machine the installs wait minutes for the index
def test_the_job_installs_llm_ocr_beside_the_image_and_runs_the_images_vllm(image: Path, tmp_path: Path) -> None:
    python = image / "bin" / "python"
    before = _pip(python, "freeze")
    assert "transformers==4.57.6" in before and "huggingface_hub==0." in before.replace("-", "_")

    wheel = build_wheel()
    code = tmp_path / "code"
    code.mkdir()
    (code / wheel.filename).write_bytes(wheel.data)
    corpus = tmp_path / "in"
    make_corpus(corpus, documents=1, pages=2)
    out = tmp_path / "out"
    runs = tmp_path / "vllm-runs.txt"
    command = [*install_then_run(with_extras(str(code / wheel.filename), ["hub", "s3"])),
               *llm_ocr_command("run", [str(corpus), "--workers", "0"], str(out))]
    env = {
        "PATH": os.pathsep.join([str(image / "bin"), "/usr/local/bin", "/usr/bin", "/bin"]),
        "HOME": str(tmp_path / "home"),
        "TMPDIR": str(tmp_path),
        "LANG": "C.UTF-8",
        "LLM_OCR_ENGINE": "vllm",  # as the launcher sets it for a GPU job
        "LLM_OCR_PROGRESS": "log",
        "IMAGE_VLLM_RUNS": str(runs),
        "LLM_OCR_TEST_PYTHON": sys.executable,  # the fake vLLM's simulator runs in the tests' Python
        "FAKE_VLLM_SIM_ARGS": f"--corpus {corpus} --instant",
        **{k: v for k, v in os.environ.items() if k in ("SSL_CERT_FILE", "PIP_CERT", "PIP_INDEX_URL", "UV_INDEX_URL")},
    }
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]

    assert "llm-ocr bootstrap: installed llm-ocr[hub,s3]" in done.stderr
    assert runs.read_text().split() == [str(image / "bin" / "vllm")]  # the image's vLLM served the pages
    assert len(read_stage(out, "extract")) == 2
    assert _pip(python, "freeze") == before
    check = subprocess.run([str(python), "-m", "pip", "check"], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout
    transformers = subprocess.run([str(python), "-c", "import transformers, huggingface_hub; print(huggingface_hub.__version__)"],
                                  capture_output=True, text=True)
    assert transformers.returncode == 0 and transformers.stdout.startswith("0."), transformers.stderr[-2000:]
    venv = json.loads(subprocess.run([str(tmp_path / "llm-ocr-venv" / "bin" / "python"), "-c",
                                      "import json, huggingface_hub, datasets; print(json.dumps(huggingface_hub.__version__))"],
                                     capture_output=True, text=True, check=True).stdout)
    assert int(venv.split(".")[0]) >= 1  # llm-ocr's own venv has the hub datasets needs
