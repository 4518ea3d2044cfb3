"""The Kubernetes objects of a launch: one Indexed Job, and the ConfigMaps that carry the code.

Pure functions, no API call. What a :func:`job_manifest` says, and why (Kubernetes docs,
"Jobs", https://kubernetes.io/docs/concepts/workloads/controllers/job/; the validation rules
are those of ``pkg/apis/batch/validation/validation.go`` in kubernetes/kubernetes):

- ``completionMode: Indexed`` with ``completions = parallelism`` = the shards it runs (or
  ``--parallelism``): each pod gets ``JOB_COMPLETION_INDEX`` (0..completions-1), and
  ``LLM_OCR_NUM_SHARDS`` says N, which the Job never tells its pods
  (:mod:`llm_ocr.container.shard_index`). A relaunch of only some shards is a new Job whose
  index i runs the i-th of them (``LLM_OCR_TASK_SHARDS=N:3,7``): a Job cannot be told to run
  only some indexes of 0..N-1;
- ``backoffLimitPerIndex = attempts - 1``: a failed pod is replaced by one for the same index
  only, which resumes from the shard's parts; the other indexes are not charged for it.
  ``maxFailedIndexes`` (``--max-failed-shards``) stops the whole Job once that many shards have
  failed; unset, every shard runs to its end whatever the others do;
- ``podFailurePolicy``: a pod disrupted by the cluster (preemption, eviction, a drained node:
  the ``DisruptionTarget`` condition) is replaced without counting as a failure (``Ignore``); a
  container that exits 1 (finished, some pages failed: a retry would redo only those, and
  quarantined pages fail again) or 2 (could not run: bad options, inputs or credentials, or the
  image's CUDA against the driver) fails its index at once (``FailIndex``), as
  :class:`llm_ocr.outcomes.ExitCode` defines them. Any other exit (137 from the OOM killer, 3
  after a SIGTERM) is retried. The policy needs ``restartPolicy: Never``;
- each pod: ``nvidia.com/gpu`` limits (``requests`` of an extended resource must equal its
  limits, so only limits are given), the node selector and tolerations asked for (and, with a
  GPU, the toleration of the ``nvidia.com/gpu`` taint GPU node pools carry), ``activeDeadlineSeconds``
  = the launch's timeout of one attempt, secrets only as ``secretKeyRef`` (never a value),
  ``/dev/shm`` memory-backed as vLLM's Kubernetes guide mounts it, and the claims the user says
  are shared (``--pvc CLAIM:PATH``) at the same path as on the launching machine.

Code delivery without building an image: the llm-ocr wheel (about 1 MB) is cut into parts of
:data:`PART_BYTES`, each in an immutable ConfigMap named after the wheel's digest (a ConfigMap
holds at most 1 MiB, and ``kubectl apply`` keeps a copy of each object in a 256 KiB
annotation); an init container of the same image joins them into an ``emptyDir``, checks the
digest, and the pod's command installs the wheel into a virtualenv of its own before it execs
``llm-ocr`` (:mod:`llm_ocr.launchers.core.command`). ``--image`` with llm-ocr in it needs none of this.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

from llm_ocr.container.shard_index import NUM_SHARDS_ENV, TASK_SHARDS_ENV, task_shards_value
from llm_ocr.launchers.core.spec import LAUNCH_LABEL, LaunchError, ShardSpec
from llm_ocr.outcomes import ExitCode

#: The pod's one container (and the name ``kubectl logs -c`` takes).
CONTAINER = "llm-ocr"
INIT_CONTAINER = "llm-ocr-code"
GPU_RESOURCE = "nvidia.com/gpu"
#: Where the joined wheel is, and where its parts are mounted, in the pod.
CODE_MOUNT = "/llm-ocr-code"
PARTS_MOUNT = "/llm-ocr-parts"
#: Bytes of the wheel per ConfigMap: its base64 in ``kubectl apply``'s last-applied annotation
#: (218 KiB) stays under the 256 KiB all annotations of an object may hold.
PART_BYTES = 160 * 1024
#: The label naming a code ConfigMap's wheel (digest prefix), to find or delete them.
CODE_LABEL = "llm-ocr-code"
STAGE_LABEL = "llm-ocr-stage"
#: Exit statuses after which an index is not retried (see the module docstring).
FINAL_EXIT_CODES = (int(ExitCode.PAGES_FAILED), int(ExitCode.COULD_NOT_RUN))
#: Pods per Indexed Job at most (``maxParallelismForIndexedJob``; completions above 10^5 need
#: ``maxFailedIndexes`` and parallelism under 10^4).
MAX_INDEXES = 100_000
#: Seconds between SIGTERM and SIGKILL when a pod is stopped (deleted, preempted, at its
#: deadline): Kubernetes' default, written out; llm-ocr's grace period for the pages in flight
#: (``LLM_OCR_GRACE_PERIOD``) ends well inside it, so the last part is written.
TERMINATION_GRACE_S = 30
GRACE_PERIOD_S = 15
#: The shared memory vLLM's processes use (its Kubernetes guide mounts a memory-backed emptyDir).
SHM_SIZE = "2Gi"

#: Run by the init container with the image's ``python3``: join the parts (their ConfigMap keys
#: ``part-000``...; the volume's own ``..data`` entries are skipped), check the digest, write the wheel.
JOIN_PARTS = (
    "import hashlib,os,sys;d,w,h=sys.argv[1:4];b=b''.join(open(os.path.join(d,n),'rb').read() for n in "
    "sorted(os.listdir(d)) if n.startswith('part-'));hashlib.sha256(b).hexdigest()==h or sys.exit('llm-ocr code: "
    "the wheel joined from the ConfigMaps is not the one launched (sha256 '+h+')');"
    "os.makedirs(os.path.dirname(w),exist_ok=True);open(w,'wb').write(b)"
)

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_QUALIFIED_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")
_ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
_CONFIG_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")
_QUANTITY = re.compile(r"^\d+(\.\d+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$")
_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


# --------------------------------------------------------------------------------------------
# Names and values the API server accepts


def check_label_name(name: str, what: str) -> str:
    """``name`` if it is a DNS-1123 label (what the API server takes as a namespace or a Job's
    name): lowercase letters, digits and ``-``, starting and ending with a letter or digit, at
    most 63 characters; :class:`LaunchError` saying so otherwise."""
    if len(name) > 63 or not _DNS_LABEL.match(name):
        raise LaunchError(f"{what} {name!r}: Kubernetes takes lowercase letters, digits and '-', starting and ending "
                          "with a letter or digit, at most 63 characters")
    return name


def check_subdomain(name: str, what: str) -> str:
    """``name`` if it is a DNS-1123 subdomain (a Secret's, a ServiceAccount's, a claim's name)."""
    if len(name) > 253 or not _DNS_SUBDOMAIN.match(name):
        raise LaunchError(f"{what} {name!r}: Kubernetes takes lowercase letters, digits, '-' and '.', each part "
                          "starting and ending with a letter or digit, at most 253 characters")
    return name


def check_label_key(key: str, what: str) -> str:
    """``key`` if it is a label key: ``[PREFIX/]NAME``, a DNS subdomain prefix, a name of 63 at most."""
    prefix, slash, name = key.rpartition("/")
    if (slash and (not prefix or len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix))) or len(name) > 63 \
            or not _QUALIFIED_NAME.match(name):
        raise LaunchError(f"{what} {key!r}: a key is [PREFIX/]NAME, NAME at most 63 letters, digits, '-', '_' or '.' "
                          "starting and ending with a letter or digit (e.g. cloud.google.com/gke-accelerator)")
    return key


