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

import aiohttp

from llm_ocr.backoff import backoff_delay
from llm_ocr.container.cuda import CudaMismatch, check_cuda, interpreter_of
from llm_ocr.gpu_presets import HARDWARE_PRESETS, PRESETS, GpuPreset, named_preset, with_gpus
from llm_ocr.options import ClientOptions, ServerOptions
from llm_ocr.serving.command_lines import api_key_to_env, free_port, sim_command, vllm_command
from llm_ocr.serving.dispatch import Dispatcher
from llm_ocr.serving.quarantine import CrashTracker
from llm_ocr.serving.vllm.fleet import ServerFleet, gpu_devices, sum_metrics, uses_vllm_parallelism
from llm_ocr.serving.vllm.presets import GpuInfo, client_in_flight, detect_gpu, for_family, preset_for
from llm_ocr.serving.vllm.process import ManagedServer, ServerFailed
from llm_ocr.serving.vllm.prometheus import parse_metrics
from llm_ocr.serving.watch import EndpointWatch, probe_endpoint
from llm_ocr.storage import Storage
from llm_ocr.vlm.client import EndpointDown, VlmClient, display_url
from llm_ocr.vlm.families import family_for

log = logging.getLogger("llm_ocr")

class EndpointError(Exception):
    """The model endpoint cannot be used; the message says why and what to do."""


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
        raise EndpointError(f"endpoint {client.display_url} does not serve --model {client.model!r}; it serves "
                            f"{served}")


def choose_engine(options: ServerOptions) -> tuple[str, str, GpuPreset | None]:
    """``(engine, why, preset)`` for ``--engine``; ``auto`` prefers vLLM on a CUDA GPU."""
    gpu = detect_gpu() if options.engine in ("auto", "vllm") else None
    named = named_preset(options.gpu_preset) if options.gpu_preset else None
    if options.gpu_preset and named is None:
        raise EndpointError(
            f"unknown --gpu-preset {options.gpu_preset!r}; choose one of {', '.join(PRESETS)}, "
            f"or a platform's hardware name: {', '.join(HARDWARE_PRESETS)}"
        )
    preset = named or (with_gpus(preset_for(gpu), gpu.count) if gpu else None)
    preset = _fit_gpus(preset, options, gpu)
    if options.engine != "auto":
        return options.engine, "chosen with --engine", preset
    program = shlex.split(options.server_command)[0] if options.server_command else "vllm"
    have_vllm = shutil.which(program) is not None or importlib.util.find_spec("vllm") is not None
    if gpu and have_vllm:
        return "vllm", f"found a CUDA GPU ({gpu.name}, {gpu.memory_gib:.0f} GiB) and vLLM", preset
    if gpu:
        return "cpu", f"found a GPU ({gpu.name}) but not vLLM (pip install vllm to use it)", None
    return "cpu", "no CUDA GPU found (nvidia-smi absent or silent)", None


def check_vllm_cuda(options: ServerOptions) -> None:
    """Before vLLM starts: can the CUDA of the Python that runs it work with this machine's driver?
    :class:`EndpointError` naming both (and the image to use) when not, instead of vLLM failing
    minutes later deep in its start-up (:mod:`llm_ocr.container.cuda`)."""
    words = shlex.split(options.server_command) or ["vllm"]
    try:
        log.info("%s", check_cuda(interpreter_of(words[0])))
    except CudaMismatch as exc:
        raise EndpointError(str(exc)) from None


