"""``llm-ocr launch cloud-run`` end to end: the real google-cloud-run clients against a local fake
of the Cloud Run API that really runs every task (wheel install from the mounted Cloud Storage
volume, llm-ocr, the fake vllm), reading and writing the GCS emulator."""

from __future__ import annotations

import json
from pathlib import Path

import psutil
import pytest

from tests import waiting
from tests.docs import make_corpus
from tests.installed import skip_module_unless_installed
from tests.launchers.cloud_run_common import (
    CODE_PREFIX,
    INPUT,
    JOB,
    OUTPUT,
    PLANTED,
    PROJECT,
    REGION,
    bucket_text,
    fake_cloud_run,
    launch_args,
    launcher_env,
    llm_ocr,
    stage_rows,
    status,
)
from tests.launchers.common import expected_pages, llm_ocr_batch, wait_until
from tests.launchers.simulators import HELD_START, simulator_in

skip_module_unless_installed("google.cloud.run_v2")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("cloud-run") / "docs"
    make_corpus(folder, documents=4, pages=2)
    return folder


def _pages(rows: list[dict]) -> list[tuple[str, int]]:
    return sorted((r["doc_id"], r["page"]) for r in rows)


def test_shards_run_as_the_tasks_of_one_execution_and_the_token_stays_a_reference(tmp_path: Path, corpus: Path) -> None:
    with fake_cloud_run(tmp_path / "api", corpus) as api:
        env = launcher_env(api, tmp_path)
        dry = llm_ocr(*launch_args("--dry-run"), env=env)
        assert dry.returncode == 0, dry.stderr
        plan = json.loads(dry.stdout)
        assert api.requests == [] and api.gcs.list("ocr", "") == []  # a dry run sends and uploads nothing

        # The launch, waited for, then the table from the record, the logs from Cloud Logging,
        # cancelling part of the execution, and a relaunch that has nothing to do: one interpreter
        # for the six commands (tests/launchers/batch_cli.py; the other tests launch through the
        # command itself). Neither the cancel of part of it nor the relaunch changes anything the
        # launch's checks below read.
        done, table, logs, followed, cut, again = llm_ocr_batch([
            (launch_args("--wait", "--interval", "1"), {}),
            (["jobs", "status", OUTPUT, "--json"], {}),
            (["jobs", "logs", OUTPUT, "--shard", "1"], {}),
            (["jobs", "logs", OUTPUT, "--shard", "0", "-f", "--tail", "3"], {}),  # ends: the task has ended
            (["jobs", "cancel", OUTPUT, "--shard", "1"], {}),
            (launch_args(), {}),
        ], env, timeout=600)
        assert done["code"] == 0, done["stdout"] + done["stderr"]
        assert "every shard finished" in done["stdout"]

        # Every page once in each stage, every document assembled.
        for stage in ("extract", "describe"):
            assert _pages(stage_rows(api.gcs, stage)) == expected_pages(corpus), stage
        assert sorted(d["doc_id"] for d in stage_rows(api.gcs, "assemble")) == sorted(p.name for p in corpus.glob("*.pdf"))

        # One execution of 2 tasks, each succeeding on its first attempt, each told its shard by
        # the platform, the token arriving from Secret Manager.
        (execution,) = api.executions.values()
        assert [len(t.attempts) for t in execution.tasks] == [1, 1]
        envs = [t.attempts[0].env for t in execution.tasks]
        assert [(e["CLOUD_RUN_TASK_INDEX"], e["CLOUD_RUN_TASK_COUNT"], e["LLM_OCR_TASK_SHARDS"]) for e in envs] == [
            ("0", "2", "2:0-1"), ("1", "2", "2:0-1")]
        assert all(e["HF_TOKEN"] == PLANTED and "LLM_OCR_SHARD_INDEX" not in e for e in envs)

        # The job was created once (never deleted) and run once, with exactly the dry run's bodies.
        (create,) = api.calls("POST", "/jobs")
        (run,) = api.calls("POST", ":run")
        assert api.calls("DELETE") == [] and api.calls("PATCH") == []
        assert create["body"] == plan["requests"][0]["job"]
        launch_id = plan["jobs"][0]["env"]["LLM_OCR_LAUNCH_ID"]
        real_id = envs[0]["LLM_OCR_LAUNCH_ID"]
        assert json.dumps(run["body"]) == json.dumps(plan["requests"][0]["run"]).replace(launch_id, real_id)
        task = create["body"]["template"]["template"]
        assert task["nodeSelector"] == {"accelerator": "nvidia-l4"} and task["gpuZonalRedundancyDisabled"] is True
        assert task["containers"][0]["resources"]["limits"] == {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "1"}
        assert (task["maxRetries"], task["timeout"], create["body"]["template"]["parallelism"]) == (3, "3600s", 2)
        hf_token = next(e for e in task["containers"][0]["env"] if e["name"] == "HF_TOKEN")
        assert hf_token == {"name": "HF_TOKEN", "valueSource": {"secretKeyRef": {"secret": "hf-token", "version": "latest"}}}
        assert task["volumes"][0]["gcs"] == {"bucket": "ocr", "readOnly": True, "mountOptions": ["only-dir=llm-ocr-code"]}
        assert len([n for n in api.gcs.list("ocr", CODE_PREFIX) if n.endswith(".whl")]) == 1

        # The table, the logs, the partial cancel refused, the relaunch with nothing to launch.
        rows = json.loads(table["stdout"])
        assert [(r["state"], r["job_phase"]) for r in rows["shards"]] == [("done", "succeeded")] * 2 and rows["succeeded"]
        assert logs["code"] == 0, logs["stderr"]
        # Shard 1's log, not shard 0's (how many pages it saw depends on the work groups it read).
        assert "[extract shard 2/2] pages seen" in logs["stdout"] and "[extract shard 1/2]" not in logs["stdout"]
        assert followed["code"] == 0 and followed["stdout"].splitlines() == [
            line for *_, index, _, line in api.log_entries if index == 0][-3:], followed["stderr"]
        assert cut["code"] == 2 and "runs shards 0-1 together and cannot stop only some of them" in cut["stderr"]
        assert again["code"] == 0 and "nothing to launch" in again["stdout"], again["stderr"]
        assert len(api.calls("POST", ":run")) == 1

        # The planted token: in the tasks' environment only.
        places = {
            "dry-run": dry.stdout + dry.stderr,
            "launch output": done["stdout"] + done["stderr"] + again["stdout"] + again["stderr"],
            "API requests": json.dumps(api.requests),
            "task logs": api.log_text() + logs["stdout"] + logs["stderr"] + followed["stdout"],
            "status": table["stdout"],
            "output bucket": bucket_text(api.gcs, "ocr"),
            "launch cache": "".join(p.read_text() for p in (tmp_path / "cache").rglob("*.json")),
        }
        assert not [where for where, text in places.items() if PLANTED in text]