def check_label_value(value: str, what: str) -> str:
    """``value`` if a label may hold it (at most 63 letters, digits, ``-_.``, alphanumeric at both ends)."""
    if len(value) > 63 or not _LABEL_VALUE.match(value):
        raise LaunchError(f"{what} {value!r}: a label value is at most 63 letters, digits, '-', '_' or '.', starting "
                          "and ending with a letter or digit")
    return value


def check_quantity(value: str, what: str) -> str:
    """``value`` if it is a resource quantity (``8``, ``500m``, ``32Gi``)."""
    if not _QUANTITY.match(value):
        raise LaunchError(f"{what} {value!r}: write a Kubernetes quantity, e.g. 8, 500m, 32Gi")
    return value


def job_name(prefix: str, launch_id: str, completions: int) -> str:
    """The Job's name: ``PREFIX-LAUNCH_ID``. Each pod's hostname is ``NAME-INDEX``, which must be a
    DNS-1123 label too: the API server refuses a Job whose last index would not make one."""
    check_label_name(prefix, "--job-name")
    name = f"{prefix}-{launch_id}"
    longest = f"{name}-{completions - 1}"
    if len(longest) > 63 or not _DNS_LABEL.match(longest):
        room = 63 - len(longest) + len(prefix)
        raise LaunchError(f"--job-name {prefix!r} is too long: the pods are named {longest} at most, over Kubernetes' "
                          f"63 characters; give a name of at most {max(room, 1)} characters")
    return name


