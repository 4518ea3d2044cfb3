"""A local stand-in for a Kubernetes API server and its Job controller that really runs the pods.

The official ``kubernetes`` client talks to it through a kubeconfig (:meth:`FakeKubernetes.
kubeconfig`: ``server: http://127.0.0.1:PORT``, a bearer token). Routes, as the Kubernetes API
reference gives them and the client (37) calls them:

- ``POST /apis/authorization.k8s.io/v1/selfsubjectaccessreviews`` (allowed for a ``write`` token,
  reads only for a ``read`` token);
- ``GET  /api/v1/namespaces/NS/serviceaccounts/NAME``;
- ``POST /api/v1/namespaces/NS/configmaps``, ``GET .../configmaps/NAME``;
- ``POST /apis/batch/v1/namespaces/NS/jobs``, ``GET .../jobs[/NAME]`` (``labelSelector``),
  ``DELETE .../jobs/NAME`` (``propagationPolicy``: Foreground, Background, Orphan);
- ``GET  /api/v1/namespaces/NS/pods[/NAME]`` (``labelSelector``), ``GET .../pods/NAME/log``
  (``container``, ``follow``, ``tailLines``).

It refuses what the real API server refuses, by value (:func:`job_problems`, from
``pkg/apis/batch/validation/validation.go`` and ``pkg/apis/core/validation`` of
kubernetes/kubernetes): a Job name that is not a DNS-1123 subdomain or whose pods' hostnames
(``NAME-INDEX``) would not be DNS labels, an Indexed Job without ``completions``,
``backoffLimitPerIndex``/``maxFailedIndexes`` without Indexed mode, ``maxFailedIndexes`` above the
completions or without ``backoffLimitPerIndex``, a ``FailIndex`` rule without ``backoffLimitPerIndex``,
exit codes unsorted, repeated or 0 with ``In``, a pod failure policy without ``restartPolicy: Never``,
an env entry with both or neither of ``value`` and ``valueFrom``, a GPU count that is not a whole
number, ``requests`` of ``nvidia.com/gpu`` unlike its limits, invalid labels, quantities,
tolerations, volume mounts of volumes that do not exist, a ConfigMap over 1 MiB. As a tripwire
beyond the real server, it refuses an env ``value`` equal to a value of one of its Secrets: a
secret sent inline where a ``secretKeyRef`` was promised (422, "fake: ...").

The Job controller runs an Indexed Job as Kubernetes does ("Jobs", kubernetes.io): pods named
``JOB-INDEX-RANDOM`` with ``JOB_COMPLETION_INDEX`` set and the index in a label and annotation, at
most ``parallelism`` at once (and, with ``gpus`` set, only as many as the node's GPUs allow: the
others stay ``Pending``, ``Unschedulable``); a failed pod's index is retried alone until its
``backoffLimitPerIndex`` is spent, by ``podFailurePolicy`` (``Ignore`` on ``DisruptionTarget``,
``FailIndex`` on exit codes, ``FailJob``, ``Count``); ``completedIndexes``/``failedIndexes`` in the
status, ``Complete`` or ``Failed`` (``FailedIndexes``, ``MaxFailedIndexesExceeded``) at the end;
``activeDeadlineSeconds`` of a pod stops it (``DeadlineExceeded``). Init containers run first, in
order. A pod's container is a local subprocess (its own session) in the pod's folder, with
:mod:`tests.fakes.container`'s ``python3``, ``uv`` and fake ``vllm``, ``job_env``, the image's
variables (``images``), the container's env with ``secretKeyRef`` resolved from :attr:`secrets`
(a missing Secret or key leaves the pod waiting in ``CreateContainerConfigError``, as the kubelet
does); ``emptyDir`` and ``projected``/``configMap`` volumes are folders of the pod (ConfigMap keys
as files), a ``persistentVolumeClaim`` is the local folder :attr:`claims` names, and the command's
words under a mount path point at the pod's copy. Stopping a pod is SIGTERM to the container's
main process, SIGKILL to all of it ``grace_s`` later (``terminationGracePeriodSeconds``).
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import secrets as random
import signal
import subprocess
import tempfile
import threading
import time
import urllib.parse
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import psutil

from tests.fakes.container import (
    Descendants,
    container_env,
    kill_marked,
    kill_tree,
    map_words,
    process_tree,
    with_image,
)
from tests.fakes.http_server import FAKE_MARK, FakeHTTPServer

INDEX_KEY = "batch.kubernetes.io/job-completion-index"
JOB_NAME_KEY = "batch.kubernetes.io/job-name"
FAILURES_KEY = "batch.kubernetes.io/job-index-failure-count"
IGNORED_KEY = "batch.kubernetes.io/job-index-ignored-failure-count"

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_QUALIFIED = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")
_ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
_QUANTITY = re.compile(r"^\d+(\.\d+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$")
_CONFIG_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")
_GROUPS = {"jobs": "batch", "configmaps": "", "pods": "", "serviceaccounts": ""}


class ApiError(Exception):
    """An answer with a ``Status`` body: HTTP code, reason, message."""

    def __init__(self, code: int, reason: str, message: str, causes: list[dict[str, str]] | None = None) -> None:
        super().__init__(message)
        self.code, self.reason, self.message, self.causes = code, reason, message, causes or []

    def status(self) -> dict[str, Any]:
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": self.message,
                "reason": self.reason, "details": {"causes": self.causes}, "code": self.code}


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _ranges(numbers: set[int]) -> str:
    spans: list[list[int]] = []
    for n in sorted(numbers):
        if spans and n == spans[-1][1] + 1:
            spans[-1][1] = n
        else:
            spans.append([n, n])
    return ",".join(f"{a}-{b}" if b > a else str(a) for a, b in spans)


# --------------------------------------------------------------------------------------------
# Validation (values, as the API server checks them)


def _label_problems(labels: Any, where: str) -> list[str]:
    problems = []
    for key, value in (labels or {}).items():
        prefix, slash, name = key.rpartition("/")
        if (slash and not _DNS_SUBDOMAIN.match(prefix)) or len(name) > 63 or not _QUALIFIED.match(name):
            problems.append(f"{where}: Invalid value: {key!r}: name part must consist of alphanumeric characters, '-', "
                            "'_' or '.', and must start and end with an alphanumeric character")
        if not isinstance(value, str) or len(value) > 63 or not _LABEL_VALUE.match(value):
            problems.append(f"{where}: Invalid value: {value!r}: a valid label must be an empty string or consist of "
                            "alphanumeric characters, '-', '_' or '.' (at most 63)")
    return problems


def _quantity_problems(resources: dict[str, Any], where: str) -> list[str]:
    problems = []
    limits, requests = resources.get("limits") or {}, resources.get("requests") or {}
    for kind, values in (("limits", limits), ("requests", requests)):
        for name, value in values.items():
            if not isinstance(value, (str, int)) or not _QUANTITY.match(str(value)):
                problems.append(f"{where}.{kind}[{name}]: Invalid value: {value!r}: must be a quantity")
            elif "/" in name and not str(value).isdigit():
                problems.append(f"{where}.{kind}[{name}]: Invalid value: {value!r}: must be an integer")
    for name, value in requests.items():
        if "/" in name and name in limits and str(limits[name]) != str(value):
            problems.append(f"{where}.requests[{name}]: Invalid value: {value!r}: must be equal to {name} limit")
        if "/" in name and name not in limits:
            problems.append(f"{where}.limits: Required value: Limit must be set for non overcommitable resources")
    return problems


def _container_problems(container: dict[str, Any], where: str, volumes: set[str]) -> list[str]:
    problems = []
    if not isinstance(container.get("name"), str) or not _DNS_LABEL.match(container["name"]) or len(container["name"]) > 63:
        problems.append(f"{where}.name: Invalid value: {container.get('name')!r}: a lowercase RFC 1123 label")
    if not container.get("image"):
        problems.append(f"{where}.image: Required value")
    for i, item in enumerate(container.get("env") or []):
        name = item.get("name")
        if not isinstance(name, str) or not _ENV_NAME.match(name):
            problems.append(f"{where}.env[{i}].name: Invalid value: {name!r}: a valid environment variable name")
        has_value, has_from = "value" in item, "valueFrom" in item
        if has_value and has_from:
            problems.append(f"{where}.env[{i}].valueFrom: Invalid value: \"\": may not be specified when `value` is not "
                            "empty")
        if has_from:
            ref = (item["valueFrom"] or {}).get("secretKeyRef")
            if ref is not None and (not ref.get("name") or not ref.get("key")):
                problems.append(f"{where}.env[{i}].valueFrom.secretKeyRef: Required value: name and key")
        elif has_value and not isinstance(item["value"], str):
            problems.append(f"{where}.env[{i}].value: Invalid value: must be a string")
    problems += _quantity_problems(container.get("resources") or {}, f"{where}.resources")
    paths = set()
    for i, mount in enumerate(container.get("volumeMounts") or []):
        if mount.get("name") not in volumes:
            problems.append(f"{where}.volumeMounts[{i}].name: Not found: {mount.get('name')!r}")
        path = mount.get("mountPath") or ""
        if not path.startswith("/"):
            problems.append(f"{where}.volumeMounts[{i}].mountPath: Invalid value: {path!r}: must be an absolute path")
        if path in paths:
            problems.append(f"{where}.volumeMounts[{i}].mountPath: Invalid value: {path!r}: must be unique")
        paths.add(path)
    return problems


def pod_spec_problems(spec: dict[str, Any], where: str) -> list[str]:
    """What the API server refuses in a pod template's spec (a subset of ValidatePodSpec)."""
    problems = []
    volumes = set()
    for i, volume in enumerate(spec.get("volumes") or []):
        name = volume.get("name")
        if not isinstance(name, str) or not _DNS_LABEL.match(name) or name in volumes:
            problems.append(f"{where}.volumes[{i}].name: Invalid value: {name!r}: a unique RFC 1123 label")
        volumes.add(name)
        sources = [k for k in volume if k != "name"]
        if len(sources) != 1:
            problems.append(f"{where}.volumes[{i}]: Invalid value: must specify exactly 1 volume type")
    containers = spec.get("containers") or []
    if not containers:
        problems.append(f"{where}.containers: Required value")
    names = [c.get("name") for c in [*(spec.get("initContainers") or []), *containers]]
    if len(names) != len(set(names)):
        problems.append(f"{where}.containers: Duplicate value: container names must be unique")
    for kind in ("initContainers", "containers"):
        for i, container in enumerate(spec.get(kind) or []):
            problems += _container_problems(container, f"{where}.{kind}[{i}]", volumes)
    for i, toleration in enumerate(spec.get("tolerations") or []):
        operator = toleration.get("operator", "Equal")
        if operator not in ("Equal", "Exists"):
            problems.append(f"{where}.tolerations[{i}].operator: Unsupported value: {operator!r}")
        if operator == "Exists" and toleration.get("value"):
            problems.append(f"{where}.tolerations[{i}].operator: Invalid value: value must be empty when `operator` is "
                            "'Exists'")
        if toleration.get("effect", "") not in ("", "NoSchedule", "PreferNoSchedule", "NoExecute"):
            problems.append(f"{where}.tolerations[{i}].effect: Unsupported value: {toleration.get('effect')!r}")
        problems += _label_problems({toleration.get("key") or "x": "x"}, f"{where}.tolerations[{i}].key")
    problems += _label_problems(spec.get("nodeSelector"), f"{where}.nodeSelector")
    deadline = spec.get("activeDeadlineSeconds")
    if deadline is not None and (not isinstance(deadline, int) or deadline < 1):
        problems.append(f"{where}.activeDeadlineSeconds: Invalid value: {deadline!r}: must be between 1 and 2147483647")
    account = spec.get("serviceAccountName")
    if account is not None and not _DNS_SUBDOMAIN.match(account):
        problems.append(f"{where}.serviceAccountName: Invalid value: {account!r}: a lowercase RFC 1123 subdomain")
    return problems


