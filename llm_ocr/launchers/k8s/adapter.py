"""Kubernetes: every shard an index of one Indexed Job, through the official ``kubernetes`` client.

Calls (``kubernetes`` 37; routes of the Kubernetes API, "API Reference"): ``AuthorizationV1Api.
create_self_subject_access_review`` (``POST /apis/authorization.k8s.io/v1/selfsubjectaccessreviews``:
may this user create Jobs, ConfigMaps, read pods and their logs in the namespace?),
``CoreV1Api.read_namespaced_service_account``, ``create_namespaced_config_map`` (the code),
``BatchV1Api.create_namespaced_job`` (``POST /apis/batch/v1/namespaces/NS/jobs``); later
``read_namespaced_job``, ``CoreV1Api.list_namespaced_pod`` (``labelSelector=batch.kubernetes.io/
job-name=NAME``), ``read_namespaced_pod_log`` (``container=llm-ocr``, ``follow``, ``tailLines``)
and ``delete_namespaced_job`` (``propagationPolicy=Foreground``: the pods are stopped, SIGTERM then
SIGKILL after their grace period, before the Job goes).

Credentials: the kubeconfig kubectl uses (``KUBECONFIG``, else ``~/.kube/config``; ``--context``
picks one of its contexts), or the pod's service account when the launcher itself runs in the
cluster. The namespace is ``--namespace``, else the context's, else ``default``.

One launch is one Job (:mod:`llm_ocr.launchers.k8s.manifest` says what is in it and why), named
``PREFIX-LAUNCH_ID``; its index i runs the i-th shard it was given, so a relaunch of the unfinished
shards is a new, smaller Job. The Job is one entry of the launch record (``jobs cancel --shard``
cannot stop one index alone: a Job has no such call), and its pods' states give each shard's
(:mod:`llm_ocr.launchers.k8s.state`).

INPUT and OUT are URLs the pods can reach (``s3://``, ``gs://``, ``hf://``) with the credentials
their service account has (IRSA, Workload Identity) or the Secrets the user names
(``--secret-ref AWS_SECRET_ACCESS_KEY=aws:secret``: a ``secretKeyRef``, never a value). A local
path is refused unless it lies under a ``--pvc CLAIM:PATH`` the user says every pod mounts with
the same files as this machine (a ReadWriteMany volume, e.g. NFS).
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, ClassVar

from fsspec.core import split_protocol
from pydantic import BaseModel, Field

from llm_ocr.container.shard_index import NUM_SHARDS_ENV
from llm_ocr.costs import Hardware
from llm_ocr.launchers.core.adapter import JobState, Phase, PlatformOptions, Submission
from llm_ocr.launchers.core.command import CPU_IMAGE, extras_for, install_then_run, with_extras
from llm_ocr.launchers.core.files import LOCAL_PROTOCOLS
from llm_ocr.launchers.core.images import image_note, launch_image
from llm_ocr.launchers.core.spec import LaunchError, LaunchRequest, PlannedJob, ShardSpec, Target
from llm_ocr.launchers.core.wheel import wheel_to_ship
from llm_ocr.launchers.k8s.manifest import (
    CONTAINER,
    GRACE_PERIOD_S,
    PodShape,
    check_label_name,
    check_quantity,
    check_subdomain,
    code_config_maps,
    job_manifest,
    job_name,
    parse_claims,
    parse_node_selector,
    parse_secret_refs,
    parse_tolerations,
    split_wheel,
    to_yaml,
)
from llm_ocr.launchers.k8s.state import JOB_NAME_LABEL, attempt_order, index_of, index_states, job_state, now_utc
from llm_ocr.storage.stores import scrub

log = logging.getLogger("llm_ocr")

#: Where a pod finds its own namespace (the launcher running inside the cluster).
_POD_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
_LOG_POLL_S = 2.0
#: Seconds one API call may take.
_REQUEST_TIMEOUT_S = 60


class K8sOptions(PlatformOptions):
    """Kubernetes: ``llm-ocr launch k8s`` options (``llm_ocr.launch`` keywords)."""

    namespace: str | None = Field(None, description="Namespace of the Job (default: the kubeconfig context's, else "
                                  "default).")
    context: str | None = Field(None, description="kubeconfig context to use (default: the current one).")
    gpus_per_pod: int | None = Field(None, ge=0, description="GPUs per shard pod, the nvidia.com/gpu limit (default 1, "
                                     "0 for assemble and --endpoint runs).")
    gpu_type: str | None = Field(None, description="The GPU's name for the status table, e.g. L4 (pick the nodes with "
                                 "--node-selector).", json_schema_extra={"metavar": "TYPE"})
    cpu: str | None = Field(None, description="CPU request and limit per pod, e.g. 8 (default: none).")
    memory: str | None = Field(None, description="Memory request and limit per pod, e.g. 32Gi (default: none).")
    parallelism: int | None = Field(None, ge=1, description="Pods running at once (default: all shards).")
    max_failed_shards: int | None = Field(
        None, ge=0, description="Stop the whole Job once more than this many shards have failed (maxFailedIndexes; "
        "default: every shard runs to its end).",
    )
    node_selector: list[str] = Field(
        default_factory=list, description="Node label the pods must run on, e.g. "
        "cloud.google.com/gke-accelerator=nvidia-l4.", json_schema_extra={"metavar": "KEY=VALUE", "repeat": True},
    )
    toleration: list[str] = Field(
        default_factory=list, description="Taint the pods tolerate, as kubectl taint writes it: KEY[=VALUE][:EFFECT] "
        "(nvidia.com/gpu is tolerated with a GPU).", json_schema_extra={"metavar": "TAINT", "repeat": True},
    )
    service_account: str | None = Field(None, description="The pods' service account (their cloud identity, e.g. "
                                        "IRSA or Workload Identity for s3:// or gs://).")
    secret_ref: list[str] = Field(
        default_factory=list, description="Env var NAME in the pods from key KEY (default NAME) of the Kubernetes "
        "Secret SECRET.", json_schema_extra={"metavar": "NAME=SECRET[:KEY]", "repeat": True},
    )
    image_pull_secret: str | None = Field(None, description="Secret holding the registry credentials of --image.")
    pvc: list[str] = Field(
        default_factory=list, description="PersistentVolumeClaim every pod mounts at PATH, where this machine has the "
        "same files (a ReadWriteMany volume): local INPUT and OUT under PATH are then allowed.",
        json_schema_extra={"metavar": "CLAIM:PATH", "repeat": True},
    )
    price_per_hour: float | None = Field(None, ge=0, description="Your price of one pod-hour (its GPUs and the "
                                         "rest), for the cost table (default: unknown).")
    job_name: str | None = Field(None, description="Job name prefix (default llm-ocr-STAGE; the launch id follows).")
    yaml: bool = Field(False, description="With --dry-run: print the Job (and the code's ConfigMaps) as YAML for "
                       "`kubectl apply -f -` instead of the JSON.")


class Kubernetes:
    """The Kubernetes adapter (see the module docstring)."""

    name: ClassVar[str] = "k8s"
    shard_env: ClassVar[bool] = False
    hardware_option: ClassVar[str] = "gpu_type"
    options: ClassVar[type[BaseModel]] = K8sOptions
    #: Local INPUT and OUT reach the core: :meth:`resolve` allows them only under a ``--pvc`` every
    #: pod mounts, and says so (the core's own refusal would not name the way out).
    shared_filesystem: ClassVar[bool] = True

    def __init__(self, **options: Any) -> None:
        """``options``: :class:`K8sOptions` fields."""
        self.given = K8sOptions.model_validate(options)
        #: Following a launch from its record (its context may not be in this machine's kubeconfig).
        self.following = False
        self._apis: dict[str, Any] | None = None
        self._namespace: str | None = self.given.namespace
        #: job name -> shard -> the state of the index running it (filled by states()).
        self._indexes: dict[str, dict[int, JobState]] = {}

    @classmethod
    def from_record(cls, info: dict[str, Any]) -> Kubernetes:
        """An adapter following the Job of a launch record (this machine's kubeconfig, the record's
        namespace and, if this kubeconfig has it, its context)."""
        adapter = cls(namespace=info.get("namespace"), context=info.get("context"))
        adapter.following = True
        return adapter

    # -- the client -----------------------------------------------------------------------------

    def _api(self, kind: str) -> Any:
        if self._apis is None:
            try:
                from kubernetes import client, config
            except ImportError as exc:
                raise LaunchError("llm-ocr launch k8s needs the kubernetes client: pip install 'llm-ocr[k8s]'") from exc
            configuration = client.Configuration()
            try:
                if _in_cluster():
                    config.load_incluster_config(client_configuration=configuration)
                else:
                    config.load_kube_config(config_file=_kubeconfig(), context=self._context(),
                                            client_configuration=configuration, persist_config=False)
            except (config.ConfigException, OSError) as exc:
                raise LaunchError(
                    f"no Kubernetes credentials ({_brief(exc)}): point KUBECONFIG at the kubeconfig kubectl uses "
                    "(or ~/.kube/config), pick one of its contexts with --context, or launch from a pod in the cluster"
                ) from exc
            api_client = client.ApiClient(configuration)
            self._apis = {"batch": client.BatchV1Api(api_client), "core": client.CoreV1Api(api_client),
                          "auth": client.AuthorizationV1Api(api_client), "host": configuration.host}
        return self._apis[kind]

    def _context(self) -> str | None:
        """``--context``, if this machine's kubeconfig has it (a record's context may not be here)."""
        wanted = self.given.context
        if wanted is None:
            return None
        contexts = _contexts()
        if contexts is not None and wanted not in {c.get("name") for c in contexts[0]}:
            if self.following:  # this machine's current context will do
                log.warning("kubeconfig context %s is not in %s; using the current context", wanted, _kubeconfig())
                return None
            raise LaunchError(f"--context {wanted}: no such context in {_kubeconfig()} (it has "
                              f"{', '.join(sorted(str(c.get('name')) for c in contexts[0])) or 'none'})")
        return wanted

    def namespace(self) -> str:
        """``--namespace``, else the kubeconfig context's (the pod's own in the cluster), else ``default``."""
        if self._namespace is None:
            if _in_cluster() and _POD_NAMESPACE.exists():
                self._namespace = _POD_NAMESPACE.read_text().strip()
            else:
                contexts = _contexts()
                chosen: dict[str, Any] = {}
                if contexts is not None:
                    listed, current = contexts
                    chosen = next((c for c in listed if c.get("name") == self.given.context), current or {})
                self._namespace = (chosen.get("context") or {}).get("namespace") or "default"
        return self._namespace

    def _call(self, what: str, kind: str, method: str, *args: Any, **kwargs: Any) -> Any:
        """One API call; :class:`LaunchError` naming ``what`` and the API server's own message."""
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        api = self._api(kind)
        try:
            return getattr(api, method)(*args, _request_timeout=_REQUEST_TIMEOUT_S, **kwargs)
        except ApiException as exc:
            raise _ApiError(exc.status or 0, f"{what}: {_api_message(exc)}") from exc
        except (HTTPError, OSError) as exc:  # no connection, a timeout, a TLS failure
            raise LaunchError(f"{what}: could not reach the Kubernetes API server at {self._api('host')} "
                              f"({_brief(exc)})") from exc
        except ValueError as exc:  # the client's own models refused the body (pydantic)
            raise LaunchError(f"{what}: the kubernetes client refused the request ({_brief(exc)}): pip install -U "
                              "'llm-ocr[k8s]'") from exc

    def _json(self, what: str, kind: str, method: str, *args: Any, **kwargs: Any) -> Any:
        """An API call's answer as the JSON the API server sent (the client's models not involved)."""
        response = self._call(what, kind, method, *args, _preload_content=False, **kwargs)
        return json.loads(response.data)

    # -- planning -------------------------------------------------------------------------------

    def resolve(self, request: LaunchRequest) -> Target:
        """Namespace, pods' resources and placement, secrets by reference, image and the code to
        ship; online, that this user may create the Job (and its ConfigMaps) there and that the
        service account exists. Creates nothing."""
        given = self.given
        chosen = launch_image(request, self.name)
        notes: list[str] = []
        if given.yaml and not request.dry_run:
            raise LaunchError("--yaml prints the objects instead of submitting them: use it with --dry-run")
        if given.wheel and request.image:
            raise LaunchError("--wheel and --image: an image with llm-ocr needs no wheel; give one of them")
        if request.secret_names:
            name = request.secret_names[0]
            raise LaunchError(
                f"--secret {name}: Kubernetes pods read secrets from Kubernetes Secrets, never from this machine: "
                f"create one (kubectl create secret generic llm-ocr-secrets --from-literal={name}=\"${name}\") and "
                f"pass --secret-ref {name}=llm-ocr-secrets"
            )
        refs = parse_secret_refs(given.secret_ref)
        for name in refs:
            if name in request.env:
                raise LaunchError(f"{name} is given both as --env and --secret-ref; keep it a secret only")
        if split_protocol(request.output)[0] == "hf" and "HF_TOKEN" not in refs:
            raise LaunchError(
                f"the pods need HF_TOKEN to write {request.output}: store a write token in a Secret (kubectl create "
                "secret generic hf-token --from-literal=HF_TOKEN=\"$HF_TOKEN\") and pass --secret-ref HF_TOKEN=hf-token"
            )
        claims = parse_claims(given.pvc)
        self._check_local_paths(request, claims)
        namespace = check_label_name(self.namespace(), "--namespace")
        prefix = check_label_name(given.job_name or f"llm-ocr-{request.stage}", "--job-name")
        if given.service_account:
            check_subdomain(given.service_account, "--service-account")
        if given.image_pull_secret:
            check_subdomain(given.image_pull_secret, "--image-pull-secret")
        gpus = given.gpus_per_pod if given.gpus_per_pod is not None else 1 if request.needs_model else 0
        shape = PodShape(
            namespace=namespace, gpus=gpus,
            cpu=check_quantity(given.cpu, "--cpu") if given.cpu else None,
            memory=check_quantity(given.memory, "--memory") if given.memory else None,
            node_selector=parse_node_selector(given.node_selector), tolerations=parse_tolerations(given.toleration),
            service_account=given.service_account, image_pull_secret=given.image_pull_secret, secret_refs=refs,
            claims=claims,
        )
        if request.offline:
            notes.append("offline: not checked: the Kubernetes credentials, that they may create Jobs in namespace "
                         f"{namespace}, and the service account")
        else:
            self._check_access(namespace, ship_code=not request.image)
        hardware = Hardware(_hardware_name(given.gpu_type, gpus), gpus, None, given.price_per_hour, True,
                            given.gpu_type or "")
        info: dict[str, Any] = {"namespace": namespace, "context": given.context, "job_prefix": prefix}
        private: dict[str, Any] = {"shape": shape, "prefix": prefix, "stage": request.stage}
        env = {NUM_SHARDS_ENV: str(request.num_shards), "LLM_OCR_GRACE_PERIOD": str(GRACE_PERIOD_S)}
        if request.image:
            return Target(hardware, request.image, [], {}, info, private, notes, None, env, _secret_names(refs))
        wheel = wheel_to_ship(self.given.wheel)
        shape.code = split_wheel(wheel.filename, wheel.data, wheel.digest)
        info["code"] = shape.code.names
        extras = extras_for([request.output, *request.inputs])
        prefix_words = install_then_run(with_extras(shape.code.wheel_path, extras))
        image = CPU_IMAGE
        if chosen is not None:
            image = chosen.image.ref
            notes.append(image_note(request, chosen))
        notes.append(f"the llm-ocr wheel goes to {len(shape.code.names)} ConfigMap(s) {shape.code.names[0][:-2]}-* in "
                     f"namespace {namespace}, joined in each pod by an init container")
        return Target(hardware, image, prefix_words, {}, info, private, notes, None, env, _secret_names(refs))

    def _check_local_paths(self, request: LaunchRequest, claims: Sequence[Any]) -> None:
        """Local INPUT and OUT only under a claim every pod mounts at the same path."""
        for url, what in ((request.output, "--output"), *((u, "INPUT") for u in request.inputs)):
            protocol, path = split_protocol(url)
            if protocol not in LOCAL_PROTOCOLS:
                continue
            local = os.path.abspath(os.path.expanduser(path))
            if not any(local == c.path or local.startswith(c.path.rstrip("/") + "/") for c in claims):
                raise LaunchError(
                    f"{what} {url!r} is a path on this machine, which the pods cannot see: use object storage "
                    "(s3://, gs://, hf://), or, if it lies on a volume every pod can mount with the same files, say so "
                    "with --pvc CLAIM:PATH (a ReadWriteMany PersistentVolumeClaim mounted at PATH)"
                )
            if local != path:
                raise LaunchError(f"{what} {url!r}: give the absolute path, as the pods see it under the --pvc mount")

    def _check_access(self, namespace: str, *, ship_code: bool) -> None:
        """What the launch and the following will do, asked of the API server's authorizer."""
        wanted = [("create", "batch", "jobs"), ("get", "batch", "jobs"), ("delete", "batch", "jobs"),
                  ("list", "", "pods"), ("get", "", "pods/log")]
        if ship_code:
            wanted.append(("create", "", "configmaps"))
        denied = []
        for verb, group, resource in wanted:
            resource, _, sub = resource.partition("/")
            attributes = {"namespace": namespace, "verb": verb, "group": group, "resource": resource}
            if sub:
                attributes["subresource"] = sub
            body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                    "spec": {"resourceAttributes": attributes}}
            answer = self._json("checking permissions", "auth", "create_self_subject_access_review", body)
            if not (answer.get("status") or {}).get("allowed"):
                denied.append(f"{verb} {resource}{'/' + sub if sub else ''}")
        if denied:
            raise LaunchError(f"this Kubernetes user may not {', '.join(denied)} in namespace {namespace} (RBAC): ask "
                              "for a Role granting it, or pick another --namespace / --context")
        account = self.given.service_account
        if account:
            try:
                self._call(f"service account {account}", "core", "read_namespaced_service_account", account, namespace,
                           _preload_content=False)
            except _ApiError as exc:
                if exc.status == 404:
                    raise LaunchError(f"--service-account {account}: no such ServiceAccount in namespace {namespace} "
                                      "(the Job's pods would never be created)") from exc
                if exc.status != 403:  # may not read service accounts: the pods will tell
                    raise

    def plan_jobs(self, specs: Sequence[ShardSpec], target: Target) -> list[PlannedJob]:
        """One Indexed Job for every shard to launch, as ``create_namespaced_job`` sends it."""
        first = specs[0]
        shards = [spec.shard_index for spec in specs]
        name = job_name(target.private["prefix"], first.labels["llm-ocr-launch"], len(shards))
        body = job_manifest(name, target.private["stage"], first, shards, target.private["shape"],
                            parallelism=self.given.parallelism, max_failed=self.given.max_failed_shards)
        return [PlannedJob(shards, body, list(specs))]

    def dry_run_text(self, jobs: Sequence[PlannedJob], target: Target) -> str | None:
        """With ``--yaml``: the code's ConfigMaps and the Job as one YAML stream for ``kubectl apply -f -``."""
        if not self.given.yaml:
            return None
        shape: PodShape = target.private["shape"]
        maps = code_config_maps(shape.code, shape.namespace) if shape.code is not None and jobs else []
        return to_yaml([*maps, *(job.body for job in jobs)])

    # -- side effects ---------------------------------------------------------------------------

    def deliver(self, target: Target) -> None:
        """Create the code's ConfigMaps unless they exist (immutable, named after the wheel's digest)."""
        shape: PodShape = target.private["shape"]
        if shape.code is None:
            return
        created = 0
        for config_map in code_config_maps(shape.code, shape.namespace):
            name = config_map["metadata"]["name"]
            try:
                self._call(f"creating ConfigMap {name}", "core", "create_namespaced_config_map", shape.namespace,
                           config_map, _preload_content=False)
                created += 1
            except _ApiError as exc:
                if exc.status != 409:  # AlreadyExists: the same wheel, shipped by an earlier launch
                    raise
        log.info("llm-ocr wheel %s: %d of %d ConfigMap(s) created in %s", shape.code.digest[:16], created,
                 len(shape.code.names), shape.namespace)

    def submit(self, jobs: Sequence[PlannedJob], target: Target) -> Iterator[Submission]:
        """``create_namespaced_job`` for the launch's Job."""
        namespace = target.private["shape"].namespace
        for planned in jobs:
            name = planned.body["metadata"]["name"]
            self._call(f"creating Job {name}", "batch", "create_namespaced_job", namespace, planned.body,
                       _preload_content=False)
            follow = f"kubectl get pods -n {namespace} -l {JOB_NAME_LABEL}={name} -w"
            yield Submission(name, list(planned.shards), name, "", follow)

    # -- following ------------------------------------------------------------------------------

    def _pods(self, name: str) -> list[dict[str, Any]]:
        answer = self._json(f"listing the pods of Job {name}", "core", "list_namespaced_pod", self.namespace(),
                            label_selector=f"{JOB_NAME_LABEL}={name}")
        return list(answer.get("items") or [])

    def _read_job(self, name: str) -> dict[str, Any] | None:
        try:
            return self._json(f"reading Job {name}", "batch", "read_namespaced_job", name, self.namespace())
        except _ApiError as exc:
            if exc.status == 404:
                return None
            raise

    def states(self, jobs: Sequence[dict[str, Any]]) -> dict[str, JobState]:
        """Each Job's state, and each of its indexes' from its pods (kept for :meth:`shard_phase`)."""
        found = {}
        now = now_utc()
        for job in jobs:
            name = job["job_id"]
            job_json = self._read_job(name)
            pods = self._pods(name)
            state = job_state(name, job_json, now)
            self._indexes[name] = index_states(state, job_json, pods, job["shards"], now)
            found[name] = state
        return found

    def shard_phase(self, state: JobState, shard: int) -> JobState:
        """The state of the index running ``shard`` (the Job's, before states() saw it)."""
        known = self._indexes.get(state.job_id, {})
        if shard in known:
            return known[shard]
        phase: Phase = "pending" if state.phase in ("pending", "running") else state.phase
        return JobState(state.job_id, phase, state.raw, state.message)

    def logs(self, job: dict[str, Any], shard: int, *, follow: bool = False, tail: int | None = None) -> Iterator[str]:
        """The log of the pods of ``shard``'s index, oldest attempt first (``tail``: the latest pod's
        last lines; ``follow``: until the index ends, across the pods that retry it)."""
        name, index = job["job_id"], job["shards"].index(shard)
        pods = self._index_pods(name, index)
        if not pods and not follow:
            state = self.shard_phase(self.states([job])[name], shard)
            raise LaunchError(f"no pod of shard {shard} (index {index} of Job {name}) to read, yet or any more: "
                              f"{state.raw}")
        return self._log_lines(job, shard, index, pods, follow=follow, tail=tail)

    def _index_pods(self, name: str, index: int) -> list[dict[str, Any]]:
        return sorted((pod for pod in self._pods(name) if index_of(pod) == index), key=attempt_order)

    def _log_lines(self, job: dict[str, Any], shard: int, index: int, pods: list[dict[str, Any]], *, follow: bool,
                   tail: int | None) -> Iterator[str]:
        if not follow:
            shown = pods[-1:] if tail is not None else pods
            for pod in shown:
                if len(shown) > 1:
                    yield f"===== pod {pod['metadata']['name']} ====="
                yield from self._pod_log(pod, follow=False, tail=tail)
            return
        name, done = job["job_id"], set[str]()
        while True:
            fresh = [p for p in self._index_pods(name, index) if p["metadata"]["name"] not in done]
            for pod in fresh:
                if (pod.get("status") or {}).get("phase", "Pending") == "Pending":
                    break  # its container has not started: no log to follow yet
                if done or len(fresh) > 1:
                    yield f"===== pod {pod['metadata']['name']} ====="
                yield from self._pod_log(pod, follow=True, tail=tail if not done else None)
                done.add(pod["metadata"]["name"])
            state = self.shard_phase(self.states([job])[name], shard)
            if state.phase in ("succeeded", "failed", "cancelled"):
                if not [p for p in self._index_pods(name, index) if p["metadata"]["name"] not in done]:
                    return
            time.sleep(_LOG_POLL_S)

    def _pod_log(self, pod: dict[str, Any], *, follow: bool, tail: int | None) -> Iterator[str]:
        pod_name = pod["metadata"]["name"]
        try:
            response = self._call(f"reading the log of pod {pod_name}", "core", "read_namespaced_pod_log", pod_name,
                                  self.namespace(), container=CONTAINER, follow=follow, tail_lines=tail,
                                  _preload_content=False)
        except _ApiError as exc:
            if exc.status in (400, 404):  # not started yet (ContainerCreating...), or gone
                yield f"(no log from pod {pod_name}: {exc})"
                return
            raise
        pending = b""
        try:
            for chunk in response.stream(4096):
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    yield line.decode("utf-8", "replace")
            if pending:
                yield pending.decode("utf-8", "replace")
        finally:
            response.release_conn()

    def cancel(self, jobs: Sequence[dict[str, Any]]) -> list[str]:
        """Delete each Job, its pods first (``Foreground``: they get SIGTERM, then SIGKILL after their
        grace period; llm-ocr keeps the parts it wrote)."""
        cancelled = []
        for job in jobs:
            name = job["job_id"]
            try:
                self._call(f"deleting Job {name}", "batch", "delete_namespaced_job", name, self.namespace(),
                           propagation_policy="Foreground", _preload_content=False)
            except _ApiError as exc:
                if exc.status != 404:
                    raise
                continue  # gone already
            cancelled.append(name)
        return cancelled


