"""What the real platforms would refuse or get wrong, caught before anything is uploaded: Cloud
Run's retry cap, a huggingface_hub too old for the Jobs API, a network failure told from a bad
token, offline dry runs (no network at all), and prices of the region launched in."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest

from llm_ocr.costs import sagemaker_price_note
from llm_ocr.launchers.core import api
from llm_ocr.launchers.core.spec import LaunchError
from llm_ocr.launchers.hf_jobs.adapter import check_jobs_api, is_network_error
from tests.conftest import REPO
from tests.fakes.fake_hub import FakeHub
from tests.launchers.common import llm_ocr_batch

#: Nothing listens here: every call to "the platform" fails as an unreachable network would.
NOWHERE = "http://127.0.0.1:9"


def _offline_env(tmp_path: Path) -> dict[str, str]:
    """A launching machine whose every endpoint is unreachable, with a token and AWS keys set."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "AWS_", "LLM_OCR_", "GOOGLE_", "CLOUDSDK_"))}
    env.update(PYTHONPATH=str(REPO), XDG_CACHE_HOME=str(tmp_path / "cache"), HF_HOME=str(tmp_path / "hf"),
               HF_ENDPOINT=NOWHERE, HF_TOKEN="hf_offlineTestToken1234567890", AWS_ENDPOINT_URL=NOWHERE,
               AWS_ACCESS_KEY_ID="AKIAOFFLINE", AWS_SECRET_ACCESS_KEY="offline-secret-key-1234567890",
               AWS_DEFAULT_REGION="eu-west-1", AWS_EC2_METADATA_DISABLED="true", LLM_OCR_CLOUD_RUN_ENDPOINT=NOWHERE,
               AWS_CONFIG_FILE=os.devnull, AWS_SHARED_CREDENTIALS_FILE=os.devnull)
    return env


PLATFORM_ARGS = {
    "hf-jobs": ["hf://datasets/me/scans", "--output", "hf://datasets/me/ocr", "--flavor", "l4x1", "--namespace", "me"],
    "sagemaker": ["s3://scans/2024", "--output", "s3://ocr/2024", "--role", "arn:aws:iam::123456789012:role/ocr",
                  "--region", "eu-west-1"],
    "cloud-run": ["gs://scans/pdfs", "--output", "gs://ocr/out", "--project", "p", "--region", "europe-west4"],
}


def test_offline_dry_runs_plan_without_the_network_and_say_what_they_skipped(tmp_path: Path) -> None:
    cases = [(["launch", platform, *args, "--num-shards", "2", "--dry-run", "--offline"], {})
             for platform, args in PLATFORM_ARGS.items()]
    online_args = [a for a in PLATFORM_ARGS["hf-jobs"] if a not in ("--namespace", "me")]  # so the token's user is asked
    cases += [(["launch", "hf-jobs", *online_args, "--num-shards", "2", "--dry-run"], {})]
    *offline, online = llm_ocr_batch(cases, _offline_env(tmp_path))
    for (argv, _), result in zip(cases, offline):
        assert result["code"] == 0, result["stderr"]
        plan = json.loads(result["stdout"])
        assert set(plan) == {"platform", "launch_id", "jobs", "requests"} and len(plan["jobs"]) == 2
        assert plan["requests"], argv
        assert "offline: not checked: that the INPUTs can be read" in result["stderr"]
    hf, sagemaker, cloud_run = (r["stderr"] for r in offline)
    assert "offline: not checked: the Hugging Face token and its namespace" in hf
    assert "offline: not checked: the AWS credentials and account" in sagemaker
    assert "offline: not checked: the Google Cloud credentials" in cloud_run
    # Without --offline the same machine cannot reach the Hub: it says so, and does not blame the token.
    assert online["code"] == 2
    assert "could not reach the Hugging Face Hub" in online["stderr"] and "token was refused" not in online["stderr"]


#: The platform options of PLATFORM_ARGS, for ``api.launch``.
PLATFORM_OPTIONS = {
    "hf-jobs": {"flavor": "l4x1", "namespace": "me"},
    "sagemaker": {"role": "arn:aws:iam::123456789012:role/ocr", "region": "eu-west-1"},
    "cloud-run": {"project": "p", "region": "europe-west4"},
}


