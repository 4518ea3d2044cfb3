"""The Kubernetes objects of an llm-ocr service (docs/service.md, "Kubernetes"): what
``llm-ocr service --k8s-manifests`` prints for ``kubectl apply -f -``.

Pure functions, no API call, the same checks of names and secret references as the launcher's
Job (:mod:`llm_ocr.launchers.k8s.manifest`). The objects:

- a gateway ``Deployment`` (``llm-ocr service --no-worker``, probes on ``/readyz`` and
  ``/healthz``) and a ``Service`` in front of it;
- a worker ``Deployment`` (``llm-ocr worker``) and a ``HorizontalPodAutoscaler`` (``autoscaling/v2``)
  scaling it on the queue depth the gateways export at ``/metrics``
  (``llm_ocr_service_queue_depth``), read as an **External** metric: a target of ``AverageValue``
  = the documents one worker reads at once, so the autoscaler asks for
  ``ceil(queued / concurrency)`` workers (Kubernetes docs, "HorizontalPodAutoscaler Walkthrough",
  "Autoscaling on metrics not related to Kubernetes objects",
  https://kubernetes.io/docs/tasks/run-application/horizontal-pod-autoscale-walkthrough/#autoscaling-on-metrics-not-related-to-kubernetes-objects).
  The metric reaches the autoscaler through a metrics adapter; the Prometheus Adapter's
  ``externalRules`` (https://github.com/kubernetes-sigs/prometheus-adapter/blob/master/docs/externalmetrics.md)
  with ``max`` over the gateways, since every gateway reads the same depth from the database.
  Chosen over KEDA's ``ScaledObject``: it is a built-in API object, so it is checked against
  Kubernetes' own schemas like the rest, and it needs no operator beyond the adapter a cluster
  with Prometheus usually has;
- PostgreSQL and object storage are the user's (a managed database, or one in the cluster): the
  database's URL reaches both Deployments only as a ``secretKeyRef``, as do the API token and any
  store credentials (``--k8s-secret-ref``). No value of a secret is ever written here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from llm_ocr.launchers.core.spec import LaunchError
from llm_ocr.launchers.k8s.manifest import (
    CONTAINER,
    TERMINATION_GRACE_S,
    SecretRef,
    check_label_name,
    check_quantity,
    parse_secret_refs,
)

#: The variables the service reads its database URL and its API token from (llm_ocr.service.config).
DATABASE_VARIABLE = "LLM_OCR_SERVICE_DATABASE"
TOKEN_VARIABLE = "LLM_OCR_SERVICE_TOKEN"  # noqa: S105 - a variable's name
#: The gauge the gateways export and the autoscaler scales the workers on (llm_ocr.service.metrics).
QUEUE_METRIC = "llm_ocr_service_queue_depth"
PORT = 8080
APP_LABEL = "app.kubernetes.io/name"
COMPONENT_LABEL = "app.kubernetes.io/component"


@dataclass
class ServiceDeploy:
    """What the service's objects are made of (the command's options, checked by :func:`service_manifests`)."""

    image: str
    store: str
    namespace: str = "llm-ocr"
    name: str = "llm-ocr"
    endpoint: str | None = None
    gateways: int = 2
    min_workers: int = 1
    max_workers: int = 10
    #: Documents one worker reads at once: written into its command, and the autoscaler's target
    #: of queued documents per worker (the command resolves a default from the in-flight limit).
    concurrency: int = 128
    #: The worker's ``--max-in-flight`` (None: its default).
    max_in_flight: int | None = None
    lease: float = 30.0
    database_secret: str = "llm-ocr-database:url"  # noqa: S105 - a Secret's name and key
    token_secret: str = "llm-ocr-token:token"  # noqa: S105 - a Secret's name and key
    secret_refs: Sequence[str] = ()
    worker_gpus: int = 0
    worker_cpu: str | None = None
    worker_memory: str | None = None
    extra_worker_args: list[str] = field(default_factory=list)


def _ref(value: str, variable: str, option: str) -> SecretRef:
    """``SECRET:KEY`` -> the reference (the launcher's parser, so the same names are refused)."""
    secret, sep, key = value.partition(":")
    if not sep or not key:
        raise LaunchError(f"{option} {value!r}: write SECRET:KEY (the Kubernetes Secret and its key holding it)")
    return parse_secret_refs([f"{variable}={secret}:{key}"])[variable]


def _labels(deploy: ServiceDeploy, component: str) -> dict[str, str]:
    return {APP_LABEL: deploy.name, COMPONENT_LABEL: component}


def _deployment(deploy: ServiceDeploy, component: str, replicas: int, container: dict[str, Any],
                grace_s: int) -> dict[str, Any]:
    labels = _labels(deploy, component)
    pod: dict[str, Any] = {"terminationGracePeriodSeconds": grace_s, "containers": [container]}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": f"{deploy.name}-{component}", "namespace": deploy.namespace, "labels": labels},
        "spec": {"replicas": replicas, "selector": {"matchLabels": dict(labels)},
                 "template": {"metadata": {"labels": dict(labels)}, "spec": pod}},
    }


