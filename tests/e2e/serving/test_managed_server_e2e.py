"""The pipeline launching and babysitting its own server: a fake `vllm` on PATH runs the simulator."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import psutil

from tests.conftest import REPO, read_stage, run_cli
from tests.docs import make_corpus
from tests.processes import kill_marked, marked, new_mark, wait_until_none_marked
from tests.waiting import wait_until

FAKES = REPO / "tests" / "fakes"


def fake_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    return {
        "PATH": f"{FAKES}{os.pathsep}{os.environ['PATH']}",
        "LLM_OCR_TEST_PYTHON": sys.executable,
        "FAKE_VLLM_ARGV_FILE": str(tmp_path / "argv.json"),
        **extra,
    }


def test_extract_launches_vllm_with_the_recipe_when_no_endpoint(tmp_path: Path) -> None:
    make_corpus(tmp_path / "docs", documents=2, pages=1)
    result = run_cli(
        "extract", str(tmp_path / "docs"), "--output", str(tmp_path / "out"), "--engine", "vllm",
        "--gpu-preset", "l4-24gb", "--workers", "0", "--server-args", "--enforce-eager --max-num-seqs 48",
        env=fake_env(tmp_path, FAKE_VLLM_SIM_ARGS=f"--corpus {tmp_path / 'docs'}"),
    )
    assert result.returncode == 0, result.stderr
    argv = json.loads((tmp_path / "argv.json").read_text())
    assert argv[:2] == ["serve", "deepseek-ai/DeepSeek-OCR"]
    joined = " ".join(argv)
    assert "--logits-processors vllm.model_executor.models.deepseek_ocr:NGramPerReqLogitsProcessor" in joined
    assert "--no-enable-prefix-caching" in argv and "--mm-processor-cache-gb 0" in joined
    assert argv[argv.index("--max-num-seqs") + 1] == "64"  # the L4 preset...
    assert argv[-3:] == ["--enforce-eager", "--max-num-seqs", "48"]  # ...and the extra args last, overriding it
    log = (tmp_path / "out/_state/logs/server-00000-of-00001.log").read_text()
    assert "ready on http://127.0.0.1" in log
    assert [r["status"] for r in read_stage(tmp_path / "out", "extract")] == ["ok", "ok"]
    stats = json.loads((tmp_path / "out/_state/extract/done-00000-of-00001.json").read_text())
    gpu = stats["gpu"]
    assert gpu["preset"] == "l4-24gb" and gpu["price_per_gpu_hour"] == 0.80
    assert abs(gpu["estimated_cost_usd"] - gpu["gpu_seconds"] / 3600 * 0.80) < 1e-3
    assert stats["pages_per_s"] > 0 and stats["tokens_per_s"] > 0


def test_server_that_dies_at_start_fails_fast_with_its_log(tmp_path: Path) -> None:
    (tmp_path / "a.png").write_bytes((REPO / "samples/notes.png").read_bytes())
    # A start-up timeout beyond the test's own (300 s): waiting for it instead of noticing the
    # exit fails the test, with no stopwatch for a loaded machine to stretch.
    result = run_cli(
        "extract", str(tmp_path / "a.png"), "--output", str(tmp_path / "out"), "--engine", "vllm",
        "--server-startup-timeout", "3600", env=fake_env(tmp_path, FAKE_VLLM_MODE="crash_on_start"),
    )
    assert result.returncode == 2
    assert "CUDA out of memory" in result.stderr  # the server's own last words are shown


def test_server_killed_mid_run_is_restarted_and_every_page_lands_once(tmp_path: Path) -> None:
    make_corpus(tmp_path / "docs", documents=6, pages=3)
    args = [
        sys.executable, "-m", "llm_ocr.cli", "extract", str(tmp_path / "docs"), "--output", str(tmp_path / "out"),
        "--engine", "vllm", "--workers", "0", "--progress", "log", "--progress-interval", "0.5",
        "--max-in-flight", "4",
    ]
    sim_args = f"--corpus {tmp_path / 'docs'} --prefill-ms 400 --slots 3"
    mark = new_mark()
    # spawn_child: each server generation starts a child of its own, as vLLM starts EngineCore.
    env = {**os.environ, **fake_env(tmp_path, FAKE_VLLM_SIM_ARGS=sim_args, FAKE_VLLM_MODE="spawn_child"), **mark}
    process = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
    try:
        victim = _wait_for_server(process)
        # Kill it mid-run, not mid-startup (a slow machine can take seconds to bring it up): wait
        # until it is running requests, as its own /metrics says.
        assert _wait_running_requests(victim, timeout=60), "the server never ran a request"
        victim.send_signal(signal.SIGKILL)
        _, stderr = process.communicate(timeout=120)
        assert process.returncode == 0, stderr
        assert "restart" in stderr.lower()
        rows = read_stage(tmp_path / "out", "extract")
        assert len(rows) == 18 == len({(r["doc_id"], r["page"]) for r in rows})
        assert {r["status"] for r in rows} == {"ok"}
        # Neither generation of the server, nor their children, nor anything else the CLI
        # started outlives it: the killed generation's child, re-parented to init at once, too.
        left = marked(mark)
        assert left == [], "\n".join(left)
    finally:
        process.kill()
        kill_marked(mark)


def _wait_for_server(process: subprocess.Popen[str]) -> psutil.Process:
    """The simulated server the CLI ``process`` started (through the fake ``vllm``), waited for
    as an event: a server start took minutes at load 25 (a 30 s deadline failed with "the server
    never started"); fails at once if the CLI exits first."""

    def server() -> psutil.Process | None:
        for child in psutil.Process(process.pid).children(recursive=True):
            with contextlib.suppress(psutil.Error):
                if "llm_ocr.engines.sim" in " ".join(child.cmdline()):
                    return child
        return None

    return wait_until(server, "the server started", interval=0.2, process=process)


def _wait_running_requests(server: psutil.Process, timeout: float) -> bool:
    """Wait until ``server`` (a simulated server process) reports a running request."""
    cmd = server.cmdline()
    port = cmd[cmd.index("--port") + 1]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as response:
                metrics = response.read().decode()
            if any(line.startswith("vllm:num_requests_running") and float(line.split()[-1]) > 0 for line in metrics.splitlines()):
                return True
        except OSError:
            pass  # not listening yet
        time.sleep(0.1)
    return False


def test_sigterm_stops_the_run_and_the_server_with_no_orphans(tmp_path: Path) -> None:
    make_corpus(tmp_path / "docs", documents=4, pages=3)
    args = [
        sys.executable, "-m", "llm_ocr.cli", "extract", str(tmp_path / "docs"), "--output", str(tmp_path / "out"),
        "--engine", "vllm", "--workers", "0", "--progress", "off", "--grace-period", "5", "--flush-interval", "0.3",
        "--max-in-flight", "2",
    ]
    # Slow pages (1.5 s each, two at a time): the signal lands mid-run even on a loaded machine.
    sim_args = f"--corpus {tmp_path / 'docs'} --prefill-ms 1500 --slots 2"
    mark = new_mark()
    env = {**os.environ, **fake_env(tmp_path, FAKE_VLLM_SIM_ARGS=sim_args, FAKE_VLLM_MODE="spawn_child"), **mark}
    process = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
    try:
        _wait_for_server(process)
        # The fake starts its child before it becomes the server (scanning every process takes a
        # while on a loaded machine: done here, not between the first rows and the signal).
        assert len(marked(mark)) >= 3  # at least the CLI, the server and the server's own child
        # Signal once the first rows are stored (not at a fixed delay: on a loaded machine that
        # landed before the server was up, or after the last page).
        wait_until(lambda: any((tmp_path / "out/extract").glob("*.parquet")), "the first rows were stored",
                   process=process)
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=60)
        assert process.returncode == 3, stderr
        left = marked(mark)  # at once: the CLI stops the server's whole group before it exits
        assert left == [], "\n".join(left)
    finally:
        process.kill()
        kill_marked(mark)
    saved = read_stage(tmp_path / "out", "extract")
    assert 0 < len(saved) < 12
    # The rerun completes the job with every page exactly once.
    rerun = run_cli(
        "extract", str(tmp_path / "docs"), "--output", str(tmp_path / "out"), "--engine", "vllm", "--workers", "0",
        env=fake_env(tmp_path, FAKE_VLLM_SIM_ARGS=f"--corpus {tmp_path / 'docs'}"),
    )
    assert rerun.returncode == 0, rerun.stderr
    rows = read_stage(tmp_path / "out", "extract")
    assert len(rows) == 12 == len({(r["doc_id"], r["page"]) for r in rows})


