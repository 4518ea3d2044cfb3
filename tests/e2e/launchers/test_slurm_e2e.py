"""``llm-ocr launch slurm`` against a real one-node Slurm (Debian's slurm-wlm 22.05, started by the
fixture as root: tests/fixtures/slurm/): CPU-only tasks running the simulator, or the node's fake
GPUs; every page exactly once after a normal run, a killed task, a requeue, a cancelled task and a
time limit."""

from __future__ import annotations

import json
import re
import stat
import sys
from pathlib import Path

import pytest

from llm_ocr.launchers.slurm.script import parse_slurm_time
from llm_ocr.storage.parts import part_glob
from llm_ocr.testing import SimulatedServer
from tests import waiting
from tests.docs import make_corpus
from tests.launchers.common import wait_until
from tests.launchers.simulators import HELD_START, JobSimulator, find_simulator
from tests.launchers.slurm_common import (
    array_id,
    expected,
    launch_args,
    launch_folder,
    launcher_env,
    llm_ocr,
    pages,
    records,
    shard_run_process,
    slurm,  # noqa: F401 - the fixture
    slurm_cmd,
)

# The hang guard (pytest-timeout; 300 s by default): a test waits for several Slurm runs in turn (a time limit and its requeue alone take minutes).
pytestmark = pytest.mark.timeout(1200)

#: A secret planted in the launching environment: it must reach the tasks and appear nowhere else.
PLANTED = "planted-secret-5f1e2d3c4b5a69788796a5b4"
#: One page at a time, each kept at once: a stop lands mid-shard, with parts saved and pages left.
SLOW = ("--part-rows", "1", "--max-in-flight", "1")
#: Two seconds a page: a shard of four pages is still running when its first part appears.
PACED = "--prefill-ms 2000 --slots 1"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("slurm") / "docs"
    make_corpus(folder, documents=4, pages=2)
    return folder


def _done_earlier(log: Path) -> int:
    """Pages a run found in its shard's parts (the last ``done earlier N`` of its log)."""
    return int(re.findall(r"done earlier (\d+)", log.read_text())[-1])


def _event_kinds(out: Path, shard: int) -> list[tuple[str, int]]:
    return [(e["event"], e["attempt"]) for e in records(out, shard)]


