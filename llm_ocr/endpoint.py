"""Where requests go: a given ``--endpoint``, or a server this process launches and babysits.

Every stage that talks to a model opens it with :func:`open_endpoint`, so "use this URL" and
"start vLLM (or the CPU engine, or the simulator) and keep it alive" look the same to callers.
"""

from __future__ import annotations

import asyncio
import importlib.util
import itertools
import logging
import shlex
import shutil
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import aiohttp
from pydantic import BaseModel, Field

from llm_ocr.backoff import backoff_delay
from llm_ocr.endpoint_watch import EndpointWatch, probe_endpoint
from llm_ocr.quarantine import CrashTracker
from llm_ocr.servers.engines import api_key_to_env, free_port, sim_command, vllm_command
from llm_ocr.servers.presets import PRESETS, GpuPreset, client_in_flight, detect_gpu, preset_for
from llm_ocr.servers.process import ManagedServer, ServerFailed, parse_metrics
from llm_ocr.storage import Storage
from llm_ocr.vlm.client import ClientOptions, EndpointDown, VlmClient, display_url

log = logging.getLogger("llm_ocr")

Engine = Literal["auto", "vllm", "cpu", "sim"]


class EndpointError(Exception):
    """The model endpoint cannot be used; the message says why and what to do."""


class ServerOptions(BaseModel):
    """The model server this process launches when no ``--endpoint`` is given."""

    engine: Engine = Field(
        "auto", description="Server to launch without --endpoint: vllm, cpu, sim, or auto (vllm with a CUDA GPU, else cpu)."
    )
    gpu_preset: str | None = Field(
        None, description=f"vLLM sizing preset: {', '.join(PRESETS)} (default: detected with nvidia-smi)."
    )
    server_command: str = Field("vllm serve", description="Command that starts vLLM (e.g. 'python -m vllm.entrypoints.openai.api_server').")
    server_args: str = Field("", description="Extra arguments appended to the server command line (they override ours).")
    server_startup_timeout: float = Field(1800.0, gt=0, description="Seconds the server may take to become ready.")
    server_max_restarts: int = Field(2, ge=0, description="Restarts of a server that crashed mid-run.")


@dataclass
class Endpoint:
    """An open model endpoint: the client, and the server's live metrics if we can read them."""

    client: VlmClient
    metrics: Callable[[], Awaitable[dict[str, float]]] | None = None
    suggested_in_flight: int | None = None
    preset: str | None = None
    #: Pages that crash the server: the runners guard their page handler with it.
    tracker: CrashTracker | None = None


async def check_model(client: VlmClient, wait: float = 0.0) -> None:
    """Fail early, before any work, if the endpoint is down or does not serve the model.

    An endpoint that refuses connections or answers 5xx is waited for, with backoff and jitter,
    for up to ``wait`` seconds: a vLLM started beside this job (a sidecar container, another
    process of the same platform task) only listens once its weights are loaded. A 401 or 404
    fails at once.
    """
    deadline = time.monotonic() + wait
    for attempt in itertools.count(1):
        try:
            served = await client.served_models()
            break
        except EndpointDown as exc:
            left = deadline - time.monotonic()
            if not exc.transient or left <= 0:
                hint = f" (waited {wait:.0f}s, --dead-after)" if exc.transient and wait > 0 else ""
                raise EndpointError(f"{exc}{hint}") from exc
            log.warning("%s; retrying for up to %.0fs more (--dead-after)", exc, left)
            await asyncio.sleep(min(left, backoff_delay(attempt, 0.5, 15.0)))
    if client.model not in served:
        raise EndpointError(f"endpoint {client.display_url} does not serve --model {client.model!r}; it serves {served}")


def choose_engine(options: ServerOptions) -> tuple[str, str, GpuPreset | None]:
    """``(engine, why, preset)`` for ``--engine``; ``auto`` prefers vLLM on a CUDA GPU."""
    gpu = detect_gpu() if options.engine in ("auto", "vllm") else None
    preset = PRESETS[options.gpu_preset] if options.gpu_preset in PRESETS else (preset_for(gpu) if gpu else None)
    if options.gpu_preset and options.gpu_preset not in PRESETS:
        raise EndpointError(f"unknown --gpu-preset {options.gpu_preset!r}; choose one of {', '.join(PRESETS)}")
    if options.engine != "auto":
        return options.engine, "chosen with --engine", preset
    program = shlex.split(options.server_command)[0] if options.server_command else "vllm"
    have_vllm = shutil.which(program) is not None or importlib.util.find_spec("vllm") is not None
    if gpu and have_vllm:
        return "vllm", f"found a CUDA GPU ({gpu.name}, {gpu.memory_gib:.0f} GiB) and vLLM", preset
    if gpu:
        return "cpu", f"found a GPU ({gpu.name}) but not vLLM (pip install vllm to use it)", None
    return "cpu", "no CUDA GPU found (nvidia-smi absent or silent)", None


