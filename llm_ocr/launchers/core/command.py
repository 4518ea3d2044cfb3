"""The command a shard's container runs: the plain ``llm-ocr`` CLI, maybe behind a code install.

With a prebuilt image (``--image``) the command is just ``llm-ocr STAGE ... --output OUT``.
With a stock image (the default: vLLM's image, pinned) the shipped wheel is installed first, into
a virtualenv of its own (never into the image's Python, whose pins vLLM needs), and the same
invocation then replaces the installer (``exec``), so signals (a platform's SIGTERM before
preemption) reach llm-ocr directly and its exit status is the job's::

    python3 -c "import sys;...;main()" /code/llm_ocr-0.1.0-py3-none-any.whl[hub] llm-ocr run ...

``python3`` is the image's interpreter; it runs :mod:`llm_ocr.container.bootstrap` straight from
the wheel (standard library only), which makes the venv, installs the wheel with its extras and
execs the venv's ``llm-ocr`` with the rest of the words. Nothing is re-quoted into a string, the
``llm-ocr`` invocation stays a plain list at the end of the command, and every word stays short
(SageMaker allows 256 characters per ``ContainerEntrypoint`` word).

The command replaces the image's ENTRYPOINT (Hugging Face Jobs' ``command``, SageMaker's
``ContainerEntrypoint``, Cloud Run's ``command`` all do), which for ``vllm/vllm-openai`` would
otherwise start the API server.
"""

from __future__ import annotations

from collections.abc import Sequence

from fsspec.core import split_protocol

from llm_ocr.container.cuda import VLLM_IMAGES

#: The stock image GPU stages run in when no --image is given. Pinned: DeepSeek-OCR broke in
#: vLLM 0.30, and Hugging Face's own DeepSeek-OCR script uses v0.29.0. The CUDA 12.9 build: it
#: runs on every driver of the CUDA 12 family (535.216.03 on Cloud Run's L4, CUDA 12.2, through
#: minor version compatibility); the default v0.29.0 tag is CUDA 13.0 and needs a 580 driver
#: (docs/platforms-cloud-run.md, "GPU driver and CUDA").
VLLM_IMAGE = VLLM_IMAGES[12]
#: The stock image for stages that need no model server (Assemble, or any stage with --endpoint).
CPU_IMAGE = "python:3.12-slim"

#: Run by the image's ``python3``: import the bootstrap from the wheel (the first word, without its
#: extras) and hand it the rest of the words; a wheel that is not there is said so, not a traceback.
BOOTSTRAP = (
    "import os,sys;w=sys.argv[1].partition('[')[0];os.path.isfile(w) or sys.exit('llm-ocr bootstrap: the llm-ocr "
    "wheel '+w+' is not in the container');sys.path.insert(0,w);from llm_ocr.container.bootstrap import main;main()"
)

#: The package extra each storage protocol needs inside the job.
_EXTRAS = {"hf": "hub", "s3": "s3", "s3a": "s3", "gs": "gcs", "gcs": "gcs"}


def llm_ocr_command(stage: str, stage_args: Sequence[str], output: str) -> list[str]:
    """``llm-ocr STAGE <stage args and inputs, unchanged> --output OUT``."""
    return ["llm-ocr", stage, *stage_args, "--output", output]


def install_then_run(wheel_path: str) -> list[str]:
    """The command words that install ``wheel_path`` (``/code/x.whl[extras]``, in the container)
    into a venv of its own and exec the rest from there."""
    return ["python3", "-c", BOOTSTRAP, wheel_path]


def extras_for(urls: Sequence[str]) -> list[str]:
    """The llm-ocr extras the stores of ``urls`` need (``hf://`` -> ``hub``...), sorted."""
    return sorted({_EXTRAS[p] for url in urls if (p := split_protocol(url)[0]) in _EXTRAS})


def with_extras(wheel_path: str, extras: Sequence[str]) -> str:
    """``/code/x.whl[hub,s3]``: pip installs a wheel file with extras written this way."""
    return f"{wheel_path}[{','.join(extras)}]" if extras else wheel_path
