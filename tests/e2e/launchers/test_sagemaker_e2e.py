"""``llm-ocr launch sagemaker`` against moto and a fake SageMaker Processing that runs the hosts.

The launcher talks to real local AWS APIs (moto: S3, IAM, STS, CloudWatch Logs, Secrets Manager)
with plain boto3; SageMaker calls go to tests/fakes/fake_sagemaker.py, which checks each request
against SageMaker's limits, hands it to moto, and runs the request's exact entrypoint and
arguments once per host, each host finding its shard in its own resourceconfig.json.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from tests import waiting
from tests.conftest import REPO
from tests.docs import make_corpus
from tests.fakes.fake_hub import FakeHub
from tests.launchers.common import expected_pages, llm_ocr, llm_ocr_batch, wait_until
from tests.launchers.sagemaker_common import INPUT, OUTPUT, PLANTED, REGION, ROLE, aws_world, launcher_here, sm_args
from tests.launchers.simulators import HELD_START, simulator_in
from tests.stages.common import run_in_process

# The hang guard (pytest-timeout; 300 s by default): a test waits for a launch and a relaunch in turn, each with its own hang guard.
pytestmark = pytest.mark.timeout(900)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("sagemaker") / "docs"
    make_corpus(folder, documents=6, pages=2)
    return folder


def test_one_job_of_two_hosts_makes_every_page_once_and_no_secret_leaks(
    tmp_path: Path, corpus: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from llm_ocr.launchers.core import api

    with aws_world(tmp_path / "jobs", corpus) as world, launcher_here(world, tmp_path, monkeypatch):
        env = world.env(tmp_path)
        # The dry run, then the launch, waited for, in one interpreter (tests/launchers/batch_cli.py).
        # Two hosts show what more would (each finds its shard; the last is not the first): a
        # third cost a job and a server more.
        dry, done = llm_ocr_batch([(sm_args("--dry-run", shards=2), {}), (sm_args("--wait", "--interval", "0.5", shards=2), {})],
                                  env, timeout=400)
        assert dry["code"] == 0, dry["stderr"]
        plan = json.loads(dry["stdout"])  # exactly one JSON object on stdout
        assert done["code"] == 0, done["stdout"] + done["stderr"]
        assert "every shard finished" in done["stdout"]

        # ONE Processing job (the dry run sent none), two hosts, nothing but plain settings in its environment.
        (sent,) = world.sagemaker.requests
        assert sent["ProcessingResources"]["ClusterConfig"] == {"InstanceCount": 2, "InstanceType": "ml.g6.xlarge",
                                                                 "VolumeSizeInGB": 50}
        assert sent["Environment"]["LLM_OCR_TASK_SHARDS"] == "2:0-1"
        assert "LLM_OCR_SHARD_INDEX" not in sent["Environment"]  # each host finds its shard itself
        assert "ProcessingOutputConfig" not in sent  # the output goes straight to S3
        assert sent["ProcessingInputs"][0]["S3Input"]["S3Uri"].startswith("s3://ocr/2024/_state/code/wheels/")
        assert sent["AppSpecification"]["ContainerArguments"] == ["run", INPUT, "--workers", "0", "--output", OUTPUT]
        assert {"Key": "llm-ocr-launch", "Value": sent["Environment"]["LLM_OCR_LAUNCH_ID"]} in sent["Tags"]
        # The dry run showed exactly the body the launch then sent (but for the launch id).
        (shown,) = plan["requests"]
        real_id = sent["Environment"]["LLM_OCR_LAUNCH_ID"]
        assert json.dumps(shown, sort_keys=True).replace(plan["launch_id"], real_id) == json.dumps(sent, sort_keys=True)

        # Every page of the input exactly once in each stage, every document assembled.
        for stage in ("extract", "describe"):
            rows = world.rows(stage)
            assert sorted((r["doc_id"], r["page"]) for r in rows) == expected_pages(corpus), stage
            assert {r["status"] for r in rows} == {"ok"}
        assert sorted(d["doc_id"] for d in world.rows("assemble")) == sorted(p.name for p in corpus.glob("*.pdf"))

        # The table from the record alone, one host's log from CloudWatch, a relaunch that does nothing.
        table = api.status(OUTPUT).to_dict()
        assert [row["state"] for row in table["shards"]] == ["done"] * 2
        assert table["totals"]["done"] == 12 and table["totals"]["cost_usd"] is not None
        logs, again = llm_ocr_batch([(["jobs", "logs", OUTPUT, "--shard", "1"], {}), (sm_args(shards=2), {})], env)
        assert logs["code"] == 0, logs["stderr"]
        assert "[extract shard 2/2] pages seen" in logs["stdout"]  # host algo-2 ran shard index 1
        assert "[extract shard 1/2]" not in logs["stdout"]
        assert again["code"] == 0 and "nothing to launch" in again["stdout"], again["stderr"]
        assert len(world.sagemaker.requests) == 1
        assert len(world.moto.list("ocr", "2024/_state/code/wheels/")) == 1  # the wheel went up once (none by the dry run)

        places = {
            "dry-run": dry["stdout"] + dry["stderr"],
            "launch output": done["stdout"] + done["stderr"] + again["stdout"] + again["stderr"],
            "requests": json.dumps(world.sagemaker.requests),
            "host output": world.sagemaker.log_text(),
            "CloudWatch": world.cloudwatch_text(),
            "status and logs": json.dumps(table) + logs["stdout"] + logs["stderr"],
            "output bucket": world.bucket_text("ocr"),
            "launch cache": "".join(p.read_text() for p in (tmp_path / "cache").rglob("*.json")),
        }
        assert places["CloudWatch"], "the hosts' logs should be in CloudWatch"
        leaked = [where for where, text in places.items() if PLANTED in text]
        assert not leaked, f"the AWS secret key leaked into {leaked}"


def test_a_lost_host_is_the_only_shard_relaunched_and_it_resumes(
    tmp_path: Path, corpus: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from llm_ocr.launchers.core import api

    # Host algo-2 (shard 1) serves slowly, algo-1 (shard 0) at once: shard 0 is done while shard 1
    # is still reading, and the kill waits for both, so shard 0's host has finished when algo-2 is
    # lost (on a loaded machine a kill timed by shard 1's progress alone could land before it had).
    slow = "--prefill-ms 2000 --slots 1"
    fast = {"algo-1": {"FAKE_VLLM_SIM_ARGS": f"--corpus {corpus} --instant"}}
    # Static shards: with work groups the fast host would read the slow one's free groups, and
    # the lost host's relaunch would have nothing to resume (tests/runners/test_stragglers_e2e.py).
    args = sm_args("--part-rows", "1", "--progress-interval", "0.3", "--no-steal", shards=2)
    with aws_world(tmp_path / "jobs", corpus, sim_args=slow, host_env=fast) as world, \
            launcher_here(world, tmp_path, monkeypatch):
        env = world.env(tmp_path)
        first = llm_ocr(*args, env=env)
        assert first.returncode == 0, first.stderr
        (job_name,) = world.sagemaker.jobs
        # Kill host algo-2 once shard 0 is done and shard 1 has stored some parts, before its marker.
        shard0_done = "2024/_state/assemble/done-00000-of-00002.json"
        wait_until(lambda: shard0_done in world.moto.list("ocr", "2024/_state/assemble/")
                   and [k for k in world.moto.list("ocr", "2024/extract/") if "part-00001-of-00002" in k],
                   timeout=300, period=0.1)
        assert "2024/_state/extract/done-00001-of-00002.json" not in world.moto.list("ocr", "2024/_state/extract/"), (
            "shard 1 finished before it could be killed")
        world.sagemaker.kill_host(job_name, 2)
        final = api.wait(OUTPUT, interval=0.3, live=False)
        assert not final.succeeded
        # SageMaker reports the job, not its hosts: shard 0's host finished, its job failed for host algo-2.
        assert {row.shard: row.kind for row in final.shards} == {0: "done", 1: "failed"}
        assert "algo-2" in (final.shards[1].message or "")
        before = len(world.rows("extract"))
        assert 0 < before < len(expected_pages(corpus))

        again = llm_ocr(*args, "--wait", "--interval", "0.5", env=env, timeout=400)
        assert again.returncode == 0, again.stdout + again.stderr
        relaunched = world.sagemaker.requests[1]
        assert relaunched["ProcessingResources"]["ClusterConfig"]["InstanceCount"] == 1
        assert relaunched["Environment"]["LLM_OCR_TASK_SHARDS"] == "2:1"  # its one host is shard 1
        for stage in ("extract", "describe"):
            assert sorted((r["doc_id"], r["page"]) for r in world.rows(stage)) == expected_pages(corpus), stage
        marker = json.loads(world.moto.read("ocr", "2024/_state/extract/done-00001-of-00002.json"))
        assert marker["pages"]["skipped"] > 0  # it resumed from the parts of the lost host
        table = api.status(OUTPUT, count=True)
        assert table.totals()["done"] == len(expected_pages(corpus)) and table.duplicates == 0
        assert table.shards[0].job_id == job_name and table.shards[1].job_id != job_name


def test_cancel_stops_the_job_and_every_host(tmp_path: Path, corpus: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from llm_ocr.launchers.core import api

    # The hosts' servers never become ready (tests/launchers/simulators.py): both hosts are running,
    # for certain, when the cancel lands, their llm-ocr waiting for its server as on a slow start.
    # With 3-second pages a machine at load 50 let the job finish first ("none was running").
    with aws_world(tmp_path / "jobs", corpus, sim_args=HELD_START) as world, launcher_here(world, tmp_path, monkeypatch):
        env = world.env(tmp_path)
        assert llm_ocr(*sm_args("--grace-period", "1", shards=2), env=env).returncode == 0
        (job,) = world.sagemaker.jobs.values()
        waiting.wait_until(lambda: len(job.hosts) == 2 and all(simulator_in(h.folder) for h in job.hosts),
                           "both hosts' model servers listen", interval=0.5)
        pids = [h.process.pid for h in job.hosts]
        # Follow shard 1's CloudWatch stream while the job runs: it must end when the job does.
        follow = subprocess.Popen([sys.executable, "-m", "llm_ocr.cli", "jobs", "logs", OUTPUT, "--shard", "1", "-f"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=str(REPO))
        wait_until(lambda: "(from SageMaker, task" in world.cloudwatch_text())
        # The cancel in this process (the launching machine already: launcher_here); the launch
        # and the follower above are the commands as a user runs them.
        cancelled = run_in_process("jobs", "cancel", OUTPUT)
        assert cancelled.returncode == 0, cancelled.stderr
        assert f"cancel sent to 1 job(s): {job.name}" in cancelled.stdout
        world.sagemaker.wait_all(60)
        assert job.status == "Stopped" and "SageMaker.StopProcessingJob" in world.sagemaker.calls
        assert not [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
        assert {row.state for row in api.status(OUTPUT).shards} == {"cancelled"}
        out, err = follow.communicate(timeout=60)
        assert follow.returncode == 0, err
        assert "shard 1 of 2 (from SageMaker, task 1 of 2)" in out and "received SIGTERM" in out  # host algo-2, to its end


def test_an_hf_output_gets_its_token_from_secrets_manager_by_name(
    tmp_path: Path, corpus: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    token = "hf_PLANTEDsmSecret0a1b2c3d4e5f6a7b8c9d0e1f"
    with FakeHub(tokens={token: "write"}) as hub:
        # The fake Hub answers LFS, not Xet, for Parquet parts (tests/fakes/fake_hub.py).
        job_env = {"HF_ENDPOINT": hub.url, "HF_HUB_DISABLE_TELEMETRY": "1", "HF_HUB_DISABLE_XET": "1"}
        with aws_world(tmp_path / "jobs", corpus, job_env=job_env) as world, launcher_here(world, tmp_path, monkeypatch):
            world.client("secretsmanager").create_secret(Name="llm-ocr/hf-token", SecretString=token)
            env = {**world.env(tmp_path), "HF_ENDPOINT": hub.url, "HF_TOKEN": token, "HF_HOME": str(tmp_path / "hf-home"),
                   "HF_HUB_DISABLE_XET": "1"}
            args = sm_args("--code-uri", "s3://ocr/code", "--aws-secret", "HF_TOKEN=llm-ocr/hf-token", "--wait",
                           "--interval", "0.5", shards=2, output="hf://datasets/tester/ocr")
            done = llm_ocr(*args, env=env, timeout=400)
            assert done.returncode == 0, done.stdout + done.stderr
            (sent,) = world.sagemaker.requests
            assert sent["Environment"]["LLM_OCR_AWS_SECRET_HF_TOKEN"] == "llm-ocr/hf-token"
            assert "HF_TOKEN" not in sent["Environment"]
            assert sent["AppSpecification"]["ContainerEntrypoint"][3].endswith(".whl[hub,s3,sagemaker]")
            files = hub.files("tester/ocr")
            assert sum(name.startswith("extract/") and name.endswith(".parquet") for name in files) >= 2
            assert "fetched HF_TOKEN from AWS Secrets Manager" in world.sagemaker.log_text()
            places = {
                "launch output": done.stdout + done.stderr,
                "requests": json.dumps(world.sagemaker.requests),
                "CloudWatch": world.cloudwatch_text() + world.sagemaker.log_text(),
                "output repo": "\n".join(data.decode("utf-8", "replace") for data in files.values()),
            }
            leaked = [where for where, text in places.items() if token in text]
            assert not leaked, f"the token leaked into {leaked}"


CONTRACT_JOB_KEYS = {"shard_index", "num_shards", "name", "image", "command", "env", "secrets", "hardware", "timeout_s", "attempts"}


def test_dry_run_contract_splitting_multi_gpu_and_ways_of_shipping_the_code(tmp_path: Path, corpus: Path) -> None:
    with aws_world(tmp_path / "jobs", corpus) as world:
        results = llm_ocr_batch([
            (sm_args("--dry-run", "--pages", "4000", shards=3), {}),
            (sm_args("--dry-run", "--image", "1234.dkr.ecr.us-east-1.amazonaws.com/llm-ocr:1", shards=2), {}),
            (["launch", "sagemaker", "--stage", "assemble", "--output", OUTPUT, "--num-shards", "2", "--role", ROLE,
              "--dry-run"], {}),
            (sm_args("--dry-run", shards=250), {}),
            (sm_args("--dry-run", "--instance-type", "ml.g6e.12xlarge", shards=2), {}),
        ], world.env(tmp_path))
        assert world.sagemaker.requests == [] and not world.moto.list("ocr", "")  # a dry run changes nothing
    plans = []
    for result in results:
        assert result["code"] == 0, result["stderr"]
        plans.append(json.loads(result["stdout"]))
    for plan in plans:
        assert set(plan) == {"platform", "launch_id", "jobs", "requests"} and plan["platform"] == "sagemaker"
        for index, job in enumerate(plan["jobs"]):
            assert set(job) == CONTRACT_JOB_KEYS and job["shard_index"] == index
            assert job["secrets"] == [] and job["attempts"] == 1
            assert not any(k.startswith("AWS_SECRET") or k == "AWS_ACCESS_KEY_ID" for k in job["env"])
    stock, prebuilt, assemble, many, multi = plans

    # Stock image: the vLLM DLC, the wheel from S3 installed, then the plain llm-ocr invocation.
    (body,) = stock["requests"]
    assert body["AppSpecification"]["ImageUri"].startswith(f"763104351884.dkr.ecr.{REGION}.amazonaws.com/vllm:")
    assert body["AppSpecification"]["ContainerEntrypoint"][:2] == ["python3", "-c"]
    assert body["AppSpecification"]["ContainerEntrypoint"][-1] == "llm-ocr"
    assert stock["jobs"][1]["command"][-6:] == ["llm-ocr", "run", INPUT, "--workers", "0", "--output", OUTPUT][-6:]
    assert body["StoppingCondition"]["MaxRuntimeInSeconds"] == stock["jobs"][0]["timeout_s"] == 5400
    assert stock["jobs"][0]["env"]["LLM_OCR_GPU_PRESET"] == "l4-24gb" and stock["jobs"][0]["env"]["LLM_OCR_ENGINE"] == "vllm"
    assert stock["jobs"][0]["env"] == body["Environment"]  # what each host gets
    # A prebuilt image: llm-ocr is the entrypoint, nothing to download.
    (body,) = prebuilt["requests"]
    assert body["AppSpecification"]["ContainerEntrypoint"] == ["llm-ocr"] and "ProcessingInputs" not in body
    # Assemble: a CPU instance, no model server.
    (body,) = assemble["requests"]
    assert body["ProcessingResources"]["ClusterConfig"]["InstanceType"] == "ml.m5.xlarge"
    assert "LLM_OCR_ENGINE" not in body["Environment"] and body["AppSpecification"]["ContainerArguments"][0] == "assemble"
    # 250 shards: three jobs of at most 100 hosts, each told which shards its hosts are.
    assert [r["ProcessingResources"]["ClusterConfig"]["InstanceCount"] for r in many["requests"]] == [100, 100, 50]
    assert [r["Environment"]["LLM_OCR_TASK_SHARDS"] for r in many["requests"]] == ["250:0-99", "250:100-199", "250:200-249"]
    assert len({r["ProcessingJobName"] for r in many["requests"]}) == 3 and len(many["jobs"]) == 250
    # 4x L40S: the per-GPU preset, four servers, the whole machine's price.
    (body,) = multi["requests"]
    assert body["ProcessingResources"]["ClusterConfig"]["InstanceType"] == "ml.g6e.12xlarge"
    assert body["Environment"]["LLM_OCR_GPU_PRESET"] == "l40s-48gb" and body["Environment"]["LLM_OCR_GPUS"] == "4"
    assert float(body["Environment"]["LLM_OCR_GPU_PRICE_PER_HOUR"]) > 10


BAD_INPUT = [
    ("no region", {"env": {"AWS_DEFAULT_REGION": "", "AWS_REGION": ""}}, "no AWS region"),
    ("no role", {"drop": "--role"}, "no execution role: pass --role"),
    ("not a role ARN", {"args": ["--role", "ocr-role"]}, "is not an IAM role ARN"),
    ("role not in the account", {"args": ["--role", "arn:aws:iam::123456789012:role/missing"]}, "no such role"),
    ("training-only type", {"args": ["--instance-type", "ml.p4d.24xlarge"]}, "ml.p4d.24xlarge is for SageMaker Training only"),
    ("unknown type", {"args": ["--instance-type", "ml.g9.xlarge"]}, "unknown --instance-type 'ml.g9.xlarge'"),
    ("CPU type for a model", {"args": ["--instance-type", "ml.m5.xlarge"]}, "ml.m5.xlarge has no GPU"),
    ("over the account's quota", {"args": ["--instance-type", "ml.g6e.12xlarge"], "shards": 3},
     "'ml.g6e.12xlarge for processing job usage' quota in us-east-1 is 2"),
    ("environment value too long", {"args": ["--env", "NOTE=" + "x" * 300]},
     "Environment['NOTE'] is 300 characters long; SageMaker allows at most 256"),
    ("too many variables", {"args": [a for i in range(95) for a in ("--env", f"V{i}=1")]},
     "entries; SageMaker allows at most 100"),
    ("argument too long", {"args": ["--describe-prompt", "p" * 300]}, "ContainerArguments[5] is 300 characters long"),
    ("output that cannot be written", {"output": "s3://no-such-bucket/out"}, "cannot write to s3://no-such-bucket/out"),
    ("a local secret", {"args": ["--secret", "AWS_SECRET_ACCESS_KEY"]}, "SageMaker jobs have no secrets channel"),
    ("the AWS key in a stage option", {"args": ["--describe-prompt", f"key {PLANTED}"]},
     "your AWS secret key or session token would appear in the Processing job request"),
    ("hf output without a token secret", {"output": "hf://datasets/me/ocr", "args": ["--code-uri", "s3://ocr/c"]},
     "pass --aws-secret HF_TOKEN=llm-ocr/hf-token"),
    ("a secret that does not exist", {"args": ["--aws-secret", "HF_TOKEN=llm-ocr/none"]}, "no secret 'llm-ocr/none'"),
]


def test_bad_input_fails_before_anything_is_submitted(tmp_path: Path, corpus: Path) -> None:
    with aws_world(tmp_path / "jobs", corpus, quotas={"ml.g6e.12xlarge": 2}) as world:
        cases = []
        for _, change, _ in BAD_INPUT:
            args = sm_args(shards=change.get("shards", 2), output=change.get("output", OUTPUT))
            if change.get("drop"):
                at = args.index(change["drop"])
                del args[at:at + 2]
            cases.append((args + change.get("args", []), change.get("env", {})))
        results = llm_ocr_batch(cases, world.env(tmp_path))
        wrong = []
        for (case, _, message), result in zip(BAD_INPUT, results):
            if result["code"] != 2 or message not in result["stderr"]:
                wrong.append(f"{case}: exit {result['code']}, {result['stderr'][-700:]}")
            if PLANTED in result["stdout"] + result["stderr"]:
                wrong.append(f"{case}: the secret key is in the output")
        assert not wrong, "\n".join(wrong)
        assert "ml.g6e.xlarge" in results[4]["stderr"] and "ml.g5.xlarge" in results[4]["stderr"]  # what to use instead
        assert world.sagemaker.requests == [] and "SageMaker.CreateProcessingJob" not in world.sagemaker.calls
        assert not world.moto.list("ocr", "2024/_state/code"), "nothing is uploaded either"
