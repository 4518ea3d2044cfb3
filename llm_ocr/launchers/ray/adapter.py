"""Ray: one Ray Job per launch, whose driver runs the shards on K actors (Ray 2.x, the Jobs API).

``llm-ocr launch ray --address ray://HEAD:10001`` submits the driver
(:mod:`llm_ocr.launchers.ray.driver`) with ``JobSubmissionClient.submit_job`` (Ray Jobs,
https://docs.ray.io/en/latest/cluster/running-applications/job-submission/sdk.html): the driver
runs on the cluster, not on the launching machine, so the launch outlives this process, and
``llm-ocr jobs status|logs|cancel`` work from any machine that reaches the cluster's dashboard,
through the same API (``get_job_info``, ``get_job_logs``, ``stop_job``). The launch record keeps
the dashboard's HTTP address the client resolved (from a ``ray://`` address, Ray asks the cluster
through Ray Client), so following a launch needs no Ray Client connection.

What the job carries, all of it shown by the dashboard and ``ray job list``, so no secret:

- ``entrypoint``: ``python llm_ocr_ray_driver.py plan.json``, run in the cluster's Python (it needs
  ``ray`` only);
- ``runtime_env``: ``working_dir`` with those two files (Ray uploads it to the cluster), ``pip``
  (``--pip``: Ray installs llm-ocr on each node, in a virtualenv that sees the cluster's packages),
  and ``env_vars`` for Ray itself (how long ``ray job stop`` waits before its SIGKILL);
- the plan: the shards, the ``llm-ocr STAGE ... --output OUT`` command, its plain environment, the
  actors' resources (``num_gpus``, ``num_cpus``, ``accelerator_type``), ``max_restarts``, the
  attempts per shard, the per-attempt timeout, and the names of the node secrets.

Secrets by reference: ``--node-secret NAME`` names a variable the cluster's nodes already have
(exported before ``ray start``; on KubeRay, an ``env`` entry with ``valueFrom.secretKeyRef`` in the
head and worker pod templates). Ray workers inherit their raylet's environment, so the actors and
the ``llm-ocr`` they start have it; the launcher never reads the value, and ``--secret`` (a local
value) is refused: Ray has no secrets channel, and ``runtime_env.env_vars`` is public.

Where llm-ocr comes from on the nodes: by default the cluster's own Python (its image); or
``--pip REQUIREMENT`` (Ray's pip runtime_env); or ``--venv PATH``, a virtualenv every node has at
that path (a shared file system). Local INPUT and OUT paths work where every node sees them at the
same path (``shared_filesystem``); otherwise use object storage URLs.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar

from fsspec.core import split_protocol
from pydantic import BaseModel, Field

from llm_ocr.container.shard_index import NUM_SHARDS_ENV
from llm_ocr.costs import Hardware
from llm_ocr.launchers.core.adapter import TERMINAL_PHASES, JobState, PlatformOptions, Submission
from llm_ocr.launchers.core.files import LOCAL_PROTOCOLS
from llm_ocr.launchers.core.spec import LAUNCH_LABEL, LaunchError, LaunchRequest, PlannedJob, ShardSpec, Target
from llm_ocr.launchers.ray import dashboards, driver
from llm_ocr.launchers.ray.state import JOB_PHASES, parse_events, shard_lines, shard_state

log = logging.getLogger("llm_ocr")

#: The driver's file name in the job's working_dir.
DRIVER_FILE = "llm_ocr_ray_driver.py"
PLAN_FILE = "plan.json"
#: Seconds llm-ocr lets the pages in flight finish after a SIGTERM (``ray job stop``).
GRACE_S = 20
#: ``RAY_JOB_STOP_WAIT_TIME_S``: how long Ray waits after its SIGTERM before the SIGKILL (Ray's
#: default is 3 s); the driver needs the shards' grace period and a little more.
STOP_WAIT_S = GRACE_S + 40
#: What the dry run shows for the working_dir, a temporary folder made at submit.
WORKING_DIR = f"<a temporary folder holding {DRIVER_FILE} and {PLAN_FILE}>"
_LOG_POLL_S = 2.0
#: Variables through which Ray's own client picks an address, over the one it is given.
_ADDRESS_VARIABLES = ("RAY_ADDRESS", "RAY_API_SERVER_ADDRESS")


class RayOptions(PlatformOptions):
    """Ray: ``llm-ocr launch ray`` options (``llm_ocr.launch`` keywords)."""

    address: str | None = Field(
        None, description="The Ray cluster: ray://HEAD:10001 (Ray Client), http://HEAD:8265 (its dashboard), or auto "
        "(the cluster on this machine) (default: RAY_ADDRESS, else auto).", json_schema_extra={"metavar": "ADDRESS"},
    )
    actors: int | None = Field(
        None, ge=1, description="Actors running shards at once (default: one per GPU the cluster has when the job "
        "starts, or per --cpus-per-actor CPUs without GPUs; at most one per shard).",
    )
    gpus_per_actor: int | None = Field(
        None, ge=0, description="GPUs per actor, each running one vLLM (default 1; 0 for assemble and --endpoint "
        "runs, and CPU-only clusters).",
    )
    cpus_per_actor: float = Field(1.0, ge=0, description="CPUs per actor (Ray's num_cpus).")
    accelerator_type: str | None = Field(
        None, description="Only GPUs of this type (Ray's accelerator_type, e.g. A100, L4, H100).",
        json_schema_extra={"metavar": "TYPE"},
    )
    actor_restarts: int = Field(
        3, ge=-1, description="Times Ray restarts an actor whose process or node died (max_restarts; -1: always); "
        "its shard goes to the next free actor.",
    )
    venv: str | None = Field(None, description="A virtualenv with llm-ocr at this path on every node (default: llm-ocr "
                             "in the cluster's own Python).", json_schema_extra={"metavar": "PATH"})
    pip: list[str] = Field(
        default_factory=list, description="A requirement Ray installs on each node (runtime_env pip), e.g. "
        "'llm-ocr[s3]==0.1.0'.", json_schema_extra={"metavar": "REQUIREMENT", "repeat": True},
    )
    node_secret: list[str] = Field(
        default_factory=list, description="An environment variable the cluster's nodes already have (exported before "
        "`ray start`, or a Kubernetes Secret in KubeRay's pod env), checked in each actor; its value never passes "
        "through the launcher or the job.", json_schema_extra={"metavar": "NAME", "repeat": True},
    )


class Ray:
    """The Ray adapter (see the module docstring)."""

    name: ClassVar[str] = "ray"
    shard_env: ClassVar[bool] = False
    hardware_option: ClassVar[str] = "accelerator_type"
    options: ClassVar[type[BaseModel]] = RayOptions
    #: Local INPUT and OUT paths are accepted: every node must see them at the same path.
    shared_filesystem: ClassVar[bool] = True
    #: Runs of a shard at most (an actor's death counts as one).
    default_attempts: ClassVar[int] = 3

    def __init__(self, **options: Any) -> None:
        """``options``: :class:`RayOptions` fields."""
        self.given = RayOptions.model_validate(options)
        #: Each job's events, as read by the latest :meth:`states` (for :meth:`shard_phase`).
        self._events: dict[str, list[dict[str, Any]]] = {}

    @classmethod
    def from_record(cls, info: dict[str, Any]) -> Ray:
        """An adapter following a launch's job through the dashboard address the launch resolved."""
        return cls(address=info.get("address"))

    # -- planning -------------------------------------------------------------------------------

    def resolve(self, request: LaunchRequest) -> Target:
        """The actors' resources, the environment and the cluster's dashboard; submits nothing."""
        given = self.given
        if given.wheel:
            raise LaunchError("--wheel: Ray actors run the llm-ocr of the cluster's environment; install it there (the "
                              "cluster's image), or pass --pip REQUIREMENT (a wheel URL works) or --venv PATH")
        if request.image:
            raise LaunchError("--image: a Ray cluster runs the image its nodes were started from (KubeRay's RayCluster "
                              "spec, your VMs): put llm-ocr in it, or pass --pip REQUIREMENT or --venv PATH")
        if request.secret_names:
            name = request.secret_names[0]
            raise LaunchError(
                f"--secret {name}: a Ray job has no secrets channel (its runtime_env, env_vars included, is shown by "
                f"the dashboard and `ray job list`); give {name} to the cluster's nodes (export it before `ray start`; "
                f"on KubeRay an env entry with valueFrom.secretKeyRef in the pod templates) and pass "
                f"--node-secret {name}"
            )
        for name in given.node_secret:
            if name in request.env:
                raise LaunchError(f"{name} is given both as --env and --node-secret; keep it a secret only")
        notes: list[str] = []
        info: dict[str, Any] = {"address": given.address}
        if request.offline:
            notes.append("offline: not checked: that Ray's job client is installed, the cluster's address and that its "
                         "dashboard answers")
        else:
            with _client(given.address) as client:
                info["address"] = client.get_address()
            notes.append(f"the Ray cluster's dashboard: {info['address']}")
        gpus = given.gpus_per_actor if given.gpus_per_actor is not None else (1 if request.needs_model else 0)
        accelerator = given.accelerator_type or ""
        name = f"{gpus}x {accelerator or 'GPU'} per actor" if gpus else "CPU actor"
        hardware = Hardware(name, gpus, None, None, True, accelerator)
        local = [url for url in (request.output, *request.inputs) if split_protocol(url)[0] in LOCAL_PROTOCOLS]
        if local:
            notes.append(f"{local[0]} is a path: every node of the Ray cluster must see it at that path (a shared file "
                         "system); use s3://, gs:// or hf:// otherwise")
        if given.venv:
            notes.append(f"the actors run llm-ocr from the virtualenv {given.venv} (on every node)")
        elif given.pip:
            notes.append(f"Ray installs {', '.join(given.pip)} on each node (runtime_env pip)")
        if given.actors is None:
            notes.append("actors: one per GPU the cluster has when the job starts; give --actors K on an autoscaling "
                         "cluster (each actor's GPU request makes it add nodes)")
        private = {"cwd": os.getcwd()}
        env = {NUM_SHARDS_ENV: str(request.num_shards), "LLM_OCR_GRACE_PERIOD": str(GRACE_S)}
        refs = dict.fromkeys(given.node_secret, "the Ray nodes' environment")
        return Target(hardware, "", [], {}, info, private, notes, None, env, refs)

    def plan_jobs(self, specs: Sequence[ShardSpec], target: Target) -> list[PlannedJob]:
        """One Ray Job for every shard to launch: ``submit_job``'s arguments and the driver's plan."""
        first = specs[0]
        launch_id = first.labels[LAUNCH_LABEL]
        stage = first.command[1]
        env = {k: v for k, v in first.env.items() if k not in ("LLM_OCR_SHARD_INDEX",)}
        given = self.given
        plan = {
            "launch_id": launch_id,
            "shards": [spec.shard_index for spec in specs],
            "num_shards": first.num_shards,
            "command": list(first.command),
            "env": env,
            "node_secrets": list(given.node_secret),
            "venv": str(Path(given.venv).expanduser()) if given.venv else None,
            "cwd": target.private["cwd"],
            "actors": given.actors,
            "gpus_per_actor": target.hardware.gpus,
            "cpus_per_actor": given.cpus_per_actor,
            "accelerator_type": given.accelerator_type,
            "actor_restarts": given.actor_restarts,
            "attempts": first.attempts,
            "timeout_s": first.timeout_s,
            "grace_s": GRACE_S,
        }
        runtime_env: dict[str, Any] = {"working_dir": WORKING_DIR, "env_vars": {"RAY_JOB_STOP_WAIT_TIME_S": str(
            STOP_WAIT_S)}}
        if given.pip:
            runtime_env["pip"] = list(given.pip)
        submit = {
            "entrypoint": f"python {DRIVER_FILE} {PLAN_FILE}",
            "submission_id": f"llm-ocr-{stage}-{launch_id}",
            "runtime_env": runtime_env,
            "metadata": {LAUNCH_LABEL: launch_id, "llm-ocr-stage": stage,
                         "llm-ocr-shards": f"{len(specs)} of {first.num_shards}"},
        }
        return [PlannedJob([spec.shard_index for spec in specs], {"submit_job": submit, "plan": plan}, list(specs))]

    # -- side effects ---------------------------------------------------------------------------

    def deliver(self, target: Target) -> None:
        """Nothing to upload ahead: the job's working_dir carries the driver."""

    def submit(self, jobs: Sequence[PlannedJob], target: Target) -> Iterator[Submission]:
        """Submit each job with its working_dir (the driver and its plan) and its runtime_env."""
        with _client(target.info["address"]) as client:
            address = client.get_address()
            for planned in jobs:
                submit = json.loads(json.dumps(planned.body["submit_job"]))
                with tempfile.TemporaryDirectory(prefix="llm-ocr-ray-") as folder:
                    shutil.copyfile(driver.__file__, Path(folder) / DRIVER_FILE)
                    (Path(folder) / PLAN_FILE).write_text(json.dumps(planned.body["plan"], indent=1))
                    submit["runtime_env"]["working_dir"] = folder
                    try:
                        job_id = client.submit_job(**submit)
                    except Exception as exc:
                        raise LaunchError(f"the Ray cluster refused the job: {_said(exc)}") from exc
                log.info("submitted Ray job %s to %s", job_id, address)
                follow = f"ray job logs -f {job_id} --address {address}"
                first = planned.specs[0]
                name = first.name.rsplit("-", 3)[0]
                yield Submission(job_id, list(planned.shards), name, f"{address}/#/jobs/{job_id}", follow)

    # -- following ------------------------------------------------------------------------------

    def states(self, jobs: Sequence[dict[str, Any]]) -> dict[str, JobState]:
        """Each job's state (``get_job_info``), and its shards' events (``get_job_logs``)."""
        found = {}
        with _client(self.given.address) as client:
            for job in jobs:
                job_id = job["job_id"]
                try:
                    info = client.get_job_info(job_id)
                except Exception as exc:  # noqa: BLE001 - the job API raises RuntimeError for an unknown id
                    found[job_id] = JobState(job_id, "unknown", "UNKNOWN",
                                             f"the Ray cluster does not say: {_said(exc)}")
                    continue
                status = str(getattr(info.status, "value", info.status))
                self._events[job_id] = parse_events(client.get_job_logs(job_id))
                message = info.message if status in ("FAILED", "STOPPED") else None
                found[job_id] = JobState(job_id, JOB_PHASES.get(status, "unknown"), status, message)
        return found

    def shard_phase(self, state: JobState, shard: int) -> JobState:
        """The shard's state from the job's and its own events."""
        return shard_state(state, self._events.get(state.job_id, []), shard)

    def logs(self, job: dict[str, Any], shard: int, *, follow: bool = False, tail: int | None = None) -> Iterator[str]:
        """The shard's lines in the job's log (``follow``: until the shard or the job ends)."""
        with _client(self.given.address) as client:
            job_id = job["job_id"]
            text = client.get_job_logs(job_id)
        lines = shard_lines(text, shard)
        return self._lines(job, shard, lines, follow=follow, tail=tail)

    def _lines(self, job: dict[str, Any], shard: int, lines: list[str], *, follow: bool,
               tail: int | None) -> Iterator[str]:
        yield from lines[-tail:] if tail is not None else lines
        seen = len(lines)
        while follow:
            ended = self.shard_phase(self.states([job])[job["job_id"]], shard).phase in TERMINAL_PHASES
            with _client(self.given.address) as client:
                now = shard_lines(client.get_job_logs(job["job_id"]), shard)
            yield from now[seen:]
            seen = len(now)
            if ended:
                return
            time.sleep(_LOG_POLL_S)

    def cancel(self, jobs: Sequence[dict[str, Any]]) -> list[str]:
        """``stop_job``: the driver stops the running shards (SIGTERM: they keep their parts) and ends."""
        stopped = []
        with _client(self.given.address) as client:
            for job in jobs:
                try:
                    client.stop_job(job["job_id"])
                except Exception as exc:
                    raise LaunchError(f"ray job stop {job['job_id']} failed: {_said(exc)}") from exc
                stopped.append(job["job_id"])
        return stopped


