"""The tier's vLLM servers, shared: one per distinct model and serving settings for the whole session.

A vLLM start is most of the tier's cost (importing torch, vLLM and transformers, building the
model, profiling its memory: tens of CPU-seconds each on the 2-core machine), so every test that
does not need a server of its own reads through one of these, started by llm-ocr's own launcher
(:class:`~llm_ocr.serving.vllm.process.ManagedServer` on
:func:`~llm_ocr.serving.command_lines.vllm_command`). Their watchdogs run on one event loop in a
thread (:class:`LoopThread`) while the tests run in the main thread. The tests of the tier run one
after the other in one process, so a test reads what it caused from vLLM's request log from where
the log stood when it began (:meth:`TierServer.mark`, :meth:`TierServer.requests`).

Nothing here imports vLLM, torch or transformers (the default suite collects the tier's conftest).
"""

from __future__ import annotations

import ast
import asyncio
import concurrent.futures
import io
import os
import re
import threading
import time
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import psutil

from llm_ocr.options import ClientOptions
from llm_ocr.serving.vllm.process import ManagedServer
from llm_ocr.vlm.client import ChatResult, VlmClient
from llm_ocr.vlm.recipes import image_messages, recipe_for

T = TypeVar("T")

#: The shared server's own served name (the generic recipe): unlike its model path, so a lost or
#: wrong ``--served-model-name`` fails every request (vLLM would serve the path: a 404).
SERVED = "acme/tiny-ocr"

#: Each architecture's served model names (``tests/vllm_real/tiny_models.py`` builds one tiny model
#: per architecture): the first one's family flags start the server. PaddleOCR-VL (1.0 to 1.6) is
#: missing: vLLM 0.32's processor info reads ``image_processor.max_pixels``, which transformers
#: 5.19's ``PaddleOCRVLImageProcessor`` no longer has (it keeps the bounds in ``size``), so vLLM
#: cannot start it with this pair of versions (docs/models.md). So is Unlimited-OCR: its
#: DeepSeek-OCR encoder is built at full size whatever the config, and vLLM's CPU attention has no
#: R-SWA mask (docs/testing.md).
ARCHITECTURES: dict[str, tuple[str, ...]] = {
    "qwen2_5_vl": ("nanonets/Nanonets-OCR2-3B", "Qwen/Qwen2.5-VL-7B-Instruct", "allenai/olmOCR-2-7B-1025"),
    "qwen3_vl": ("Qwen/Qwen3-VL-8B-Instruct", "datalab-to/chandra", "FireRedTeam/FireRed-OCR"),
    "lightonocr": ("lightonai/LightOnOCR-2-1B", "lightonai/LightOnOCR-2-1B-bbox-soup", "lightonai/LightOnOCR-3-1B"),
    "glm_ocr": ("zai-org/GLM-OCR",),
    # LightOnOCR-3's 0.8B and 4B are Qwen3.5 models, as is Surya OCR 2; Infinity-Parser2-Pro a
    # Qwen3.5 mixture of experts, served with its own flags (--reasoning-parser qwen3...).
    "qwen3_5": ("lightonai/LightOnOCR-3-4B", "datalab-to/surya-ocr-2"),
    "qwen3_5_moe": ("infly/Infinity-Parser2-Pro",),
    # NAME@RECIPE: the model served as NAME, read with --recipe RECIPE (a variant of NAME's family).
    "qianfan_ocr": ("baidu/Qianfan-OCR", "baidu/Qianfan-OCR@qianfan-ocr-think"),
}
#: The architecture whose server is also the shared one (``tiny_server``): it answers to
#: :data:`SERVED` beside its families' names, so the launcher's checks, streaming, Fields and
#: Describe need no vLLM start of their own (a start is ~20 CPU-seconds on the 2-core machine).
SHARED_ARCHITECTURE = "qwen2_5_vl"
#: Weights are random anyway: vLLM draws them from the config (no weight files to build).
DUMMY_WEIGHTS = "--load-format dummy"


def served_names(names: Sequence[str]) -> list[str]:
    """The model names a server answers to (``NAME@RECIPE`` entries share NAME's)."""
    return list(dict.fromkeys(n.partition("@")[0] for n in names))


@dataclass
class LoggedRequest:
    """One request as vLLM's request logger saw it: parsed sampling params and its answer."""

    request_id: str
    params: str
    output: str | None = None
    finish_reason: str | None = None

    def param(self, name: str) -> str:
        """The repr of one ``SamplingParams`` field (``extra_args`` and others)."""
        match = re.search(rf"\b{name}=(.*?)(?:, [a-z_]+=|\)$)", self.params)
        assert match, f"no {name} in {self.params}"
        return match.group(1)


_RECEIVED = re.compile(r"Received request (\S+): params: (SamplingParams\(.*\)), lora_request: .*\.$")
# A streamed request is logged once more at its end as "(streaming complete)", with the whole
# text and finish_reason "streaming_complete"; "(streaming delta)" lines (--enable-log-deltas) are skipped.
_GENERATED = re.compile(
    r"Generated response (?P<id>\S+?)(?P<stream> \(streaming (?:delta|complete)\))?: "
    r"output: (?P<output>.*), finish_reason: (?P<finish>\S+)$"
)


