"""Cloud Run's pieces in isolation: which shard a task runs, shards sized under the 1-hour task
limit, when the job must be updated, and the task resources Cloud Run accepts."""

from __future__ import annotations

from pathlib import Path

import pytest

from llm_ocr.container.shard_index import detect_shard, parse_task_shards, task_shards_value
from llm_ocr.launchers.cloud_run.job import CodeVolume, job_body, run_body, task_resources, template_changed
from llm_ocr.launchers.core.sizing import STARTUP_S, fit_timeout, shard_timeout
from llm_ocr.launchers.core.spec import LaunchError, ShardSpec

NO_SAGEMAKER = Path("/nonexistent/resourceconfig.json")


def test_a_relaunched_task_finds_its_shard_from_the_list(monkeypatch: pytest.MonkeyPatch) -> None:
    assert task_shards_value(20, [1, 5, 6, 7, 12]) == "20:1,5-7,12"
    assert parse_task_shards("20:1,5-7,12") == (20, [1, 5, 6, 7, 12])
    monkeypatch.setenv("CLOUD_RUN_TASK_COUNT", "5")
    monkeypatch.setenv("CLOUD_RUN_TASK_INDEX", "2")
    assert detect_shard(NO_SAGEMAKER)[:2] == (5, 2)  # a first launch: the task index is the shard
    monkeypatch.setenv("LLM_OCR_TASK_SHARDS", "20:1,5-7,12")
    assert detect_shard(NO_SAGEMAKER)[:2] == (20, 6)  # task 2 of a relaunch of shards 1, 5-7, 12
    monkeypatch.setenv("CLOUD_RUN_TASK_COUNT", "4")
    with pytest.raises(ValueError, match="lists 5 shard"):
        detect_shard(NO_SAGEMAKER)
    for bad in ("1,5", "20:", "20:25", "x:1"):
        with pytest.raises(ValueError):
            parse_task_shards(bad)


def test_shards_are_sized_under_the_task_limit_with_numbers() -> None:
    hour = 3600
    # No limit: the timeout is shard_timeout's, as before.
    assert fit_timeout(4000, 2, 0.7, limit_s=None, attempts=4) == (shard_timeout(4000, 2, 0.7), [])
    # 400 pages a shard at 0.7 pages/s: 20 min start-up + 19 min x 2 fits the hour.
    assert fit_timeout(800, 2, 0.7, limit_s=hour, attempts=4) == (hour, [])
    # 2000 pages a shard: 48 min of work, more than one hour's attempt can do with margin, but
    # fits 2 attempts of 40 useful minutes: a warning with the numbers and the shard count that fits.
    timeout, warnings = fit_timeout(4000, 2, 0.7, limit_s=hour, attempts=4)
    assert timeout == hour
    (warning,) = warnings
    assert "a shard of 2000 pages needs ~115 min" in warning and "--num-shards 5 or more" in warning
    assert (hour - STARTUP_S) / 2 * 0.7 * 5 >= 4000 > (hour - STARTUP_S) / 2 * 0.7 * 4  # 5 is the least that fits
    # 50000 pages a shard cannot finish even in 4 attempts: refused, with the shard count to use.
    with pytest.raises(ValueError, match=r"a shard of 50000 pages needs ~1190 min .* --num-shards 120 or more"):
        fit_timeout(100_000, 2, 0.7, limit_s=hour, attempts=4)
    with pytest.raises(ValueError, match="more than the platform's limit of 3600s"):
        fit_timeout(None, 2, 0.7, limit_s=hour, attempts=4, requested_s=2 * hour)
    assert fit_timeout(None, 2, 0.7, limit_s=hour, attempts=4) == (hour, [])  # unknown pages: the limit


def _spec(image: str = "img:1", env: dict[str, str] | None = None) -> ShardSpec:
    return ShardSpec(0, 2, "llm-ocr-run-00000-of-00002", image, ["sh", "-c", "x", "/w.whl", "llm-ocr", "run", "gs://a", "--output", "gs://b"],
                     env or {"LLM_OCR_LAUNCH_ID": "L1", "A": "1"}, {}, "nvidia-l4", 3600, 4, {}, {"HF_TOKEN": "hf-token:latest"})