# ------------------------------------------------------------------------------------------------


@contextmanager
def _client(address: str | None) -> Iterator[Any]:
    """A ``JobSubmissionClient`` of ``address`` (None: RAY_ADDRESS, else the cluster on this machine).

    Ray's client lets ``RAY_ADDRESS`` override the address it is given; an address given here
    (``--address``, or the one a launch record keeps) is meant, so those variables are set aside
    while the client resolves it."""
    try:
        from ray.job_submission import JobSubmissionClient
    except ImportError as exc:
        raise LaunchError("llm-ocr launch ray needs Ray's job client: pip install 'llm-ocr[ray]'") from exc
    hidden = {name: os.environ.pop(name) for name in _ADDRESS_VARIABLES if address and name in os.environ}
    try:
        try:
            if address and address.startswith("ray://"):  # the dashboard through Ray Client, then plain HTTP
                client = _remembered_client(JobSubmissionClient, address)
                if client is None:
                    dashboard = _connect(_dashboard_of, address)
                    client = JobSubmissionClient(dashboard)
                    dashboards.remember(address, dashboard)
            else:
                client = _connect(JobSubmissionClient, address)
        except Exception as exc:
            where = address or os.environ.get("RAY_ADDRESS") or "auto (a cluster started on this machine)"
            raise LaunchError(
                f"cannot reach the Ray cluster at {where}: {_said(exc)}; give --address ray://HEAD:10001 or "
                "http://HEAD:8265 (the dashboard, `ray start --head --dashboard-host 0.0.0.0`), or start one "
                "(ray start --head)"
            ) from exc
    finally:
        os.environ.update(hidden)
    yield client


