"""The command a shard's container runs: the plain ``llm-ocr`` CLI, maybe behind a code install.

With a prebuilt image (``--image``) the command is just ``llm-ocr STAGE ... --output OUT``.
With a stock image (the default: ``vllm/vllm-openai`` pinned) the shipped wheel is installed
first, and the same invocation then replaces the shell (``exec``), so signals (a platform's
SIGTERM before preemption) reach llm-ocr directly and its exit status is the job's::

    sh -c 'pip install ... "$0" && exec "$@"' /code/llm_ocr-0.1.0-py3-none-any.whl[hub] llm-ocr run ...

The wheel is ``$0`` and the llm-ocr command line is ``"$@"``: nothing is re-quoted into a
string, and the ``llm-ocr`` invocation stays a plain list at the end of the command.

The command replaces the image's ENTRYPOINT (Hugging Face Jobs' ``command``, SageMaker's
``ContainerEntrypoint``, Cloud Run's ``command`` all do), which for ``vllm/vllm-openai`` would
otherwise start the API server (FACTS.md, vLLM images).
"""

from __future__ import annotations

from collections.abc import Sequence

from fsspec.core import split_protocol

#: The stock image GPU stages run in when no --image is given. Pinned: DeepSeek-OCR broke in
#: vLLM 0.30, and Hugging Face's own DeepSeek-OCR script uses this tag (FACTS.md, Hugging Face).
VLLM_IMAGE = "vllm/vllm-openai:v0.29.0"
#: The stock image for stages that need no model server (Assemble, or any stage with --endpoint).
CPU_IMAGE = "python:3.12-slim"

#: Installs "$0" (the wheel) and execs "$@" (the llm-ocr command line). pip, not uv: both stock
#: images (vllm/vllm-openai, python:3.12-slim) have pip on PATH for the interpreter they run.
INSTALL_SCRIPT = (
    'pip install --no-cache-dir --disable-pip-version-check --root-user-action=ignore --progress-bar off "$0" '
    '&& exec "$@"'
)

#: The package extra each storage protocol needs inside the job.
_EXTRAS = {"hf": "hub", "s3": "s3", "s3a": "s3", "gs": "gcs", "gcs": "gcs"}


def llm_ocr_command(stage: str, stage_args: Sequence[str], output: str) -> list[str]:
    """``llm-ocr STAGE <stage args and inputs, unchanged> --output OUT``."""
    return ["llm-ocr", stage, *stage_args, "--output", output]


def install_then_run(wheel_path: str) -> list[str]:
    """The command words that install ``wheel_path`` (in the container) and exec the rest."""
    return ["sh", "-c", INSTALL_SCRIPT, wheel_path]


def extras_for(urls: Sequence[str]) -> list[str]:
    """The llm-ocr extras the stores of ``urls`` need (``hf://`` -> ``hub``...), sorted."""
    return sorted({_EXTRAS[p] for url in urls if (p := split_protocol(url)[0]) in _EXTRAS})


def with_extras(wheel_path: str, extras: Sequence[str]) -> str:
    """``/code/x.whl[hub,s3]``: pip installs a wheel file with extras written this way."""
    return f"{wheel_path}[{','.join(extras)}]" if extras else wheel_path
