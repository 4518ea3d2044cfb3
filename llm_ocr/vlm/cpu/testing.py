"""The CPU OCR engine as a subprocess on a free port, for tests and benchmarks::

    from llm_ocr.vlm.cpu.testing import CpuServer

    with CpuServer("--threads", "1") as engine:
        client = openai.OpenAI(base_url=engine.base_url, api_key="EMPTY")
        ...

It is :class:`llm_ocr.testing.SimulatedServer` running ``python -m llm_ocr.vlm.cpu`` instead:
same start/stop, ``health()``, ``call()``, ``metrics()`` and request log; the simulator's fault
injection and ``/sim/stats`` do not exist here.
"""

from __future__ import annotations

import os
from typing import Any, NoReturn

from llm_ocr.testing import SimulatedServer, SimulatedServerError

__all__ = ["CpuServer", "OFFLINE_ENV"]

#: Environment that makes any attempt to download over HTTP(S) fail at once (a proxy on a
#: closed port), to prove that the engine works offline.
OFFLINE_ENV = {
    "HTTP_PROXY": "http://127.0.0.1:9",
    "HTTPS_PROXY": "http://127.0.0.1:9",
    "http_proxy": "http://127.0.0.1:9",
    "https_proxy": "http://127.0.0.1:9",
    "NO_PROXY": "127.0.0.1,localhost",
    "no_proxy": "127.0.0.1,localhost",
}


class CpuServer(SimulatedServer):
    """``python -m llm_ocr.vlm.cpu`` in a subprocess, as a context manager.

    Args:
        *args: extra options (``"--threads", "2"`` ...); ``--port 0 --port-file`` are added.
        request_log: as for :class:`~llm_ocr.testing.SimulatedServer`.
        startup_timeout: seconds to wait for the models to load (``/health`` 200).
        offline: run with HTTP(S) proxies pointing at a closed port (see :data:`OFFLINE_ENV`).
        env, python: as for :class:`~llm_ocr.testing.SimulatedServer`.
    """

    module = "llm_ocr.vlm.cpu"
    label = "CPU OCR engine"

    def __init__(
        self,
        *args: str,
        request_log: str | os.PathLike[str] | bool | None = None,
        startup_timeout: float = 120.0,
        offline: bool = False,
        env: dict[str, str] | None = None,
        python: str | None = None,
    ) -> None:
        full_env = {**(OFFLINE_ENV if offline else {}), **(env or {})}
        super().__init__(*args, request_log=request_log, startup_timeout=startup_timeout, env=full_env, python=python)

    def _unsupported(self, what: str) -> NoReturn:
        raise SimulatedServerError(f"the CPU OCR engine has no {what}")

    def inject(self, kind: str, count: int = 1, **kw: Any) -> dict[str, Any]:
        """Not available: the CPU engine has no fault injection."""
        self._unsupported("fault injection")

    def clear_faults(self) -> int:
        """Not available: the CPU engine has no fault injection."""
        self._unsupported("fault injection")

    def stats(self) -> dict[str, Any]:
        """Not available: the CPU engine has no ``/sim/stats``."""
        self._unsupported("/sim/stats")
