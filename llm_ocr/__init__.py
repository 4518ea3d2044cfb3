"""llm-ocr: batch OCR of PDFs and page images into Markdown, figures and captions.

The Python API (docs/python-api.md); ``llm-ocr`` on the command line is the same functions::

    import llm_ocr

    result = llm_ocr.run("samples/", output="out")       # Extract, Describe, Assemble
    llm_ocr.extract(...); llm_ocr.describe("out"); llm_ocr.assemble("out")
    llm_ocr.escalate("out", model="...")                  # flagged pages read again by a stronger model
    llm_ocr.fields("out", schema="invoice.schema.json")   # typed, validated fields per document
    await llm_ocr.arun("samples/", "out")                 # from async code
    pages = llm_ocr.load("out", "describe")               # a datasets.Dataset
    print(llm_ocr.plan("s3://bucket/scans/", model="allenai/olmOCR-2-7B-1025-FP8", num_shards=8))
    job = llm_ocr.launch("hf-jobs", "hf://datasets/me/scans", output="hf://datasets/me/out", num_shards=16)
    job = llm_ocr.Launch.attach("hf://datasets/me/out")   # the same launch, later, from anywhere
    llm_ocr.Service("http://ocr-box:8080").submit("scan.pdf").wait()  # a running llm-ocr service

Importing the package imports nothing else: each name is loaded on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from types import ModuleType

    from llm_ocr.api import Result, RunError, arun, assemble, describe, escalate, extract, fields, load, run
    from llm_ocr.config import OptionError
    from llm_ocr.launchers.core.api import Launch, LaunchError, launch
    from llm_ocr.planning import plan
    from llm_ocr.service.client import Service

__all__ = [
    "Launch",
    "LaunchError",
    "OptionError",
    "Result",
    "RunError",
    "Service",
    "arun",
    "assemble",
    "describe",
    "escalate",
    "extract",
    "fields",
    "launch",
    "load",
    "plan",
    "run",
]


def __getattr__(name: str) -> Any:
    # Imported on first use (lazily, but as plain imports: the layer test sees them).
    home: ModuleType
    if name in ("Result", "RunError", "arun", "load"):
        from llm_ocr import api

        home = api
    elif name == "OptionError":
        from llm_ocr import config

        home = config
    elif name in ("Launch", "LaunchError", "launch"):
        from llm_ocr.launchers.core import api as launchers_api

        home = launchers_api
    elif name == "Service":
        from llm_ocr.service import client

        home = client
    elif name == "plan":
        from llm_ocr import planning

        home = planning
    elif name.startswith("_"):  # probes such as __wrapped__ import nothing
        raise AttributeError(f"module 'llm_ocr' has no attribute {name!r}")
    elif _is_submodule(name):
        # ``from llm_ocr import pdf_space`` asks the package for the name before it imports the
        # submodule: no stage is called that, and the stage table would cost pydantic's import
        # (a simulated server's imports took 0.44-0.57 CPU-s with it, 0.29-0.33 without).
        raise AttributeError(f"module 'llm_ocr' has no attribute {name!r}")
    else:
        from llm_ocr.stage_table import STAGES

        if name not in STAGES:  # every stage of the table is a function of the API
            raise AttributeError(f"module 'llm_ocr' has no attribute {name!r}")
        from llm_ocr import api

        home = api
    value = getattr(home, name)
    globals()[name] = value  # later lookups skip this function
    return value


def _is_submodule(name: str) -> bool:
    """Whether ``llm_ocr.<name>`` is a module or package of this package (found, not imported)."""
    from importlib.util import find_spec

    return find_spec(f"{__name__}.{name}") is not None


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
