"""The Kubernetes launcher's objects without a cluster: the manifests against the real Kubernetes
OpenAPI schemas (``kubernetes-validate``, strict: unknown fields refused) for every release that
has the fields used, the fake API server refusing what the real one refuses (by value), and the
order of an index's pods."""

from __future__ import annotations

import base64
import copy
import hashlib
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from llm_ocr.launchers.core.spec import LaunchError, ShardSpec
from llm_ocr.launchers.k8s.manifest import PodShape, job_manifest, parse_secret_refs, parse_tolerations
from llm_ocr.launchers.k8s.state import attempt_order
from tests.conftest import REPO
from tests.fakes.fake_k8s import ApiError, FakeKubernetes, config_map_problems, job_problems
from tests.launchers.common import llm_ocr_batch

#: Kubernetes releases whose schemas the launcher's objects must pass: backoffLimitPerIndex and
#: FailIndex are GA from 1.33 (alpha from 1.28); kubernetes-validate ships schemas up to 1.37.
RELEASES = ["1.33", "1.34", "1.35", "1.36", "1.37"]
INPUTS = ["s3://scans/2024"]
BASE = ["--output", "s3://ocr/2024", "--num-shards", "4", "--dry-run", "--offline", "--yaml"]


def _offline_env(tmp: Path) -> dict[str, str]:
    """No kubeconfig, no cluster, no cloud credentials: an offline dry run needs none."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KUBE", "AWS_", "HF_", "LLM_OCR_"))}
    env.update(HOME=str(tmp), XDG_CACHE_HOME=str(tmp / "cache"))
    return env


@pytest.fixture(scope="module")
def manifests(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, Any]]]:
    """The objects ``--dry-run --offline --yaml`` prints for launches that use every option, by case."""
    tmp = tmp_path_factory.mktemp("k8s-manifests")
    cases = {
        "stock image, every option": (INPUTS, [
            "--namespace", "ocr", "--gpus-per-pod", "2", "--gpu-type", "L4", "--cpu", "8", "--memory", "32Gi",
            "--parallelism", "2", "--max-failed-shards", "1", "--node-selector", "cloud.google.com/gke-accelerator=nvidia-l4",
            "--toleration", "dedicated=gpu:NoSchedule", "--toleration", "spot", "--service-account", "ocr-jobs",
            "--secret-ref", "HF_TOKEN=hf-token", "--secret-ref", "AWS_SECRET_ACCESS_KEY=aws:secret-access-key",
            "--image-pull-secret", "registry", "--job-name", "scans-2024", "--attempts", "4", "--timeout", "2h",
            "--describe-model", "deepseek-ai/DeepSeek-OCR"]),
        "prebuilt image": (INPUTS, ["--image", "registry.example.com/llm-ocr:0.1.0"]),
        "assemble on CPU": ([], ["--stage", "assemble"]),
    }
    runs = llm_ocr_batch([(["launch", "k8s", *inputs, *BASE, *args], {}) for inputs, args in cases.values()],
                         _offline_env(tmp))
    found = {}
    for name, run in zip(cases, runs):
        assert run["code"] == 0, (name, run["stderr"])
        found[name] = list(yaml.safe_load_all(run["stdout"]))
    return found


def test_the_dry_run_yaml_is_the_code_and_one_indexed_job_as_asked(manifests: dict[str, list[dict[str, Any]]]) -> None:
    *maps, job = manifests["stock image, every option"]
    assert [m["kind"] for m in maps] == ["ConfigMap"] * len(maps) and maps and job["kind"] == "Job"
    # The ConfigMaps hold the wheel the pods' init container joins: the digest it checks is the parts'.
    init = job["spec"]["template"]["spec"]["initContainers"][0]
    wheel = b"".join(base64.b64decode(m["binaryData"][key]) for m in maps for key in sorted(m["binaryData"]))
    assert hashlib.sha256(wheel).hexdigest() == init["command"][-1] and wheel[:2] == b"PK"
    assert all(m["immutable"] is True for m in maps)
    spec = job["spec"]
    assert (spec["completionMode"], spec["completions"], spec["parallelism"], spec["backoffLimitPerIndex"],
            spec["maxFailedIndexes"]) == ("Indexed", 4, 2, 3, 1)
    pod = spec["template"]["spec"]
    container = pod["containers"][0]
    assert container["resources"] == {"requests": {"cpu": "8", "memory": "32Gi"},
                                      "limits": {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "2"}}
    env = {e["name"]: e for e in container["env"]}
    assert env["LLM_OCR_NUM_SHARDS"]["value"] == "4" and "LLM_OCR_SHARD_INDEX" not in env  # the index is the Job's
    assert env["HF_TOKEN"] == {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf-token", "key": "HF_TOKEN"}}}
    assert env["AWS_SECRET_ACCESS_KEY"]["valueFrom"]["secretKeyRef"] == {"name": "aws", "key": "secret-access-key"}
    assert pod["activeDeadlineSeconds"] == 7200 and pod["restartPolicy"] == "Never"
    assert pod["nodeSelector"] == {"cloud.google.com/gke-accelerator": "nvidia-l4"}
    assert {"key": "spot", "operator": "Exists"} in pod["tolerations"]
    assert {"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"} in pod["tolerations"]
    assert pod["serviceAccountName"] == "ocr-jobs" and pod["imagePullSecrets"] == [{"name": "registry"}]
    assert job["metadata"]["name"].startswith("scans-2024-") and job["metadata"]["namespace"] == "ocr"
    assert container["command"][-4:] == ["--describe-model", "deepseek-ai/DeepSeek-OCR", "--output", "s3://ocr/2024"]
    # A prebuilt image: llm-ocr itself, no code to join; assemble: no GPU, the CPU image.
    (prebuilt,) = manifests["prebuilt image"]
    pod = prebuilt["spec"]["template"]["spec"]
    assert pod["containers"][0]["command"][:2] == ["llm-ocr", "run"] and "initContainers" not in pod
    *_, assemble = manifests["assemble on CPU"]
    container = assemble["spec"]["template"]["spec"]["containers"][0]
    assert "resources" not in container and container["image"] == "python:3.12-slim"


@pytest.mark.parametrize("release", RELEASES)
def test_every_object_passes_the_kubernetes_openapi_schema(manifests: dict[str, list[dict[str, Any]]], release: str) -> None:
    for case, objects in manifests.items():
        for obj in objects:
            try:
                kubernetes_validate.validate(obj, release, strict=True)
            except kubernetes_validate.ValidationError as exc:
                pytest.fail(f"{case}: {obj['kind']} {obj['metadata']['name']} fails Kubernetes {release}'s schema: {exc.message}")


def test_a_release_without_backoff_limit_per_index_refuses_the_job(manifests: dict[str, list[dict[str, Any]]]) -> None:
    # The schema check can fail: in 1.27 a pod failure policy rule must have onPodConditions, and
    # there is no backoffLimitPerIndex at all.
    (job,) = manifests["prebuilt image"]
    with pytest.raises(kubernetes_validate.ValidationError, match="'onPodConditions' is a required property"):
        kubernetes_validate.validate(job, "1.27", strict=True)
    without_policy = copy.deepcopy(job)
    del without_policy["spec"]["podFailurePolicy"]
    with pytest.raises(kubernetes_validate.ValidationError, match="'backoffLimitPerIndex' was unexpected"):
        kubernetes_validate.validate(without_policy, "1.27", strict=True)


@pytest.mark.parametrize("page", ["stages.md", "platforms-kubernetes.md"])
def test_the_job_yamls_of_the_docs_pass_the_schemas(page: str) -> None:
    jobs = [doc for block in re.findall(r"```yaml\n(.*?)```", (REPO / "docs" / page).read_text(), re.S)
            if (doc := yaml.safe_load(block)).get("kind") == "Job"]
    assert jobs
    for job in jobs:
        for release in ("1.33", "1.37"):
            kubernetes_validate.validate(job, release, strict=True)
        assert job_problems(job) == []


def _spec(**changes: Any) -> ShardSpec:
    fields = dict(shard_index=0, num_shards=8, name="llm-ocr-run-00000-of-00008", image="img:1",
                  command=["llm-ocr", "run", "s3://a/b", "--output", "s3://c/d"], env={"LLM_OCR_NUM_SHARDS": "8"},
                  secrets={}, hardware="1x GPU", timeout_s=3600, attempts=3, labels={"llm-ocr-launch": "20261125-101010-abcd"})
    fields.update(changes)
    return ShardSpec(**fields)


def _job(shards: list[int] | None = None, **shape: Any) -> dict[str, Any]:
    pod = PodShape(namespace="ocr", gpus=1, secret_refs=parse_secret_refs(["AWS_SECRET_ACCESS_KEY=aws:secret"]), **shape)
    return job_manifest("llm-ocr-run-20261125-101010-abcd", "run", _spec(), shards if shards is not None else list(range(8)),
                        pod)


def test_a_relaunch_job_maps_its_indexes_to_the_unfinished_shards() -> None:
    job = _job([3, 7])
    env = {e["name"]: e.get("value") for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert job["spec"]["completions"] == 2 and env["LLM_OCR_TASK_SHARDS"] == "8:3,7" and env["LLM_OCR_NUM_SHARDS"] == "8"
    assert "LLM_OCR_TASK_SHARDS" not in {e["name"] for e in _job()["spec"]["template"]["spec"]["containers"][0]["env"]}
    for release in ("1.33", "1.37"):
        kubernetes_validate.validate(job, release, strict=True)


def _broken(change: Any) -> dict[str, Any]:
    job = copy.deepcopy(_job())
    change(job)
    return job


def _pod(job: dict[str, Any]) -> dict[str, Any]:
    return job["spec"]["template"]["spec"]


#: (what, how the launcher's Job is broken, what the fake answers): each as the real API server does.
REFUSED = [
    ("Indexed without completions", lambda j: j["spec"].pop("completions"), "spec.completions: Required value: when completion mode is Indexed"),
    ("backoffLimitPerIndex without Indexed", lambda j: j["spec"].pop("completionMode"), "spec.backoffLimitPerIndex: Invalid value: 2: requires indexed completion mode"),
    ("a name of 64 characters", lambda j: j["metadata"].update(name="x" * 64), "must be no more than 63 characters"),
    ("a name that is not DNS-1123", lambda j: j["metadata"].update(name="LLM_OCR_run"), "metadata.name: Invalid value: 'LLM_OCR_run'"),
    ("pods' hostnames too long", lambda j: j["metadata"].update(name="x" * 62), "will not able to create pod with invalid DNS label: " + "x" * 62 + "-7"),
    ("maxFailedIndexes above completions", lambda j: j["spec"].update(maxFailedIndexes=9), "must be less than or equal to completions"),
    ("maxFailedIndexes without backoffLimitPerIndex", lambda j: (j["spec"].update(maxFailedIndexes=1), j["spec"].pop("backoffLimitPerIndex"), j["spec"].pop("podFailurePolicy")), "spec.backoffLimitPerIndex: Required value: when maxFailedIndexes is specified"),
    ("FailIndex without backoffLimitPerIndex", lambda j: j["spec"].pop("backoffLimitPerIndex"), "requires the backoffLimitPerIndex to be set"),
    ("exit codes out of order", lambda j: j["spec"]["podFailurePolicy"]["rules"][1]["onExitCodes"].update(values=[2, 1]), "must be ordered and unique"),
    ("exit code 0 with In", lambda j: j["spec"]["podFailurePolicy"]["rules"][1]["onExitCodes"].update(values=[0, 2]), "must not be 0 for the In operator"),
    ("a policy with restartPolicy OnFailure", lambda j: _pod(j).update(restartPolicy="OnFailure"), "only \"Never\" is supported when podFailurePolicy is specified"),
    ("a GPU count that is not whole", lambda j: _pod(j)["containers"][0]["resources"]["limits"].update({"nvidia.com/gpu": "0.5"}), "must be an integer"),
    ("GPU requests unlike limits", lambda j: _pod(j)["containers"][0]["resources"].update(requests={"nvidia.com/gpu": "2"}), "must be equal to nvidia.com/gpu limit"),
    ("an env with a value and a reference", lambda j: _pod(j)["containers"][0]["env"][-1].update(value="x"), "may not be specified when `value` is not empty"),
    ("a toleration Exists with a value", lambda j: _pod(j)["tolerations"][0].update(value="x"), "value must be empty when `operator` is 'Exists'"),
    ("a mount of no volume", lambda j: _pod(j)["containers"][0]["volumeMounts"].append({"name": "nope", "mountPath": "/x"}), "volumeMounts[1].name: Not found: 'nope'"),
]


def test_the_launchers_job_passes_the_fakes_checks() -> None:
    assert job_problems(_job()) == []
    assert job_problems(_job([1, 5], cpu="4", memory="16Gi")) == []


@pytest.mark.parametrize(("what", "change", "message"), REFUSED, ids=[r[0] for r in REFUSED])
def test_the_fake_refuses_what_the_api_server_refuses(what: str, change: Any, message: str) -> None:
    problems = job_problems(_broken(change))
    assert any(message in p for p in problems), problems


def test_a_secret_value_inline_is_refused_through_the_real_client(tmp_path: Path) -> None:
    # The tripwire beyond the real server: the fake knows its Secrets' values and refuses a Job that
    # carries one in plain env. The real kubernetes client sends the Job; the 422 comes back as an
    # ApiException with the fake's message, as an invalid Job would from a real API server.
    from kubernetes import client, config

    secret = "PLANTEDinlineSecret0123456789"
    with FakeKubernetes(tokens={"t": "write"}, namespaces=("ocr",), secrets={("ocr", "aws"): {"secret": secret}},
                        workdir=tmp_path) as api:
        configuration = client.Configuration()
        config.load_kube_config(config_file=str(api.kubeconfig(tmp_path / "kubeconfig", "t", "ocr")),
                                client_configuration=configuration)
        batch = client.BatchV1Api(client.ApiClient(configuration))
        job = _job()
        _pod(job)["containers"][0]["env"].append({"name": "AWS_SECRET_ACCESS_KEY_COPY", "value": secret})
        with pytest.raises(client.exceptions.ApiException) as caught:
            batch.create_namespaced_job("ocr", job)
        assert caught.value.status == 422
        assert "fake: the value of Secret ocr/aws key secret inline" in json.loads(caught.value.body)["message"]
        same = _job([0])  # the same Job, the secret by reference: accepted (and run: its pod just exits)
        _pod(same)["containers"][0]["command"] = ["python3", "-c", "pass"]
        batch.create_namespaced_job("ocr", same)
        assert [r["path"] for r in api.calls("POST")] == ["/apis/batch/v1/namespaces/ocr/jobs"] * 2


def test_a_config_map_over_one_mebibyte_is_refused() -> None:
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "code"},
            "binaryData": {"part-000": base64.b64encode(b"x" * (1024 * 1024 + 1)).decode()}}
    assert any("may not be more than 1048576 bytes" in p for p in config_map_problems(body))
    body["binaryData"]["part-000"] = base64.b64encode(b"x" * 1024).decode()
    assert config_map_problems(body) == []


@pytest.mark.parametrize(("flags", "message"), [
    (["--toleration", "dedicated=gpu:Sometimes"], "the effect after ':' is one of NoSchedule, PreferNoSchedule, NoExecute"),
    (["--secret-ref", "HF_TOKEN"], "write NAME=SECRET[:KEY]"),
    (["--secret-ref", "HF_TOKEN=Not_A_Secret"], "--secret-ref secret 'Not_A_Secret'"),
])
def test_bad_option_values_are_refused_with_what_to_write(flags: list[str], message: str) -> None:
    parse = parse_tolerations if flags[0] == "--toleration" else parse_secret_refs
    with pytest.raises(LaunchError) as caught:
        parse(flags[1:])
    assert message in str(caught.value)


def test_an_indexs_pods_are_ordered_by_the_failures_counted_before_each() -> None:
    # Creation times have whole seconds: a retry made in the same second as the pod it replaces
    # sorts after it by the failure count the controller wrote on it.
    def pod(name: str, failures: int, ignored: int = 0) -> dict[str, Any]:
        return {"metadata": {"name": name, "creationTimestamp": "2026-11-25T10:00:00Z", "annotations": {
            "batch.kubernetes.io/job-index-failure-count": str(failures),
            "batch.kubernetes.io/job-index-ignored-failure-count": str(ignored)}}}

    pods = [pod("job-1-zzzzz", 0), pod("job-1-aaaaa", 1), pod("job-1-mmmmm", 1, 1)]
    assert [p["metadata"]["name"] for p in sorted(pods, key=attempt_order)] == ["job-1-zzzzz", "job-1-aaaaa", "job-1-mmmmm"]


def test_api_errors_carry_the_status_the_client_reads() -> None:
    error = ApiError(404, "NotFound", 'jobs.batch "x" not found')
    assert error.status()["code"] == 404 and error.status()["message"] == 'jobs.batch "x" not found'


#: A container whose process leaves a model server behind as llm-ocr's do: a child in a session of
#: its own, re-parented (double fork), so it is no descendant of the container's process; then
#: both run until stopped. The child writes its pid once it runs.
_LEAVES_A_CHILD = """
import os, sys, time
if os.fork() == 0:
    os.setsid()
    if os.fork():
        os._exit(0)
    with open(sys.argv[1] + ".tmp", "w") as f:
        f.write(str(os.getpid()))
    os.rename(sys.argv[1] + ".tmp", sys.argv[1])
    while True:
        time.sleep(60)
