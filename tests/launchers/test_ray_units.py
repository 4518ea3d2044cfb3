"""``llm-ocr launch ray`` without a cluster: the dry run's job and plan, what is refused before
anything is submitted, and a shard's state read from the driver's events."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llm_ocr.launchers.core.adapter import JobState
from llm_ocr.launchers.ray.driver import event_line
from llm_ocr.launchers.ray.state import parse_events, shard_lines, shard_state
from tests.docs import make_corpus
from tests.launchers.common import llm_ocr_batch
from tests.launchers.ray_common import launcher_env


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("ray-units") / "docs"
    make_corpus(folder, documents=2, pages=1)
    return folder


def test_the_dry_run_shows_the_ray_job_and_the_plan_and_refuses_what_cannot_run(tmp_path: Path, corpus: Path) -> None:
    out = str(tmp_path / "out")
    base = ["launch", "ray", str(corpus), "--output", out, "--num-shards", "4", "--address", "ray://head:10001",
            "--dry-run", "--offline"]
    cases = [
        (base, {}),
        ([*base, "--pip", "llm-ocr[s3]==0.1.0", "--actors", "2", "--accelerator-type", "A100", "--attempts", "2",
          "--venv", "/opt/ocr"], {}),
        ([*base, "--endpoint", "http://vllm:8000/v1"], {}),
        ([*base, "--secret", "OCR_TOKEN"], {"OCR_TOKEN": "local-secret-value-123"}),
        ([*base, "--image", "vllm/vllm-openai:v0.29.0"], {}),
        ([*base, "--wheel", "dist/llm_ocr-0.1.0-py3-none-any.whl"], {}),
        (["launch", "ray", str(corpus), "--output", out, "--num-shards", "1", "--address", "http://127.0.0.1:9"], {}),
    ]
    plain, options, endpoint, secret, image, wheel, unreachable = llm_ocr_batch(cases, launcher_env(tmp_path))

    assert plain["code"] == 0, plain["stderr"]
    plan = json.loads(plain["stdout"])
    (request,) = plan["requests"]
    submit, driver = request["submit_job"], request["plan"]
    assert submit["entrypoint"] == "python llm_ocr_ray_driver.py plan.json"
    assert submit["submission_id"] == f"llm-ocr-run-{plan['launch_id']}"
    # Only what Ray itself reads: no llm-ocr setting, no secret, in the job's public runtime_env.
    assert submit["runtime_env"]["env_vars"] == {"RAY_JOB_STOP_WAIT_TIME_S": "60"}
    assert set(submit["runtime_env"]) == {"working_dir", "env_vars"}
    assert driver["shards"] == [0, 1, 2, 3] and driver["num_shards"] == 4
    assert driver["gpus_per_actor"] == 1 and driver["env"]["LLM_OCR_ENGINE"] == "vllm"  # one vLLM per actor's GPU
    assert driver["command"][:2] == ["llm-ocr", "run"] and driver["command"][-2:] == ["--output", out]
    assert "LLM_OCR_SHARD_INDEX" not in driver["env"]  # the actor gives each shard its own
    assert (driver["attempts"], driver["actor_restarts"], driver["actors"]) == (3, 3, None)
    assert "offline: not checked" in plain["stderr"]

    assert options["code"] == 0, options["stderr"]
    request = json.loads(options["stdout"])["requests"][0]
    assert request["submit_job"]["runtime_env"]["pip"] == ["llm-ocr[s3]==0.1.0"]
    assert (request["plan"]["actors"], request["plan"]["accelerator_type"], request["plan"]["attempts"],
            request["plan"]["venv"]) == (2, "A100", 2, "/opt/ocr")

    assert endpoint["code"] == 0, endpoint["stderr"]
    driver = json.loads(endpoint["stdout"])["requests"][0]["plan"]
    assert driver["gpus_per_actor"] == 0 and "LLM_OCR_ENGINE" not in driver["env"]  # the model is elsewhere

    assert secret["code"] == 2 and "--node-secret OCR_TOKEN" in secret["stderr"], secret["stderr"]
    assert "local-secret-value-123" not in secret["stdout"] + secret["stderr"]
    assert image["code"] == 2 and "--image: a Ray cluster runs the image its nodes" in image["stderr"], image["stderr"]
    assert wheel["code"] == 2 and "--pip REQUIREMENT" in wheel["stderr"], wheel["stderr"]
    assert unreachable["code"] == 2 and "cannot reach the Ray cluster at http://127.0.0.1:9" in unreachable["stderr"]


def test_the_python_api_plans_the_same_launch(tmp_path: Path, corpus: Path) -> None:
    import llm_ocr

    job = llm_ocr.launch("ray", str(corpus), output=str(tmp_path / "out"), num_shards=2, address="ray://head:10001",
                         gpus_per_actor=0, node_secret=["HF_TOKEN"], dry_run=True, offline=True)
    assert job.plan is not None
    body = job.plan.to_json()
    assert body["platform"] == "ray" and [j["secrets"] for j in body["jobs"]] == [["HF_TOKEN"], ["HF_TOKEN"]]
    assert body["requests"][0]["plan"]["node_secrets"] == ["HF_TOKEN"]


def _events(*lines: str) -> list[dict]:
    return parse_events("\n".join(lines))


RUNNING = JobState("job", "running", "RUNNING")


def test_a_shards_state_follows_its_events_and_the_jobs_end() -> None:
    log = "\n".join([
        "2026 INFO worker.py -- Connected to Ray cluster.",
        event_line("start", shard=0, attempt=1, actor=0),
        "[shard 0] starting",
        event_line("lost", shard=0, attempt=1, why="actor 0 died"),
        event_line("retry", shard=0, attempt=1, why="actor 0 died"),
        event_line("start", shard=1, attempt=1, actor=1),
        "[shard 1] done",
        event_line("exit", shard=1, attempt=1, code=1, seconds=2.0, why=""),
        event_line("start", shard=0, attempt=2, actor=0),
        "[shard 0] resumed",
        '{"json": "a torn event"',
    ])
    found = parse_events(log)
    assert shard_state(RUNNING, found, 0).raw == "RUNNING (attempt 2, actor 0)"
    assert shard_state(RUNNING, found, 1).phase == "failed"  # some pages failed: done, not clean
    assert shard_state(RUNNING, found, 2).raw == "QUEUED"
    assert [line.startswith("llm-ocr-ray ") for line in shard_lines(log, 0)] == [True, False, True, True, True, False]
    # The driver ended before shards 0 and 2 did: stopped, or failed with the job's message.
    stopped, failed = JobState("job", "cancelled", "STOPPED"), JobState("job", "failed", "FAILED", "driver died")
    assert [shard_state(stopped, found, s).phase for s in (0, 1, 2)] == ["cancelled", "failed", "cancelled"]
    assert shard_state(failed, found, 2).phase == "failed" and "driver died" in shard_state(failed, found, 2).message
    assert shard_state(JobState("job", "pending", "PENDING"), [], 0).phase == "pending"


def test_a_shards_llm_ocr_dies_with_its_actors_process(tmp_path: Path) -> None:
    # The actor starts llm-ocr through the driver's wrapper; when the actor's process dies (SIGKILL:
    # its node's OOM killer, a crash), the kernel kills llm-ocr too, even one that writes nothing
    # (so no broken pipe would stop it), before its shard is given to another actor.
    import subprocess
    import sys

    import psutil

    from llm_ocr.launchers.ray.driver import _WRAPPER
    from tests.waiting import wait_until

    actor = subprocess.Popen([sys.executable, "-c", (
        "import os, subprocess, sys, time\n"
        f"child = subprocess.Popen([sys.executable, '-c', {_WRAPPER!r}, str(os.getpid()), 'sleep', '3600'])\n"
        "print(child.pid, flush=True)\n"
        "child.wait()\n"
    )], stdout=subprocess.PIPE, text=True)
    assert actor.stdout is not None
    child = psutil.Process(int(actor.stdout.readline()))
    wait_until(lambda: child.name() == "sleep", "the wrapper became the program")
    actor.kill()
    actor.wait()
    try:
        wait_until(lambda: not child.is_running() or child.status() == psutil.STATUS_ZOMBIE,
                   "the child died with its parent", timeout=60)
    finally:
        if child.is_running():
            child.kill()  # this test's own orphan, by its pid


def test_a_client_connection_the_cluster_failed_to_start_is_retried_and_other_failures_are_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from llm_ocr.launchers.ray import adapter as ray_cluster

    monkeypatch.setattr(ray_cluster, "_CLIENT_RETRY_WAITS_S", (0.0, 0.0))
    calls: list[str | None] = []

    def flaky(failures: int, message: str):  # type: ignore[no-untyped-def]
        def make(address: str | None) -> str:
            calls.append(address)
            if len(calls) <= failures:
                raise ConnectionError(message)
            return "client"

        return make

    # What CI saw under load: the proxy's per-client server died while starting.
    transient = "Initialization failure from server: Traceback ... psutil_proc.cmdline()"
    assert ray_cluster._connect(flaky(2, transient), "ray://head:10001") == "client" and len(calls) == 3
    calls.clear()
    with pytest.raises(ConnectionError):  # the retries are bounded
        ray_cluster._connect(flaky(3, transient), "ray://head:10001")
    assert len(calls) == 3
    calls.clear()
    # What a run beside another Ray cluster saw: the connection's server exited as it started.
    started = ("Starting Ray client server failed. See ray_client_server_23000.err for detailed logs.")
    assert ray_cluster._connect(flaky(1, started), "ray://head:10001") == "client" and len(calls) == 2
    calls.clear()
    with pytest.raises(ConnectionError):  # an unreachable cluster is reported at once
        ray_cluster._connect(flaky(1, "Failed to connect to the Ray cluster"), "ray://head:10001")
    assert len(calls) == 1


def test_a_ray_client_connection_that_stalls_is_killed_and_tried_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """The proxy can hold a connection without failing it (seen in this project's tests): the
    resolution runs in a child process that is killed at the deadline, and a new one is tried."""
    import time

    from llm_ocr.launchers.ray import adapter as ray_cluster

    monkeypatch.setattr(ray_cluster, "_CLIENT_ATTEMPT_S", 2.0)
    monkeypatch.setattr(ray_cluster, "_CLIENT_RETRY_WAITS_S", (0.0,))
    monkeypatch.setattr(ray_cluster, "_RESOLVE", "import time\ntime.sleep(120)\n")  # a client that never returns
    started = time.monotonic()
    with pytest.raises(ray_cluster._ClientStalled, match="within 2 s"):
        ray_cluster._connect(ray_cluster._dashboard_of, "ray://head:10001")
    assert time.monotonic() - started < 60  # two attempts of 2 s, not the child's 120 s

    # A child whose Ray Client failed to start the connection's server: its error, and a retry.
    # The children below answer at once, however long a loaded machine takes to start them: no
    # deadline of theirs may be met first (r26, load 25: a 2 s one was, before Python started).
    monkeypatch.setattr(ray_cluster, "_CLIENT_ATTEMPT_S", 3600.0)
    failing = "raise ConnectionError('Initialization failure from server:\\nTraceback (most recent call last): ...')\n"
    monkeypatch.setattr(ray_cluster, "_RESOLVE", failing)
    with pytest.raises(ConnectionError, match=r"^ConnectionError: Initialization failure from server: Traceback"):
        ray_cluster._dashboard_of("ray://head:10001")
    answers = iter(["raise ConnectionError('Initialization failure from server:')\n",
                    "print('LLM_OCR_DASHBOARD', 'http://head:8265')\n"])
    tries: list[str] = []

    def resolve(address: str) -> str:
        monkeypatch.setattr(ray_cluster, "_RESOLVE", next(answers))
        tries.append(address)
        return ray_cluster._dashboard_of(address)

    assert ray_cluster._connect(resolve, "ray://head:10001") == "http://head:8265" and len(tries) == 2


def test_a_remembered_dashboard_that_no_longer_answers_is_forgotten_and_one_that_does_is_used(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A ray:// address is resolved through Ray Client once; later commands try the dashboard it
    resolved to (Ray's job client checks ``/api/version``), and one that no longer answers is
    dropped so that the next command asks the cluster again."""
    import socket
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from ray.job_submission import JobSubmissionClient

    from llm_ocr.launchers.ray import dashboards
    from llm_ocr.launchers.ray.adapter import _remembered_client

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert _remembered_client(JobSubmissionClient, "ray://head:10001") is None  # nothing remembered yet
    with socket.socket() as closed:  # a port nothing listens on
        closed.bind(("127.0.0.1", 0))
        gone = f"http://127.0.0.1:{closed.getsockname()[1]}"
    dashboards.remember("ray://head:10001", gone)
    assert dashboards.remembered("ray://head:10001") == gone
    assert _remembered_client(JobSubmissionClient, "ray://head:10001") is None
    assert dashboards.remembered("ray://head:10001") is None  # forgotten: the next command asks again

    class Version(BaseHTTPRequestHandler):  # what a dashboard answers to Ray's version check
        def do_GET(self) -> None:
            body = json.dumps({"version": "4", "ray_version": "2.40.0", "ray_commit": "x"}).encode()
            self.send_response(200 if self.path == "/api/version" else 404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Version)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        answering = f"http://127.0.0.1:{server.server_address[1]}"
        dashboards.remember("ray://head:10001", answering)
        client = _remembered_client(JobSubmissionClient, "ray://head:10001")
        assert client is not None and client.get_address() == answering
    finally:
        server.shutdown()
        server.server_close()
