"""``llm-ocr launch hf-jobs`` against a fake Hugging Face Jobs API that really runs the jobs.

huggingface_hub talks to the fake through ``HF_ENDPOINT`` (tests/fakes/fake_jobs.py); every job
runs its container command as a local subprocess: the wheel the launcher uploaded is installed
from the mounted code repo, ``llm-ocr`` launches its model server (the fake ``vllm`` running the
simulated DeepSeek-OCR server) and writes to the fake Hub with the ``HF_TOKEN`` secret.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import psutil
import pytest

from tests.docs import make_corpus
from tests.fakes.fake_jobs import FakeJob, FakeJobs, hub_files_text
from tests.launchers.common import (
    CODE_REPO,
    INPUT,
    OUTPUT,
    OUTPUT_REPO,
    PLANTED,
    READER,
    expected_pages,
    fake_jobs,
    launch_args,
    launcher_env,
    launcher_here,
    llm_ocr,
    llm_ocr_batch,
    stage_rows,
)
from tests.launchers.simulators import HELD_START, JobSimulator, simulator_in
from tests.waiting import wait_until


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("launch") / "docs"
    make_corpus(folder, documents=6, pages=2)
    return folder


def _without_launch_id(body: dict, launch_id: str) -> str:
    return json.dumps(body, sort_keys=True).replace(launch_id, "LAUNCH")


def test_two_shards_make_every_page_once_and_the_token_stays_secret(tmp_path: Path, corpus: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from llm_ocr.launchers.core import api

    with fake_jobs(tmp_path / "jobs", corpus) as hub, launcher_here(hub, tmp_path, monkeypatch) as so:
        env = launcher_env(hub, tmp_path)
        # The user's commands in turn, in one interpreter (tests/launchers/batch_cli.py): the dry
        # run (which submits nothing: test_dry_run_prints_the_contract...), the launch, one shard's
        # logs, and a relaunch of the finished output.
        dry, done, logs, again = llm_ocr_batch([
            (launch_args("--dry-run", shards=2), {}),
            (launch_args("--wait", "--interval", "2", shards=2), {}),
            (["jobs", "logs", OUTPUT, "--shard", "1"], {}),
            (launch_args(shards=2), {}),
        ], env)
        assert dry["code"] == 0, dry["stderr"]
        plan = json.loads(dry["stdout"])  # exactly one JSON object on stdout
        assert done["code"] == 0, done["stdout"] + done["stderr"]
        assert "every shard finished" in done["stdout"]
        assert [j.attempts_run for j in hub.jobs.values()] == [1, 1]  # no shard needed a retry

        # Every page of the input exactly once in each stage, every document assembled.
        for stage in ("extract", "describe"):
            rows = stage_rows(hub, stage)
            assert sorted((r["doc_id"], r["page"]) for r in rows) == expected_pages(corpus), stage
            assert {r["status"] for r in rows} == {"ok"}
        documents = stage_rows(hub, "assemble")
        assert sorted(d["doc_id"] for d in documents) == sorted(p.name for p in corpus.glob("*.pdf"))
        # One job per shard, each told its shard in env; the token only in secrets.
        received = hub.job_requests
        assert sorted(r["environment"]["LLM_OCR_SHARD_INDEX"] for r in received[:2]) == ["0", "1"]
        assert all(r["environment"]["LLM_OCR_NUM_SHARDS"] == "2" for r in received)
        assert all(r["secrets"] == {"HF_TOKEN": PLANTED} for r in received)
        # The dry run showed the exact bodies the launch then sent (but for the launch id and
        # the secret's value).
        real_id = received[0]["labels"]["llm-ocr-launch"]
        shown = sorted(_without_launch_id(b, plan["launch_id"]).replace('"<secret>"', json.dumps(PLANTED)) for b in plan["requests"])
        assert shown == sorted(_without_launch_id(b, real_id) for b in received)
        # The wheel went up once, to the mounted code repo.
        assert len(hub.commits_to(CODE_REPO)) == 1

        # The table from the record alone (as from another machine), and one shard's logs.
        table = api.status(OUTPUT, storage_options=so).to_dict()
        assert [row["state"] for row in table["shards"]] == ["done"] * 2
        assert table["totals"]["done"] == 12 and table["totals"]["cost_usd"] is not None
        assert logs["code"] == 0, logs["stderr"]
        assert "[extract shard 2/2] pages seen" in logs["stdout"]  # shard index 1 is "2/2" in its log
        assert "[extract shard 1/2]" not in logs["stdout"]

        # Relaunching a finished output submits nothing.
        assert again["code"] == 0, again["stderr"]
        assert "nothing to launch" in again["stdout"]
        assert len(hub.job_requests) == 2

        # The planted token: nowhere but the secrets channel.
        spec_views = [{k: v for k, v in r.items() if k != "secrets"} for r in received]
        places = {
            "dry-run": dry["stdout"] + dry["stderr"],
            "launch output": done["stdout"] + done["stderr"] + again["stdout"] + again["stderr"],
            "job specs": json.dumps(spec_views),
            "job logs": hub.log_text(),
            "status and logs output": json.dumps(table) + logs["stdout"] + logs["stderr"],
            "output repo": hub_files_text(hub, OUTPUT_REPO),
            "launch cache": "".join(p.read_text() for p in (tmp_path / "cache").rglob("*.json")),
        }
        leaked = [where for where, text in places.items() if PLANTED in text]
        assert not leaked, f"the token leaked into {leaked}"
        assert places["launch cache"], "the launch should be noted locally by id"


def _job_of(hub: FakeJobs, shard: int, nth: int = 0) -> FakeJob | None:
    """The ``nth`` job submitted for ``shard`` (None before)."""
    jobs = [j for j in list(hub.jobs.values()) if j.body["environment"]["LLM_OCR_SHARD_INDEX"] == str(shard)]
    return jobs[nth] if len(jobs) > nth else None


def _simulator_of(job: FakeJob | None) -> JobSimulator | None:
    return simulator_in(job.folder) if job is not None else None


def _hold_after_a_page(job: FakeJob, server: JobSimulator) -> None:
    """Let ``job`` through one request at a time until it has finished a page, and hold it there.

    A page takes one extract request and a describe request per figure, so the count is not
    fixed: each time a request is held (the job cannot change state then), the job's next progress
    line says whether a page is done; if not, that request is let through.
    """
    held_at = server.hold()
    server.ready()
    while True:
        wait_until(lambda at=held_at: server.hangs_applied() >= at, "the job's next request reached its server")
        seen = len(job.logs)
        # The second progress line after the hold: the first may have been made before it.
        lines = wait_until(lambda since=seen: [ln for _, ln in job.logs[since:] if " pages " in ln][1:],
                           "a progress line of the held job")
        done = re.search(r"\(ok (\d+),", lines[0])
        assert done is not None, lines[0]
        if int(done.group(1)) > 0:
            return
        server.release()
        held_at += 1


def test_killed_shard_is_the_only_one_relaunched_and_it_resumes(tmp_path: Path, corpus: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from llm_ocr.launchers.core import api

    # Every job's server waits for the test (tests/launchers/simulators.py). Shard 0's runs at
    # once; shard 1's answers one page and holds the rest (_hold_after_a_page), so that shard 1 has a part on the Hub
    # and progress to show, and is mid-shard for certain when it is killed, however slow the
    # machine. Small parts committed often, one page in flight. Static shards: with work groups
    # shard 0 would read shard 1's free groups (tests/runners/test_stragglers_e2e.py).
    tuning = ("--env", "LLM_OCR_HUB_COMMIT_FILES=2", "--env", "LLM_OCR_HUB_COMMIT_INTERVAL=1")
    args = launch_args(*tuning, "--part-rows", "1", "--max-in-flight", "1", "--progress-interval", "0.3", "--no-steal",
                       shards=2)
    with fake_jobs(tmp_path / "jobs", corpus, sim_args=f"--instant {HELD_START}") as hub, \
            launcher_here(hub, tmp_path, monkeypatch) as so:
        env = launcher_env(hub, tmp_path)
        first = llm_ocr(*args, env=env)
        assert first.returncode == 0, first.stderr
        wait_until(lambda: _simulator_of(_job_of(hub, 0)), "shard 0's model server listens", interval=0.5).ready()
        held = wait_until(lambda: _simulator_of(_job_of(hub, 1)), "shard 1's model server listens", interval=0.5)
        victim = _job_of(hub, 1)
        assert victim is not None
        _hold_after_a_page(victim, held)

        # The live table counts pages from the progress file before the shard has a marker.
        def progressing() -> object:
            row = api.status(OUTPUT, storage_options=so).shards[1]
            return row if row.state == "running" and row.counts["ok"] > 0 and not row.stages_done else None

        seen = wait_until(progressing, "shard 1's progress in the live table", interval=0.5)
        assert seen.job_id == victim.id
        wait_until(lambda: any(n.startswith("extract/part-00001-of-00002") for n in hub.files(OUTPUT_REPO)),
                   "shard 1's first part on the Hub", interval=0.2)
        hub.kill(victim.id)
        final = api.wait(OUTPUT, interval=0.5, live=False, storage_options=so)
        assert not final.succeeded
        assert {row.shard: row.state for row in final.shards} == {0: "done", 1: "failed"}
        before = len(stage_rows(hub, "extract"))
        assert 0 < before < len(expected_pages(corpus))

        again = llm_ocr(*args, env=env)
        assert again.returncode == 0, again.stdout + again.stderr
        relaunched = hub.job_requests[2:]
        assert [r["environment"]["LLM_OCR_SHARD_INDEX"] for r in relaunched] == ["1"]
        wait_until(lambda: _simulator_of(_job_of(hub, 1, nth=1)), "the relaunched shard's server listens",
                   interval=0.5).ready()
        assert api.wait(OUTPUT, interval=0.5, live=False, storage_options=so).succeeded
        assert len(hub.commits_to(CODE_REPO)) == 1  # same code: the wheel was not uploaded again
        for stage in ("extract", "describe"):
            keys = sorted((r["doc_id"], r["page"]) for r in stage_rows(hub, stage))
            assert keys == expected_pages(corpus), stage
        marker = json.loads(hub.files(OUTPUT_REPO)["_state/extract/done-00001-of-00002.json"])
        assert marker["pages"]["skipped"] > 0  # it resumed from the parts of the killed run
        assert marker["pages"]["total"] + marker["pages"]["skipped"] == marker["pages"]["seen"]
        # The final table counts every run's rows; the record still has shard 0's first job.
        table = api.status(OUTPUT, count=True, storage_options=so)
        assert table.totals()["done"] == len(expected_pages(corpus)) and table.duplicates == 0
        first_shard0 = next(j.id for j in hub.jobs.values() if j.body["environment"]["LLM_OCR_SHARD_INDEX"] == "0")
        assert table.shards[0].job_id == first_shard0 and table.shards[1].job_id != victim.id


def test_cancel_stops_every_job_and_its_processes(tmp_path: Path, corpus: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from llm_ocr.launchers.core import api

    # The jobs' servers never become ready (tests/launchers/simulators.py): both jobs are running,
    # for certain, when the cancel lands, with llm-ocr waiting for its server as on a slow start.
    with fake_jobs(tmp_path / "jobs", corpus, sim_args=HELD_START) as hub, launcher_here(hub, tmp_path, monkeypatch) as so:
        env = launcher_env(hub, tmp_path)
        assert llm_ocr(*launch_args("--grace-period", "1", shards=2), env=env).returncode == 0
        for shard in (0, 1):
            wait_until(lambda s=shard: _simulator_of(_job_of(hub, s)), f"shard {shard}'s model server listens", interval=0.5)
        pids = [j.process.pid for j in hub.jobs.values()]
        cancelled = llm_ocr("jobs", "cancel", OUTPUT, env=env)
        assert cancelled.returncode == 0, cancelled.stderr
        assert "cancel sent to 2 job(s)" in cancelled.stdout
        hub.wait_all(60)
        assert {j.stage for j in hub.jobs.values()} == {"CANCELED"}
        assert not [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
        assert {row.state for row in api.status(OUTPUT, storage_options=so).shards} == {"cancelled"}


CONTRACT_JOB_KEYS = {"shard_index", "num_shards", "name", "image", "command", "env", "secrets", "hardware", "timeout_s", "attempts"}


def test_dry_run_prints_the_contract_for_each_way_of_shipping_the_code(tmp_path: Path, corpus: Path) -> None:
    with fake_jobs(tmp_path / "jobs", corpus) as hub:
        env = launcher_env(hub, tmp_path)
        stock, prebuilt, assemble = llm_ocr_batch([
            (launch_args("--dry-run", "--describe-model", "deepseek-ai/DeepSeek-OCR", "--pages", "4000", shards=3), {}),
            (launch_args("--dry-run", "--image", "me/llm-ocr:1", shards=2), {}),
            (["launch", "hf-jobs", "--stage", "assemble", "--output", OUTPUT, "--num-shards", "2", "--dry-run"], {}),
        ], env)
        assert hub.job_requests == [] and ("model", CODE_REPO) not in hub.repos  # a dry run changes nothing
    plans = []
    for result in (stock, prebuilt, assemble):
        assert result["code"] == 0, result["stderr"]
        plans.append(json.loads(result["stdout"]))  # stdout is exactly one JSON object
    for plan in plans:
        assert set(plan) == {"platform", "launch_id", "jobs", "requests"} and plan["platform"] == "hf-jobs"
        assert len(plan["requests"]) == len(plan["jobs"])
        for index, job in enumerate(plan["jobs"]):
            assert set(job) == CONTRACT_JOB_KEYS
            assert (job["shard_index"], job["env"]["LLM_OCR_SHARD_INDEX"], job["env"]["LLM_OCR_NUM_SHARDS"]) == (
                index, str(index), str(job["num_shards"]))
            assert job["secrets"] == ["HF_TOKEN"] and "HF_TOKEN" not in job["env"]
            assert plan["requests"][index]["secrets"] == {"HF_TOKEN": "<secret>"}
            assert plan["requests"][index]["labels"]["llm-ocr-launch"] == plan["launch_id"]

    # Stock image: install the shipped wheel, then the plain llm-ocr invocation, options unchanged.
    job = plans[0]["jobs"][1]
    tail = ["llm-ocr", "run", INPUT, "--workers", "0", "--describe-model", "deepseek-ai/DeepSeek-OCR", "--output", OUTPUT]
    assert job["command"][-len(tail):] == tail
    assert job["command"][:2] == ["python3", "-c"] and job["command"][3].startswith("/llm-ocr-code/wheels/")
    assert job["command"][3].endswith(".whl[hub]")
    # The CUDA 12.9 build of the pinned vLLM: it runs on any CUDA 12 driver (the plain tag is CUDA 13).
    assert job["image"] == "vllm/vllm-openai:v0.29.0-cu129" and job["hardware"] == "l4x1" and job["attempts"] == 3
    assert job["env"]["LLM_OCR_GPU_PRESET"] == "l4-24gb" and job["env"]["LLM_OCR_ENGINE"] == "vllm"
    assert job["timeout_s"] == 5400  # 4000 pages / 3 shards at the L4's 0.7 pages/s, x2, + 20 min
    assert plans[0]["requests"][1]["volumes"] == [{"type": "model", "source": CODE_REPO, "mountPath": "/llm-ocr-code"}]
    # A prebuilt image: the command is llm-ocr itself, nothing mounted.
    job = plans[1]["jobs"][0]
    assert job["command"] == ["llm-ocr", "run", INPUT, "--workers", "0", "--output", OUTPUT]
    assert job["image"] == "me/llm-ocr:1" and "volumes" not in plans[1]["requests"][0]
    # Assemble needs no GPU: a CPU flavor and image by default, no model server.
    job = plans[2]["jobs"][0]
    assert job["command"][-4:] == ["llm-ocr", "assemble", "--output", OUTPUT]
    assert (job["hardware"], job["image"]) == ("cpu-basic", "python:3.12-slim")
    assert "LLM_OCR_ENGINE" not in job["env"] and "LLM_OCR_GPU_PRESET" not in job["env"]


BAD_INPUT = [
    ("no token", {"token": None}, "no Hugging Face token"),
    ("unknown flavor", {"args": ["--flavor", "a100-huge"]}, "unknown --flavor 'a100-huge'"),
    ("output the token cannot write", {"token": READER}, "cannot write to hf://datasets/tester/ocr"),
    ("zero shards", {"shards": 0}, "--num-shards must be at least 1 (got 0)"),
    ("unreadable input", {"inputs": ("hf://datasets/tester/scans/missing",)}, "input not found: hf://datasets/tester/scans/missing"),
    ("local input", {"inputs": ("/tmp/scans",)}, "is a path on this machine"),
    ("local output", {"args": ["--output", "/tmp/out"]}, "--output '/tmp/out' is a path on this machine"),
    ("key in a stage option", {"args": ["--api-key", "sk-abcdefgh12345678"]}, "--api-key cannot be passed"),
    ("mistyped stage option", {"args": ["--describe-modle", "x"]}, "unrecognized arguments: --describe-modle x: not a launch option"),
    ("token in --env", {"args": ["--env", f"HF_TOKEN={PLANTED}"]}, "--env HF_TOKEN=... looks like a secret"),
    ("GPU stage on a CPU flavor", {"args": ["--flavor", "cpu-basic"]}, "--flavor cpu-basic has no GPU"),
    ("unset secret", {"args": ["--secret", "AWS_SECRET_ACCESS_KEY"]}, "AWS_SECRET_ACCESS_KEY is not set in this environment"),
]


def test_bad_input_fails_before_anything_is_submitted(tmp_path: Path, corpus: Path) -> None:
    with fake_jobs(tmp_path / "jobs", corpus) as hub:
        env = launcher_env(hub, tmp_path)
        cases = []
        for _, change, _ in BAD_INPUT:
            args = launch_args(shards=change.get("shards", 2), inputs=change.get("inputs", (INPUT,)))
            extra = change.get("args", [])
            if extra[:1] == ["--output"]:  # replaces the launch's own --output
                at = args.index("--output")
                args[at + 1] = extra[1]
                extra = extra[2:]
            cases.append((args + extra, {"HF_TOKEN": change.get("token", PLANTED) or ""}))
        results = llm_ocr_batch(cases, env)
        wrong = []
        for (case, _, message), result in zip(BAD_INPUT, results):
            if result["code"] != 2 or message not in result["stderr"]:
                wrong.append(f"{case}: exit {result['code']}, {result['stderr'][-600:]}")
            if PLANTED in result["stdout"] + result["stderr"]:
                wrong.append(f"{case}: the token is in the output")
        assert not wrong, "\n".join(wrong)
        flavor_error = results[1]["stderr"]
        assert "a100-large" in flavor_error and "l4x1" in flavor_error  # the valid flavors are listed
        assert hub.job_requests == []
        assert ("model", CODE_REPO) not in hub.repos, "nothing is uploaded either"
        assert ("dataset", OUTPUT_REPO) not in hub.repos, "nor the output repo created"