@dataclass(frozen=True)
class SecretRef:
    """An environment variable read from a Kubernetes Secret's key in the pod."""

    secret: str
    key: str

    def env(self, name: str) -> dict[str, Any]:
        """The container's ``env`` entry: a reference, no value."""
        return {"name": name, "valueFrom": {"secretKeyRef": {"name": self.secret, "key": self.key}}}


def parse_secret_refs(items: Sequence[str]) -> dict[str, SecretRef]:
    """``NAME=SECRET[:KEY]`` (KEY defaults to NAME) -> ``{NAME: SecretRef}``."""
    refs: dict[str, SecretRef] = {}
    for item in items:
        name, sep, ref = item.partition("=")
        secret, _, key = ref.partition(":")
        if not sep or not name or not secret:
            raise LaunchError(f"--secret-ref {item!r}: write NAME=SECRET[:KEY] (the variable NAME in the pods, from "
                              "key KEY of the Kubernetes Secret SECRET; KEY defaults to NAME)")
        if not _ENV_NAME.match(name):
            raise LaunchError(f"--secret-ref {item!r}: {name!r} is not an environment variable name")
        key = key or name
        if len(key) > 253 or not _CONFIG_KEY.match(key):
            raise LaunchError(f"--secret-ref {item!r}: a Secret's key is letters, digits, '-', '_' or '.'")
        refs[name] = SecretRef(check_subdomain(secret, "--secret-ref secret"), key)
    return refs


def parse_node_selector(items: Sequence[str]) -> dict[str, str]:
    """``KEY=VALUE`` node labels the pods must run on."""
    selector = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise LaunchError(f"--node-selector {item!r}: write KEY=VALUE, e.g. "
                              "cloud.google.com/gke-accelerator=nvidia-l4")
        selector[check_label_key(key, "--node-selector")] = check_label_value(value, "--node-selector value")
    return selector


def parse_tolerations(items: Sequence[str]) -> list[dict[str, str]]:
    """``KEY[=VALUE][:EFFECT]`` (``kubectl taint``'s notation) -> tolerations: with a value the taint
    must have it (``Equal``), without one any value (``Exists``); without an effect, every effect."""
    tolerations = []
    for item in items:
        rest, colon, effect = item.rpartition(":") if ":" in item else (item, "", "")
        if colon and effect not in _EFFECTS:
            raise LaunchError(f"--toleration {item!r}: the effect after ':' is one of {', '.join(_EFFECTS)}")
        key, sep, value = rest.partition("=")
        toleration = {"key": check_label_key(key, "--toleration"), "operator": "Equal" if sep else "Exists"}
        if sep:
            toleration["value"] = check_label_value(value, "--toleration value")
        if effect:
            toleration["effect"] = effect
        tolerations.append(toleration)
    return tolerations


@dataclass(frozen=True)
class ClaimMount:
    """A PersistentVolumeClaim every pod mounts, at the path it has on the launching machine."""

    claim: str
    path: str