def logged_requests(log_text: str) -> list[LoggedRequest]:
    """The requests vLLM logged (``--enable-log-requests --enable-log-outputs``), in order."""
    requests: dict[str, LoggedRequest] = {}
    for line in log_text.splitlines():
        if m := _RECEIVED.search(line):
            requests[m.group(1)] = LoggedRequest(m.group(1), m.group(2))
        elif (m := _GENERATED.search(line)) and m["stream"] != " (streaming delta)":
            logged = requests.setdefault(m["id"], LoggedRequest(m["id"], ""))
            logged.output = ast.literal_eval(m["output"])  # vLLM logs the text's repr()
            logged.finish_reason = m["finish"]
    return list(requests.values())



class LoopThread:
    """An event loop in a thread: the servers' watchdogs run there while the tests run here."""

    #: vLLM starts at once: two fill the 2-core machine (a start is mostly imports, on one core).
    #: Seven at once held ~9 GB (1.3 GB a start) beside the default suite for no gain in CPU time:
    #: its EngineCore cost 19.5-24.5 CPU-seconds a start at load 13-24, 20.6 with seven at once at
    #: load 13-15 (docs/testing.md).
    START_SLOTS = 2

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True, name="tier-servers")
        self.thread.start()
        self.starts = asyncio.Semaphore(self.START_SLOTS)

    def run(self, coro: Coroutine[Any, Any, T], timeout: float) -> T:
        """Run ``coro`` on the loop; its result (or exception) here."""
        return self.submit(coro).result(timeout)

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Start ``coro`` on the loop without waiting for it."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    async def start(self, server: ManagedServer) -> None:
        """Start ``server`` and wait until it is ready, in one of the :data:`START_SLOTS`."""
        async with self.starts:
            await server.start()
            await server.wait_ready()

    def close(self) -> None:
        """Stop the loop and its thread."""
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)


@dataclass
class StartUp:
    """What the launcher did while vLLM started: ``/health`` just after the process was spawned,
    and the first request, made then through a client gated on the server's readiness."""

    health_at_start: int | None
    first: ChatResult
    waited: float  # seconds from the spawn to the first answer


@dataclass
class TierServer:
    """One shared vLLM, as the tests see it."""

    name: str
    server: ManagedServer
    log_path: Path
    served: Sequence[str]
    api_key: str | None = None
    startup: StartUp | None = None
    #: The server's process group as it ran (API server, EngineCore, helpers), for the check at the end.
    members: list[psutil.Process] = field(default_factory=list)

    @property
    def base_url(self) -> str:
        return self.server.base_url

    def requests(self, since: int = 0) -> list[LoggedRequest]:
        """What vLLM logged (``--enable-log-requests --enable-log-outputs``), from request ``since`` on."""
        return logged_requests(self.log_path.read_text(errors="replace"))[since:]

    def mark(self) -> int:
        """How many requests vLLM has logged so far: a test's own start in :meth:`requests`."""
        return len(self.requests())

    def headers(self) -> dict[str, str]:
        """The request headers a raw HTTP client needs (the key, if the server has one)."""
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}


async def health(root_url: str) -> int | None:
    """The status ``/health`` answers now, or None when nothing answers."""
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as session:
            async with session.get(f"{root_url}/health") as response:
                return response.status
    except (aiohttp.ClientError, asyncio.TimeoutError, OSError):
        return None


def group_members(pgid: int) -> list[psutil.Process]:
    """The live (not zombie) processes of process group ``pgid``."""
    members = []
    for proc in psutil.process_iter(["status"]):
        try:
            if os.getpgid(proc.pid) == pgid and proc.info["status"] != psutil.STATUS_ZOMBIE:
                members.append(proc)
        except (ProcessLookupError, psutil.Error):
            continue
    return members


def still_running(members: Sequence[psutil.Process]) -> list[int]:
    """The pids of ``members`` that still run (a zombie has ended)."""
    alive = []
    for member in members:
        try:
            if member.is_running() and member.status() != psutil.STATUS_ZOMBIE:
                alive.append(member.pid)
        except psutil.Error:
            continue
    return alive


def page_jpeg(width: int = 612, height: int = 792) -> bytes:
    """A letter-size page with a line of text, as JPEG (what the tests send as the image)."""
    from PIL import Image, ImageDraw

    image = Image.new("RGB", (width, height), "white")
    ImageDraw.Draw(image).text((40, 40), "Section 1.1 archive batch caption", fill="black")
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG", quality=95)
    return buffer.getvalue()


def plain_request(max_tokens: int = 16) -> dict[str, Any]:
    """A greedy request of the generic recipe (the shared server's served name picks it)."""
    recipe = recipe_for(SERVED)
    return {"messages": image_messages(page_jpeg(), "image/jpeg", recipe.prompt.text), "max_tokens": max_tokens,
            "temperature": 0.0, "extra_body": recipe.extra_body}


async def start_with_a_request(tier: TierServer, body: dict[str, Any], slots: asyncio.Semaphore) -> StartUp:
    """Start ``tier``'s server (in one of ``slots``) and, while vLLM is still loading, send ``body``
    through a client gated on the server's readiness (as the runners do): what :class:`StartUp` records."""
    async with slots:
        return await _start_with_a_request(tier, body)


async def _start_with_a_request(tier: TierServer, body: dict[str, Any]) -> StartUp:
    server = tier.server
    await server.start()
    started = time.monotonic()
    health_at_start = await health(server.root_url)
    # locate: a server whose port another process took while it started listens on another one.
    client = VlmClient(server.base_url, tier.served[0], api_key=tier.api_key, options=ClientOptions(),
                       gate=server.wait_ready, locate=lambda: server.base_url)
    try:
        first = await client.chat(body)
    finally:
        await client.close()
    return StartUp(health_at_start, first, time.monotonic() - started)
