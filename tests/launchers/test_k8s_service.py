"""``llm-ocr service --k8s-manifests``: the service's Kubernetes objects against Kubernetes' own
OpenAPI schemas (``kubernetes-validate``, strict, as the launcher's Job is checked in
test_k8s_units.py), every secret by reference only, and ``kubectl apply --dry-run=client``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import kubernetes_validate
import pytest
import yaml

from llm_ocr.cli import main
from tests.waiting import HANG_GUARD_S

#: Releases with everything the objects use (autoscaling/v2 is GA since 1.23).
RELEASES = ["1.33", "1.37"]
#: A database URL with its password, in the environment where the command runs: it must not be printed.
PLANTED = "postgresql://ocr:s3cr3t-pw@db.internal/ocr"
ARGS = ["service", "--k8s-manifests", "--store", "s3://ocr/service", "--k8s-image", "registry.example.com/llm-ocr:1",
        "--endpoint", "http://vllm.gpu:8000/v1", "--concurrency", "8", "--k8s-workers", "2:20",
        "--k8s-secret-ref", "AWS_SECRET_ACCESS_KEY=aws:secret-access-key", "--k8s-database-secret", "pg:dsn"]


@pytest.fixture(scope="module")
def printed() -> str:
    monkeypatch = pytest.MonkeyPatch()
    monkeypatch.setenv("LLM_OCR_SERVICE_DATABASE", PLANTED)
    monkeypatch.setenv("LLM_OCR_SERVICE_TOKEN", "planted-token-value")
    try:
        from contextlib import redirect_stdout
        from io import StringIO

        out = StringIO()
        with redirect_stdout(out):
            code = main(ARGS)
    finally:
        monkeypatch.undo()
    assert code == 0
    return out.getvalue()


def _objects(text: str) -> dict[str, dict[str, Any]]:
    return {f"{o['kind']}/{o['metadata']['name']}": o for o in yaml.safe_load_all(text)}


def test_the_objects_pass_the_kubernetes_schemas_and_scale_workers_on_queue_depth(printed: str) -> None:
    objects = _objects(printed)
    assert set(objects) == {"Deployment/llm-ocr-gateway", "Service/llm-ocr", "Deployment/llm-ocr-worker",
                            "HorizontalPodAutoscaler/llm-ocr-worker"}
    for release in RELEASES:
        for name, obj in objects.items():
            try:
                kubernetes_validate.validate(obj, release, strict=True)
            except kubernetes_validate.ValidationError as exc:
                pytest.fail(f"{name} fails Kubernetes {release}'s schema: {exc.message}")
    hpa = objects["HorizontalPodAutoscaler/llm-ocr-worker"]["spec"]
    assert hpa["scaleTargetRef"]["name"] == "llm-ocr-worker" and (hpa["minReplicas"], hpa["maxReplicas"]) == (2, 20)
    # The gauge the gateway exports (GET /metrics), one worker per --concurrency queued documents.
    assert hpa["metrics"] == [{"type": "External", "external": {"metric": {"name": "llm_ocr_service_queue_depth"},
                                                                "target": {"type": "AverageValue", "averageValue": "8"}}}]
    # The Service reaches the gateway pods, on the port their container listens on.
    service, gateway = objects["Service/llm-ocr"]["spec"], objects["Deployment/llm-ocr-gateway"]["spec"]
    assert service["selector"] == gateway["template"]["metadata"]["labels"]
    (container,) = gateway["template"]["spec"]["containers"]
    assert container["command"][:3] == ["llm-ocr", "service", "--no-worker"]
    assert container["command"][container["command"].index("--port") + 1] == str(container["ports"][0]["containerPort"])
    (worker,) = objects["Deployment/llm-ocr-worker"]["spec"]["template"]["spec"]["containers"]
    assert worker["command"][:2] == ["llm-ocr", "worker"] and "s3://ocr/service" in worker["command"]
    assert worker["command"][worker["command"].index("--endpoint") + 1] == "http://vllm.gpu:8000/v1"


def test_secrets_reach_the_pods_by_reference_only(printed: str) -> None:
    assert "s3cr3t-pw" not in printed and "planted-token-value" not in printed
    objects = _objects(printed)
    for kind in ("Deployment/llm-ocr-gateway", "Deployment/llm-ocr-worker"):
        (container,) = objects[kind]["spec"]["template"]["spec"]["containers"]
        env = {e["name"]: e for e in container["env"]}
        assert all("value" not in e for e in env.values()), env
        assert env["LLM_OCR_SERVICE_DATABASE"]["valueFrom"] == {"secretKeyRef": {"name": "pg", "key": "dsn"}}
        assert env["AWS_SECRET_ACCESS_KEY"]["valueFrom"]["secretKeyRef"] == {"name": "aws", "key": "secret-access-key"}
    (gateway,) = objects["Deployment/llm-ocr-gateway"]["spec"]["template"]["spec"]["containers"]
    token = {e["name"]: e for e in gateway["env"]}["LLM_OCR_SERVICE_TOKEN"]
    assert token["valueFrom"] == {"secretKeyRef": {"name": "llm-ocr-token", "key": "token"}}


@pytest.mark.parametrize(("change", "said"), [
    (["--store", "/srv/ocr"], "object store"),
    (["--k8s-namespace", "OCR_prod"], "--k8s-namespace 'OCR_prod'"),
    (["--k8s-database-secret", "pg"], "SECRET:KEY"),
    (["--k8s-workers", "0:3"], "MIN:MAX"),
    (["--escalate-to", "allenai/olmOCR-2-7B-1025"], "--escalate-endpoint URL go together"),
])
def test_what_the_api_server_or_the_pods_would_refuse_is_refused_with_the_option(
        change: list[str], said: str, caplog: pytest.LogCaptureFixture) -> None:
    assert main([*ARGS, *change]) == 2  # a later option overrides the same one before it
    assert said in caplog.text


def test_without_concurrency_the_worker_and_its_autoscaler_follow_the_in_flight_limit(
        capsys: pytest.CaptureFixture[str]) -> None:
    # The same number in the worker's command and as the autoscaler's documents per worker: twice
    # the limit (the old default, 4, left most of a worker's 24 slots idle on one-page documents).
    args = [arg for arg in ARGS if arg not in ("--concurrency", "8")]
    assert main([*args, "--max-in-flight", "24"]) == 0
    objects = _objects(capsys.readouterr().out)
    (worker,) = objects["Deployment/llm-ocr-worker"]["spec"]["template"]["spec"]["containers"]
    command = worker["command"]
    assert (command[command.index("--concurrency") + 1], command[command.index("--max-in-flight") + 1]) == ("48", "24")
    target = objects["HorizontalPodAutoscaler/llm-ocr-worker"]["spec"]["metrics"][0]["external"]["target"]
    assert target == {"type": "AverageValue", "averageValue": "48"}


#: Discovery as a real API server answers it (the legacy lists), for the kinds the manifests use;
#: every other GET is 404, so an apply is a create.
_DISCOVERY = {
    "/version": {"major": "1", "minor": "33", "gitVersion": "v1.33.0"},
    "/api": {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []},
    "/apis": {"kind": "APIGroupList", "apiVersion": "v1", "groups": [
        {"name": g, "versions": [{"groupVersion": f"{g}/{v}", "version": v}],
         "preferredVersion": {"groupVersion": f"{g}/{v}", "version": v}} for g, v in (("apps", "v1"), ("autoscaling", "v2"))]},
    "/api/v1": {"kind": "APIResourceList", "groupVersion": "v1", "resources": [
        {"name": "services", "singularName": "", "namespaced": True, "kind": "Service", "verbs": ["create", "get", "patch"]}]},
    "/apis/apps/v1": {"kind": "APIResourceList", "groupVersion": "apps/v1", "resources": [
        {"name": "deployments", "singularName": "", "namespaced": True, "kind": "Deployment", "verbs": ["create", "get", "patch"]}]},
    "/apis/autoscaling/v2": {"kind": "APIResourceList", "groupVersion": "autoscaling/v2", "resources": [
        {"name": "horizontalpodautoscalers", "singularName": "", "namespaced": True, "kind": "HorizontalPodAutoscaler",
         "verbs": ["create", "get", "patch"]}]},
}


class _Discovery(BaseHTTPRequestHandler):
    writes: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        body = _DISCOVERY.get(self.path.split("?")[0])
        data = json.dumps(body or {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound",
                                   "code": 404}).encode()
        self.send_response(200 if body else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:
        self.writes.append(self.path)
        self.send_response(500)
        self.end_headers()

    do_PATCH = do_PUT = do_POST

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def api_server() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Discovery)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_kubectl_applies_them_as_a_client_side_dry_run(printed: str, api_server: str, tmp_path: Path) -> None:
    kubectl = os.environ.get("LLM_OCR_TEST_KUBECTL") or shutil.which("kubectl")
    if not kubectl:
        pytest.skip("kubectl is not installed: scripts/test installs Debian's kubernetes-client as root")
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path), "KUBECONFIG": str(tmp_path / "none")}
    applied = subprocess.run([kubectl, "--server", api_server, "apply", "--dry-run=client", "--validate=false", "-f", "-"],
                             input=printed, text=True, capture_output=True, env=env, timeout=HANG_GUARD_S)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert sorted(applied.stdout.splitlines()) == [
        "deployment.apps/llm-ocr-gateway created (dry run)", "deployment.apps/llm-ocr-worker created (dry run)",
        "horizontalpodautoscaler.autoscaling/llm-ocr-worker created (dry run)", "service/llm-ocr created (dry run)"]
    assert _Discovery.writes == []


def test_the_workers_model_and_stronger_model_reach_its_command(capsys: pytest.CaptureFixture[str]) -> None:
    # Flags of the worker the objects have no field of are passed on as given, not dropped.
    assert main([*ARGS, "--model", "deepseek-ai/DeepSeek-OCR", "--escalate-to", "allenai/olmOCR-2-7B-1025",
                 "--escalate-endpoint", "http://vllm-strong.gpu:8000/v1", "--escalate-on", "garbled,short"]) == 0
    (worker,) = _objects(capsys.readouterr().out)["Deployment/llm-ocr-worker"]["spec"]["template"]["spec"]["containers"]
    command = worker["command"]
    assert {flag: command[command.index(flag) + 1] for flag in
            ("--model", "--escalate-to", "--escalate-endpoint", "--escalate-on")} == {
        "--model": "deepseek-ai/DeepSeek-OCR", "--escalate-to": "allenai/olmOCR-2-7B-1025",
        "--escalate-endpoint": "http://vllm-strong.gpu:8000/v1", "--escalate-on": "garbled,short"}