def parse_claims(items: Sequence[str]) -> list[ClaimMount]:
    """``CLAIM:/PATH`` -> the claims to mount."""
    claims = []
    for item in items:
        claim, sep, path = item.partition(":")
        if not sep or not path.startswith("/"):
            raise LaunchError(f"--pvc {item!r}: write CLAIM:/PATH (a ReadWriteMany PersistentVolumeClaim, mounted at "
                              "PATH in every pod, where this machine has the same files)")
        claims.append(ClaimMount(check_label_name(claim, "--pvc claim"), path.rstrip("/") or "/"))
    return claims


# --------------------------------------------------------------------------------------------
# The objects


@dataclass(frozen=True)
class CodeParts:
    """The shipped wheel as ConfigMaps: their names, and where the pods find the joined wheel."""

    filename: str
    digest: str
    parts: tuple[bytes, ...] = field(repr=False)

    @property
    def names(self) -> list[str]:
        """The ConfigMaps' names: the wheel's digest and the part's number."""
        return [f"llm-ocr-code-{self.digest[:16]}-{i}" for i in range(len(self.parts))]

    @property
    def wheel_path(self) -> str:
        """The joined wheel in the pod."""
        return f"{CODE_MOUNT}/{self.filename}"


def split_wheel(filename: str, data: bytes, digest: str) -> CodeParts:
    """The wheel ``data`` cut into ConfigMap-sized parts."""
    parts = tuple(data[i:i + PART_BYTES] for i in range(0, len(data), PART_BYTES)) or (b"",)
    return CodeParts(filename, digest, parts)


def code_config_maps(code: CodeParts, namespace: str) -> list[dict[str, Any]]:
    """One immutable ConfigMap per part (``binaryData``, base64 as the API takes it)."""
    return [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": namespace, "labels": {CODE_LABEL: code.digest[:16]}},
            "immutable": True,
            "binaryData": {f"part-{i:03d}": base64.b64encode(part).decode()},
        }
        for i, (name, part) in enumerate(zip(code.names, code.parts))
    ]


@dataclass
class PodShape:
    """What every pod of the launch gets besides its command (the adapter's options, checked)."""

    namespace: str
    gpus: int
    cpu: str | None = None
    memory: str | None = None
    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: list[dict[str, str]] = field(default_factory=list)
    service_account: str | None = None
    image_pull_secret: str | None = None
    secret_refs: dict[str, SecretRef] = field(default_factory=dict)
    claims: list[ClaimMount] = field(default_factory=list)
    #: The code's ConfigMaps, None with an image that has llm-ocr.
    code: CodeParts | None = None


def job_manifest(
    name: str,
    stage: str,
    spec: ShardSpec,
    shards: Sequence[int],
    shape: PodShape,
    *,
    parallelism: int | None = None,
    max_failed: int | None = None,
) -> dict[str, Any]:
    """The Indexed Job running ``shards`` of ``spec.num_shards`` (index i runs ``shards[i]``) of a
    ``stage`` launch; every pod as ``spec`` and ``shape`` say."""
    completions = len(shards)
    if completions > MAX_INDEXES:
        raise LaunchError(f"{completions} shards in one Job: an Indexed Job runs at most {MAX_INDEXES} indexes")
    labels = {LAUNCH_LABEL: spec.labels[LAUNCH_LABEL], STAGE_LABEL: stage}
    job_spec: dict[str, Any] = {
        "completionMode": "Indexed",
        "completions": completions,
        "parallelism": min(parallelism or completions, completions),
        "backoffLimitPerIndex": max(spec.attempts - 1, 0),
    }
    if max_failed is not None:
        job_spec["maxFailedIndexes"] = min(max_failed, completions)
    job_spec["podFailurePolicy"] = {"rules": [
        {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
        {"action": "FailIndex", "onExitCodes": {"operator": "In", "values": list(FINAL_EXIT_CODES)}},
    ]}
    job_spec["template"] = {"metadata": {"labels": dict(labels)}, "spec": _pod_spec(spec, shards, shape)}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": shape.namespace, "labels": labels},
        "spec": job_spec,
    }