def test_a_task_stopped_at_its_time_limit_resumes_on_retry_and_every_page_is_done_once(tmp_path: Path, corpus: Path) -> None:
    # Slow pages one at a time, each written at once: the stop lands mid-shard, with parts saved
    # and pages left (with llm-ocr's default of 64 in flight, the grace period would finish them all).
    slow = "--prefill-ms 1500 --slots 1"
    with fake_cloud_run(tmp_path / "api", corpus, sim_args=slow) as api:
        env = launcher_env(api, tmp_path)
        first = llm_ocr(*launch_args("--part-rows", "1", "--max-in-flight", "1", shards=1), env=env)
        assert first.returncode == 0, first.stderr
        (name,) = api.executions
        wait_until(lambda: any("/part-00000-of-00001" in n for n in api.gcs.list("ocr", "out/extract/")), period=0.1)
        api.stop_attempt(name, 0, "timeout")  # as the 1-hour limit does: SIGTERM, SIGKILL 10 s later
        final = llm_ocr("jobs", "wait", OUTPUT, "--interval", "1", env=env)
        assert final.returncode == 0, final.stdout + final.stderr

        (task,) = api.executions[name].tasks
        stopped, retry = task.attempts
        # The stopped attempt saved its parts and exited with llm-ocr's "interrupted" code before
        # the SIGKILL; Cloud Run retried the task, which resumed.
        assert (stopped.stop_reason, stopped.exit_code, stopped.term_signal) == ("timeout", 3, None)
        assert (retry.exit_code, stopped.env["CLOUD_RUN_TASK_ATTEMPT"], retry.env["CLOUD_RUN_TASK_ATTEMPT"]) == (0, "0", "1")
        for stage in ("extract", "describe"):
            assert _pages(stage_rows(api.gcs, stage)) == expected_pages(corpus), stage  # every page exactly once
        marker = json.loads(api.gcs.read("ocr", "out/_state/extract/done-00000-of-00001.json"))
        assert marker["pages"]["skipped"] > 0 and marker["pages"]["total"] > 0  # the retry did the rest only
        table = status(env)
        assert table["shards"][0]["state"] == "done" and table["succeeded"]