def _remembered_client(make: Any, address: str) -> Any:
    """A job client of the dashboard the ray:// ``address`` resolved to last time, if it still
    answers (Ray's client checks ``/api/version`` as it is made), else None."""
    dashboard = dashboards.remembered(address)
    if not dashboard:
        return None
    try:
        return make(dashboard)
    # Ray's version check: ConnectionError (no answer), RuntimeError (404, an old Ray), requests'
    # HTTPError (an OSError) for another status, ValueError/KeyError for an answer not Ray's.
    except (OSError, RuntimeError, ValueError, KeyError) as exc:
        log.info("the Ray dashboard %s that %s resolved to before does not answer (%s): asking again",
                 dashboard, address, _said(exc))
        dashboards.forget(address)
        return None


# Ray Client's proxy starts a server process per client connection; on a loaded head node that
# start can fail (ray/util/client/server/proxier.py reads the new process's command line while it
# may already have exited) and the client sees "Initialization failure from server"; or the new
# process exits as it starts, and the client hears "Starting Ray client server failed" (seen with
# two clusters on one machine: the proxy picks each connection's port from one fixed range,
# 23000-24000, by binding it and letting it go, so two proxies can pick the same port at once).
# The cluster is reachable and a new connection (on another port) usually succeeds, so such
# failures are retried a few times; an unreachable address is not (its own connect timeout
# already took tens of seconds).
_TRANSIENT_CLIENT_FAILURES = ("Initialization failure from server", "Starting Ray client server failed")
_CLIENT_RETRY_WAITS_S = (3.0, 10.0, 30.0)
#: How long one Ray Client connection may take to tell a ray:// address's dashboard. The proxy can
#: also stall on a connection without failing it: it waits for the head's runtime-env agent and for
#: the connection's server with no timeout of its own (ray/util/client/server/proxier.py), and the
#: client then waits for ever, most often on a loaded head node. So the connection is made in a
#: child process, killed at this deadline, and a new one is tried. A
#: connection takes seconds; Ray's own limits are 30 s for the channel and 30 s for the server.
_CLIENT_ATTEMPT_S = 90.0
#: What the child runs: Ray's job client resolves the ray:// address (Ray Client) to the dashboard.
_RESOLVE = ("import sys\n"
            "from ray.job_submission import JobSubmissionClient\n"
            "print('LLM_OCR_DASHBOARD', JobSubmissionClient(sys.argv[1]).get_address(), flush=True)\n")