def _pod_spec(spec: ShardSpec, shards: Sequence[int], shape: PodShape) -> dict[str, Any]:
    env = [{"name": key, "value": value} for key, value in spec.env.items()]
    if list(shards) != list(range(spec.num_shards)):
        # Index i of this Job runs the i-th shard listed (a relaunch of some shards).
        env.append({"name": TASK_SHARDS_ENV, "value": task_shards_value(spec.num_shards, shards)})
    if not any(item["name"] == NUM_SHARDS_ENV for item in env):
        env.append({"name": NUM_SHARDS_ENV, "value": str(spec.num_shards)})
    env += [ref.env(name) for name, ref in shape.secret_refs.items()]
    resources: dict[str, Any] = {}
    limits = {key: value for key, value in (("cpu", shape.cpu), ("memory", shape.memory)) if value}
    if limits:
        resources["requests"] = dict(limits)
    if shape.gpus:
        limits[GPU_RESOURCE] = str(shape.gpus)
    if limits:
        resources["limits"] = limits
    mounts: list[dict[str, Any]] = []
    volumes: list[dict[str, Any]] = []
    if shape.gpus:
        mounts.append({"name": "dshm", "mountPath": "/dev/shm"})  # noqa: S108 - the pod's own, memory-backed
        volumes.append({"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": SHM_SIZE}})
    for number, claim in enumerate(shape.claims):
        mounts.append({"name": f"claim-{number}", "mountPath": claim.path})
        volumes.append({"name": f"claim-{number}", "persistentVolumeClaim": {"claimName": claim.claim}})
    container: dict[str, Any] = {"name": CONTAINER, "image": spec.image, "command": list(spec.command), "env": env}
    if resources:
        container["resources"] = resources
    pod: dict[str, Any] = {"restartPolicy": "Never", "activeDeadlineSeconds": spec.timeout_s,
                           "terminationGracePeriodSeconds": TERMINATION_GRACE_S}
    if shape.code is not None:
        code = shape.code
        mounts.append({"name": "code", "mountPath": CODE_MOUNT, "readOnly": True})
        volumes.append({"name": "code", "emptyDir": {}})
        volumes.append({"name": "code-parts", "projected": {"sources": [{"configMap": {"name": name}}
                                                                        for name in code.names]}})
        pod["initContainers"] = [{
            "name": INIT_CONTAINER,
            "image": spec.image,
            "command": ["python3", "-c", JOIN_PARTS, PARTS_MOUNT, code.wheel_path, code.digest],
            "volumeMounts": [{"name": "code-parts", "mountPath": PARTS_MOUNT, "readOnly": True},
                             {"name": "code", "mountPath": CODE_MOUNT}],
        }]
    if mounts:
        container["volumeMounts"] = mounts
    pod["containers"] = [container]
    if volumes:
        pod["volumes"] = volumes
    if shape.service_account:
        pod["serviceAccountName"] = shape.service_account
    if shape.image_pull_secret:
        pod["imagePullSecrets"] = [{"name": shape.image_pull_secret}]
    if shape.node_selector:
        pod["nodeSelector"] = dict(shape.node_selector)
    tolerations = list(shape.tolerations)
    if shape.gpus and not any(t["key"] == GPU_RESOURCE for t in tolerations):
        # GPU node pools are commonly tainted nvidia.com/gpu (GKE and EKS's GPU AMIs do): tolerated
        # here so the pods can land there; GKE also adds it itself to pods that ask for a GPU.
        tolerations.append({"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"})
    if tolerations:
        pod["tolerations"] = tolerations
    return pod


def to_yaml(objects: Sequence[dict[str, Any]]) -> str:
    """The objects as one YAML stream, ``---`` between them: what ``kubectl apply -f -`` reads."""
    return yaml.safe_dump_all(list(objects), sort_keys=False, default_flow_style=False, width=1_000_000)