def test_sigkill_of_the_cli_takes_the_server_and_its_children_down(tmp_path: Path) -> None:
    """``kill -9`` of llm-ocr (the OOM killer, a preempted VM's agent): the server must not stay
    behind holding the GPU, nor its own children (vLLM's EngineCore, here the fake's child)."""
    make_corpus(tmp_path / "docs", documents=4, pages=3)
    args = [
        sys.executable, "-m", "llm_ocr.cli", "extract", str(tmp_path / "docs"), "--output", str(tmp_path / "out"),
        "--engine", "vllm", "--workers", "1", "--progress", "off", "--max-in-flight", "2",
    ]
    sim_args = f"--corpus {tmp_path / 'docs'} --prefill-ms 400 --slots 2"
    child_file = tmp_path / "child.pid"
    mark = new_mark()
    env = {**os.environ, **mark, **fake_env(tmp_path, FAKE_VLLM_SIM_ARGS=sim_args, FAKE_VLLM_MODE="spawn_child",
                                            FAKE_VLLM_CHILD_PID_FILE=str(child_file))}
    process = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=REPO)
    try:
        server = _wait_for_server(process)
        assert _wait_running_requests(server, timeout=60), "the server never ran a request"
        engine = psutil.Process(int(child_file.read_text()))
        assert os.getpgid(engine.pid) == server.pid  # in the server's process group, as vLLM's are
        running = marked(mark)
        assert len(running) >= 4, running  # the CLI, its render worker, the server and its child
        process.kill()
        process.wait()
        left = wait_until_none_marked(mark, timeout=15)
        assert left == [], "\n".join(left)
    finally:
        process.kill()
        kill_marked(mark)
