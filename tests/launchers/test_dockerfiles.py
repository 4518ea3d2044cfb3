"""The prebuilt images' recipes: the pinned CUDA 12.9 vLLM image, its ENTRYPOINT reset, llm-ocr in a
virtualenv of its own (by the jobs' own installer), and every build made for linux/amd64.

Checked by reading the files (no Docker here): what an image build does is the bootstrap's
``install``, the installer a job runs, which tests/packaging runs against a stand-in image."""

from __future__ import annotations

import re

import pytest

from llm_ocr.container.cuda import VLLM_IMAGES
from tests.conftest import REPO

DOCKERFILES = ["hf-jobs/Dockerfile", "sagemaker/Dockerfile", "google-cloud-run/Dockerfile"]


@pytest.mark.parametrize("path", DOCKERFILES)
def test_each_dockerfile_installs_llm_ocr_beside_the_images_python(path: str) -> None:
    text = (REPO / path).read_text()
    base = re.search(r"^(?:ARG BASE=(\S+)|FROM (\S+))", text, re.M)
    assert base and (base.group(1) or base.group(2)) == VLLM_IMAGES[12]  # runs on CUDA 12 drivers (535: Cloud Run's L4)
    assert re.search(r"^ENTRYPOINT \[\]$", text, re.M)
    install = r'python3 -m llm_ocr\.container\.bootstrap install "/opt/llm-ocr/src\[[a-z0-9,-]+\]" /opt/llm-ocr/venv --link /usr/local/bin'
    assert re.search(install, text), "llm-ocr must go into its own venv, by the installer the jobs use"
    commands = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    assert not any(re.search(r"pip install\b.*\.\[", line) for line in commands), "no pip install into the image's Python"


def test_every_image_build_is_for_linux_amd64() -> None:
    assert "docker build --platform linux/amd64" in (REPO / "sagemaker/build_and_push.sh").read_text()
    assert "docker build --platform linux/amd64" in (REPO / "hf-jobs/README.md").read_text()
    assert "docker build --platform linux/amd64" in (REPO / "hf-jobs/Dockerfile").read_text()
    assert '"--platform", "linux/amd64"' in (REPO / "google-cloud-run/cloudbuild.yaml").read_text()