def job_problems(job: dict[str, Any]) -> list[str]:
    """What the API server refuses in a Job (``field: Reason: detail``, as its Status lists them)."""
    problems = []
    if (job.get("apiVersion"), job.get("kind")) != ("batch/v1", "Job"):
        problems.append(f"apiVersion/kind: Invalid value: {job.get('apiVersion')}/{job.get('kind')}: want batch/v1 Job")
    meta = job.get("metadata") or {}
    name = meta.get("name") or ""
    if not name or len(name) > 253 or not _DNS_SUBDOMAIN.match(name):
        problems.append(f"metadata.name: Invalid value: {name!r}: a lowercase RFC 1123 subdomain must consist of lower "
                        "case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character")
    elif len(name) > 63:
        # The controller labels every pod with the Job's name, and a label value holds at most 63.
        problems.append(f"spec.template.labels: Invalid value: {name!r}: must be no more than 63 characters")
    problems += _label_problems(meta.get("labels"), "metadata.labels") + _annotation_problems(meta)
    spec = job.get("spec") or {}
    for key in ("parallelism", "completions", "activeDeadlineSeconds", "backoffLimit", "backoffLimitPerIndex",
                "maxFailedIndexes", "ttlSecondsAfterFinished"):
        if key in spec and (not isinstance(spec[key], int) or spec[key] < 0):
            problems.append(f"spec.{key}: Invalid value: {spec[key]!r}: must be greater than or equal to 0")
    mode = spec.get("completionMode", "NonIndexed")
    if mode not in ("NonIndexed", "Indexed"):
        problems.append(f"spec.completionMode: Unsupported value: {mode!r}: supported values: \"Indexed\", \"NonIndexed\"")
    completions = spec.get("completions")
    if "maxFailedIndexes" in spec and "backoffLimitPerIndex" not in spec:
        problems.append("spec.backoffLimitPerIndex: Required value: when maxFailedIndexes is specified")
    if mode == "Indexed":
        if completions is None:
            problems.append("spec.completions: Required value: when completion mode is Indexed")
        if isinstance(spec.get("parallelism"), int) and spec["parallelism"] > 100_000:
            problems.append("spec.parallelism: Invalid value: must be less than or equal to 100000 when completion mode "
                            "is Indexed")
        if isinstance(completions, int) and isinstance(spec.get("maxFailedIndexes"), int) \
                and spec["maxFailedIndexes"] > completions:
            problems.append("spec.maxFailedIndexes: Invalid value: must be less than or equal to completions")
        if isinstance(completions, int) and completions > 0 and name:
            hostname = f"{name}-{completions - 1}"
            if len(hostname) > 63 or not _DNS_LABEL.match(hostname):
                problems.append(f"metadata.name: Invalid value: {name!r}: will not able to create pod with invalid DNS "
                                f"label: {hostname}")
    else:
        for key in ("backoffLimitPerIndex", "maxFailedIndexes"):
            if key in spec:
                problems.append(f"spec.{key}: Invalid value: {spec[key]!r}: requires indexed completion mode")
    template = spec.get("template") or {}
    pod = template.get("spec") or {}
    policy = spec.get("podFailurePolicy")
    if policy is not None:
        containers = {c.get("name") for c in [*(pod.get("containers") or []), *(pod.get("initContainers") or [])]}
        rules = policy.get("rules") or []
        if len(rules) > 20:
            problems.append("spec.podFailurePolicy.rules: Too many: must have at most 20 items")
        for i, rule in enumerate(rules):
            where = f"spec.podFailurePolicy.rules[{i}]"
            action = rule.get("action")
            if action not in ("Count", "FailIndex", "FailJob", "Ignore"):
                problems.append(f"{where}.action: Unsupported value: {action!r}")
            if action == "FailIndex" and "backoffLimitPerIndex" not in spec:
                problems.append(f"{where}.action: Invalid value: \"FailIndex\": requires the backoffLimitPerIndex to be set")
            codes, conditions = rule.get("onExitCodes"), rule.get("onPodConditions")
            if (codes is None) == (not conditions):
                problems.append(f"{where}: Invalid value: specifying one of OnExitCodes and OnPodConditions is required")
            if codes is not None:
                values = codes.get("values") or []
                if codes.get("operator") not in ("In", "NotIn"):
                    problems.append(f"{where}.onExitCodes.operator: Unsupported value: {codes.get('operator')!r}")
                if not values or len(values) > 255:
                    problems.append(f"{where}.onExitCodes.values: Invalid value: between 1 and 255 values")
                if values != sorted(set(values)):
                    problems.append(f"{where}.onExitCodes.values: Invalid value: {values}: must be ordered and unique")
                if codes.get("operator") == "In" and 0 in values:
                    problems.append(f"{where}.onExitCodes.values: Invalid value: 0: must not be 0 for the In operator")
                if codes.get("containerName") is not None and codes["containerName"] not in containers:
                    problems.append(f"{where}.onExitCodes.containerName: Invalid value: must be one of the container or "
                                    "initContainer names in the pod template")
            for j, pattern in enumerate(conditions or []):
                if pattern.get("status") not in ("True", "False", "Unknown"):
                    problems.append(f"{where}.onPodConditions[{j}].status: Unsupported value: {pattern.get('status')!r}")
    restart = pod.get("restartPolicy")
    if restart not in ("Never", "OnFailure"):
        problems.append("spec.template.spec.restartPolicy: Required value: valid values: \"OnFailure\", \"Never\"")
    elif policy is not None and restart != "Never":
        problems.append("spec.template.spec.restartPolicy: Invalid value: only \"Never\" is supported when "
                        "podFailurePolicy is specified")
    problems += _label_problems((template.get("metadata") or {}).get("labels"), "spec.template.metadata.labels")
    problems += pod_spec_problems(pod, "spec.template.spec")
    return problems