def _command(
    engine: str, model: str, port: int, options: ServerOptions, preset: GpuPreset | None, recipe: str | None = None
) -> list[str]:
    extra = shlex.split(options.server_args)
    if engine == "vllm":
        return vllm_command(
            model,
            host="127.0.0.1",
            port=port,
            preset=preset or preset_for(None),
            extra_args=extra,
            server_command=shlex.split(options.server_command),
            family=family_for(model, recipe),
        )
    if engine == "sim":
        return sim_command(model, host="127.0.0.1", port=port, extra_args=extra, recipe=recipe)
    if importlib.util.find_spec("rapidocr") is None:
        raise EndpointError("the CPU engine needs its extra: pip install 'llm-ocr[cpu]' (or pass --endpoint URL)")
    return [sys.executable, "-m", "llm_ocr.engines.cpu", "--host", "127.0.0.1", "--port", str(port),
            "--served-model-name", model, *extra]


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
    recipe: str | None = None,
    stopping: Callable[[], bool] | None = None,
) -> AsyncIterator[Endpoint]:
    """Yield a ready :class:`Endpoint`; a launched server is stopped (whole process group) on exit.
    ``stopping``: true once the run was asked to stop; a launched server that exits then is not
    restarted (:attr:`ManagedServer.stopping`).

    A launched server is started with the flags of ``model``'s family (``recipe``: the family
    named by ``--recipe``) and the GPU preset sized for that family.

    ``endpoint`` may list several URLs, comma-separated: servers of the same model, used behind
    one dispatcher. Without it, vLLM on a machine with several GPUs is one server per GPU.
    """
    tracker = CrashTracker()
    if endpoint and "," in endpoint:
        async with _open_several(endpoint, model, api_key, client_options, server_options, tracker) as several:
            yield several
        return
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
        client = VlmClient(endpoint, model, api_key=api_key, options=client_options, gate=gate,
                           request_ended=tracker.request_ended)
        named = (server_options.gpu_preset if server_options else None) or None
        try:
            await check_model(client, wait=client_options.dead_after)
            yield Endpoint(client=client, metrics=lambda: _external_metrics(endpoint), preset=named, tracker=tracker)
        finally:
            await client.close()
        return

    options = server_options or ServerOptions()
    engine, why, preset = choose_engine(options)
    if preset is not None:
        preset = for_family(preset, family_for(model, recipe).serving)
    log.info("no --endpoint: launching the %s engine (%s)", engine, why)
    if engine == "vllm":
        check_vllm_cuda(options)
    if engine == "vllm" and preset is not None and preset.gpus > 1:
        async with _open_fleet(model, api_key, client_options, options, preset, out, log_name, tracker,
                               recipe, stopping) as fleet:
            yield fleet
        return
    port = free_port()
    command = _command(engine, model, port, options, preset, recipe)
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
    server.stopping = stopping
    log.info("server log: %s", log_path)
    try:
        try:
            await server.__aenter__()
        except ServerFailed as exc:
            raise EndpointError(f"the {engine} server did not start: {exc}") from exc
        try:
            gate = tracker.gate(server.wait_ready)
            client = VlmClient(server.base_url, model, api_key=api_key, options=client_options, gate=gate,
                               request_ended=tracker.request_ended, locate=lambda: server.base_url)
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
        _copy_logs(out, [(log_path, upload_to)])


def _fit_gpus(preset: GpuPreset | None, options: ServerOptions, gpu: GpuInfo | None) -> GpuPreset | None:
    """``preset`` with the number of servers to start: ``--gpus``, else the preset's, never more
    than nvidia-smi lists; one when ``--server-args`` spread vLLM over GPUs itself."""
    if preset is None:
        return None
    wanted = options.gpus or preset.gpus
    if uses_vllm_parallelism(shlex.split(options.server_args)):
        wanted = 1  # the user chose vLLM's own data/tensor parallelism: one server
    if gpu is not None and wanted > gpu.count:
        log.warning("%d GPUs wanted (%s) but nvidia-smi lists %d; using %d", wanted,
                    "--gpus" if options.gpus else f"preset {preset.name}", gpu.count, gpu.count)
        wanted = gpu.count
    return with_gpus(preset, wanted) if wanted != preset.gpus else preset


@asynccontextmanager
async def _open_several(
    endpoints: str,
    model: str,
    api_key: str | None,
    client_options: ClientOptions,
    server_options: ServerOptions | None,
    tracker: CrashTracker,
) -> AsyncIterator[Endpoint]:
    """Several ``--endpoint`` URLs behind one dispatcher; their ``/metrics`` summed. Each is
    watched for down-then-up like a single endpoint, with its deaths told apart in ``tracker``."""
    urls = [u.strip() for u in endpoints.split(",") if u.strip()]
    clients = []
    for i, url in enumerate(urls):
        watch = EndpointWatch(
            lambda url=url: probe_endpoint(url, api_key),  # type: ignore[misc]
            display_url=display_url(url),
            dead_after=client_options.dead_after,
            on_down=tracker.server_death(i),
        )
        gate = tracker.gate(watch.wait_up, on_retry=watch.check, server=i)
        clients.append(VlmClient(url, model, api_key=api_key, options=client_options, gate=gate,
                                  request_ended=tracker.request_ended))
    dispatcher = Dispatcher(clients, route=tracker.route)
    try:
        await asyncio.gather(*(check_model(c, wait=client_options.dead_after) for c in clients))

        async def metrics() -> dict[str, float]:
            # A server that is gone for good, down or restarting runs nothing: it is left out
            # of the sum (a dead server must not stop the adaptive in-flight sizing).
            asked = [u for i, u in enumerate(urls) if dispatcher.is_live(i)]
            values = await asyncio.gather(*(_external_metrics(u) for u in asked), return_exceptions=True)
            answered = [v for v in values if not isinstance(v, BaseException)]
            if not answered:
                failed = next((v for v in values if isinstance(v, BaseException)), None)
                if failed is not None:
                    raise failed
            # One server without /metrics: a sum would undercount, so there are none.
            return {} if any(not v for v in answered) else sum_metrics(answered)

        named = (server_options.gpu_preset if server_options else None) or None
        yield Endpoint(client=dispatcher, metrics=metrics, preset=named, tracker=tracker)  # type: ignore[arg-type]
    finally:
        await dispatcher.close()


