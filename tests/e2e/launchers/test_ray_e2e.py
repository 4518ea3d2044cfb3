"""``llm-ocr launch ray`` against a real one-node Ray cluster (Ray from PyPI, ``ray start --head``
by the fixture: tests/fixtures/ray/): CPU-only actors running the simulator; every page exactly
once after a normal launch, a killed actor (restarted by Ray, or finished by the relaunch) and a
cancelled launch; status, logs and cancel through the Ray Jobs API."""

from __future__ import annotations

import json
import re
import signal
from pathlib import Path

import pytest

from llm_ocr.storage.parts import part_glob
from llm_ocr.testing import SimulatedServer
from tests.docs import make_corpus
from tests.fixtures.ray.cluster import NODE_SECRET, NODE_SECRET_VALUE
from tests.launchers.ray_common import (
    events,
    expected,
    gone,
    job_id,
    job_info,
    job_log,
    launch_args,
    launcher_env,
    llm_ocr,
    pages,
    ray_cluster,  # noqa: F401 - the fixture
    shard_process,
)
from tests.waiting import hold_request, wait_until, wait_until_held

# The hang guard (pytest-timeout; 300 s by default) counts the session's cluster start against the
# first test, which then runs seven commands, a launch waited for among them: at load 17 that
# test was stopped at 300 s in its first command, and the cluster with it.
pytestmark = pytest.mark.timeout(900)

#: One page at a time, each kept at once: a stop lands mid-shard, with parts saved and pages left.
SLOW = ("--part-rows", "1", "--max-in-flight", "1")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("ray") / "docs"
    make_corpus(folder, documents=4, pages=2)
    return folder


def _launch_id(stdout: str) -> str:
    match = re.search(r"launch (\S+) on ray", stdout)
    assert match, stdout
    return match.group(1)


def _done_earlier(lines: str) -> int:
    """Pages a run found in its shard's parts (the last ``done earlier N`` of its log)."""
    return int(re.findall(r"done earlier (\d+)", lines)[-1])


def _kinds(found: list[dict]) -> list[tuple[str, int]]:
    return [(e["event"], e["attempt"]) for e in found if "attempt" in e]


