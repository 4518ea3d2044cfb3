"""Server command lines and the ManagedServer lifecycle, against a fake ``vllm`` on PATH.

The fake (tests/fakes/vllm) parses our flags with vLLM's argparse types and then runs the
simulated DeepSeek-OCR server, crashes, hangs or spawns a child, as FAKE_VLLM_MODE says.
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
import os
import shutil
import signal
import socket
import stat
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import psutil
import pytest
from PIL import Image

from llm_ocr.gpu_presets import PRESETS, GpuPreset
from llm_ocr.options import ClientOptions
from llm_ocr.serving.command_lines import (
    DEEPSEEK_OCR_SERVER_ARGS,
    VLLM_API_SERVER,
    api_key_to_env,
    free_port,
    sim_command,
    vllm_command,
)
from llm_ocr.serving.vllm.process import ManagedServer, ServerFailed, redact_command
from llm_ocr.serving.vllm.prometheus import parse_metrics
from llm_ocr.vlm.client import VlmClient
from llm_ocr.vlm.recipes import DOCUMENT_PROMPT, image_messages, recipe_for
from tests.waiting import HANG_GUARD_S

FAKES = Path(__file__).resolve().parents[1] / "fakes"
MODEL = "deepseek-ai/DeepSeek-OCR"
HOST = "127.0.0.1"
RECIPE = [
    "--trust-remote-code",
    "--logits-processors",
    "vllm.model_executor.models.deepseek_ocr:NGramPerReqLogitsProcessor",
    "--no-enable-prefix-caching",
    "--mm-processor-cache-gb",
    "0",
]
#: A small batch so the simulator behind the fake starts quickly.
TINY = GpuPreset(name="tiny", gpu_memory_gb=24, max_num_seqs=4, gpu_memory_utilization=0.9,
                 max_num_batched_tokens=4096)


def index_of(command: list[str], sub: list[str]) -> int:
    """Where ``sub`` occurs contiguously in ``command`` (-1 if it does not)."""
    for i in range(len(command) - len(sub) + 1):
        if command[i : i + len(sub)] == sub:
            return i
    return -1


def flag_value(command: list[str], flag: str) -> str:
    return command[command.index(flag) + 1]


# --- command lines -------------------------------------------------------------------------


def test_deepseek_command_has_exactly_the_recipe_flags() -> None:
    preset = PRESETS["a100-80gb"]
    cmd = vllm_command(MODEL, host=HOST, port=8123, preset=preset, extra_args=["--enforce-eager"])
    assert list(DEEPSEEK_OCR_SERVER_ARGS) == RECIPE
    assert cmd[:3] == ["vllm", "serve", MODEL]  # positional, right after `serve`
    assert index_of(cmd, RECIPE) > 0
    assert cmd.count("--logits-processors") == 1
    assert flag_value(cmd, "--host") == HOST
    assert flag_value(cmd, "--port") == "8123"
    assert flag_value(cmd, "--served-model-name") == MODEL
    assert flag_value(cmd, "--max-num-seqs") == "256"
    assert flag_value(cmd, "--gpu-memory-utilization") == "0.92"
    assert flag_value(cmd, "--max-model-len") == "8192"
    assert flag_value(cmd, "--max-num-batched-tokens") == "4096"
    assert json.loads(flag_value(cmd, "--limit-mm-per-prompt")) == {"image": 1}
    assert cmd[-1] == "--enforce-eager"


def test_deepseek_ocr_2_is_served_the_same_way() -> None:
    cmd = vllm_command("deepseek-ai/DeepSeek-OCR-2", host=HOST, port=1, preset=PRESETS["l4-24gb"])
    assert index_of(cmd, RECIPE) > 0


def test_other_models_get_no_deepseek_flags() -> None:
    cmd = vllm_command("Qwen/Qwen2.5-VL-7B-Instruct", host=HOST, port=8000, preset=PRESETS["l4-24gb"])
    # DeepSeek-OCR's logits processor lives in its own model module: loading it for Qwen would
    # fail at startup. (Qwen's own family turns prefix caching off, as DeepSeek-OCR's does.)
    assert "--logits-processors" not in cmd
    assert "NGramPerReqLogitsProcessor" not in " ".join(cmd)
    assert json.loads(flag_value(cmd, "--limit-mm-per-prompt")) == {"image": 1}


def test_extra_args_come_last_after_preset_extras() -> None:
    preset = PRESETS["h100-80gb"].model_copy(update={"extra_args": ("--kv-cache-dtype", "fp8")})
    extra = ["--max-num-seqs", "8", "--api-key", "secret"]
    cmd = vllm_command(MODEL, host=HOST, port=1, preset=preset, served_model_name="ocr", extra_args=extra)
    assert cmd[-len(extra) :] == extra
    assert cmd[-len(extra) - 2 : -len(extra)] == ["--kv-cache-dtype", "fp8"]
    assert flag_value(cmd, "--served-model-name") == "ocr"
    # vLLM's parser keeps the last value of a repeated flag: the user's override wins.
    assert [a for i, a in enumerate(cmd) if i and cmd[i - 1] == "--max-num-seqs"] == ["320", "8"]


def test_api_server_entry_point_takes_model_as_flag() -> None:
    cmd = vllm_command(MODEL, host=HOST, port=1, preset=PRESETS["l4-24gb"], server_command=VLLM_API_SERVER)
    assert cmd[:3] == [sys.executable, "-m", "vllm.entrypoints.openai.api_server"]
    assert cmd[3:5] == ["--model", MODEL]
    assert cmd.count(MODEL) == 2  # --model and --served-model-name, no positional
    assert index_of(cmd, RECIPE) > 0


def test_sim_command() -> None:
    cmd = sim_command(MODEL, host=HOST, port=9, extra_args=["--instant"], preset=TINY)
    assert cmd[:3] == [sys.executable, "-m", "llm_ocr.engines.sim"]
    assert flag_value(cmd, "--port") == "9"
    assert flag_value(cmd, "--served-model-name") == MODEL
    assert flag_value(cmd, "--slots") == "4"
    assert cmd[-1] == "--instant"


def test_free_port_is_bindable() -> None:
    import socket

    port = free_port(HOST)
    with socket.socket() as s:
        s.bind((HOST, port))


def test_one_api_key_moves_from_the_command_line_to_the_environment() -> None:
    base = ["vllm", "serve", "m", "--port", "1"]
    assert api_key_to_env([*base, "--api-key", "k1", "--corpus", "c"]) == ([*base, "--corpus", "c"], {"VLLM_API_KEY": "k1"})
    assert api_key_to_env([*base, "--api-key=k1"]) == (base, {"VLLM_API_KEY": "k1"})
    # Several keys do not fit the one variable: left as they are (and masked when logged).
    for several in ([*base, "--api-key", "k1", "k2"], [*base, "--api-key", "k1", "--api-key=k2"]):
        assert api_key_to_env(several) == (several, {})
    assert api_key_to_env(base) == (base, {})


def test_redact_command() -> None:
    cmd = ["vllm", "serve", "m", "--api-key", "k1", "k2", "--hf-token=hf_abcdefghijklmnopqrstuv",
           "--max-num-batched-tokens", "4096", "--decode-ms-per-token", "4", "--token", "t",
           "--port", "-1", "--x", "Bearer abc.def"]
    out = redact_command(cmd)
    assert out == ["vllm", "serve", "m", "--api-key", "***", "***", "--hf-token=***",
                   "--max-num-batched-tokens", "4096", "--decode-ms-per-token", "4", "--token", "***",
                   "--port", "-1", "--x", "Bearer ***"]


def test_parse_metrics_sums_labels_and_skips_missing() -> None:
    text = (
        "# HELP vllm:num_requests_running Number of requests.\n"
        "# TYPE vllm:num_requests_running gauge\n"
        'vllm:num_requests_running{engine="0",model_name="m"} 3.0\n'
        'vllm:num_requests_running{engine="1",model_name="m"} 4.0\n'
        'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25\n'
        'vllm:generation_tokens_total{engine="0",model_name="m {weird}"} 1.5e3\n'
        "vllm:num_requests_waiting 2\n"
        "vllm:num_requests_waiting_by_reason 99\n"
        "garbage line\n"
    )
    assert parse_metrics(text) == {
        "running": 7.0,
        "kv_cache_usage": 0.25,
        "generation_tokens_total": 1500.0,
        "waiting": 2.0,
    }


# --- lifecycle against the fake vllm -------------------------------------------------------


@pytest.fixture
def fake_vllm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Put tests/fakes first on PATH (so ``vllm`` is the fake); yield the argv-file path."""
    fakes = FAKES
    if not os.access(FAKES / "vllm", os.X_OK):  # a checkout that lost the executable bit
        fakes = tmp_path / "fakes"
        shutil.copytree(FAKES, fakes)
        (fakes / "vllm").chmod((fakes / "vllm").stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{fakes}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setenv("LLM_OCR_TEST_PYTHON", sys.executable)
    argv_file = tmp_path / "argv.json"
    monkeypatch.setenv("FAKE_VLLM_ARGV_FILE", str(argv_file))
    for var in ("FAKE_VLLM_MODE", "FAKE_VLLM_REJECT_FLAG", "FAKE_VLLM_IGNORE_SIGTERM"):
        monkeypatch.delenv(var, raising=False)
    yield argv_file


@pytest.fixture
def reaper() -> Iterator[list[int | None]]:
    """Pids a test started; whatever is left of them is killed afterwards (even on failure)."""
    pids: list[int | None] = []
    yield pids
    for pid in filter(None, pids):
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def gone(pid: int | None) -> bool:
    """The process no longer runs (a zombie awaiting its reaper counts as gone)."""
    assert pid is not None
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def waitable(pid: int | None) -> bool:
    """Our child ``pid`` has exited and ``waitpid`` would reap it now (it is not reaped here).

    Stricter than :func:`gone`: a multithreaded process's leader shows as a zombie while its
    other threads are still exiting, and until they have, ``Popen.poll()`` still says it runs.
    """
    assert pid is not None
    return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None


def make_server(tmp_path: Path, *, mode: str = "ok", extra_args: list[str] | None = None,
                **kwargs: Any) -> ManagedServer:
    port = free_port(HOST)
    cmd = vllm_command(MODEL, host=HOST, port=port, preset=TINY, extra_args=extra_args or [])
    env = {"FAKE_VLLM_MODE": mode, "FAKE_VLLM_CHILD_PID_FILE": str(tmp_path / "child.pid")}
    env.update(kwargs.pop("env", {}))
    kwargs.setdefault("startup_timeout", HANG_GUARD_S)
    kwargs.setdefault("stop_grace", 5)
    return ManagedServer(cmd, host=HOST, port=port, log_path=tmp_path / "logs" / "vllm.log", env=env, **kwargs)


async def get_json(url: str) -> Any:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
        async with session.get(url) as resp:
            resp.raise_for_status()
            return await resp.json(content_type=None)


def one_page_body(max_tokens: int = 64) -> dict[str, Any]:
    """A DeepSeek-OCR request for a small white page (``VlmClient.chat``'s keywords)."""
    buf = io.BytesIO()
    Image.new("RGB", (64, 80), "white").save(buf, format="PNG")
    return {"messages": image_messages(buf.getvalue(), "image/png", DOCUMENT_PROMPT), "max_tokens": max_tokens,
            "temperature": 0, "extra_body": recipe_for(MODEL).extra_body}


async def ocr_one_page(base_url: str) -> dict[str, Any]:
    """:func:`one_page_body` sent as JSON (its ``extra_body`` merged, as the OpenAI SDK does)."""
    request = one_page_body(max_tokens=512)
    body = {"model": MODEL, **request, **request.pop("extra_body")}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
        async with session.post(f"{base_url}/chat/completions", json=body) as resp:
            return {"status": resp.status, "body": await resp.json(content_type=None)}


async def wait_for(predicate, timeout: float = HANG_GUARD_S, interval: float = 0.1) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(interval)


async def crash(server: ManagedServer) -> None:
    """Make the simulator behind ``server`` exit on its next request, send it one, and wait
    until the process has exited (nothing restarts it but a later :meth:`~ManagedServer.wait_ready`
    when the watchdog polls rarely)."""
    pid = server.pid
    async with aiohttp.ClientSession() as session:
        async with session.post(f"{server.root_url}/sim/faults", json={"kind": "crash"}) as resp:
            assert resp.status < 300
    with pytest.raises(aiohttp.ClientError):
        await ocr_one_page(server.base_url)  # the simulator exits(1) on this request
    # Not gone(): the leader shows as a zombie a moment before poll() can reap it.
    await wait_for(lambda: waitable(pid))


def test_fake_vllm_becomes_ready_and_serves(tmp_path: Path, fake_vllm: Path, reaper: list[int | None],
                                            caplog: pytest.LogCaptureFixture) -> None:
    server = make_server(tmp_path, extra_args=["--api-key", "sekrit-value"])

    async def scenario() -> None:
        async with server:
            reaper.append(server.pid)
            assert server.generation == 1
            assert server.base_url == f"http://{HOST}:{server.port}/v1"
            assert await server.wait_ready() == 1
            models = await get_json(f"{server.base_url}/models")
            assert [m["id"] for m in models["data"]] == [MODEL]

            before = await server.metrics()
            assert before == {"running": 0.0, "waiting": 0.0, "kv_cache_usage": 0.0,
                              "generation_tokens_total": 0.0, "prompt_tokens_total": 0.0}
            answer = await ocr_one_page(server.base_url)
            assert answer["status"] == 200, answer
            after = await server.metrics()
            assert after["generation_tokens_total"] == answer["body"]["usage"]["completion_tokens"] > 0
            assert after["prompt_tokens_total"] == answer["body"]["usage"]["prompt_tokens"] > 0

    with caplog.at_level(logging.INFO, logger="llm_ocr.serving.vllm.process"):
        asyncio.run(scenario())
    assert gone(server.pid)
    # The fake saw exactly our command line (and parsed it with vLLM's flag types).
    assert json.loads(fake_vllm.read_text()) == server.command[1:]
    # The server's own output is in the log file.
    log_text = (tmp_path / "logs" / "vllm.log").read_text()
    assert "INFO fake vllm: serving deepseek-ai/DeepSeek-OCR" in log_text
    assert "simulated DeepSeek-OCR server ready" in log_text
    assert "simulated DeepSeek-OCR server ready" in server.log_tail(5)
    # The command line is logged, but not the API key.
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "--limit-mm-per-prompt '{\"image\": 1}'" in logged  # shell-quoted: copy-pastable
    assert "--api-key '***'" in logged
    assert "sekrit-value" not in logged


def test_crash_on_start_fails_fast_with_the_servers_error(tmp_path: Path, fake_vllm: Path,
                                                          reaper: list[int | None]) -> None:
    # A start-up timeout beyond the test's own (pytest-timeout, 300 s): a launcher that waited
    # for it instead of noticing the exit fails the test however fast or loaded the machine.
    server = make_server(tmp_path, mode="crash_on_start", startup_timeout=3600)

    async def scenario() -> None:
        async with server:
            raise AssertionError("should not become ready")

    with pytest.raises(ServerFailed) as info:
        asyncio.run(scenario())
    reaper.append(server.pid)
    assert info.value.exit_code == 1
    assert "CUDA out of memory" in str(info.value)
    assert "exit code 1" in str(info.value)
    assert server.restarts == 0  # a first start that fails is not retried
    assert gone(server.pid)


def test_rejected_flag_reports_vllms_usage_error(tmp_path: Path, fake_vllm: Path, reaper: list[int | None],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_VLLM_REJECT_FLAG", "--mm-processor-cache-gb")
    server = make_server(tmp_path)

    async def scenario() -> None:
        async with server:
            pass

    with pytest.raises(ServerFailed) as info:
        asyncio.run(scenario())
    reaper.append(server.pid)
    assert info.value.exit_code == 2
    assert "unrecognized arguments: --mm-processor-cache-gb" in str(info.value)


def test_hang_hits_the_startup_timeout_and_leaves_nothing(tmp_path: Path, fake_vllm: Path,
                                                          reaper: list[int | None]) -> None:
    # The hanging fake also ignores SIGTERM: only the SIGKILL escalation can stop it.
    server = make_server(tmp_path, mode="hang", startup_timeout=2, stop_grace=1,
                         env={"FAKE_VLLM_IGNORE_SIGTERM": "1"})

    async def scenario() -> None:
        async with server:
            raise AssertionError("should not become ready")

    started = time.monotonic()
    with pytest.raises(ServerFailed) as info:
        asyncio.run(scenario())
    elapsed = time.monotonic() - started
    reaper.append(server.pid)
    # Not sooner than the timeout; a launcher stuck on the fake that ignores SIGTERM would meet
    # the test's own timeout instead (no upper bound here: load stretches the escalation).
    assert elapsed >= 2, elapsed
    assert "not healthy after 2s" in str(info.value)
    assert "loading weights forever" in str(info.value)
    assert gone(server.pid)


def test_killed_server_is_restarted_by_the_watchdog(tmp_path: Path, fake_vllm: Path,
                                                     reaper: list[int | None]) -> None:
    # spawn_child: the dead server's child (think EngineCore) must not survive the restart.
    server = make_server(tmp_path, mode="spawn_child", max_restarts=1, poll_interval=0.2)
    child_file = tmp_path / "child.pid"

    async def scenario() -> None:
        async with server:
            first_pid = server.pid
            reaper.append(first_pid)
            first_child = int(child_file.read_text())
            reaper.append(first_child)
            os.kill(first_pid, signal.SIGKILL)  # type: ignore[arg-type]
            # The watchdog notices, cleans up, restarts; wait_ready blocks until healthy.
            await wait_for(lambda: server.generation == 2)
            reaper.append(server.pid)
            assert await server.wait_ready() == 2
            assert server.restarts == 1
            assert server.pid != first_pid
            assert gone(first_pid) and gone(first_child)
            models = await get_json(f"{server.base_url}/models")
            assert models["data"][0]["id"] == MODEL
            reaper.append(int(child_file.read_text()))

            # Second death: the budget (1) is spent, wait_ready reports it.
            os.kill(server.pid, signal.SIGKILL)  # type: ignore[arg-type]
            with pytest.raises(ServerFailed) as info:
                deadline = time.monotonic() + HANG_GUARD_S
                while time.monotonic() < deadline:
                    await server.wait_ready()
                    await asyncio.sleep(0.1)
            assert "restart budget (1) is spent" in str(info.value)
            assert info.value.exit_code == -signal.SIGKILL
            assert "exit code -9, SIGKILL" in str(info.value)
            assert server.restarts == 1

    asyncio.run(scenario())
    assert gone(server.pid)


def test_crash_fault_is_recovered_by_wait_ready(tmp_path: Path, fake_vllm: Path, reaper: list[int | None]) -> None:
    # A watchdog too slow to notice: wait_ready itself must find the dead server and restart it.
    server = make_server(tmp_path, max_restarts=2, poll_interval=600)

    async def scenario() -> None:
        async with server:
            reaper.append(server.pid)
            await crash(server)
            assert await server.wait_ready() == 2
            reaper.append(server.pid)
            assert server.restarts == 1
            assert (await ocr_one_page(server.base_url))["status"] == 200
        log_text = (tmp_path / "logs" / "vllm.log").read_text()
        assert "injected crash, exiting with code 1" in log_text
        assert "generation 2 started" in log_text

    asyncio.run(scenario())
    assert gone(server.pid)


def test_a_restart_whose_port_was_taken_moves_and_the_client_follows(tmp_path: Path, fake_vllm: Path,
                                                                     reaper: list[int | None],
                                                                     caplog: pytest.LogCaptureFixture) -> None:
    """While a managed server is down, another process takes its port (shards' servers side by
    side on one machine; a fresh clone's real-vLLM tier beside another's met it): the restart
    binds another port, and the run's client, made before, sends its pages there rather than to
    the old port until --dead-after stops the run."""
    server = make_server(tmp_path, max_restarts=1, poll_interval=600)  # restarted by the request's gate
    options = ClientOptions(max_attempts=2, backoff_base=0.05, backoff_max=0.2, dead_after=20)

    async def scenario() -> int:
        async with server:
            first_port = server.port
            reaper.append(server.pid)
            client = VlmClient(server.base_url, MODEL, options=options, gate=server.wait_ready,
                               locate=lambda: server.base_url)
            try:
                assert (await client.chat(one_page_body())).text
                await crash(server)
                with PortTaker(first_port):
                    answer = await client.chat(one_page_body())
                reaper.append(server.pid)
                assert answer.text  # answered: the old port's taker answers nothing
                assert server.port != first_port and server.generation == 3  # 2 met the taken port
                assert client.base_url == server.base_url
            finally:
                await client.close()
        return first_port

    with caplog.at_level(logging.WARNING):
        first_port = asyncio.run(scenario())
    assert gone(server.pid)
    assert f"could not bind port {first_port} (another process took it)" in caplog.text
    assert f"the model server moved from http://{HOST}:{first_port}/v1" in caplog.text


class PortTaker:
    """Another process's listener on ``port`` (SO_REUSEADDR, as servers bind: the killed server's
    connections may still be in TIME_WAIT); a connection it gets is closed at once (the server's
    health checks of the start that met it come here)."""

    def __init__(self, port: int) -> None:
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((HOST, port))
        self.sock.listen()
        self._thread = threading.Thread(target=self._accept, daemon=True)

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:  # closed
                return
            conn.close()

    def __enter__(self) -> PortTaker:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        self._thread.join(timeout=10)


def test_unresponsive_server_is_killed_and_restarted(tmp_path: Path, fake_vllm: Path,
                                                     reaper: list[int | None]) -> None:
    # A process that runs but no longer answers /health (a wedged engine; here: SIGSTOP).
    server = make_server(tmp_path, poll_interval=0.2, health_interval=0.3, unhealthy_timeout=1.5)

    async def scenario() -> None:
        async with server:
            first_pid = server.pid
            reaper.append(first_pid)
            await asyncio.sleep(1.0)  # healthy probes: nothing happens
            assert server.generation == 1
            os.kill(first_pid, signal.SIGSTOP)  # type: ignore[arg-type]
            await wait_for(lambda: server.generation == 2, timeout=20)
            reaper.append(server.pid)
            assert await server.wait_ready() == 2
            assert server.restarts == 1
            assert gone(first_pid)

    asyncio.run(scenario())
    assert gone(server.pid)


def test_stop_kills_the_whole_process_group(tmp_path: Path, fake_vllm: Path, reaper: list[int | None]) -> None:
    server = make_server(tmp_path, mode="spawn_child")
    child_file = tmp_path / "child.pid"

    async def scenario() -> int:
        async with server:
            reaper.append(server.pid)
            child = int(child_file.read_text())
            reaper.append(child)
            assert not gone(child)
            assert os.getpgid(child) == server.pid  # same group as the server
        return child

    child = asyncio.run(scenario())
    assert gone(server.pid)
    assert gone(child)


def test_cancelled_context_still_stops_the_server(tmp_path: Path, fake_vllm: Path, reaper: list[int | None]) -> None:
    server = make_server(tmp_path, mode="spawn_child")
    child_file = tmp_path / "child.pid"

    async def scenario() -> None:
        is_ready = asyncio.Event()

        async def run() -> None:
            async with server:
                reaper.append(server.pid)
                reaper.append(int(child_file.read_text()))
                is_ready.set()
                await asyncio.sleep(3600)

        task = asyncio.create_task(run())
        await asyncio.wait_for(is_ready.wait(), 30)
        task.cancel()  # what the runner's signal handling amounts to
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(scenario())
    assert gone(server.pid)
    assert gone(int(child_file.read_text()))


def test_missing_executable_is_a_server_failure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no vllm anywhere
    port = free_port(HOST)
    cmd = vllm_command(MODEL, host=HOST, port=port, preset=TINY)
    server = ManagedServer(cmd, host=HOST, port=port, log_path=tmp_path / "vllm.log")

    async def scenario() -> None:
        async with server:
            pass

    with pytest.raises(ServerFailed, match="could not run 'vllm'"):
        asyncio.run(scenario())


def test_stop_during_startup_does_not_restart(tmp_path: Path, fake_vllm: Path, reaper: list[int | None]) -> None:
    server = make_server(tmp_path, mode="slow:30", startup_timeout=60)

    async def scenario() -> None:
        await server.start()
        reaper.append(server.pid)
        waiter = asyncio.create_task(server.wait_ready())
        await asyncio.sleep(1.0)
        await server.stop()
        with pytest.raises(ServerFailed, match="was stopped"):
            await waiter
        assert server.generation == 1 and server.restarts == 0
        with pytest.raises(ServerFailed, match="was stopped"):
            await server.wait_ready()

    asyncio.run(scenario())
    assert gone(server.pid)


def test_slow_start_is_waited_for(tmp_path: Path, fake_vllm: Path, reaper: list[int | None]) -> None:
    server = make_server(tmp_path, mode="slow:1.5", startup_timeout=30)

    async def scenario() -> float:
        started = time.monotonic()
        async with server:
            reaper.append(server.pid)
            return time.monotonic() - started

    assert asyncio.run(scenario()) >= 1.5
    assert gone(server.pid)


@pytest.mark.parametrize(
    "model, flags",
    [
        ("allenai/olmOCR-2-7B-1025-FP8", []),
        ("rednote-hilab/dots.mocr", ["--trust-remote-code", "--chat-template-content-format", "string"]),
        ("datalab-to/chandra-ocr-2", ["--mm-processor-kwargs", '{"min_pixels": 3136, "max_pixels": 6291456}']),
        ("opendatalab/MinerU2.5-2509-1.2B", ["--logits-processors", "mineru_vl_utils:MinerULogitsProcessor"]),
        ("ibm-granite/granite-docling-258M", []),
    ],
)
def test_each_family_gets_its_own_flags_context_and_sizing(model: str, flags: list[str]) -> None:
    from llm_ocr.vlm.families import family_for

    family = family_for(model)
    cmd = vllm_command(model, host=HOST, port=1, preset=PRESETS["l4-24gb"])
    assert flags == [] or index_of(cmd, flags) > 0
    assert "NGramPerReqLogitsProcessor" not in " ".join(cmd)  # DeepSeek's processor: DeepSeek's only
    assert flag_value(cmd, "--max-model-len") == str(family.serving.context)
    assert json.loads(flag_value(cmd, "--limit-mm-per-prompt")) == dict(family.serving.limit_mm_per_prompt)
    seqs = int(flag_value(cmd, "--max-num-seqs"))
    # The L4's KV cache, sized with the family's own weights and KV bytes per token.
    kv_tokens = (22.5 * 0.90 - family.serving.weights_gib) * 1024**3 / family.serving.kv_bytes_per_token
    assert 8 <= seqs <= min(64, max(8, kv_tokens / family.serving.typical_seq_tokens))
    # A fine-tune served under another name gets the family it names.
    named = vllm_command("me/ocr-ft", host=HOST, port=1, preset=PRESETS["l4-24gb"], family=family)
    assert named[named.index("--max-model-len") + 1] == str(family.serving.context)


def test_olmocr_on_an_l4_holds_fewer_pages_than_deepseek() -> None:
    olmocr = vllm_command("allenai/olmOCR-2-7B-1025", host=HOST, port=1, preset=PRESETS["l4-24gb"])
    deepseek = vllm_command(MODEL, host=HOST, port=1, preset=PRESETS["l4-24gb"])
    assert int(flag_value(olmocr, "--max-num-seqs")) < int(flag_value(deepseek, "--max-num-seqs")) == 64


def test_a_port_taken_before_the_server_binds_it_moves_the_server_not_the_requests(tmp_path: Path) -> None:
    """Another program takes the port free_port gave us before our server binds it (the window
    free_port's docstring names; a loaded test run hit it). That program answers /health, but
    it is not our server: the server is started again on another port, without spending its
    restart budget (0 here), and is ready there, serving our model."""
    import http.server
    import threading

    class Anything(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    squatter = http.server.ThreadingHTTPServer((HOST, 0), Anything)
    taken = squatter.server_address[1]
    threading.Thread(target=squatter.serve_forever, daemon=True).start()
    try:
        async def scenario() -> tuple[int, int, list[str]]:
            server = ManagedServer(sim_command(MODEL, host=HOST, port=taken, extra_args=["--instant"], preset=TINY),
                                   host=HOST, port=taken, log_path=tmp_path / "server.log", max_restarts=0,
                                   name="sim", startup_timeout=HANG_GUARD_S)
            async with server:
                async with aiohttp.ClientSession() as session, session.get(f"{server.base_url}/models") as resp:
                    models = [m["id"] for m in (await resp.json())["data"]]
                return server.port, server.restarts, models

        port, restarts, models = asyncio.run(scenario())
    finally:
        squatter.shutdown()
        squatter.server_close()
    assert port != taken and restarts == 0
    assert models == [MODEL]
