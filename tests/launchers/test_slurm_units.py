"""The shard a process takes from each engine's own variables, and the parts of the Slurm launcher
that need no cluster: the script (parsed by bash itself), the squeue lines and the task records."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from llm_ocr.commands.launch import _launch_parser
from llm_ocr.container.shard_index import PlatformError, detect_shard
from llm_ocr.launchers import PLATFORMS, platform_class
from llm_ocr.launchers.slurm.script import parse_slurm_time, slurm_time
from llm_ocr.launchers.slurm.state import record_state, squeue_states
from tests.waiting import HANG_GUARD_S

NO_SAGEMAKER = Path("/nonexistent/resourceconfig.json")
ENGINE_PREFIXES = ("SLURM_", "JOB_COMPLETION_INDEX", "AWS_BATCH_", "BATCH_TASK_", "CLOUD_RUN_", "LLM_OCR_")


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in list(os.environ):
        if name.startswith(ENGINE_PREFIXES):
            monkeypatch.delenv(name)
    return monkeypatch


@pytest.mark.parametrize(("variables", "given", "found"), [
    # A Slurm array 0-3: the task id is the shard, the array's size the count.
    ({"SLURM_ARRAY_TASK_ID": "2", "SLURM_ARRAY_TASK_COUNT": "4", "SLURM_ARRAY_TASK_MIN": "0",
      "SLURM_ARRAY_TASK_MAX": "3"}, None, (4, 2, "Slurm array task 2")),
    # A relaunch of shards 3 and 7 of 8 (--array=3,7): the count is given.
    ({"SLURM_ARRAY_TASK_ID": "7", "SLURM_ARRAY_TASK_COUNT": "2", "SLURM_ARRAY_TASK_MIN": "3",
      "SLURM_ARRAY_TASK_MAX": "7"}, 8, (8, 7, "Slurm array task 7")),
    ({"JOB_COMPLETION_INDEX": "3"}, 5, (5, 3, "Kubernetes Indexed Job")),
    # A relaunch through a launcher's list: index 1 runs the second shard listed.
    ({"JOB_COMPLETION_INDEX": "1", "LLM_OCR_TASK_SHARDS": "10:4,8"}, None, (10, 8, "Kubernetes Indexed Job, task 1 of 2")),
    ({"AWS_BATCH_JOB_ARRAY_INDEX": "3", "AWS_BATCH_JOB_ARRAY_SIZE": "4"}, None, (4, 3, "AWS Batch array job")),
    ({"AWS_BATCH_JOB_ARRAY_INDEX": "3"}, 6, (6, 3, "AWS Batch array job")),
    ({"BATCH_TASK_INDEX": "0", "BATCH_TASK_COUNT": "2"}, None, (2, 0, "Google Cloud Batch")),
    # The given count wins over the platform's: four tasks running shards 0-3 of 8.
    ({"CLOUD_RUN_TASK_INDEX": "1", "CLOUD_RUN_TASK_COUNT": "4"}, 8, (8, 1, "Cloud Run")),
    ({}, 8, (8, 0, "default")),
])
def test_each_engine_gives_the_shard_in_its_own_variables(
    clean_env: pytest.MonkeyPatch, variables: dict[str, str], given: int | None, found: tuple[int, int, str]
) -> None:
    for name, value in variables.items():
        clean_env.setenv(name, value)
    assert detect_shard(NO_SAGEMAKER, given) == found


@pytest.mark.parametrize(("variables", "given", "message"), [
    ({"JOB_COMPLETION_INDEX": "3"}, None,
     ("JOB_COMPLETION_INDEX=3 gives this task's index but not the shard count (a Job does not pass its completions to "
      "pods): set LLM_OCR_NUM_SHARDS=N")),
    ({"AWS_BATCH_JOB_ARRAY_INDEX": "1"}, None, "(AWS_BATCH_JOB_ARRAY_SIZE is not set): set LLM_OCR_NUM_SHARDS=N"),
    # 1-based ids: the count cannot be the array's, and the index would run past it.
    ({"SLURM_ARRAY_TASK_ID": "8", "SLURM_ARRAY_TASK_COUNT": "8", "SLURM_ARRAY_TASK_MIN": "1",
      "SLURM_ARRAY_TASK_MAX": "8"}, None, "are not 0..N-1, so they do not say how many shards there are"),
    ({"JOB_COMPLETION_INDEX": "3"}, 3, "Kubernetes Indexed Job gives index 3, out of range for 3 shard(s)"),
    ({"BATCH_TASK_INDEX": "2", "BATCH_TASK_COUNT": "2"}, None, "out of range for 2 shard(s) (the count from the platform's"),
    ({"SLURM_ARRAY_TASK_ID": "x"}, 4, "SLURM_ARRAY_TASK_ID='x' is not a whole number"),
])
def test_an_index_without_a_usable_count_is_an_error_not_a_guess(
    clean_env: pytest.MonkeyPatch, variables: dict[str, str], given: int | None, message: str
) -> None:
    for name, value in variables.items():
        clean_env.setenv(name, value)
    with pytest.raises(PlatformError) as caught:
        detect_shard(NO_SAGEMAKER, given)
    assert message in str(caught.value)


def _dry_run(*args: str, tmp: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LLM_OCR_", "SLURM_", "SBATCH_"))}
    env["XDG_CACHE_HOME"] = str(tmp / "cache")
    done = subprocess.run([sys.executable, "-m", "llm_ocr.cli", "launch", "slurm", *args, "--dry-run", "--offline"],
                          capture_output=True, text=True, env=env, cwd=tmp, timeout=HANG_GUARD_S)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_the_script_carries_every_option_and_bash_parses_it(tmp_path: Path) -> None:
    plan = _dry_run("/data/scans", "--output", "/data/ocr", "--num-shards", "16", "--partition", "gpu", "--account",
                    "proj1", "--qos", "high", "--gres", "gpu:a100:2", "--cpus-per-task", "16", "--mem", "120G",
                    "--parallelism", "4", "--timeout", "6h", "--requeue-before", "600", "--attempts", "5",
                    "--module", "cuda/12.4", "--setup", "export HF_HOME=/scratch/hf",
                    "--sbatch-option", "--constraint=a100", "--image", "/images/llm-ocr.sqsh", "--describe-model", "my/model",
                    tmp=tmp_path)
    (request,) = plan["requests"]
    script = request["script"]
    directives = [line.removeprefix("#SBATCH ") for line in script.splitlines() if line.startswith("#SBATCH ")]
    assert directives == [
        "--job-name=llm-ocr-run", "--array=0-15%4", "--gres=gpu:a100:2", "--cpus-per-task=16", "--mem=120G",
        "--partition=gpu", "--account=proj1", "--qos=high", "--time=0-06:00:00",
        f"--output=/data/ocr/_state/slurm/{plan['launch_id']}/%A_%a.log", "--open-mode=append", "--requeue",
        "--signal=B:USR1@600", f"--chdir={tmp_path}", "--constraint=a100"]
    assert "module load cuda/12.4\nexport HF_HOME=/scratch/hf\n" in script  # no venv: the image has llm-ocr
    assert ("srun --ntasks=1 --container-image=/images/llm-ocr.sqsh "
            f"--container-mounts=/data/ocr:/data/ocr,/data/scans:/data/scans,{tmp_path}:{tmp_path} "
            f"--container-workdir={tmp_path} "
            "llm-ocr run /data/scans --describe-model my/model --output /data/ocr &") in script
    assert "export LLM_OCR_NUM_SHARDS=16\n" in script and "attempts=5\n" in script
    (job, *_) = plan["jobs"]
    assert (job["hardware"], job["timeout_s"], job["attempts"], job["image"]) == ("2x GPU (gpu)", 21600, 5,
                                                                                 "/images/llm-ocr.sqsh")
    path = tmp_path / "job.sbatch"
    path.write_text(script)
    syntax = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
    assert syntax.returncode == 0, syntax.stderr


def test_a_cpu_stage_asks_for_no_gpu_and_an_object_store_output_needs_a_log_folder(tmp_path: Path) -> None:
    plan = _dry_run("--output", "/data/ocr", "--num-shards", "2", "--stage", "assemble", tmp=tmp_path)
    script = plan["requests"][0]["script"]
    assert "--gpus" not in script and "--gres" not in script and plan["jobs"][0]["hardware"] == "cpu"
    assert f"source {Path(sys.prefix)}/bin/activate\n" in script  # the launcher's own venv by default
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LLM_OCR_", "SLURM_"))}
    done = subprocess.run([sys.executable, "-m", "llm_ocr.cli", "launch", "slurm", "s3://bucket/scans", "--output",
                           "s3://bucket/ocr", "--num-shards", "2", "--dry-run", "--offline"],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=HANG_GUARD_S)
    assert done.returncode == 2 and "pass --log-dir DIR" in done.stderr


def test_squeue_lines_become_task_states() -> None:
    # `squeue -h -r -t all -o '%F|%K|%A|%T|%r|%M'` lines as Slurm 22.05 printed them here.
    states = squeue_states("\n".join([
        "1|2|1|COMPLETED|None|0:10",
        "1|0|2|RUNNING|None|1:02:03",
        "7|3|9|PENDING|PartitionTimeLimit|0:00",
        "7|4|10|PENDING|BeginTime|0:00",
        "8|0|11|CANCELLED by 0|None|0:05",
        "9|N/A|12|RUNNING|None|0:01",  # not an array task: not ours
    ]))
    assert {k: (s.phase, s.raw, s.running_s) for k, s in states.items()} == {
        "1_2": ("succeeded", "COMPLETED", 10), "1_0": ("running", "RUNNING", 3723),
        "7_3": ("pending", "PENDING (PartitionTimeLimit)", None), "7_4": ("pending", "PENDING (BeginTime)", None),
        "8_0": ("cancelled", "CANCELLED", 5)}
    assert "will not start: PartitionTimeLimit" in (states["7_3"].message or "") and states["7_4"].message is None


def test_task_records_tell_the_state_once_squeue_has_forgotten_it() -> None:
    start = {"event": "start", "task": "5_1", "attempt": 1, "time": 100, "host": "node7"}
    exited = {"event": "exit", "task": "5_1", "attempt": 1, "time": 160, "code": 137, "stop": ""}
    requeue = {"event": "requeue", "task": "5_1", "attempt": 1, "time": 160, "why": "exit status 137"}
    again = {"event": "start", "task": "5_1", "attempt": 2, "time": 200, "host": "node8"}
    done = {"event": "exit", "task": "5_1", "attempt": 2, "time": 230, "code": 0, "stop": ""}
    other = {"event": "start", "task": "4_1", "attempt": 1, "time": 1}  # an earlier launch's task of shard 1
    assert (record_state("5_1", [start, exited, requeue, again, done]).phase,
            record_state("5_1", [start, exited, requeue, again, done]).running_s) == ("succeeded", 90)
    lost = record_state("5_1", [other, start, exited, requeue, again])
    assert lost.phase == "failed" and "attempt 2 on node8 ended without recording its exit" in (lost.message or "")
    assert record_state("5_1", [start, exited]).message == "attempt 1 exited 137"
    assert record_state("5_1", [other]).phase == "unknown"


def test_slurm_durations() -> None:
    assert [slurm_time(s) for s in (1, 60, 61, 3600, 21600, 90000)] == [
        "0-00:01:00", "0-00:01:00", "0-00:02:00", "0-01:00:00", "0-06:00:00", "1-01:00:00"]
    assert [parse_slurm_time(t) for t in ("60", "1:00:00", "0:10", "1-00:00:00", "2-3", "infinite", "UNLIMITED")] == [
        3600, 3600, 10, 86400, 183600, None, None]


@pytest.mark.parametrize("platform", sorted(PLATFORMS))
def test_every_platforms_launch_help_renders(platform: str) -> None:
    # argparse formats each help with %: a bare "%" in an option's description breaks --help.
    text = _launch_parser(platform, platform_class(platform)).format_help()
    assert f"llm-ocr launch {platform} INPUT..." in text