def test_shards_run_on_actors_and_are_followed_with_the_node_secret_by_name_only(
    tmp_path: Path, corpus: Path, ray_cluster: dict[str, str]  # noqa: F811
) -> None:
    out = tmp_path / "out"
    # The user has the secret locally too: it must go nowhere from here.
    env = launcher_env(tmp_path, **{NODE_SECRET: NODE_SECRET_VALUE})
    args = launch_args(corpus, out, ray_cluster["client"], "--actors", "2", "--node-secret", NODE_SECRET)
    refused = llm_ocr(*launch_args(corpus, out, ray_cluster["client"], "--secret", NODE_SECRET), env=env)
    assert refused.returncode == 2 and f"--node-secret {NODE_SECRET}" in refused.stderr, refused.stderr

    dry = llm_ocr(*args, "--dry-run", env=env)  # a ray:// address: the launcher asks the cluster for its dashboard
    assert dry.returncode == 0, dry.stderr
    plan = json.loads(dry.stdout)
    assert not out.exists()  # a dry run writes and submits nothing
    (request,) = plan["requests"]
    assert request["plan"]["shards"] == [0, 1, 2] and request["plan"]["node_secrets"] == [NODE_SECRET]
    assert all(job["secrets"] == [NODE_SECRET] for job in plan["jobs"])
    assert request["submit_job"]["entrypoint"] == "python llm_ocr_ray_driver.py plan.json"

    done = llm_ocr(*args, "--wait", "--interval", "1", env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "every shard finished" in done.stdout
    for stage in ("extract", "describe"):
        assert pages(out, stage) == expected(corpus), stage
    job = job_id(done.stdout)
    found = events(ray_cluster, job)
    (launched,) = [e for e in found if e["event"] == "launch"]
    assert launched["actors"] == 2 and launched["num_gpus"] == 0
    starts = [e for e in found if e["event"] == "start"]
    assert sorted(e["shard"] for e in starts) == [0, 1, 2] and {e["actor"] for e in starts} == {0, 1}
    assert sorted((e["shard"], e["code"]) for e in found if e["event"] == "exit") == [(0, 0), (1, 0), (2, 0)]

    status = llm_ocr("jobs", "status", str(out), "--json", env=env)
    rows = json.loads(status.stdout)["shards"]
    assert [(r["job_id"], r["state"], r["job_phase"], r["job_state"]) for r in rows] == [
        (job, "done", "succeeded", "EXITED 0 (attempt 1)") for _ in range(3)]
    logs = llm_ocr("jobs", "logs", str(out), "--shard", "1", env=env)
    assert logs.returncode == 0 and "[extract shard 2/3]" in logs.stdout, logs.stderr
    assert "[extract shard 1/3]" not in logs.stdout and "[extract shard 3/3]" not in logs.stdout
    followed = llm_ocr("jobs", "logs", str(out), "--shard", "1", "-f", env=env)  # ends: the shard has ended
    assert followed.returncode == 0 and followed.stdout == logs.stdout, followed.stderr
    again = llm_ocr(*args, env=env)
    assert again.returncode == 0 and "nothing to launch" in again.stdout, again.stderr
    # The ray:// address went through Ray Client once (the dry run); the launches after it used
    # the dashboard it resolved to (llm_ocr/launchers/ray/dashboards.py).
    asked = "for its dashboard (Ray Client)"
    assert [asked in run.stderr for run in (dry, done, again)] == [True, False, False], dry.stderr

    info = job_info(ray_cluster, job)
    places = {
        "dry run": dry.stdout + dry.stderr,
        "launch output": done.stdout + done.stderr + again.stdout + again.stderr,
        "status and logs": status.stdout + logs.stdout + followed.stdout,
        "the Ray job (entrypoint, runtime_env, metadata, message)": repr(info),
        "the Ray job's log": job_log(ray_cluster, job),
        "output, launch record": b"".join(p.read_bytes() for p in out.rglob("*") if p.is_file()).decode(errors="replace"),
        "launch cache": "".join(p.read_text() for p in (tmp_path / "cache").rglob("*.json")),
    }
    assert not [where for where, text in places.items() if NODE_SECRET_VALUE in text]


def test_a_node_secret_the_nodes_lack_fails_the_shard_with_the_reason(
    tmp_path: Path, corpus: Path, ray_cluster: dict[str, str]  # noqa: F811
) -> None:
    out = tmp_path / "out"
    env = launcher_env(tmp_path)
    done = llm_ocr(*launch_args(corpus, out, ray_cluster["dashboard"], "--node-secret", "OCR_ABSENT_TOKEN", shards=1),
                   "--wait", "--interval", "1", env=env)
    assert done.returncode == 1, done.stdout + done.stderr
    assert not (out / "extract").exists()
    (ended,) = events(ray_cluster, job_id(done.stdout), 0)[-1:]
    assert (ended["event"], ended["code"]) == ("exit", 127)  # not retried: a retry would not help
    logs = llm_ocr("jobs", "logs", str(out), "--shard", "0", env=env).stdout
    assert "node secret OCR_ABSENT_TOKEN is not set in the environment of the Ray workers" in logs


def _held_launch(corpus: Path, out: Path, address: str, server: SimulatedServer, *extra: str,
                 shards: int) -> tuple[list[str], int]:
    """``launch ray`` of Extract with one actor, one page in flight and a part per page, against the
    test's own simulator, which answers the first request and holds the second until its client
    goes away: shard 0 has a part and is mid-run for certain when the test acts, however slow the
    machine. The launch's arguments, and the hold count to wait for.

    Static shards (``--no-steal``): with work groups the one actor's shard 0 reads the queued
    shards' groups too, and the page answered first can be one of theirs (seen at load 20: shard
    0 held with a part of shard 2's and none of its own, and the test waited for one in vain).
    Stealing is docs/stragglers.md's, tested in tests/e2e/runners/test_stragglers_e2e.py."""
    held_at = hold_request(server, after=1, count=1)
    args = ["launch", "ray", str(corpus), "--output", str(out), "--num-shards", str(shards), "--address", address,
            "--endpoint", server.base_url, "--stage", "extract", "--actors", "1", "--workers", "0", "--no-steal",
            *SLOW, *extra]
    return args, held_at


def _mid_shard(out: Path, server: SimulatedServer, held_at: int, shards: int) -> None:
    wait_until(lambda: list((out / "extract").glob(part_glob(0, shards))), "shard 0 wrote a part")
    wait_until_held(server, held_at)


def test_a_killed_actor_is_restarted_by_ray_and_its_shard_resumes(
    tmp_path: Path, corpus: Path, ray_cluster: dict[str, str]  # noqa: F811
) -> None:
    out = tmp_path / "out"
    env = launcher_env(tmp_path)
    with SimulatedServer("--slots", "1", corpus=corpus) as server:
        args, held_at = _held_launch(corpus, out, ray_cluster["dashboard"], server, shards=2)
        first = llm_ocr(*args, env=env)
        assert first.returncode == 0, first.stderr
        launch, job = _launch_id(first.stdout), job_id(first.stdout)
        _mid_shard(out, server, held_at, 2)
        child = shard_process(launch, 0)
        assert child is not None
        actor = child.parent()
        assert actor is not None and actor.cmdline()[0].startswith("ray::ShardRunner")
        actor.send_signal(signal.SIGKILL)  # the actor's process dies, as with its node or the OOM killer
        wait_until(lambda: gone(child.pid), "the killed actor's llm-ocr stopped with it")
        final = llm_ocr("jobs", "wait", str(out), "--interval", "1", env=env)
    assert final.returncode == 0, final.stdout + final.stderr + job_log(ray_cluster, job)
    assert pages(out) == expected(corpus)
    found = events(ray_cluster, job, 0)
    assert _kinds(found) == [("start", 1), ("lost", 1), ("retry", 1), ("start", 2), ("exit", 2)]
    assert found[-1]["code"] == 0
    logs = llm_ocr("jobs", "logs", str(out), "--shard", "0", env=env).stdout
    assert _done_earlier(logs) == 1  # the second attempt resumed from the first one's part
    # The one actor, restarted, ran shard 0 again and then shard 1 from the queue.
    assert _kinds(events(ray_cluster, job, 1)) == [("start", 1), ("exit", 1)]


def test_a_killed_actor_without_restarts_fails_its_shards_and_the_relaunch_finishes_them(
    tmp_path: Path, corpus: Path, ray_cluster: dict[str, str]  # noqa: F811
) -> None:
    out = tmp_path / "out"
    env = launcher_env(tmp_path)
    with SimulatedServer("--slots", "1", corpus=corpus) as server:
        args, held_at = _held_launch(corpus, out, ray_cluster["dashboard"], server, "--actor-restarts", "0",
                                     "--attempts", "1", shards=2)
        first = llm_ocr(*args, env=env)
        assert first.returncode == 0, first.stderr
        launch, job = _launch_id(first.stdout), job_id(first.stdout)
        _mid_shard(out, server, held_at, 2)
        child = shard_process(launch, 0)
        assert child is not None
        child.parent().send_signal(signal.SIGKILL)
        ended = llm_ocr("jobs", "wait", str(out), "--interval", "1", env=env)
        assert ended.returncode == 1, ended.stdout + ended.stderr
        rows = json.loads(llm_ocr("jobs", "status", str(out), "--json", env=env).stdout)["shards"]
        assert [(r["state"], r["job_phase"]) for r in rows] == [("failed", "failed"), ("failed", "failed")]
        assert "actor 0 died" in rows[0]["message"] and "relaunch to resume" in rows[0]["message"]
        assert "no actor left to run it" in rows[1]["message"]  # the one actor is gone for good
        assert [e["event"] for e in events(ray_cluster, job, 0)] == ["start", "lost", "failed"]
        assert [e["event"] for e in events(ray_cluster, job, 1)] == ["failed"]

        relaunch = llm_ocr(*args, "--wait", "--interval", "1", env=env)
    assert relaunch.returncode == 0, relaunch.stdout + relaunch.stderr
    assert pages(out) == expected(corpus)
    assert job_id(relaunch.stdout) != job
    assert _done_earlier(llm_ocr("jobs", "logs", str(out), "--shard", "0", env=env).stdout) == 1


def test_a_cancelled_launch_stops_its_shards_and_the_relaunch_finishes_them(
    tmp_path: Path, corpus: Path, ray_cluster: dict[str, str]  # noqa: F811
) -> None:
    out = tmp_path / "out"
    env = launcher_env(tmp_path)
    with SimulatedServer("--slots", "1", corpus=corpus) as server:
        # One actor: shard 0 runs (held mid-shard) while shards 1 and 2 wait in the queue. Stopped,
        # llm-ocr gives its held page 2 s (not 20) before it abandons it and exits.
        args, held_at = _held_launch(corpus, out, ray_cluster["dashboard"], server, "--env", "LLM_OCR_GRACE_PERIOD=2",
                                     shards=3)
        first = llm_ocr(*args, env=env)
        assert first.returncode == 0, first.stderr
        launch, job = _launch_id(first.stdout), job_id(first.stdout)
        _mid_shard(out, server, held_at, 3)
        rows = json.loads(llm_ocr("jobs", "status", str(out), "--json", env=env).stdout)["shards"]
        assert [(r["job_phase"], r["job_state"]) for r in rows] == [
            ("running", "RUNNING (attempt 1, actor 0)"), ("pending", "QUEUED"), ("pending", "QUEUED")]
        logs = llm_ocr("jobs", "logs", str(out), "--shard", "0", env=env).stdout
        assert '"event": "start"' in logs and '"shard": 0' in logs and '"shard": 1' not in logs
        child = shard_process(launch, 0)
        assert child is not None

        cancel = llm_ocr("jobs", "cancel", str(out), env=env)
        assert cancel.returncode == 0 and f"cancel sent to 1 job(s): {job}" in cancel.stdout, cancel.stderr
        wait_until(lambda: job_info(ray_cluster, job).status == "STOPPED", "the Ray job stopped")
        wait_until(lambda: gone(child.pid), "shard 0's llm-ocr stopped")
        (exit_event,) = [e for e in events(ray_cluster, job, 0) if e["event"] == "exit"]
        assert (exit_event["code"], exit_event["why"]) == (3, "stopped")  # SIGTERM: it kept its part
        rows = json.loads(llm_ocr("jobs", "status", str(out), "--json", env=env).stdout)["shards"]
        assert [r["job_phase"] for r in rows] == ["cancelled"] * 3
        assert not list((out / "_state" / "extract").glob("done-*"))

        relaunch = llm_ocr(*args, "--wait", "--interval", "1", env=env)
    assert relaunch.returncode == 0, relaunch.stdout + relaunch.stderr
    assert pages(out) == expected(corpus)
    assert _done_earlier(llm_ocr("jobs", "logs", str(out), "--shard", "0", env=env).stdout) == 1


def test_a_users_own_ray_script_needs_no_launcher(tmp_path: Path, corpus: Path, ray_cluster: dict[str, str]) -> None:  # noqa: F811
    # What docs/platforms-ray.md shows: one Ray task per shard running the plain CLI with its shard.
    from ray.job_submission import JobSubmissionClient

    out = tmp_path / "out"
    folder = tmp_path / "script"
    folder.mkdir()
    (folder / "ocr.py").write_text(f"""import subprocess
import ray

N = 2

@ray.remote(num_gpus=0, max_retries=3)
def shard(i: int) -> int:
    return subprocess.run(["llm-ocr", "run", "{corpus}", "--output", "{out}", "--engine", "sim",
                           "--server-args", "--corpus {corpus} --instant",
                           "--num-shards", str(N), "--shard-index", str(i)]).returncode

ray.init()
print("exit statuses", ray.get([shard.remote(i) for i in range(N)]))
""")
    client = JobSubmissionClient(ray_cluster["dashboard"])
    job = client.submit_job(entrypoint="python ocr.py", runtime_env={"working_dir": str(folder)})
    wait_until(lambda: client.get_job_status(job) in ("SUCCEEDED", "FAILED", "STOPPED"), "the script's job ended")
    assert "exit statuses [0, 0]" in client.get_job_logs(job), client.get_job_logs(job)
    for stage in ("extract", "describe"):
        assert pages(out, stage) == expected(corpus), stage