def test_an_execution_with_a_failed_task_is_failed_and_a_relaunch_updates_the_job(tmp_path: Path, corpus: Path) -> None:
    from llm_ocr.launchers.cloud_run.adapter import CloudRun

    # Task 1's machine cannot start the model server (every attempt): that task fails, task 0 succeeds.
    broken = {1: {"FAKE_VLLM_MODE": "crash_on_start"}}
    with fake_cloud_run(tmp_path / "api", corpus, task_env=broken) as api:
        env = launcher_env(api, tmp_path)
        # Static shards: with work groups task 0 would read task 1's groups, and task 1, left
        # nothing, would end without starting its server (tests/runners/test_stragglers_e2e.py).
        first = llm_ocr(*launch_args("--attempts", "2", "--wait", "--interval", "1", "--no-steal"), env=env)
        assert first.returncode == 1, first.stdout + first.stderr
        assert "not every shard finished" in first.stdout
        (failed_name,) = api.executions
        assert [t.state for t in api.executions[failed_name].tasks] == ["SUCCEEDED", "FAILED"]
        assert [len(t.attempts) for t in api.executions[failed_name].tasks] == [1, 2]

        # The execution is failed, not succeeded, though a task succeeded (the seed's mistake).
        follower = CloudRun(project=PROJECT, region=REGION, endpoint=api.url)
        state = follower.states([{"job_id": failed_name, "shards": [0, 1]}])[failed_name]
        assert state.phase == "failed" and state.raw.startswith("1/2 succeeded, 1 failed")
        table = status(env)
        assert [r["state"] for r in table["shards"]] == ["done", "failed"] and not table["succeeded"]
        assert "attempt 2 exited 2" in table["shards"][1]["message"]

        # Relaunch: only shard 1, as task 0 of a new execution (the task index is not the shard);
        # the job's template changed (1 task), so it is updated, not deleted: its history stays.
        api.task_env.clear()
        again = llm_ocr(*launch_args("--attempts", "2", "--wait", "--interval", "1", "--no-steal"), env=env)
        assert again.returncode == 0, again.stdout + again.stderr
        (relaunched,) = [e for n, e in api.executions.items() if n != failed_name]
        (task,) = relaunched.tasks
        assert (task.attempts[0].env["CLOUD_RUN_TASK_INDEX"], task.attempts[0].env["LLM_OCR_TASK_SHARDS"]) == ("0", "2:1")
        assert api.calls("DELETE") == [] and len(api.calls("PATCH")) == 1
        assert [int(v["generation"]) for v in api.job_versions[JOB]] == [1, 2]
        assert [v["template"]["taskCount"] for v in api.job_versions[JOB]] == [2, 1]
        history = [e.name for e in follower._client("executions").list_executions(parent=JOB)]
        assert sorted(history) == sorted(api.executions) and len(history) == 2
        assert follower.states([{"job_id": failed_name, "shards": [0, 1]}])[failed_name].phase == "failed"  # still there
        for stage in ("extract", "describe"):
            assert _pages(stage_rows(api.gcs, stage)) == expected_pages(corpus), stage
        table = status(env)
        assert [r["state"] for r in table["shards"]] == ["done", "done"] and table["succeeded"]


