"""Several model servers started, watched and stopped together: one vLLM per GPU.

Each member is a :class:`~llm_ocr.serving.vllm.process.ManagedServer` of its own (its own process
group, port, log file, ``CUDA_VISIBLE_DEVICES`` and restart budget), so a member that crashes is
restarted alone while the others keep serving, and a member that cannot be brought back is
dropped without stopping the rest. Which member gets a request is the client's business
(:class:`llm_ocr.serving.dispatch.Dispatcher`).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from types import TracebackType

from llm_ocr.serving.vllm.process import ManagedServer, ServerFailed

log = logging.getLogger(__name__)

#: vLLM flags that spread one server over several GPUs: with them, the user chose vLLM's own
#: parallelism and gets one server.
PARALLEL_FLAGS = (
    "--data-parallel-size", "-dp", "--tensor-parallel-size", "-tp", "--pipeline-parallel-size", "-pp",
)  # fmt: skip


def gpu_devices(count: int, visible: str | None = None) -> list[str]:
    """The device ids of ``count`` servers: the first ``count`` of ``CUDA_VISIBLE_DEVICES`` when
    it is set (the user narrowed the GPUs), else ``0..count-1``."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES") if visible is None else visible
    if visible is not None and visible.strip():
        ids = [v.strip() for v in visible.split(",") if v.strip()]
        return ids[:count]
    return [str(i) for i in range(count)]


def uses_vllm_parallelism(args: Sequence[str]) -> bool:
    """Whether vLLM arguments already spread one server over several GPUs."""
    return any(a.split("=", 1)[0] in PARALLEL_FLAGS for a in args)


class ServerFleet:
    """``len(devices)`` servers, one per GPU, as one async context manager.

    ``make(device, port)`` returns a server's argv; each server gets a free port from
    ``ports``, ``env`` plus ``CUDA_VISIBLE_DEVICES=device`` and the log file ``log_path(device)``.
    Entering starts them all at once and waits until each is ready or has failed; the fleet is
    usable when at least one is ready (the others are stopped and reported).
    """

    def __init__(
        self,
        devices: Sequence[str],
        make: Callable[[str, int], list[str]],
        *,
        ports: Callable[[], int],
        host: str,
        log_path: Callable[[str], Path],
        startup_timeout: float,
        max_restarts: int,
        name: str = "vllm",
        env: dict[str, str] | None = None,
    ) -> None:
        self.devices = list(devices)
        self.servers: list[ManagedServer] = []
        for device in self.devices:
            port = ports()
            self.servers.append(
                ManagedServer(
                    make(device, port),
                    host=host,
                    port=port,
                    log_path=log_path(device),
                    env={**(env or {}), "CUDA_VISIBLE_DEVICES": device},
                    startup_timeout=startup_timeout,
                    max_restarts=max_restarts,
                    name=f"{name}[gpu {device}]",
                )
            )
        #: The servers that came up (a member whose restarts run out stays in the list; its
        #: wait_ready then raises, which the dispatcher takes as "gone for good").
        self.members: list[ManagedServer] = []

    async def __aenter__(self) -> ServerFleet:
        outcomes = await asyncio.gather(*(s.__aenter__() for s in self.servers), return_exceptions=True)
        failed: list[tuple[ManagedServer, BaseException]] = []
        for server, outcome in zip(self.servers, outcomes):
            if isinstance(outcome, BaseException):
                failed.append((server, outcome))
            else:
                self.members.append(server)
        for server, error in failed:
            if not isinstance(error, Exception):  # cancelled, interrupted: stop everything
                await self.__aexit__(None, None, None)
                raise error
            log.error("%s did not start; going on without it: %s", server.name, error)
        if not self.members:
            raise ServerFailed(
                f"none of the {len(self.servers)} servers started; the first: {failed[0][1]}"
            ) from failed[0][1]
        if failed:
            log.warning("%d of %d servers ready (GPUs %s)", len(self.members), len(self.servers),
                        ", ".join(s.name for s in self.members))
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        # Every server's stop runs to the end, even if one of them raises.
        results = await asyncio.gather(*(s.__aexit__(None, None, None) for s in self.servers), return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException) and not isinstance(result, Exception):
                raise result

    async def metrics(self) -> dict[str, float]:
        """The members' ``/metrics`` summed (members that do not answer are left out)."""
        values = await asyncio.gather(*(s.metrics() for s in self.members), return_exceptions=True)
        answered = [v for v in values if isinstance(v, dict)]
        if not answered and values and isinstance(values[0], BaseException):
            raise values[0]
        return sum_metrics(answered)


def sum_metrics(values: Iterable[dict[str, float]]) -> dict[str, float]:
    """Several servers' metrics as one server's: every key summed."""
    total: dict[str, float] = {}
    for value in values:
        for key, number in value.items():
            total[key] = total.get(key, 0.0) + number
    return total