def test_shards_run_as_one_array_and_are_followed_with_the_secret_in_the_environment_only(
    tmp_path: Path, corpus: Path, slurm: dict[str, str]  # noqa: F811
) -> None:
    out = tmp_path / "out"
    env = launcher_env(slurm, tmp_path, OCR_TEST_TOKEN=PLANTED)
    # One (fake) GPU per task, as on a GPU node; the task proves the secret reached it by its length.
    args = [a for a in launch_args(corpus, out) if a not in ("--gpus-per-task", "0")]
    args += ["--secret", "OCR_TEST_TOKEN", "--setup", 'echo "token length ${#OCR_TEST_TOKEN}"']
    dry = llm_ocr(*args, "--dry-run", env=env)
    assert dry.returncode == 0, dry.stderr
    plan = json.loads(dry.stdout)
    assert not (out / "_state").exists()  # a dry run writes and submits nothing
    (request,) = plan["requests"]
    script = request["script"]
    assert "#SBATCH --array=0-2\n" in script and "#SBATCH --gpus=1\n" in script and "#SBATCH --requeue\n" in script
    assert [j["env"]["LLM_OCR_NUM_SHARDS"] for j in plan["jobs"]] == ["3"] * 3
    assert all(j["secrets"] == ["OCR_TEST_TOKEN"] for j in plan["jobs"])

    done = llm_ocr(*args, "--wait", "--interval", "1", env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "every shard finished" in done.stdout
    for stage in ("extract", "describe"):
        assert pages(out, stage) == expected(corpus), stage

    folder = launch_folder(out)
    written = (folder / "llm-ocr-run.sbatch").read_text()
    assert written == script.replace(plan["launch_id"], folder.name)  # the dry run showed what was submitted
    array = array_id(done.stdout)
    for shard in range(3):
        assert _event_kinds(out, shard) == [("start", 1), ("exit", 1)]
        log_text = (folder / f"{array}_{shard}.log").read_text()
        assert f"token length {len(PLANTED)}" in log_text
        assert f"[extract shard {shard + 1}/3]" in log_text
    # The fake GPUs are devices: slurmd then hands each task its own, as on a GPU node.
    devices = sorted((Path(slurm["SLURM_CONF"]).parent.parent / "dev").glob("nvidia*"))
    if devices and all(stat.S_ISCHR(d.stat().st_mode) for d in devices):
        assert {records(out, s)[0]["gpus"] for s in range(3)} <= {"0", "1"}

    status = llm_ocr("jobs", "status", str(out), "--json", env=env)
    rows = json.loads(status.stdout)["shards"]
    assert [(r["job_id"], r["state"], r["job_phase"]) for r in rows] == [
        (f"{array}_{s}", "done", "succeeded") for s in range(3)]
    logs = llm_ocr("jobs", "logs", str(out), "--shard", "1", "--tail", "3", env=env)
    assert logs.returncode == 0 and len(logs.stdout.splitlines()) == 3, logs.stderr
    followed = llm_ocr("jobs", "logs", str(out), "--shard", "1", "-f", env=env)  # ends: the task has ended
    assert followed.returncode == 0 and followed.stdout == (folder / f"{array}_1.log").read_text(), followed.stderr
    again = llm_ocr(*args, env=env)
    assert again.returncode == 0 and "nothing to launch" in again.stdout, again.stderr

    places = {
        "dry run": dry.stdout + dry.stderr,
        "launch output": done.stdout + done.stderr + again.stdout + again.stderr,
        "status and logs": status.stdout + logs.stdout + followed.stdout,
        "output, script, logs, records, launch record": b"".join(
            p.read_bytes() for p in out.rglob("*") if p.is_file()).decode(errors="replace"),
        "launch cache": "".join(p.read_text() for p in (tmp_path / "cache").rglob("*.json")),
    }
    assert not [where for where, text in places.items() if PLANTED in text]


def test_a_users_own_sbatch_script_needs_no_launcher(tmp_path: Path, corpus: Path, slurm: dict[str, str]) -> None:  # noqa: F811
    # What docs/platforms-slurm.md shows: the task id is the shard, the array's size the count.
    env = launcher_env(slurm, tmp_path)
    venv = Path(sys.executable).parent.parent
    logs = tmp_path / "logs"
    logs.mkdir()

    def submit(array: str, out: Path) -> str:
        script = tmp_path / f"ocr-{array}.sbatch"
        script.write_text(f"""#!/bin/bash
#SBATCH --job-name=ocr
#SBATCH --array={array}
#SBATCH --output={logs}/%A_%a.log
source {venv}/bin/activate
llm-ocr run {corpus} --output {out} --engine sim --server-args "--corpus {corpus} --instant"
""")
        done = slurm_cmd("sbatch", "--parsable", str(script), env=env)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    good, bad = submit("0-2", tmp_path / "out"), submit("1-3", tmp_path / "bad")
    # Some shards only: the same script with other ids, the count given.
    # (Static shards: alone, shard 1 would read the free work groups of shards 0 and 2 too.)
    (tmp_path / "ocr-part.sbatch").write_text(
        (tmp_path / "ocr-0-2.sbatch").read_text().replace("/out ", "/part ").replace(" --engine sim", " --no-steal --engine sim"))
    part = slurm_cmd("sbatch", "--parsable", "--array=1", "--export=ALL,LLM_OCR_NUM_SHARDS=3",
                     str(tmp_path / "ocr-part.sbatch"), env=env).stdout.strip()

    def ended() -> bool:
        live = slurm_cmd("squeue", "-h", "-r", "-t", "PD,R,CG", "-j", f"{good},{bad},{part}", "-o", "%i", env=env)
        return live.returncode == 0 and not live.stdout.strip()

    wait_until(ended, timeout=240, period=1)
    assert pages(tmp_path / "out") == expected(corpus)
    markers = sorted(p.name for p in (tmp_path / "part" / "_state" / "extract").glob("done-*"))
    assert markers == ["done-00001-of-00003.json"] and 0 < len(pages(tmp_path / "part")) < len(expected(corpus))
    # Ids 1-3 are not 0..N-1: every task stops at once with the reason, and writes nothing.
    states = slurm_cmd("squeue", "-h", "-r", "-t", "all", "-j", bad, "-o", "%K %T", env=env).stdout.split("\n")
    assert sorted(s for s in states if s) == ["1 FAILED", "2 FAILED", "3 FAILED"]
    message = (logs / f"{bad}_3.log").read_text()
    assert "SLURM_ARRAY_TASK_ID=3 is the shard index, but the array's ids (1-3, 3 task(s)) are not 0..N-1" in message
    assert not (tmp_path / "bad" / "extract").exists()


def test_a_task_that_cannot_find_llm_ocr_stops_at_once_with_the_reason(
    tmp_path: Path, corpus: Path, slurm: dict[str, str]  # noqa: F811
) -> None:
    out = tmp_path / "out"
    env = launcher_env(slurm, tmp_path, PATH="/usr/bin:/bin")  # no llm-ocr there, only the venv has it
    done = llm_ocr(*launch_args(corpus, out, "--setup", "deactivate", shards=1), "--wait", "--interval", "1", env=env)
    assert done.returncode == 1, done.stdout + done.stderr
    assert [(e["event"], e["attempt"], e.get("code")) for e in records(out, 0)] == [("start", 1, None), ("exit", 1, 127)]
    log_text = next(launch_folder(out).glob("*_0.log")).read_text()
    assert "llm-ocr: llm-ocr is not on PATH after the set-up above" in log_text


def test_a_killed_task_requeues_itself_and_resumes_from_its_parts(
    tmp_path: Path, corpus: Path, slurm: dict[str, str]  # noqa: F811
) -> None:
    out = tmp_path / "out"
    env = launcher_env(slurm, tmp_path)
    # Static shards: with work groups the other task could read the requeued task's free
    # groups, and there would be nothing left to resume from (tests/runners/test_stragglers_e2e.py).
    first = llm_ocr(*launch_args(corpus, out, "--stage", "extract", "--no-steal", *SLOW, shards=2, sim=PACED),
                    env=env)
    assert first.returncode == 0, first.stderr
    array = array_id(first.stdout)
    wait_until(lambda: list((out / "extract").glob(part_glob(0, 2))), timeout=180, period=0.2)
    process = shard_run_process(array, 0, out)
    assert process is not None
    process.kill()  # SIGKILL: no grace, no clean-up, as the OOM killer does
    final = llm_ocr("jobs", "wait", str(out), "--interval", "1", env=env, timeout=300)
    assert final.returncode == 0, final.stdout + final.stderr
    assert pages(out) == expected(corpus)
    events = records(out, 0)
    assert [(e["event"], e["attempt"]) for e in events] == [("start", 1), ("exit", 1), ("requeue", 1), ("start", 2),
                                                           ("exit", 2)]
    assert (events[1]["code"], events[4]["code"]) == (137, 0)
    assert _done_earlier(launch_folder(out) / f"{array}_0.log") >= 1  # the second attempt resumed
    assert _event_kinds(out, 1) == [("start", 1), ("exit", 1)]


def test_a_requeued_task_resumes_from_its_parts(tmp_path: Path, corpus: Path, slurm: dict[str, str]) -> None:  # noqa: F811
    # `scontrol requeue` is what a preemption with PreemptMode=REQUEUE does: SIGTERM to every
    # process of the task, back to the queue, started again with SLURM_RESTART_COUNT=1.
    out = tmp_path / "out"
    env = launcher_env(slurm, tmp_path)
    # Static shards: with work groups the other task could read the requeued task's free
    # groups, and there would be nothing left to resume from (tests/runners/test_stragglers_e2e.py).
    first = llm_ocr(*launch_args(corpus, out, "--stage", "extract", "--no-steal", *SLOW, shards=2, sim=PACED),
                    env=env)
    assert first.returncode == 0, first.stderr
    array = array_id(first.stdout)
    wait_until(lambda: list((out / "extract").glob(part_glob(1, 2))), timeout=180, period=0.2)
    requeued = slurm_cmd("scontrol", "requeue", f"{array}_1", env=env)
    assert requeued.returncode == 0, requeued.stderr
    final = llm_ocr("jobs", "wait", str(out), "--interval", "1", env=env, timeout=300)
    assert final.returncode == 0, final.stdout + final.stderr
    assert pages(out) == expected(corpus)
    events = records(out, 1)
    assert [(e["event"], e["attempt"]) for e in events] == [("start", 1), ("exit", 1), ("start", 2), ("exit", 2)]
    # llm-ocr stopped on Slurm's SIGTERM and kept its parts (exit 3); the script left the requeue to Slurm.
    log = launch_folder(out) / f"{array}_1.log"
    assert (events[1]["code"], events[1]["stop"], events[3]["code"]) == (3, "stopped by Slurm", 0), log.read_text()
    assert _done_earlier(log) >= 1  # the second run resumed


def _task_simulator(array: str, shard: int, cluster_env: dict[str, str]) -> JobSimulator | None:
    """The simulated server task ``ARRAY_SHARD`` of this session's cluster started (found by the
    job's own variables: another session's one-node cluster numbers its jobs from 1 too)."""
    return find_simulator(lambda env: env.get("SLURM_ARRAY_JOB_ID") == array
                          and env.get("SLURM_ARRAY_TASK_ID") == str(shard)
                          and env.get("SLURM_CONF") == cluster_env["SLURM_CONF"])


def test_a_cancelled_task_is_the_only_shard_relaunched(tmp_path: Path, corpus: Path, slurm: dict[str, str]) -> None:  # noqa: F811
    out = tmp_path / "out"
    env = launcher_env(slurm, tmp_path)
    # Static shards, so that the cancelled shard's rest is left for its relaunch to resume. Every
    # task's server waits for the test (tests/launchers/simulators.py): shard 0's answers one page
    # and holds the next, so the task is running, for certain, when the cancel lands (with paced
    # pages a loaded machine let the task end first: "none was running"); shard 1's runs at once.
    args = launch_args(corpus, out, "--stage", "extract", "--no-steal", *SLOW, shards=2, sim=f"--instant {HELD_START}")
    first = llm_ocr(*args, env=env)
    assert first.returncode == 0, first.stderr
    array = array_id(first.stdout)
    held = waiting.wait_until(lambda: _task_simulator(array, 0, slurm), "shard 0's server listens", interval=0.5)
    held_at = held.hold(after=1)
    held.ready()
    waiting.wait_until(lambda: _task_simulator(array, 1, slurm), "shard 1's server listens", interval=0.5).ready()
    waiting.wait_until(lambda: held.hangs_applied() >= held_at, "shard 0's second page is held", interval=0.2)
    # Its first page's part (written as its second page is asked for), so the relaunch has something to resume.
    waiting.wait_until(lambda: list((out / "extract").glob(part_glob(0, 2))), "shard 0's first part",
                       interval=0.2)
    cancel = llm_ocr("jobs", "cancel", str(out), "--shard", "0", env=env)
    assert cancel.returncode == 0 and f"{array}_0" in cancel.stdout + cancel.stderr, cancel.stderr
    ended = llm_ocr("jobs", "wait", str(out), "--interval", "1", env=env, timeout=300)
    assert ended.returncode == 1, ended.stdout + ended.stderr  # shard 0 has no marker
    rows = json.loads(llm_ocr("jobs", "status", str(out), "--json", env=env).stdout)["shards"]
    assert [(r["state"], r["job_phase"]) for r in rows] == [("cancelled", "cancelled"), ("done", "succeeded")]

    again = llm_ocr(*args, env=env)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "not launched: 1 shard(s) already done (1)" in again.stdout
    relaunched = array_id(again.stdout)
    waiting.wait_until(lambda: _task_simulator(relaunched, 0, slurm), "the relaunched task's server listens",
                       interval=0.5).ready()
    done = llm_ocr("jobs", "wait", str(out), "--interval", "1", env=env, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "#SBATCH --array=0\n" in (launch_folder(out) / "llm-ocr-extract.sbatch").read_text()
    assert pages(out) == expected(corpus)
    assert _done_earlier(launch_folder(out) / f"{relaunched}_0.log") >= 1  # it resumed


@pytest.mark.slow
def test_a_task_near_its_time_limit_requeues_itself_and_resumes(
    tmp_path: Path, corpus: Path, slurm: dict[str, str]  # noqa: F811
) -> None:
    # The limit is brought near while the shard is held mid-run, instead of waited for: launched
    # with an hour and --requeue-before 300 (sbatch --signal=B:USR1@300), the task's limit is cut
    # with `scontrol update TimeLimit` to end 4-5 minutes into its run once it has a part and its
    # next page is held by the test's server. slurmctld checks limits every 30 s and sends the
    # --signal to a job whose end is within its time plus those 30 s (send_job_warn_signal in
    # src/slurmctld/job_mgr.c; sbatch(1): "may be sent up to 60 seconds earlier"), so USR1 comes
    # at the next check, minutes before the limit itself would end the task, and the held page
    # means the run cannot have finished first however fast the machine. Slurm keeps a limit set
    # by scontrol across a requeue, so it is set back to the hour once the task has requeued
    # itself: the runs after it are not signalled (were one signalled still, it would requeue
    # too, and the checks below hold). Before, the test waited for a real 2-minute limit: 151 s.
    out = tmp_path / "out"
    env = launcher_env(slurm, tmp_path)
    with SimulatedServer("--slots", "1", corpus=corpus) as server:
        held_at = waiting.hold_request(server, after=1, count=1)
        first = llm_ocr("launch", "slurm", str(corpus), "--output", str(out), "--num-shards", "1",
                        "--gpus-per-task", "0", "--endpoint", server.base_url, "--stage", "extract", *SLOW,
                        "--timeout", "60m", "--requeue-before", "300", "--attempts", "8",
                        "--env", "LLM_OCR_GRACE_PERIOD=2", env=env)  # the held page is abandoned after 2 s
        assert first.returncode == 0, first.stderr
        task = f"{array_id(first.stdout)}_0"
        waiting.wait_until(lambda: list((out / "extract").glob(part_glob(0, 1))), "the shard's first part",
                           interval=0.2)
        waiting.wait_until_held(server, held_at)
        elapsed = parse_slurm_time(slurm_cmd("squeue", "-h", "-j", task, "-o", "%M", env=env).stdout)
        assert elapsed is not None
        cut = slurm_cmd("scontrol", "update", f"JobId={task}", f"TimeLimit={-(-elapsed // 60) + 4}", env=env)
        assert cut.returncode == 0, cut.stderr
        waiting.wait_until(lambda: any(e["event"] == "requeue" for e in records(out, 0)), "the task requeued itself",
                           interval=0.2)
        restored = slurm_cmd("scontrol", "update", f"JobId={task}", "TimeLimit=60", env=env)
        assert restored.returncode == 0, restored.stderr
        done = llm_ocr("jobs", "wait", str(out), "--interval", "1", env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert pages(out) == expected(corpus)
    events = records(out, 0)
    requeues = [e for e in events if e["event"] == "requeue"]
    assert requeues and all(e["why"] == "time limit" for e in requeues)
    stops = [e for e in events if e["event"] == "exit"]
    assert [e["code"] for e in stops] == [3] * len(requeues) + [0]  # each stop kept its parts (exit 3)
    assert _done_earlier(launch_folder(out) / f"{task}.log") >= 1  # the run after the requeue resumed


def test_bad_requests_fail_before_anything_is_submitted(tmp_path: Path, corpus: Path, slurm: dict[str, str]) -> None:  # noqa: F811
    env = launcher_env(slurm, tmp_path)
    out = tmp_path / "out"
    cases = {
        ("--partition", "nosuch"): "--partition nosuch: no such partition here (sinfo lists debug, short)",
        ("--partition", "short", "--timeout", "2h"): "more than the platform's limit of 3600s",
        ("--venv", str(tmp_path)): "no bin/activate there",
    }
    for extra, message in cases.items():
        done = llm_ocr(*launch_args(corpus, out, *extra), env=env)
        assert done.returncode == 2 and message in done.stderr, (extra, done.stderr)
    many = llm_ocr(*launch_args(corpus, out, shards=1002), env=env)
    assert many.returncode == 2 and "this cluster's MaxArraySize is 1001" in many.stderr, many.stderr
    assert not (out / "_state" / "slurm").exists() and not (out / "_state" / "launches").exists()