class _ClientStalled(ConnectionError):
    """A Ray Client connection that neither answered nor failed within :data:`_CLIENT_ATTEMPT_S`."""


def _connect(make: Any, address: str | None) -> Any:
    """``make(address)``, retried when Ray Client's server failed to start the connection's
    server, or the connection stalled (:class:`_ClientStalled`)."""
    waits = list(_CLIENT_RETRY_WAITS_S)
    while True:
        try:
            return make(address)
        except Exception as exc:
            transient = any(failure in str(exc) for failure in _TRANSIENT_CLIENT_FAILURES)
            if not waits or not (isinstance(exc, _ClientStalled) or transient):
                raise
            wait = waits.pop(0)
            log.warning("the Ray cluster at %s did not start a client connection (%s); retrying in %.0f s", address,
                        _said(exc), wait)
            time.sleep(wait)


def _dashboard_of(address: str) -> str:
    """The dashboard URL of the cluster at the ray:// ``address``, asked through Ray Client in a
    child process that is killed if it takes over :data:`_CLIENT_ATTEMPT_S` (:class:`_ClientStalled`)."""
    env = {name: value for name, value in os.environ.items() if name not in _ADDRESS_VARIABLES}
    log.info("asking the Ray cluster at %s for its dashboard (Ray Client)", address)
    try:
        done = subprocess.run([sys.executable, "-c", _RESOLVE, address], capture_output=True, text=True, env=env,
                              timeout=_CLIENT_ATTEMPT_S, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as exc:
        raise _ClientStalled(f"Ray Client neither connected nor failed within {_CLIENT_ATTEMPT_S:.0f} s") from exc
    for line in done.stdout.splitlines():
        if line.startswith("LLM_OCR_DASHBOARD "):
            return line.split(" ", 1)[1].strip()
    raise ConnectionError(_child_error(done.stderr) or f"Ray's job client exited with {done.returncode}")


def _child_error(stderr: str) -> str:
    """The exception a child's traceback ends with (its first line: Ray's messages run on)."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    for index in range(len(lines) - 1, -1, -1):
        if re.match(r"^[\w.]+(Error|Exception|Failure)\b.*:", lines[index]):
            return " ".join(lines[index:index + 2])
    return lines[-1] if lines else ""


def _said(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return (text[:500] + "...") if len(text) > 500 else text or type(exc).__name__