def _command(engine: str, model: str, port: int, options: ServerOptions, preset: GpuPreset | None) -> list[str]:
    extra = shlex.split(options.server_args)
    if engine == "vllm":
        return vllm_command(
            model,
            host="127.0.0.1",
            port=port,
            preset=preset or preset_for(None),
            extra_args=extra,
            server_command=shlex.split(options.server_command),
        )
    if engine == "sim":
        return sim_command(model, host="127.0.0.1", port=port, extra_args=extra)
    if importlib.util.find_spec("rapidocr") is None:
        raise EndpointError("the CPU engine needs its extra: pip install 'llm-ocr[cpu]' (or pass --endpoint URL)")
    return [sys.executable, "-m", "llm_ocr.servers.cpu", "--host", "127.0.0.1", "--port", str(port), "--served-model-name", model, *extra]


def _log_path(out: Storage | None, name: str) -> tuple[Path, str | None]:
    """A local log file, and where to copy it afterwards when the output is remote."""
    if out is not None and out.is_local:
        return Path(out.path("_state", "logs", name)), None
    local = Path(".llm-ocr", "logs", name).resolve()
    return local, out.path("_state", "logs", name) if out is not None else None


async def _external_metrics(base_url: str) -> dict[str, float]:
    root = base_url.rstrip("/").removesuffix("/v1")
    timeout = aiohttp.ClientTimeout(total=5)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        async with session.get(f"{root}/metrics") as response:
            if response.status != 200:
                return {}
            return parse_metrics(await response.text())


@asynccontextmanager
async def open_endpoint(
    endpoint: str | None,
    model: str,
    *,
    api_key: str | None,
    client_options: ClientOptions,
    server_options: ServerOptions | None = None,
    out: Storage | None = None,
    log_name: str = "server.log",
) -> AsyncIterator[Endpoint]:
    """Yield a ready :class:`Endpoint`; a launched server is stopped (whole process group) on exit."""
    tracker = CrashTracker()
    if endpoint:
        # Down-then-up counts as a death of the endpoint (a Kubernetes vLLM restarted by its
        # controller): the tracker blames the pages whose requests were lost to it.
        watch = EndpointWatch(
            lambda: probe_endpoint(endpoint, api_key),
            display_url=display_url(endpoint),
            dead_after=client_options.dead_after,
            on_down=tracker.record_death,
        )
        gate = tracker.gate(watch.wait_up, on_retry=watch.check)
        client = VlmClient(endpoint, model, api_key=api_key, options=client_options, gate=gate)
        named = (server_options.gpu_preset if server_options else None) or None
        try:
            await check_model(client, wait=client_options.dead_after)
            yield Endpoint(client=client, metrics=lambda: _external_metrics(endpoint), preset=named, tracker=tracker)
        finally:
            await client.close()
        return

    options = server_options or ServerOptions()
    engine, why, preset = choose_engine(options)
    log.info("no --endpoint: launching the %s engine (%s)", engine, why)
    port = free_port()
    command = _command(engine, model, port, options, preset)
    server_env: dict[str, str] = {}
    if engine == "vllm":
        command, server_env = api_key_to_env(command)
        if server_env:
            log.info("the server's --api-key is passed in its environment (VLLM_API_KEY), not on its command line")
    log_path, upload_to = _log_path(out, log_name)
    server = ManagedServer(
        command,
        host="127.0.0.1",
        port=port,
        log_path=log_path,
        env=server_env,
        startup_timeout=options.server_startup_timeout,
        max_restarts=options.server_max_restarts,
        name=engine,
    )
    server.count_death = tracker.record_death  # deaths a poison page explains do not spend the budget
    log.info("server log: %s", log_path)
    try:
        try:
            await server.__aenter__()
        except ServerFailed as exc:
            raise EndpointError(f"the {engine} server did not start: {exc}") from exc
        try:
            gate = tracker.gate(server.wait_ready)
            client = VlmClient(server.base_url, model, api_key=api_key, options=client_options, gate=gate)
            try:
                await check_model(client)
                in_flight = client_in_flight(preset) if engine == "vllm" and preset else None
                yield Endpoint(
                    client=client,
                    metrics=server.metrics,
                    suggested_in_flight=in_flight,
                    preset=preset.name if engine == "vllm" and preset else None,
                    tracker=tracker,
                )
            finally:
                await client.close()
        finally:
            await server.__aexit__(None, None, None)
    finally:
        if upload_to and out is not None and log_path.exists():
            try:
                out.write_atomic(upload_to, log_path.read_bytes())
            except Exception as exc:  # noqa: BLE001 - the log copy is a convenience
                log.warning("could not copy the server log to %s: %s", out.display(upload_to), exc)