def _annotation_problems(meta: dict[str, Any]) -> list[str]:
    """All of an object's annotations hold at most 256 KiB (ValidateAnnotationsSize): where
    ``kubectl apply`` keeps its copy of the object."""
    total = sum(len(k) + len(str(v)) for k, v in (meta.get("annotations") or {}).items())
    return [f"metadata.annotations: Too long: must have at most 262144 bytes ({total})"] if total > 262144 else []


def config_map_problems(body: dict[str, Any]) -> list[str]:
    """What the API server refuses in a ConfigMap (ValidateConfigMap)."""
    problems = _annotation_problems(body.get("metadata") or {})
    name = (body.get("metadata") or {}).get("name") or ""
    if not name or len(name) > 253 or not _DNS_SUBDOMAIN.match(name):
        problems.append(f"metadata.name: Invalid value: {name!r}: a lowercase RFC 1123 subdomain")
    total = 0
    keys = set()
    for key, value in (body.get("data") or {}).items():
        keys.add(key)
        total += len(str(value).encode())
    for key, value in (body.get("binaryData") or {}).items():
        if key in keys:
            problems.append(f"binaryData[{key}]: Invalid value: duplicate of key present in data")
        try:
            total += len(base64.b64decode(value, validate=True))
        except (binascii.Error, ValueError):
            problems.append(f"binaryData[{key}]: Invalid value: not base64")
        keys.add(key)
    for key in keys:
        if not _CONFIG_KEY.match(key):
            problems.append(f"data[{key}]: Invalid value: a valid config key must consist of alphanumeric characters, "
                            "'-', '_' or '.'")
    if total > 1024 * 1024:
        problems.append(f"[]: Too long: may not be more than 1048576 bytes ({total})")
    return problems


# --------------------------------------------------------------------------------------------
# The objects


@dataclass
class FakeContainer:
    """One container's run in a pod."""

    name: str
    state: dict[str, Any] = field(default_factory=lambda: {"waiting": {"reason": "PodInitializing"}})
    process: subprocess.Popen[bytes] | None = None
    log: list[str] = field(default_factory=list)


@dataclass
class FakePod:
    """One pod of a Job's index."""

    name: str
    namespace: str
    job: str
    index: int
    spec: dict[str, Any]
    labels: dict[str, str]
    annotations: dict[str, str]
    folder: Path
    created: str = field(default_factory=_now)
    uid: str = field(default_factory=lambda: str(uuid.uuid4()))
    phase: str = "Pending"
    reason: str | None = None
    message: str | None = None
    started: str | None = None
    conditions: list[dict[str, Any]] = field(default_factory=list)
    init: list[FakeContainer] = field(default_factory=list)
    main: list[FakeContainer] = field(default_factory=list)
    stop_reason: str | None = None  # "deadline" | "deleted" | "evicted" | "killed"
    gpus: int = 0
    #: The main container's environment (secrets resolved), for the tests to check what arrived.
    env: dict[str, str] = field(default_factory=dict, repr=False)

    def json(self) -> dict[str, Any]:
        def statuses(containers: list[FakeContainer]) -> list[dict[str, Any]]:
            return [{"name": c.name, "state": c.state, "ready": "running" in c.state, "restartCount": 0,
                     "image": next((x["image"] for x in [*self.spec.get("initContainers", []), *self.spec["containers"]]
                                    if x["name"] == c.name), "")} for c in containers]

        status: dict[str, Any] = {"phase": self.phase, "conditions": list(self.conditions)}
        if self.started:
            status["startTime"] = self.started
        if self.reason:
            status["reason"], status["message"] = self.reason, self.message or ""
        if self.init:
            status["initContainerStatuses"] = statuses(self.init)
        status["containerStatuses"] = statuses(self.main)
        return {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": self.name, "namespace": self.namespace, "uid": self.uid,
                             "creationTimestamp": self.created, "labels": dict(self.labels),
                             "annotations": dict(self.annotations)},
                "spec": {**self.spec, "hostname": f"{self.job}-{self.index}"}, "status": status}


