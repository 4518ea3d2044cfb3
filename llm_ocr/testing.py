"""Test helpers shipped with the package: the simulator and the CPU engine as subprocesses.

The harness lives in :mod:`llm_ocr.engines.harness`; this module is its public name, which users'
own tests import (``from llm_ocr.testing import SimulatedServer``).
"""

from llm_ocr.engines.harness import OFFLINE_ENV, CpuServer, LocalServer, SimulatedServer, SimulatedServerError

__all__ = ["OFFLINE_ENV", "CpuServer", "LocalServer", "SimulatedServer", "SimulatedServerError"]