def test_cancel_stops_the_execution_and_its_processes(tmp_path: Path, corpus: Path) -> None:
    # The task's server never becomes ready (tests/launchers/simulators.py): the task is running,
    # for certain, when the cancel lands, its llm-ocr waiting for its server as on a slow start.
    # With 3-second pages a machine at load 60 let the task finish first ("none was running").
    with fake_cloud_run(tmp_path / "api", corpus, sim_args=HELD_START) as api:
        env = launcher_env(api, tmp_path)
        assert llm_ocr(*launch_args("--grace-period", "1", shards=1), env=env).returncode == 0
        (name,) = api.executions
        execution = api.executions[name]
        (task,) = execution.tasks
        waiting.wait_until(lambda: simulator_in(api.workdir / execution.short / "task0-attempt0"),
                           "the task's model server listens", interval=0.5)
        assert task.state == "RUNNING" and task.process is not None
        pid = task.process.pid
        cancelled = llm_ocr("jobs", "cancel", OUTPUT, env=env)
        assert cancelled.returncode == 0, cancelled.stderr
        assert "cancel sent to 1 job(s)" in cancelled.stdout
        api.wait_all(60)
        assert task.state == "CANCELLED" and len(task.attempts) == 1  # a cancelled task is not retried
        assert not (psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
        assert [r["state"] for r in status(env)["shards"]] == ["cancelled"]


CONTRACT_JOB_KEYS = {"shard_index", "num_shards", "name", "image", "command", "env", "secrets", "hardware", "timeout_s", "attempts"}


def test_dry_run_prints_the_contract_for_the_stock_image_a_prebuilt_one_and_a_cpu_assemble(tmp_path: Path, corpus: Path) -> None:
    with fake_cloud_run(tmp_path / "api", corpus) as api:
        env = launcher_env(api, tmp_path)
        stock, prebuilt, assemble = llm_ocr_batch([
            (launch_args("--dry-run", "--pages", "4000"), {}),
            (launch_args("--dry-run", "--image", "us-docker.pkg.dev/p/ocr/llm-ocr:1", "--cpu", "4", "--memory", "16Gi"), {}),
            (["launch", "cloud-run", "--stage", "assemble", "--output", OUTPUT, "--num-shards", "2", "--project", PROJECT,
              "--region", REGION, "--dry-run"], {}),
        ], env)
        assert api.requests == [] and api.gcs.list("ocr", "") == []
    plans = []
    for result in (stock, prebuilt, assemble):
        assert result["code"] == 0, result["stderr"]
        plans.append(json.loads(result["stdout"]))
    for plan in plans:
        assert set(plan) == {"platform", "launch_id", "jobs", "requests"} and plan["platform"] == "cloud-run"
        assert [j["shard_index"] for j in plan["jobs"]] == [0, 1] and len(plan["requests"]) == 1  # one execution
        for job in plan["jobs"]:
            assert set(job) == CONTRACT_JOB_KEYS and "LLM_OCR_SHARD_INDEX" not in job["env"]
        assert plan["requests"][0]["name"] == JOB.replace("llm-ocr-run", f"llm-ocr-{'assemble' if plan is plans[2] else 'run'}")

    # The stock image: the pinned vLLM image from Docker Hub, the wheel from the mounted bucket,
    # 4 tries a task; 2000 pages a shard are too long for one hour: a warning with numbers.
    job = plans[0]["jobs"][0]
    assert job["image"] == "docker.io/vllm/vllm-openai:v0.29.0-cu129" and job["command"][:2] == ["python3", "-c"]
    assert job["command"][3].startswith("/llm-ocr-code/wheels/") and job["command"][3].endswith(".whl[gcs]")
    assert job["command"][-7:] == ["llm-ocr", "run", INPUT, "--workers", "0", "--output", OUTPUT]
    assert (job["timeout_s"], job["attempts"], job["secrets"]) == (3600, 4, ["HF_TOKEN"])
    assert "a shard of 2000 pages needs ~115 min" in stock["stderr"] and "--num-shards 5 or more" in stock["stderr"]
    # A prebuilt image: llm-ocr itself, nothing mounted, the resources asked for.
    job, request = plans[1]["jobs"][0], plans[1]["requests"][0]
    assert job["command"] == ["llm-ocr", "run", INPUT, "--workers", "0", "--output", OUTPUT]
    container = request["job"]["template"]["template"]["containers"][0]
    assert (container["command"], container["resources"]["limits"]["memory"]) == (["llm-ocr"], "16Gi")
    assert "volumes" not in request["job"]["template"]["template"]
    # Assemble: a CPU task, no GPU anywhere, the Python image, no 1-hour cap.
    job, task = plans[2]["jobs"][0], plans[2]["requests"][0]["job"]["template"]["template"]
    assert job["image"] == "docker.io/library/python:3.12-slim" and job["command"][-4:] == ["llm-ocr", "assemble", "--output", OUTPUT]
    assert "nodeSelector" not in task and "nvidia.com/gpu" not in task["containers"][0]["resources"]["limits"]
    assert job["timeout_s"] > 3600 and "LLM_OCR_ENGINE" not in job["env"]


BAD_INPUT = [
    ("no project", ["--project", ""], "Cloud Run needs --project"),
    ("no region", ["--region", ""], "Cloud Run needs --region"),
    ("too many vCPUs", ["--cpu", "16"], "a Cloud Run task has at most 8 vCPU and 32 GiB"),
    ("too much memory", ["--memory", "64Gi"], "a Cloud Run task has at most 8 vCPU and 32 GiB"),
    ("a GPU Cloud Run does not offer", ["--gpu", "nvidia-h100"], "--gpu 'nvidia-h100' is not a GPU Cloud Run Jobs offer"),
    ("more tasks than an execution runs", ["--num-shards", "10001"], "a Cloud Run execution runs at most 10000 tasks"),
    ("shards that cannot fit the task limit", ["--pages", "1000000"], "more than 4 attempt(s) of 60 min"),
    ("a timeout over the GPU limit", ["--timeout", "2h"], "more than the platform's limit of 3600s"),
    ("a local secret", ["--secret", "HF_TOKEN"], "Cloud Run tasks read secrets from Secret Manager"),
    ("a hub output without its token", ["--output", "hf://datasets/me/ocr"], "the tasks need HF_TOKEN to write"),
    ("a malformed secret reference", ["--secret-ref", "HF_TOKEN"], "--secret-ref 'HF_TOKEN': write NAME=SECRET[:VERSION]"),
    ("a model stage without a GPU", ["--gpu", "none"], "serves a model in each task, which needs a GPU"),
]


def test_bad_input_fails_before_anything_is_submitted(tmp_path: Path, corpus: Path) -> None:
    with fake_cloud_run(tmp_path / "api", corpus) as api:
        env = launcher_env(api, tmp_path)
        cases = []
        for _, extra, _ in BAD_INPUT:
            args = launch_args()
            if extra[0] in ("--project", "--region", "--output", "--num-shards"):  # replaces the launch's own
                args[args.index(extra[0]) + 1] = extra[1]
            elif extra[0] == "--secret-ref":
                args[args.index("--secret-ref") + 1] = extra[1]
            else:
                args += extra
            if extra[0] == "--output":  # a hub output: drop the token reference
                at = args.index("--secret-ref")
                del args[at:at + 2]
            cases.append((args, {}))
        results = llm_ocr_batch(cases, env)
        wrong = [f"{case}: exit {r['code']}, {r['stderr'][-500:]}" for (case, _, message), r in zip(BAD_INPUT, results)
                 if r["code"] != 2 or message not in r["stderr"]]
        assert not wrong, "\n".join(wrong)
        assert not [case for (case, _, _), r in zip(BAD_INPUT, results) if PLANTED in r["stdout"] + r["stderr"]]
        assert api.requests == [], "nothing was sent to Cloud Run"
        assert api.gcs.list("ocr", "") == [], "nothing was uploaded either"