@dataclass
class FakeJob:
    """A Job as stored, and its controller's bookkeeping."""

    body: dict[str, Any]
    namespace: str
    uid: str = field(default_factory=lambda: str(uuid.uuid4()))
    created: str = field(default_factory=_now)
    started: str | None = None
    finished: str | None = None
    completed: set[int] = field(default_factory=set)
    failed: set[int] = field(default_factory=set)
    failures: dict[int, int] = field(default_factory=dict)
    ignored: dict[int, int] = field(default_factory=dict)
    pod_failures: int = 0
    conditions: list[dict[str, Any]] = field(default_factory=list)
    deleting: str | None = None
    pods: list[FakePod] = field(default_factory=list)

    @property
    def name(self) -> str:
        return str(self.body["metadata"]["name"])

    @property
    def spec(self) -> dict[str, Any]:
        return dict(self.body["spec"])

    def ended(self) -> bool:
        return any(c["type"] in ("Complete", "Failed") for c in self.conditions)

    def json(self) -> dict[str, Any]:
        meta = {**self.body["metadata"], "namespace": self.namespace, "uid": self.uid, "creationTimestamp": self.created}
        if self.deleting:
            meta["deletionTimestamp"] = self.deleting
        active = sum(1 for p in self.pods if p.phase in ("Pending", "Running"))
        status: dict[str, Any] = {"active": active, "succeeded": len(self.completed), "failed": self.pod_failures,
                                  "conditions": list(self.conditions)}
        if self.completed:
            status["completedIndexes"] = _ranges(self.completed)
        if self.failed:
            status["failedIndexes"] = _ranges(self.failed)
        if self.started:
            status["startTime"] = self.started
        if self.finished and any(c["type"] == "Complete" for c in self.conditions):
            status["completionTime"] = self.finished
        selector = {"matchLabels": {"batch.kubernetes.io/controller-uid": self.uid}}
        return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta,
                "spec": {**self.body["spec"], "selector": selector}, "status": status}