def test_an_offline_dry_run_opens_no_connection(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Every connection and name lookup fails at once, as on a machine without a network, and is
    # recorded: a library that catches the failure and retries (google-auth asking the metadata
    # server for credentials when a gs:// folder is opened: 15 s of backoff) still shows here.
    tried: list[str] = []

    def unreachable(*args: object, **kwargs: object) -> None:
        tried.append(repr([a for a in args if not isinstance(a, socket.socket)][:2]))
        raise OSError("network is unreachable (test)")

    monkeypatch.setattr(socket.socket, "connect", unreachable)
    monkeypatch.setattr(socket.socket, "connect_ex", unreachable)
    monkeypatch.setattr(socket, "getaddrinfo", unreachable)
    for name, value in _offline_env(tmp_path).items():
        monkeypatch.setenv(name, value)
    for platform, args in PLATFORM_ARGS.items():
        launched = api.launch(platform, args[0], output=args[args.index("--output") + 1], num_shards=2,
                              dry_run=True, offline=True, **PLATFORM_OPTIONS[platform])  # type: ignore[arg-type]
        assert launched.plan is not None and len(launched.plan.specs) == 2, platform
        assert (platform, tried) == (platform, [])


def test_offline_needs_dry_run() -> None:
    with pytest.raises(LaunchError, match="use it with --dry-run"):
        api.launch("cloud-run", "gs://a/b", output="gs://c/d", num_shards=1, offline=True, project="p", region="r")


def test_cloud_run_refuses_more_attempts_than_its_retry_cap_before_any_upload(tmp_path: Path) -> None:
    base = ["launch", "cloud-run", *PLATFORM_ARGS["cloud-run"], "--num-shards", "2", "--offline"]
    eleven, twelve, submit = llm_ocr_batch([
        ([*base, "--dry-run", "--attempts", "11"], {}),
        ([*base, "--dry-run", "--attempts", "12"], {}),
        ([*base[:-1], "--attempts", "12"], {}),  # a real launch: refused before the wheel upload
    ], _offline_env(tmp_path))
    assert eleven["code"] == 0, eleven["stderr"]
    (request,) = json.loads(eleven["stdout"])["requests"]
    assert request["job"]["template"]["template"]["maxRetries"] == 10
    for result in (twelve, submit):
        assert result["code"] == 2
        assert "--attempts 12: Cloud Run retries a task at most 10 times" in result["stderr"]
        assert "upload" not in result["stderr"]


def test_a_huggingface_hub_without_run_jobs_keywords_is_refused_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    from huggingface_hub import HfApi

    check_jobs_api()  # the installed one (pyproject: huggingface_hub>=2.1) has them all

    def run_job(self, *, image, command, env=None, secrets=None, flavor=None, timeout=None, namespace=None):  # 2.0's
        raise AssertionError("never called")

    monkeypatch.setattr(HfApi, "run_job", run_job)
    with pytest.raises(LaunchError, match=r"too old .* no attempts, name, labels, volumes.*huggingface_hub>=2.1"):
        check_jobs_api()


def test_network_failures_are_told_from_answers() -> None:
    from huggingface_hub import HfApi

    def whoami(endpoint: str) -> Exception:
        try:
            HfApi(endpoint=endpoint, token="hf_x").whoami()
        except Exception as exc:  # noqa: BLE001 - whatever huggingface_hub raises
            return exc
        raise AssertionError("whoami answered")

    assert is_network_error(whoami(NOWHERE))  # connection refused
    assert is_network_error(whoami("http://nonexistent.invalid"))  # a name that does not resolve
    with FakeHub(tokens={}) as hub:  # a Hub that answers: 401 for an unknown token
        refused = whoami(hub.url)
    assert refused.response.status_code == 401 and not is_network_error(refused)  # type: ignore[attr-defined]


def test_prices_name_the_region_they_are_for(tmp_path: Path) -> None:
    assert "NOT" not in sagemaker_price_note("ml.g6e.xlarge", "us-east-1")
    note = sagemaker_price_note("ml.g6e.xlarge", "eu-west-1")
    assert "us-east-1, NOT eu-west-1" in note and "estimate" in note
    sagemaker, cloud_run = llm_ocr_batch([
        (["launch", "sagemaker", *PLATFORM_ARGS["sagemaker"], "--num-shards", "1", "--dry-run", "--offline",
          "--instance-type", "ml.g6e.xlarge"], {}),
        (["launch", "cloud-run", *PLATFORM_ARGS["cloud-run"], "--num-shards", "1", "--dry-run", "--offline"], {}),
    ], _offline_env(tmp_path))
    assert "on-demand in us-east-1, NOT eu-west-1" in sagemaker["stderr"]
    assert "us-east4's list prices" in cloud_run["stderr"] and "europe-west4 may differ" in cloud_run["stderr"]