def _job(spec: ShardSpec, **changes: object) -> dict:
    options = dict(command_words=4, resources=task_resources(None, None, None, needs_model=True, stage="run"), task_count=2,
                   parallelism=None, service_account=None, code=CodeVolume("b", "llm-ocr-code", "/llm-ocr-code"))
    options.update(changes)
    return job_body(spec, **options)  # type: ignore[arg-type]


def test_the_job_is_updated_only_when_its_template_changed() -> None:
    desired = _job(_spec())
    # What the API gives back: the same, plus fields it fills in itself.
    echo = {**desired, "name": "projects/p/locations/l/jobs/j", "generation": "3"}
    echo["template"] = {**desired["template"], "template": {**desired["template"]["template"], "executionEnvironment": "GEN2"}}
    assert not template_changed(desired, echo)
    # The launch id is not in the template (a new launch alone changes nothing)...
    assert not template_changed(_job(_spec(env={"LLM_OCR_LAUNCH_ID": "L2", "A": "1"})), echo)
    # ...but an image, an env value, the task count, or a field removed since do.
    assert template_changed(_job(_spec(image="img:2")), echo)
    assert template_changed(_job(_spec(env={"A": "2"})), echo)
    assert template_changed(_job(_spec(), task_count=1), echo)
    with_account = _job(_spec(), service_account="sa@p.iam.gserviceaccount.com")
    assert template_changed(desired, with_account)  # the account was dropped: the digest tells
    # Someone edited the job by hand (same digest, another image): updated back.
    edited = {**echo, "template": {**echo["template"], "template": {**echo["template"]["template"],
                                                                    "containers": [{**desired["template"]["template"]["containers"][0], "image": "other"}]}}}
    assert template_changed(desired, edited)


def test_task_template_has_the_gpu_and_secret_references_and_the_run_the_rest() -> None:
    spec = _spec()
    task = _job(spec)["template"]["template"]
    (container,) = task["containers"]
    assert container["resources"]["limits"] == {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "1"}
    assert task["nodeSelector"] == {"accelerator": "nvidia-l4"} and task["gpuZonalRedundancyDisabled"] is True
    assert (task["maxRetries"], task["timeout"]) == (3, "3600s")
    assert {"name": "HF_TOKEN", "valueSource": {"secretKeyRef": {"secret": "hf-token", "version": "latest"}}} in container["env"]
    assert all(e["name"] != "LLM_OCR_LAUNCH_ID" for e in container["env"])
    assert (container["command"], container["args"]) == (spec.command[:4], spec.command[4:])
    overrides = run_body(spec, command_words=4, shards=[1, 3])["overrides"]
    assert overrides["taskCount"] == 2 and overrides["containerOverrides"][0]["args"] == spec.command[4:]
    assert overrides["containerOverrides"][0]["env"] == [{"name": "LLM_OCR_LAUNCH_ID", "value": "L1"},
                                                         {"name": "LLM_OCR_TASK_SHARDS", "value": "2:1,3"}]


@pytest.mark.parametrize(("gpu", "cpu", "memory", "message"), [
    ("nvidia-a100", None, None, "--gpu 'nvidia-a100' is not a GPU Cloud Run Jobs offer: choose nvidia-l4"),
    (None, 10, None, "a Cloud Run task has at most 8 vCPU and 32 GiB"),
    (None, None, "64Gi", "a Cloud Run task has at most 8 vCPU and 32 GiB"),
    (None, 2, "8Gi", "needs at least 4 vCPU and 16 GiB"),
    (None, 4, "24Gi", "Cloud Run needs 2 to 16 GiB for 4 vCPU"),
    ("none", None, None, "needs a GPU"),
    (None, None, "lots", "write it like 16Gi"),
])
def test_task_resources_cloud_run_refuses(gpu: str | None, cpu: int | None, memory: str | None, message: str) -> None:
    with pytest.raises(LaunchError, match=message.replace("(", r"\(").replace(")", r"\)")):
        task_resources(gpu, cpu, memory, needs_model=True, stage="run")