os.wait()
while True:
    time.sleep(60)
"""


def test_an_ended_fake_cluster_leaves_no_pod_process_and_no_controller(tmp_path: Path) -> None:
    # A test that failed mid-run once left its pods writing into the next test's output: the Job
    # controller outlived the fake and retried the pods it had killed, and a pod's re-parented
    # processes were not found from its container's process tree. When the fake has stopped,
    # nothing it started runs and its controllers have ended.
    import threading

    import psutil

    from tests import waiting

    pid_file = tmp_path / "child.pid"
    job = _job([0])  # retried up to 3 times per index: a killed pod would be started again
    container = _pod(job)["containers"][0]
    container["command"] = [sys.executable, "-c", _LEAVES_A_CHILD, str(pid_file)]
    with FakeKubernetes(tokens={"t": "write"}, namespaces=("ocr",), secrets={("ocr", "aws"): {"secret": "s"}},
                        workdir=tmp_path) as api:
        api._create_job("ocr", job)
        waiting.wait_until(pid_file.exists, "the pod's re-parented child runs")
        (fake_job,) = api.all_jobs
    child = int(pid_file.read_text())
    assert not (psutil.pid_exists(child) and psutil.Process(child).status() != psutil.STATUS_ZOMBIE), \
        "the pod's child outlived the cluster"
    assert not [t.name for t in threading.enumerate() if t.name == f"fake-job-{fake_job.name}"], "its Job controller runs on"
    assert len(fake_job.pods) == 1 and fake_job.pods[0].phase == "Failed"  # stopped, never retried