@asynccontextmanager
async def _open_fleet(
    model: str,
    api_key: str | None,
    client_options: ClientOptions,
    options: ServerOptions,
    preset: GpuPreset,
    out: Storage | None,
    log_name: str,
    tracker: CrashTracker,
    recipe: str | None = None,
    stopping: Callable[[], bool] | None = None,
) -> AsyncIterator[Endpoint]:
    """vLLM on each of ``preset.gpus`` GPUs (``CUDA_VISIBLE_DEVICES``), behind one dispatcher;
    each server's deaths are told apart in ``tracker`` and charged to its own restart budget."""
    devices = gpu_devices(preset.gpus)
    stem, dot, ext = log_name.rpartition(".")
    logs = {d: _log_path(out, f"{stem}-gpu{d}{dot}{ext}" if dot else f"{log_name}-gpu{d}") for d in devices}
    serving = family_for(model, recipe).serving
    per_gpu = for_family(with_gpus(preset, 1), serving)
    # The API key goes in the servers' environment, never on their command lines (see api_key_to_env).
    _, key_env = api_key_to_env(_command("vllm", model, 0, options, per_gpu, recipe))
    fleet = ServerFleet(
        devices,
        lambda device, port: api_key_to_env(_command("vllm", model, port, options, per_gpu, recipe))[0],
        env=key_env,
        ports=free_port,
        host="127.0.0.1",
        log_path=lambda device: logs[device][0],
        startup_timeout=options.server_startup_timeout,
        max_restarts=options.server_max_restarts,
    )
    for member in fleet.servers:
        member.stopping = stopping
    log.info("%d GPUs: one vLLM server each (%s); logs: %s", len(devices), preset.name,
             ", ".join(str(path) for path, _ in logs.values()))
    try:
        try:
            await fleet.__aenter__()
        except ServerFailed as exc:
            raise EndpointError(f"the vllm servers did not start: {exc}") from exc
        try:
            clients = []
            for i, member in enumerate(fleet.members):
                member.count_death = tracker.server_death(i)  # a poison page's deaths do not spend its budget
                gate = tracker.gate(member.wait_ready, server=i)
                clients.append(VlmClient(member.base_url, model, api_key=api_key, options=client_options, gate=gate,
                                         request_ended=tracker.request_ended,
                                         locate=lambda member=member: member.base_url))  # type: ignore[misc]
            dispatcher = Dispatcher(clients, [_readiness(s) for s in fleet.members], route=tracker.route)
            try:
                await asyncio.gather(*(check_model(c) for c in clients))
                in_flight = client_in_flight(for_family(with_gpus(preset, len(fleet.members)), serving))
                yield Endpoint(client=dispatcher, metrics=fleet.metrics, suggested_in_flight=in_flight,  # type: ignore[arg-type]
                               preset=preset.name, tracker=tracker)
            finally:
                await dispatcher.close()
        finally:
            await fleet.__aexit__(None, None, None)
    finally:
        _copy_logs(out, list(logs.values()))


def _readiness(server: ManagedServer) -> Callable[[], bool]:
    """Whether ``server`` is ready, asked anew at each call."""
    return lambda: server.is_ready


def _copy_logs(out: Storage | None, logs: list[tuple[Path, str | None]]) -> None:
    """Copy each local server log to its place in a remote output (``None``: it is already there)."""
    for path, upload_to in logs:
        if upload_to and out is not None and path.exists():
            try:
                out.write_atomic(upload_to, path.read_bytes())
            except Exception as exc:  # noqa: BLE001 - the log copy is a convenience
                log.warning("could not copy the server log to %s: %s", out.display(upload_to), exc)