def service_manifests(deploy: ServiceDeploy) -> list[dict[str, Any]]:
    """The service's objects: gateway Deployment and Service, worker Deployment and its autoscaler.

    :class:`LaunchError` names an option the API server would refuse, or a ``store`` every pod
    could not share (a local folder)."""
    check_label_name(deploy.namespace, "--k8s-namespace")
    check_label_name(f"{deploy.name}-gateway", "the gateway's name")
    if "://" not in deploy.store or deploy.store.startswith("file://"):
        raise LaunchError(f"--store {deploy.store!r}: on Kubernetes documents and results must be on an object store "
                          "every pod reaches (s3://, gs://, az://...), not a pod's folder")
    if not deploy.image:
        raise LaunchError("--k8s-image: give an image with llm-ocr[service,postgres] installed")
    if not 1 <= deploy.min_workers <= deploy.max_workers:
        raise LaunchError(f"--k8s-workers {deploy.min_workers}:{deploy.max_workers}: write MIN:MAX with "
                          "1 <= MIN <= MAX (the autoscaler keeps at least one worker)")
    if deploy.gateways < 1 or deploy.concurrency < 1:
        raise LaunchError("--k8s-gateways and --concurrency must be at least 1")
    for value, what in ((deploy.worker_cpu, "--k8s-worker-cpu"), (deploy.worker_memory, "--k8s-worker-memory")):
        if value:
            check_quantity(value, what)
    database = _ref(deploy.database_secret, DATABASE_VARIABLE, "--k8s-database-secret").env(DATABASE_VARIABLE)
    token = _ref(deploy.token_secret, TOKEN_VARIABLE, "--k8s-token-secret").env(TOKEN_VARIABLE)
    refs = parse_secret_refs(deploy.secret_refs)
    for variable in (DATABASE_VARIABLE, TOKEN_VARIABLE):
        if variable in refs:
            raise LaunchError(f"--k8s-secret-ref {variable}: given by --k8s-database-secret / --k8s-token-secret")
    shared = [ref.env(name) for name, ref in refs.items()]

    probe = {"httpGet": {"path": "/readyz", "port": PORT}, "periodSeconds": 10}
    gateway = {
        "name": CONTAINER, "image": deploy.image,
        "command": ["llm-ocr", "service", "--no-worker", "--host", "0.0.0.0", "--port", str(PORT),  # noqa: S104 - the pod's
                    "--store", deploy.store],
        "env": [database, token, *shared],
        "ports": [{"name": "http", "containerPort": PORT}],
        "readinessProbe": probe,
        "livenessProbe": {"httpGet": {"path": "/healthz", "port": PORT}, "periodSeconds": 20, "failureThreshold": 3},
    }
    worker_command = ["llm-ocr", "worker", "--store", deploy.store, "--concurrency", str(deploy.concurrency),
                      "--lease", f"{deploy.lease:g}"]
    if deploy.max_in_flight:
        worker_command += ["--max-in-flight", str(deploy.max_in_flight)]
    if deploy.endpoint:
        worker_command += ["--endpoint", deploy.endpoint]
    worker: dict[str, Any] = {"name": CONTAINER, "image": deploy.image,
                              "command": worker_command + list(deploy.extra_worker_args),
                              "env": [database, *shared]}
    requests = {key: value for key, value in (("cpu", deploy.worker_cpu), ("memory", deploy.worker_memory)) if value}
    limits = dict(requests)
    if deploy.worker_gpus:
        limits["nvidia.com/gpu"] = str(deploy.worker_gpus)
    if limits:
        worker["resources"] = {"limits": limits, **({"requests": requests} if requests else {})}
    # A stopped worker finishes its pages in flight and hands its documents back: give it the
    # lease's length before SIGKILL (a killed one's documents wait for their lease to lapse).
    worker_grace = max(TERMINATION_GRACE_S, int(deploy.lease) + 10)
    workers = _deployment(deploy, "worker", deploy.min_workers, worker, worker_grace)
    gateway_labels = _labels(deploy, "gateway")
    return [
        _deployment(deploy, "gateway", deploy.gateways, gateway, TERMINATION_GRACE_S),
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": deploy.name, "namespace": deploy.namespace, "labels": dict(gateway_labels)},
            "spec": {"selector": dict(gateway_labels),
                     "ports": [{"name": "http", "port": PORT, "targetPort": "http"}]},
        },
        workers,
        {
            "apiVersion": "autoscaling/v2",
            "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": f"{deploy.name}-worker", "namespace": deploy.namespace,
                         "labels": _labels(deploy, "worker")},
            "spec": {
                "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": workers["metadata"]["name"]},
                "minReplicas": deploy.min_workers,
                "maxReplicas": deploy.max_workers,
                "metrics": [{"type": "External", "external": {
                    "metric": {"name": QUEUE_METRIC},
                    "target": {"type": "AverageValue", "averageValue": str(deploy.concurrency)},
                }}],
                # A worker scaled down hands its documents back: wait out a short lull first.
                "behavior": {"scaleDown": {"stabilizationWindowSeconds": 300}},
            },
        },
    ]


def parse_worker_range(text: str) -> tuple[int, int]:
    """``MIN:MAX`` (or ``N``: that many, fixed) -> the autoscaler's bounds."""
    low, sep, high = text.partition(":")
    try:
        return (int(low), int(high)) if sep else (int(low), int(low))
    except ValueError:
        raise LaunchError(f"--k8s-workers {text!r}: write MIN:MAX, e.g. 1:10") from None