class FakeKubernetes(FakeHTTPServer):
    """The fake API server and Job controller (see the module docstring).

    Args:
        tokens: bearer token -> ``"write"`` (may do everything) or ``"read"`` (may only read); the
            token ``""`` is a request without one (kubectl sends none to an ``http://`` server).
        namespaces: the namespaces that exist.
        secrets: ``(namespace, name)`` -> ``{key: value}``: the cluster's Secrets.
        service_accounts: ``(namespace, name)`` of the ServiceAccounts that exist (``default`` in each
            namespace always does).
        claims: PersistentVolumeClaim name -> the local folder that stands for its volume.
        job_env: variables every container has.
        index_env: completion index -> extra variables for its pods only (e.g. a broken node).
        first_attempt_env: completion index -> extra variables for its first pod only.
        images: image -> variables its container adds (a prebuilt image "contains" llm-ocr).
        gpus: GPUs of the cluster's one node (None: as many as asked).
        grace_s: seconds between SIGTERM and SIGKILL when a pod is stopped (default: the pod's
            ``terminationGracePeriodSeconds``).
    """

    def __init__(
        self,
        *,
        tokens: dict[str, str],
        namespaces: tuple[str, ...] = ("default",),
        secrets: dict[tuple[str, str], dict[str, str]] | None = None,
        service_accounts: tuple[tuple[str, str], ...] = (),
        claims: dict[str, Path] | None = None,
        job_env: dict[str, str] | None = None,
        index_env: dict[int, dict[str, str]] | None = None,
        first_attempt_env: dict[int, dict[str, str]] | None = None,
        images: dict[str, dict[str, str]] | None = None,
        gpus: int | None = None,
        grace_s: float | None = None,
        workdir: Path | None = None,
    ) -> None:
        self.tokens = dict(tokens)
        self.namespaces = set(namespaces)
        self.secrets = dict(secrets or {})
        self.service_accounts = {*service_accounts, *((ns, "default") for ns in namespaces)}
        self.claims = {k: Path(v) for k, v in (claims or {}).items()}
        self.job_env = dict(job_env or {})
        self.index_env = dict(index_env or {})
        self.first_attempt_env = dict(first_attempt_env or {})
        self.images = dict(images or {})
        self.gpus = gpus
        self.grace_s = grace_s
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="fake-k8s-"))
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)
        self.config_maps: dict[tuple[str, str], dict[str, Any]] = {}
        self.jobs: dict[tuple[str, str], FakeJob] = {}
        #: Every Job ever created, deleted ones included, in order.
        self.all_jobs: list[FakeJob] = []
        #: Every request: {"method", "path", "query", "body"}.
        self.requests: list[dict[str, Any]] = []
        self._gpus_used = 0
        #: Set by :meth:`stop_work`: no pod starts, no Job controller retries or goes on after it.
        self._stopped = False
        self._workers: list[threading.Thread] = []  # the Job controllers and pod runners
        super().__init__()

    # -- lifecycle (tests/fakes/http_server.py) -------------------------------------------------

    def stop_work(self) -> None:
        """End the cluster (before the fake stops answering): no Job controller starts or
        retries a pod from now on, every process any container started is killed and gone
        (found by the fake's mark in its environment: a model server in a session of its own
        or re-parented when its llm-ocr died included), and the controllers and pod runners
        have ended (:meth:`stop` looks for marked processes once more after). A test's pods
        cannot write into the next test's output then: they once did, retried by a controller
        that outlived its test (issue 46)."""
        with self.changed:
            self._stopped = True
            self.changed.notify_all()
            threads = list(self._workers)
        kill_marked(FAKE_MARK, self.mark)
        for thread in threads:
            thread.join(timeout=60)

    def kubeconfig(self, path: Path, token: str, namespace: str = "default", context: str = "fake") -> Path:
        """Write a kubeconfig for this server (as kubectl's, one context) and return its path."""
        config = {
            "apiVersion": "v1", "kind": "Config", "current-context": context,
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "tester", "user": {"token": token}}],
            "contexts": [{"name": context, "context": {"cluster": "fake", "user": "tester", "namespace": namespace}}],
        }
        path.write_text(json.dumps(config))
        return path

    # -- test helpers ---------------------------------------------------------------------------

    def calls(self, method: str, suffix: str = "") -> list[dict[str, Any]]:
        """Requests with this method whose path ends with ``suffix``."""
        with self.lock:
            return [r for r in self.requests if r["method"] == method and r["path"].endswith(suffix)]

    def pods_of(self, job: str, index: int | None = None) -> list[FakePod]:
        """The pods a Job made (of one index), in creation order."""
        with self.lock:
            found = next((j for j in reversed(self.all_jobs) if j.name == job), None)
            pods = list(found.pods) if found else []
        return [p for p in pods if index is None or p.index == index]

    def kill(self, pod: FakePod) -> None:
        """SIGKILL a pod's containers, as the OOM killer or a crash would (exit 137: a counted failure)."""
        pod.stop_reason = pod.stop_reason or "killed"
        for container in [*pod.init, *pod.main]:
            if container.process is not None and container.process.poll() is None:
                kill_tree(container.process.pid, signal.SIGKILL)

    def evict(self, pod: FakePod) -> None:
        """Evict a pod as a node drain or preemption does: ``DisruptionTarget``, then a stop."""
        with self.changed:
            pod.conditions.append({"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI",
                                   "message": "Eviction API: evicting", "lastTransitionTime": _now()})
        self._stop_pod(pod, "evicted")

    def wait_job(self, namespace: str, name: str, timeout: float = 240) -> FakeJob:
        """Wait until the Job has ended (or is gone); the Job."""
        deadline = time.monotonic() + timeout
        with self.changed:
            while True:
                job = next(j for j in self.all_jobs if j.name == name and j.namespace == namespace)
                if job.ended() and not any(p.phase in ("Pending", "Running") for p in job.pods):
                    return job
                if (namespace, name) not in self.jobs:
                    return job
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"Job {name} still running")
                self.changed.wait(min(left, 1.0))

    def log_text(self) -> str:
        """Every log line of every container."""
        with self.lock:
            return "\n".join(line for job in self.all_jobs for pod in job.pods for c in [*pod.init, *pod.main]
                             for line in c.log)

    # -- HTTP -----------------------------------------------------------------------------------

    def handle(self, handler: BaseHTTPRequestHandler) -> None:
        parsed = urllib.parse.urlsplit(handler.path)
        query = {k: v[-1] for k, v in urllib.parse.parse_qs(parsed.query).items()}
        length = int(handler.headers.get("Content-Length") or 0)
        raw = handler.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        with self.lock:
            self.requests.append({"method": handler.command, "path": parsed.path, "query": query, "body": body})
        try:
            role = self._role(handler.headers.get("Authorization") or "")
            if parsed.path.endswith("/log") and handler.command == "GET":
                self._stream_log(handler, parsed.path, query)
                return
            status, answer = self._route(handler.command, parsed.path, query, body, role)
        except ApiError as exc:
            status, answer = exc.code, exc.status()
        data = json.dumps(answer).encode()
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)

    def _role(self, authorization: str) -> str:
        token = authorization.removeprefix("Bearer ").strip()
        role = self.tokens.get(token)
        if role is None:
            raise ApiError(401, "Unauthorized", "Unauthorized")
        return role

    def _route(self, method: str, path: str, query: dict[str, str], body: Any, role: str) -> tuple[int, Any]:
        if method == "GET" and path in DISCOVERY:
            return 200, DISCOVERY[path]
        if path == "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews" and method == "POST":
            attributes = ((body or {}).get("spec") or {}).get("resourceAttributes") or {}
            allowed = role == "write" or attributes.get("verb") in ("get", "list", "watch")
            return 201, {**(body or {}), "status": {"allowed": allowed}}
        namespace_only = re.match(r"^/api/v1/namespaces/([^/]+)$", path)
        if namespace_only and method == "GET":  # kubectl apply reads the namespace first
            if namespace_only.group(1) not in self.namespaces:
                raise ApiError(404, "NotFound", f"namespaces \"{namespace_only.group(1)}\" not found")
            return 200, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace_only.group(1)},
                         "status": {"phase": "Active"}}
        match = re.match(r"^/(?:api/v1|apis/batch/v1)/namespaces/([^/]+)/([a-z]+)(?:/([^/]+))?$", path)
        if not match:
            raise ApiError(404, "NotFound", f"the server could not find the requested resource ({method} {path})")
        namespace, kind, name = match.groups()
        group = "batch" if path.startswith("/apis/batch/") else ""
        if kind not in _GROUPS or _GROUPS[kind] != group:
            raise ApiError(404, "NotFound", f"the server could not find the requested resource ({method} {path})")
        if method != "GET" and role != "write":
            raise ApiError(403, "Forbidden", f"{kind} is forbidden: User \"tester\" cannot {method.lower()} resource "
                                             f"\"{kind}\" in API group \"{group}\" in the namespace \"{namespace}\"")
        if namespace not in self.namespaces:
            raise ApiError(404, "NotFound", f"namespaces \"{namespace}\" not found")
        if kind == "serviceaccounts" and method == "GET" and name:
            if (namespace, name) not in self.service_accounts:
                raise ApiError(404, "NotFound", f"serviceaccounts \"{name}\" not found")
            return 200, {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": namespace}}
        if kind == "configmaps":
            return self._config_map(method, namespace, name, body)
        if kind == "jobs":
            return self._jobs(method, namespace, name, query, body)
        if kind == "pods" and method == "GET":
            return 200, self._pods(namespace, name, query)
        raise ApiError(405, "MethodNotAllowed", f"{method} {path} is not supported")

    def _config_map(self, method: str, namespace: str, name: str | None, body: Any) -> tuple[int, Any]:
        if method == "POST" and name is None:
            problems = config_map_problems(body or {})
            cm_name = ((body or {}).get("metadata") or {}).get("name") or ""
            if problems:
                raise _invalid("ConfigMap", cm_name, problems)
            with self.lock:
                if (namespace, cm_name) in self.config_maps:
                    raise ApiError(409, "AlreadyExists", f"configmaps \"{cm_name}\" already exists")
                stored = {**body, "metadata": {**body["metadata"], "namespace": namespace, "creationTimestamp": _now()}}
                self.config_maps[(namespace, cm_name)] = stored
            return 201, stored
        if method == "GET" and name:
            found = self.config_maps.get((namespace, name))
            if found is None:
                raise ApiError(404, "NotFound", f"configmaps \"{name}\" not found")
            return 200, found
        raise ApiError(405, "MethodNotAllowed", f"{method} configmaps is not supported here")

    def _jobs(self, method: str, namespace: str, name: str | None, query: dict[str, str], body: Any) -> tuple[int, Any]:
        if method == "POST" and name is None:
            return 201, self._create_job(namespace, body or {})
        if method == "GET" and name is None:
            with self.lock:
                jobs = [j for (ns, _), j in self.jobs.items() if ns == namespace]
            wanted = _selector(query.get("labelSelector", ""))
            items = [j.json() for j in jobs if _matches(j.body["metadata"].get("labels") or {}, wanted)]
            return 200, {"apiVersion": "batch/v1", "kind": "JobList", "metadata": {}, "items": items}
        job = self.jobs.get((namespace, name or ""))
        if job is None:
            raise ApiError(404, "NotFound", f"jobs.batch \"{name}\" not found")
        if method == "GET":
            with self.lock:
                return 200, job.json()
        if method == "DELETE":
            policy = query.get("propagationPolicy") or (body or {}).get("propagationPolicy") or "Background"
            self._delete_job(job, policy)
            return 200, {"kind": "Status", "apiVersion": "v1", "status": "Success", "details": {"name": name}}
        raise ApiError(405, "MethodNotAllowed", f"{method} jobs/{name} is not supported here")

    def _pods(self, namespace: str, name: str | None, query: dict[str, str]) -> dict[str, Any]:
        with self.lock:
            pods = [p for job in self.all_jobs for p in job.pods if p.namespace == namespace and p.phase != "Deleted"]
            if name is not None:
                pod = next((p for p in pods if p.name == name), None)
                if pod is None:
                    raise ApiError(404, "NotFound", f"pods \"{name}\" not found")
                return pod.json()
            wanted = _selector(query.get("labelSelector", ""))
            return {"apiVersion": "v1", "kind": "PodList", "metadata": {},
                    "items": [p.json() for p in pods if _matches(p.labels, wanted)]}

    def _stream_log(self, handler: BaseHTTPRequestHandler, path: str, query: dict[str, str]) -> None:
        match = re.match(r"^/api/v1/namespaces/([^/]+)/pods/([^/]+)/log$", path)
        with self.lock:
            pod = next((p for job in self.all_jobs for p in job.pods
                        if match and (p.namespace, p.name) == match.groups() and p.phase != "Deleted"), None)
        if pod is None:
            raise ApiError(404, "NotFound", f"pods \"{match.group(2) if match else path}\" not found")
        wanted = query.get("container")
        containers = [*pod.init, *pod.main]
        container = next((c for c in containers if c.name == wanted), None) if wanted else (pod.main[0] if pod.main else None)
        if container is None:
            raise ApiError(400, "BadRequest", f"container {wanted} is not valid for pod {pod.name}")
        if "waiting" in container.state:
            reason = container.state["waiting"].get("reason", "ContainerCreating")
            raise ApiError(400, "BadRequest", f"container \"{container.name}\" in pod \"{pod.name}\" is waiting to start: "
                                              f"{reason}")
        follow = query.get("follow") == "true"
        tail = int(query["tailLines"]) if query.get("tailLines") else None
        handler.send_response(200)
        handler.send_header("Content-Type", "text/plain")
        handler.send_header("Connection", "close")
        handler.end_headers()
        handler.close_connection = True
        with self.lock:
            sent = max(0, len(container.log) - tail) if tail is not None else 0
        try:
            while True:
                with self.changed:
                    lines = container.log[sent:]
                    ended = "terminated" in container.state
                    if not lines and follow and not ended:
                        self.changed.wait(0.5)
                        continue
                for line in lines:
                    handler.wfile.write(line.encode() + b"\n")
                handler.wfile.flush()
                sent += len(lines)
                if not follow or (ended and not lines):
                    return
        except (BrokenPipeError, ConnectionResetError):
            return

    # -- the Job controller ---------------------------------------------------------------------

    def _create_job(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        name = (body.get("metadata") or {}).get("name") or ""
        given = (body.get("metadata") or {}).get("namespace")
        if given and given != namespace:
            raise ApiError(400, "BadRequest", "the namespace of the provided object does not match the namespace sent "
                                              "on the request")
        problems = job_problems(body) + self._inline_secrets(body)
        if problems:
            raise _invalid("Job.batch", name, problems)
        with self.lock:
            if (namespace, name) in self.jobs:
                raise ApiError(409, "AlreadyExists", f"jobs.batch \"{name}\" already exists")
            job = FakeJob(json.loads(json.dumps(body)), namespace)
            self.jobs[(namespace, name)] = job
            self.all_jobs.append(job)
        self._spawn(self._control, job, name=f"fake-job-{name}")
        return job.json()

    def _spawn(self, target: Any, *args: Any, name: str) -> None:
        """Run ``target`` in a thread :meth:`stop_work` joins (none once the cluster has stopped)."""
        thread = threading.Thread(target=target, args=args, name=name, daemon=True)
        with self.lock:
            if self._stopped:
                return
            self._workers.append(thread)
        thread.start()

    def _inline_secrets(self, body: dict[str, Any]) -> list[str]:
        """The tripwire: a Secret's value sent as a plain env value."""
        values = {v: f"Secret {ns}/{n} key {k}" for (ns, n), data in self.secrets.items() for k, v in data.items()
                  if len(v) >= 8}
        pod = ((body.get("spec") or {}).get("template") or {}).get("spec") or {}
        problems = []
        for container in [*(pod.get("initContainers") or []), *(pod.get("containers") or [])]:
            for item in container.get("env") or []:
                if item.get("value") in values:
                    problems.append(f"spec.template.spec.containers.env[{item.get('name')}].value: Forbidden: fake: the "
                                    f"value of {values[item['value']]} inline, where a secretKeyRef was due")
            words = " ".join([*(container.get("command") or []), *(container.get("args") or [])])
            problems += [f"spec.template.spec.containers.command: Forbidden: fake: the value of {where} inline"
                         for value, where in values.items() if value in words]
        return problems

    def _control(self, job: FakeJob) -> None:
        spec = job.spec
        completions = int(spec.get("completions") or 1)
        parallelism = int(spec.get("parallelism", 1))
        per_index = spec.get("backoffLimitPerIndex")
        max_failed = spec.get("maxFailedIndexes")
        rules = (spec.get("podFailurePolicy") or {}).get("rules") or []
        queue = list(range(completions))
        running: dict[int, threading.Thread] = {}
        with self.changed:
            job.started = _now()
        while True:
            with self.changed:
                if job.deleting or job.ended() or self._stopped:
                    break
                for index in [i for i, t in running.items() if not t.is_alive()]:
                    del running[index]
                    pod = [p for p in job.pods if p.index == index][-1]
                    self._account(job, pod, rules, per_index, queue)
                if max_failed is not None and len(job.failed) > max_failed:
                    self._finish(job, "Failed", "MaxFailedIndexesExceeded", "Job has exceeded the specified maximal "
                                 "number of failed indexes")
                    break
                if not queue and not running:
                    if job.failed:
                        self._finish(job, "Failed", "FailedIndexes", "Job has failed indexes")
                    else:
                        self._finish(job, "Complete", "CompletionsReached", "Reached expected number of succeeded pods")
                    break
                while queue and len(running) < parallelism:
                    index = queue.pop(0)
                    pod = self._new_pod(job, index)
                    thread = threading.Thread(target=self._run_pod, args=(pod,), name=f"fake-pod-{pod.name}",
                                              daemon=True)
                    running[index] = thread
                    self._workers.append(thread)  # under the lock: stop_work joins it
                    thread.start()
                self.changed.wait(0.2)
        # The Job ended (or is being deleted): its pods still running are stopped (by stop_work
        # when the cluster has stopped).
        if self._stopped:
            return
        for pod in list(job.pods):
            if pod.phase in ("Pending", "Running"):
                self._stop_pod(pod, "deleted" if job.deleting else "job ended")

    def _account(self, job: FakeJob, pod: FakePod, rules: list[dict[str, Any]], per_index: int | None,
                 queue: list[int]) -> None:
        """A pod of ``job`` ended: count it as Kubernetes' Job controller does."""
        index = pod.index
        if pod.phase == "Succeeded":
            job.completed.add(index)
            return
        action = _policy_action(rules, pod)
        if action == "Ignore":
            job.ignored[index] = job.ignored.get(index, 0) + 1
            queue.insert(0, index)
            return
        job.pod_failures += 1
        if action == "FailJob":
            self._finish(job, "Failed", "PodFailurePolicy", f"Container of pod {pod.name} matched a FailJob rule")
            return
        if action == "FailIndex":
            job.failed.add(index)
            return
        job.failures[index] = job.failures.get(index, 0) + 1
        limit = per_index if per_index is not None else int(job.spec.get("backoffLimit", 6))
        if job.failures[index] > limit:
            job.failed.add(index)
        else:
            queue.insert(0, index)

    def _finish(self, job: FakeJob, kind: str, reason: str, message: str) -> None:
        job.finished = _now()
        job.conditions.append({"type": kind, "status": "True", "reason": reason, "message": message,
                               "lastTransitionTime": job.finished})
        self.changed.notify_all()

    def _new_pod(self, job: FakeJob, index: int) -> FakePod:
        template = job.body["spec"]["template"]
        labels = {**((template.get("metadata") or {}).get("labels") or {}), JOB_NAME_KEY: job.name, "job-name": job.name,
                  "batch.kubernetes.io/controller-uid": job.uid, "controller-uid": job.uid, INDEX_KEY: str(index)}
        annotations = {INDEX_KEY: str(index), FAILURES_KEY: str(job.failures.get(index, 0)),
                       IGNORED_KEY: str(job.ignored.get(index, 0))}
        name = f"{job.name}-{index}-{random.token_hex(3)[:5]}"
        spec = json.loads(json.dumps(template["spec"]))
        gpus = int((((spec["containers"][0].get("resources") or {}).get("limits") or {}).get("nvidia.com/gpu")) or 0)
        pod = FakePod(name, job.namespace, job.name, index, spec, labels, annotations, self.workdir / job.namespace / name,
                      gpus=gpus)
        pod.init = [FakeContainer(c["name"]) for c in spec.get("initContainers") or []]
        pod.main = [FakeContainer(c["name"]) for c in spec["containers"]]
        job.pods.append(pod)
        self.changed.notify_all()
        return pod

    # -- pods -----------------------------------------------------------------------------------

    def _run_pod(self, pod: FakePod) -> None:
        if not self._schedule(pod):
            return
        try:
            self._start(pod)
        finally:
            with self.changed:
                self._gpus_used -= pod.gpus
                self.changed.notify_all()

    def _schedule(self, pod: FakePod) -> bool:
        """Wait for the node to have the pod's GPUs free (``Unschedulable`` meanwhile)."""
        with self.changed:
            while self.gpus is not None and self._gpus_used + pod.gpus > self.gpus:
                if pod.stop_reason or self._stopped:
                    pod.phase = "Failed"
                    return False
                if not pod.conditions:
                    pod.conditions = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                       "message": "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."}]
                self.changed.wait(0.5)
            self._gpus_used += pod.gpus
            pod.conditions = [{"type": "PodScheduled", "status": "True"}]
            pod.started = _now()
            self.changed.notify_all()
        return True

    def _start(self, pod: FakePod) -> None:
        (pod.folder / "work").mkdir(parents=True, exist_ok=True)
        deadline = pod.spec.get("activeDeadlineSeconds")
        timer = threading.Timer(float(deadline), self._stop_pod, args=(pod, "deadline")) if deadline else None
        if timer:
            timer.daemon = True
            timer.start()
        try:
            mounts = self._mounts(pod)
            if mounts is None:
                self._wait_for_stop(pod)  # a volume that cannot be mounted: ContainerCreating until stopped
                return
            for spec, container in zip(pod.spec.get("initContainers") or [], pod.init):
                code = self._run_container(pod, spec, container, mounts)
                if code is None:
                    self._wait_for_stop(pod)
                    return
                if code != 0:
                    self._end_pod(pod, "Failed")
                    return
            spec, container = pod.spec["containers"][0], pod.main[0]
            code = self._run_container(pod, spec, container, mounts)
            if code is None:
                self._wait_for_stop(pod)  # a Secret that does not exist: CreateContainerConfigError until stopped
                return
            self._end_pod(pod, "Succeeded" if code == 0 else "Failed")
        finally:
            if timer:
                timer.cancel()

    def _wait_for_stop(self, pod: FakePod) -> None:
        with self.changed:
            while not (pod.stop_reason or self._stopped):
                self.changed.wait(0.5)
        self._end_pod(pod, "Failed")

    def _end_pod(self, pod: FakePod, phase: str) -> None:
        with self.changed:
            pod.phase = phase
            if pod.stop_reason == "deadline":
                pod.reason, pod.message = "DeadlineExceeded", "Pod was active on the node longer than the specified deadline"
            self.changed.notify_all()

    def _mounts(self, pod: FakePod) -> dict[str, str] | None:
        """Each volume as a folder of the pod; mount path -> local folder (None: cannot be mounted)."""
        folders: dict[str, Path] = {}
        for volume in pod.spec.get("volumes") or []:
            name = volume["name"]
            if "persistentVolumeClaim" in volume:
                claim = volume["persistentVolumeClaim"]["claimName"]
                if claim not in self.claims:
                    self._wait(pod, "ContainerCreating", f"persistentvolumeclaim \"{claim}\" not found")
                    return None
                folders[name] = self.claims[claim]
                continue
            local = pod.folder / "volumes" / name
            local.mkdir(parents=True, exist_ok=True)
            sources = [s["configMap"] for s in (volume.get("projected") or {}).get("sources") or [] if "configMap" in s]
            if "configMap" in volume:
                sources.append(volume["configMap"])
            for source in sources:
                found = self.config_maps.get((pod.namespace, source["name"]))
                if found is None:
                    self._wait(pod, "ContainerCreating", f"configmap \"{source['name']}\" not found")
                    return None
                for key, value in (found.get("data") or {}).items():
                    (local / key).write_text(value)
                for key, value in (found.get("binaryData") or {}).items():
                    (local / key).write_bytes(base64.b64decode(value))
                (local / "..data").mkdir(exist_ok=True)  # as the kubelet's atomic writer leaves it
            folders[name] = local
        mounts = {}
        for container in [*(pod.spec.get("initContainers") or []), *pod.spec["containers"]]:
            for mount in container.get("volumeMounts") or []:
                mounts[mount["mountPath"]] = str(folders[mount["name"]])
        return mounts

    def _wait(self, pod: FakePod, reason: str, message: str) -> None:
        with self.changed:
            for container in [*pod.init, *pod.main]:
                container.state = {"waiting": {"reason": reason, "message": message}}
            self.changed.notify_all()

    def _environment(self, pod: FakePod, spec: dict[str, Any]) -> dict[str, str] | None:
        env = {**container_env(pod.folder), "HF_HOME": str(pod.folder / "hf-home"), "HOSTNAME": pod.name, **self.job_env}
        with_image(env, self.images.get(spec["image"], {}))
        for item in spec.get("env") or []:
            if "value" in item:
                env[item["name"]] = item["value"]
                continue
            ref = (item.get("valueFrom") or {}).get("secretKeyRef") or {}
            data = self.secrets.get((pod.namespace, ref.get("name", "")))
            if data is None or ref.get("key") not in data:
                what = f"secret \"{ref.get('name')}\" not found" if data is None else \
                    f"couldn't find key {ref.get('key')} in Secret {pod.namespace}/{ref.get('name')}"
                self._wait(pod, "CreateContainerConfigError", what)
                return None
            env[item["name"]] = data[ref["key"]]
        env.update(self.index_env.get(pod.index, {}))
        if pod.annotations.get(FAILURES_KEY) == "0" and pod.annotations.get(IGNORED_KEY) == "0":
            env.update(self.first_attempt_env.get(pod.index, {}))
        env["JOB_COMPLETION_INDEX"] = str(pod.index)
        return env

    def _run_container(self, pod: FakePod, spec: dict[str, Any], container: FakeContainer,
                       mounts: dict[str, str]) -> int | None:
        env = self._environment(pod, spec)
        if env is None:
            return None
        if container in pod.main:
            pod.env = env
        words = map_words([*(spec.get("command") or []), *(spec.get("args") or [])], mounts)
        with self.changed:
            if pod.stop_reason or self._stopped:
                container.state = {"terminated": {"exitCode": 143, "reason": "Error", "startedAt": _now(),
                                                  "finishedAt": _now()}}
                return 143
            seen = Descendants()
            try:
                process = subprocess.Popen(words, env=seen.marked(self.marked(env)), cwd=pod.folder / "work",
                                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
            except OSError as exc:
                container.state = {"terminated": {"exitCode": 128, "reason": "StartError", "message": str(exc),
                                                  "startedAt": _now(), "finishedAt": _now()}}
                self.changed.notify_all()
                return 128
            container.process = process
            container.state = {"running": {"startedAt": _now()}}
            pod.phase = "Running"
            self.changed.notify_all()
        started = container.state["running"]["startedAt"]
        assert process.stdout is not None
        for raw in process.stdout:
            with self.changed:
                container.log.append(raw.decode("utf-8", "replace").rstrip("\n"))
                self.changed.notify_all()
        code = process.wait()
        seen.kill()  # the container ends with its main process: nothing it started outlives it
        exit_code = code if code >= 0 else 128 - code
        reason = "Completed" if exit_code == 0 else "OOMKilled" if pod.stop_reason == "oom" else "Error"
        with self.changed:
            container.state = {"terminated": {"exitCode": exit_code, "reason": reason, "startedAt": started,
                                              "finishedAt": _now()}}
            self.changed.notify_all()
        return exit_code

    def _stop_pod(self, pod: FakePod, reason: str) -> None:
        """SIGTERM to each running container's main process, SIGKILL to all of it after the grace period."""
        with self.changed:
            pod.stop_reason = pod.stop_reason or reason
            processes = [c.process for c in [*pod.init, *pod.main] if c.process is not None and c.process.poll() is None]
            if not processes and pod.phase == "Pending":
                pod.phase = "Failed"  # never started: nothing to stop
                for container in [*pod.init, *pod.main]:
                    container.state = {"terminated": {"exitCode": 137, "reason": "ContainerStatusUnknown",
                                                      "startedAt": _now(), "finishedAt": _now()}}
            self.changed.notify_all()
        grace = self.grace_s if self.grace_s is not None else float(pod.spec.get("terminationGracePeriodSeconds", 30))
        for process in processes:
            tree = process_tree(process.pid)
            try:
                process.send_signal(signal.SIGTERM)
            except ProcessLookupError:
                continue

            def kill_all(process: subprocess.Popen[bytes] = process, tree: list[psutil.Process] = tree) -> None:
                for proc in tree + process_tree(process.pid):
                    try:
                        proc.send_signal(signal.SIGKILL)
                    except psutil.NoSuchProcess:
                        pass

            timer = threading.Timer(grace, kill_all)
            timer.daemon = True
            timer.start()

    def _delete_job(self, job: FakeJob, policy: str) -> None:
        with self.changed:
            job.deleting = _now()
            self.changed.notify_all()
        pods = [p for p in job.pods if p.phase in ("Pending", "Running")]
        if policy != "Orphan":
            for pod in pods:
                self._stop_pod(pod, "deleted")

        def remove() -> None:
            # Foreground: the Job goes once its pods are gone; Background: at once, its pods after.
            with self.changed:
                if policy != "Foreground":
                    self.jobs.pop((job.namespace, job.name), None)
                while policy != "Orphan" and any(p.phase in ("Pending", "Running") for p in job.pods):
                    self.changed.wait(0.5)
                self.jobs.pop((job.namespace, job.name), None)
                if policy != "Orphan":
                    for pod in job.pods:
                        pod.phase = "Deleted"
                self.changed.notify_all()

        threading.Thread(target=remove, daemon=True).start()


# ------------------------------------------------------------------------------------------------


def _resources(*entries: tuple[str, str, bool, list[str]]) -> list[dict[str, Any]]:
    return [{"name": name, "singularName": "", "namespaced": namespaced, "kind": kind, "verbs": verbs}
            for name, kind, namespaced, verbs in entries]


#: The discovery documents kubectl reads before it applies objects (the legacy forms: a server that
#: does not answer the aggregated ones is asked these, as older API servers are).
DISCOVERY: dict[str, Any] = {
    "/version": {"major": "1", "minor": "33", "gitVersion": "v1.33.0", "platform": "linux/amd64"},
    "/api": {"kind": "APIVersions", "versions": ["v1"],
             "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}]},
    "/apis": {"kind": "APIGroupList", "apiVersion": "v1", "groups": [
        {"name": group, "versions": [{"groupVersion": f"{group}/v1", "version": "v1"}],
         "preferredVersion": {"groupVersion": f"{group}/v1", "version": "v1"}}
        for group in ("batch", "authorization.k8s.io")]},
    "/api/v1": {"kind": "APIResourceList", "groupVersion": "v1", "resources": _resources(
        ("configmaps", "ConfigMap", True, ["create", "get", "list"]), ("pods", "Pod", True, ["get", "list"]),
        ("pods/log", "Pod", True, ["get"]), ("serviceaccounts", "ServiceAccount", True, ["get"]),
        ("namespaces", "Namespace", False, ["get"]))},
    "/apis/batch/v1": {"kind": "APIResourceList", "groupVersion": "batch/v1", "resources": _resources(
        ("jobs", "Job", True, ["create", "delete", "get", "list"]))},
    "/apis/authorization.k8s.io/v1": {"kind": "APIResourceList", "groupVersion": "authorization.k8s.io/v1",
                                      "resources": _resources(("selfsubjectaccessreviews", "SelfSubjectAccessReview",
                                                               False, ["create"]))},
}


def _invalid(kind: str, name: str, problems: list[str]) -> ApiError:
    causes = [{"reason": "FieldValueInvalid", "field": p.split(":")[0], "message": p} for p in problems]
    return ApiError(422, "Invalid", f"{kind} \"{name}\" is invalid: {'; '.join(problems)}", causes)


def _selector(text: str) -> dict[str, str]:
    return dict(part.split("=", 1) for part in text.split(",") if "=" in part)


def _matches(labels: dict[str, str], wanted: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in wanted.items())


def _policy_action(rules: list[dict[str, Any]], pod: FakePod) -> str:
    """The first rule of a pod failure policy the failed pod matches (``Count`` if none)."""
    conditions = {(c["type"], c.get("status", "True")) for c in pod.conditions}
    codes = {c.name: c.state.get("terminated", {}).get("exitCode") for c in [*pod.init, *pod.main]}
    for rule in rules:
        for pattern in rule.get("onPodConditions") or []:
            if (pattern["type"], pattern.get("status", "True")) in conditions:
                return str(rule["action"])
        on_codes = rule.get("onExitCodes")
        if on_codes:
            names = [on_codes["containerName"]] if on_codes.get("containerName") else list(codes)
            values = set(on_codes["values"])
            for name in names:
                code = codes.get(name)
                if code is None or code == 0:
                    continue
                if (on_codes["operator"] == "In") == (code in values):
                    return str(rule["action"])
    return "Count"