# ------------------------------------------------------------------------------------------------


class _ApiError(LaunchError):
    """The API server refused a call (its HTTP status kept for the callers that expect some)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _in_cluster() -> bool:
    """Running in a pod, with no kubeconfig of its own."""
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST")) and not os.environ.get("KUBECONFIG") \
        and not Path("~/.kube/config").expanduser().exists()


def _kubeconfig() -> str:
    return os.environ.get("KUBECONFIG") or str(Path("~/.kube/config").expanduser())


def _contexts() -> tuple[list[dict[str, Any]], dict[str, Any]] | None:
    """The kubeconfig's contexts and its current one, None without a readable kubeconfig."""
    try:
        from kubernetes import config

        listed, current = config.list_kube_config_contexts(config_file=_kubeconfig())
    except Exception:  # noqa: BLE001 - no kubeconfig: the namespace defaults, the client says why later
        return None
    return list(listed or []), dict(current or {})


def _secret_names(refs: dict[str, Any]) -> dict[str, str]:
    """The Target's secret references, for the dry run's lists (``NAME -> SECRET:KEY``; no value)."""
    return {name: f"{ref.secret}:{ref.key}" for name, ref in refs.items()}


def _hardware_name(gpu_type: str | None, gpus: int) -> str:
    return f"{gpus}x {gpu_type or 'GPU'} (k8s)" if gpus else "cpu (k8s)"


def _api_message(exc: Any) -> str:
    """The API server's own words (a ``Status`` object's ``message``), else the HTTP reason."""
    try:
        body = json.loads(exc.body or "")
        message = body.get("message") if isinstance(body, dict) else None
    except (TypeError, ValueError):
        message = None
    return scrub(str(message or f"HTTP {exc.status} {exc.reason}"))


def _brief(exc: BaseException) -> str:
    """An exception's first line, without credentials."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return scrub(text)
