"""A local stand-in for Hugging Face Jobs that really runs the jobs it is given.

:class:`FakeJobs` is the fake Hub (:mod:`tests.fakes.fake_hub`: repos, commits, whoami) plus the
Jobs routes huggingface_hub 2.4 calls, found by reading its ``hf_api.py`` / ``_jobs_api.py``:

- ``GET  /api/jobs/hardware`` (``list_jobs_hardware``)
- ``POST /api/jobs/{ns}`` (``run_job``: the body of ``_create_job_spec``)
- ``GET  /api/jobs/{ns}[?label=k=v&stage=S]`` (``list_jobs``; one page, no ``Link``)
- ``GET  /api/jobs/{ns}/{id}`` (``inspect_job``, and ``wait_for_job``'s polling)
- ``GET  /api/jobs/{ns}/{id}/logs[?tail=N]`` (``fetch_job_logs``): server-sent events, one
  ``data: {"data": LINE, "timestamp": ISO}`` per line after a ``===== Job started`` event, the
  stream held open while the job runs (the client reconnects and skips the events it has seen)
- ``POST /api/jobs/{ns}/{id}/cancel`` (``cancel_job``)

Each submitted job runs its ``command`` as a local subprocess (its own session, so it and every
process it starts can be killed together), with the spec's ``environment`` and ``secrets`` as
environment variables, on top of what the "container" provides (:mod:`tests.fakes.container`:
``python3``, ``uv`` and the fake ``vllm`` on ``PATH``, no ``llm-ocr``), ``JOB_ID``,
``HF_ENDPOINT`` (this server: the job talks to the fake Hub as a real one talks to huggingface.co)
and an HF cache of its own. The job's repo volumes are materialised from the repos' files in its
folder, and the command's words under a volume's mount path (the shipped wheel,
``/llm-ocr-code/wheels/...``) point there: the job's bootstrap installs that wheel into a venv of
its own and runs ``llm-ocr`` from it, so a launcher that forgot the wheel fails here as in the
cloud.

``attempts`` are honoured (a failed attempt is rerun), ``timeoutSeconds`` kills the job
(``ERROR``), and tests can :meth:`FakeJobs.kill` a job the way a lost machine would (no retry).
Every request body is kept in :attr:`FakeJobs.job_requests`, every log line in the job.
"""

from __future__ import annotations

import json
import signal
import subprocess
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import psutil

from tests.fakes.container import container_env, map_words, with_image
from tests.fakes.fake_hub import FakeHub, _Error

TERMINAL = ("COMPLETED", "ERROR", "CANCELED", "DELETED")

#: The flavors this fake offers, in the API's shape (prices per minute, as the Hub lists them).
HARDWARE = [
    {"name": "cpu-basic", "prettyName": "CPU Basic", "cpu": "2 vCPU", "ram": "16 GB", "accelerator": None,
     "unitCostMicroUSD": 167, "unitCostUSD": 0.000167, "unitLabel": "minute"},
    {"name": "l4x1", "prettyName": "Nvidia 1xL4", "cpu": "8 vCPU", "ram": "30 GB",
     "accelerator": {"type": "gpu", "model": "L4", "quantity": "1", "vram": "24 GB", "manufacturer": "Nvidia"},
     "unitCostMicroUSD": 13333, "unitCostUSD": 0.013333, "unitLabel": "minute"},
    {"name": "l40sx1", "prettyName": "Nvidia 1xL40S", "cpu": "8 vCPU", "ram": "62 GB",
     "accelerator": {"type": "gpu", "model": "L40S", "quantity": "1", "vram": "48 GB", "manufacturer": "Nvidia"},
     "unitCostMicroUSD": 30000, "unitCostUSD": 0.03, "unitLabel": "minute"},
    {"name": "a100-large", "prettyName": "Nvidia A100 - large", "cpu": "12 vCPU", "ram": "142 GB",
     "accelerator": {"type": "gpu", "model": "A100", "quantity": "1", "vram": "80 GB", "manufacturer": "Nvidia"},
     "unitCostMicroUSD": 41667, "unitCostUSD": 0.041667, "unitLabel": "minute"},
    {"name": "a100x4", "prettyName": "4x Nvidia A100", "cpu": "48 vCPU", "ram": "568 GB",
     "accelerator": {"type": "gpu", "model": "A100", "quantity": "4", "vram": "320 GB", "manufacturer": "Nvidia"},
     "unitCostMicroUSD": 166667, "unitCostUSD": 0.166667, "unitLabel": "minute"},
    {"name": "h200", "prettyName": "Nvidia H200", "cpu": "23 vCPU", "ram": "256 GB",
     "accelerator": {"type": "gpu", "model": "H200", "quantity": "1", "vram": "141 GB", "manufacturer": "Nvidia"},
     "unitCostMicroUSD": 83333, "unitCostUSD": 0.083333, "unitLabel": "minute"},
]


def _iso(t: float | None) -> str | None:
    if t is None:
        return None
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


@dataclass
class FakeJob:
    """One submitted job and its runs."""

    id: str
    namespace: str
    body: dict[str, Any]
    folder: Path
    stage: str = "SCHEDULING"
    message: str | None = None
    created: float = field(default_factory=time.time)
    started: float | None = None
    finished: float | None = None
    logs: list[tuple[float, str]] = field(default_factory=list)
    attempts_run: int = 0
    process: subprocess.Popen[bytes] | None = None
    stop_reason: str | None = None  # "cancel" | "kill" | "timeout"
    changed: threading.Condition = field(default_factory=threading.Condition)

    def info(self) -> dict[str, Any]:
        """The job as ``GET /api/jobs/{ns}/{id}`` returns it."""
        end = self.finished or time.time()
        body = self.body
        info = {
            "id": self.id,
            "createdAt": _iso(self.created),
            "startedAt": _iso(self.started),
            "finishedAt": _iso(self.finished),
            "command": body.get("command"),
            "arguments": body.get("arguments", []),
            "environment": body.get("environment", {}),
            # The API never gives secret values back.
            "secrets": dict.fromkeys(body.get("secrets") or {}),
            "flavor": body.get("flavor"),
            "labels": body.get("labels"),
            "volumes": body.get("volumes"),
            "status": {"stage": self.stage, "message": self.message},
            "owner": {"id": f"id-{self.namespace}", "name": self.namespace, "type": "user"},
            "retry": max(0, int(body.get("attempts") or 1) - 1),
            "durations": {
                "schedulingSecs": int((self.started or end) - self.created),
                "runningSecs": int(end - self.started) if self.started else None,
                "totalSecs": int(end - self.created),
            },
        }
        if "dockerImage" in body:
            info["dockerImage"] = body["dockerImage"]
        else:
            info["spaceId"] = body.get("spaceId")
        return info


class FakeJobs(FakeHub):
    """The fake Hub with the Jobs API; see the module docstring.

    Args:
        job_env: variables every job's "container" has (e.g. ``FAKE_VLLM_SIM_ARGS``, tuning).
        images: image name -> extra variables when a job runs that image (a prebuilt image
            "contains" llm-ocr: e.g. ``{"PYTHONPATH": REPO, "PATH": ".../venv/bin"}``).
        workdir: where the jobs' folders go (default: a temporary folder).
    """

    def __init__(
        self,
        *,
        job_env: dict[str, str] | None = None,
        images: dict[str, dict[str, str]] | None = None,
        workdir: Path | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.job_env = dict(job_env or {})
        self.images = dict(images or {})
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="fake-jobs-"))
        self.jobs: dict[str, FakeJob] = {}
        self.job_requests: list[dict[str, Any]] = []

    # -- test helpers ---------------------------------------------------------------------------

    def job_with(self, label: str, value: str) -> list[FakeJob]:
        """Jobs whose label ``label`` is ``value``, in submission order."""
        with self.lock:
            return [j for j in self.jobs.values() if (j.body.get("labels") or {}).get(label) == value]

    def kill(self, job_id: str) -> None:
        """Kill a job and everything it started, as a lost machine would: ERROR, no retry."""
        self._stop(self.jobs[job_id], "kill", signal.SIGKILL)

    def wait_all(self, timeout: float = 120) -> None:
        """Wait until every job has ended."""
        deadline = time.monotonic() + timeout
        for job in list(self.jobs.values()):
            with job.changed:
                while job.stage not in TERMINAL:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise TimeoutError(f"job {job.id} still {job.stage}")
                    job.changed.wait(left)

    def log_text(self) -> str:
        """Every log line of every job."""
        with self.lock:
            return "\n".join(line for job in self.jobs.values() for _, line in job.logs)

    def stop_work(self) -> None:
        """Kill every job still running (before the fake stops answering)."""
        for job in list(self.jobs.values()):
            if job.stage not in TERMINAL:
                self._stop(job, "cancel", signal.SIGKILL)

    # -- routes ---------------------------------------------------------------------------------

    def extra_route(self, handler: Any, path: str, query: dict[str, list[str]]) -> bool:
        if not path.startswith("/api/jobs"):
            return False
        if path == "/api/jobs/hardware":
            handler._send(200, HARDWARE)
            return True
        parts = path.strip("/").split("/")[2:]  # after "api/jobs"
        namespace = parts[0] if parts else ""
        role = handler._role()
        if role is None:
            raise _Error(401, "Invalid credentials in Authorization header")
        if namespace != self.user:
            raise _Error(403, f"You don't have access to the namespace {namespace}")
        if len(parts) == 1 and handler.command == "POST":
            if role != "write":
                raise _Error(403, "Jobs need a token with write access")
            handler._send(200, self._submit(namespace, json.loads(handler.body)).info())
            return True
        if len(parts) == 1 and handler.command == "GET":
            handler._send(200, [j.info() for j in self._list(query)])
            return True
        job = self.jobs.get(parts[1]) if len(parts) >= 2 else None
        if job is None or job.namespace != namespace:
            raise _Error(404, "Job not found")
        if len(parts) == 2 and handler.command == "GET":
            handler._send(200, job.info())
            return True
        if parts[2:] == ["cancel"] and handler.command == "POST":
            self._stop(job, "cancel", signal.SIGTERM)
            handler._send(200, {})
            return True
        if parts[2:] == ["logs"] and handler.command == "GET":
            self._stream_logs(handler, job, query)
            return True
        raise _Error(404, f"no route {handler.command} {path}")

    def _list(self, query: dict[str, list[str]]) -> list[FakeJob]:
        wanted = [label.partition("=") for label in query.get("label", [])]
        stages = set(query.get("stage", []))
        with self.lock:
            jobs = list(self.jobs.values())
        return [
            j for j in jobs
            if all((j.body.get("labels") or {}).get(k) == v for k, _, v in wanted) and (not stages or j.stage in stages)
        ]

    def _stream_logs(self, handler: Any, job: FakeJob, query: dict[str, list[str]]) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", "text/event-stream")
        handler.send_header("Connection", "close")
        handler.end_headers()
        handler.close_connection = True
        tail = int(query["tail"][0]) if query.get("tail") else None

        def event(ts: float, line: str) -> bytes:
            return f"data: {json.dumps({'data': line, 'timestamp': _iso(ts)})}\n\n".encode()

        try:
            handler.wfile.write(event(job.created, f"===== Job started at {_iso(job.started or job.created)} ====="))
            with job.changed:
                sent = max(0, len(job.logs) - tail) if tail is not None else 0
            while True:
                with job.changed:
                    lines = job.logs[sent:]
                    ended = job.stage in TERMINAL
                    if not lines and not ended:
                        job.changed.wait(1.0)
                        continue
                for ts, line in lines:
                    handler.wfile.write(event(ts, line))
                sent += len(lines)
                handler.wfile.flush()
                if ended and not lines:
                    return
        except (BrokenPipeError, ConnectionResetError):
            return

    # -- running jobs ---------------------------------------------------------------------------

    def _submit(self, namespace: str, body: dict[str, Any]) -> FakeJob:
        for key in ("command", "environment", "flavor"):
            if key not in body:
                raise _Error(400, f"missing {key}")
        if body["flavor"] not in {h["name"] for h in HARDWARE}:
            raise _Error(400, f"unknown flavor {body['flavor']}")
        job_id = uuid.uuid4().hex[:24]
        folder = self.workdir / job_id
        job = FakeJob(job_id, namespace, body, folder)
        with self.lock:
            self.job_requests.append(json.loads(json.dumps(body)))
            self.jobs[job_id] = job
        threading.Thread(target=self._run, args=(job,), name=f"fake-job-{job_id}", daemon=True).start()
        return job

    def _log(self, job: FakeJob, line: str) -> None:
        with job.changed:
            job.logs.append((time.time(), line))
            job.changed.notify_all()

    def _set(self, job: FakeJob, stage: str, message: str | None = None) -> None:
        with job.changed:
            job.stage, job.message = stage, message
            if stage == "RUNNING" and job.started is None:
                job.started = time.time()
            if stage in TERMINAL:
                job.finished = time.time()
            job.changed.notify_all()

    def _environment(self, job: FakeJob) -> dict[str, str]:
        env = {
            **container_env(job.folder),
            "HF_HOME": str(job.folder / "hf-home"),
            "HF_HUB_DISABLE_TELEMETRY": "1",
            # The fake Hub stores parts through LFS, as the real one does, but has no Xet.
            "HF_HUB_DISABLE_XET": "1",
            "HF_ENDPOINT": self.url,
            "JOB_ID": job.id,
            **self.job_env,
        }
        image = job.body.get("dockerImage") or job.body.get("spaceId") or ""
        with_image(env, self.images.get(image, {}))
        env.update({k: str(v) for k, v in (job.body.get("environment") or {}).items()})
        env.update({k: str(v) for k, v in (job.body.get("secrets") or {}).items()})
        return env

    def _mount(self, job: FakeJob) -> dict[str, str]:
        """Materialise the job's repo volumes in its folder: container path -> local path."""
        mounts = {}
        for i, volume in enumerate(job.body.get("volumes") or []):
            kind = volume["type"]
            repo = self.repos.get((kind, volume["source"]))
            if repo is None:
                raise _Error(400, f"volume source {kind} {volume['source']} not found")
            local = job.folder / "mounts" / str(i)
            prefix = (volume.get("path") or "").strip("/")
            for name, data in self.files(volume["source"], kind).items():
                if prefix and not name.startswith(prefix + "/"):
                    continue
                target = local / (name[len(prefix) + 1:] if prefix else name)
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(data)
            mounts[volume["mountPath"]] = str(local)
        return mounts

    def _run(self, job: FakeJob) -> None:
        attempts = int(job.body.get("attempts") or 1)
        timeout = job.body.get("timeoutSeconds")
        (job.folder / "work").mkdir(parents=True, exist_ok=True)
        try:
            env = self._environment(job)
            command = map_words(job.body["command"], self._mount(job))
        except _Error as exc:
            self._set(job, "ERROR", exc.message)
            return
        for attempt in range(1, attempts + 1):
            job.attempts_run = attempt
            self._set(job, "RUNNING")
            if attempt > 1:
                self._log(job, f"===== attempt {attempt} of {attempts} =====")
            try:
                process = subprocess.Popen(
                    command, env=self.marked(env), cwd=job.folder / "work", stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT, start_new_session=True,
                )
            except OSError as exc:
                self._set(job, "ERROR", f"cannot start the command: {exc}")
                return
            with job.changed:
                job.process = process
            timer = threading.Timer(float(timeout), self._stop, args=(job, "timeout", signal.SIGKILL)) if timeout else None
            if timer:
                timer.start()
            assert process.stdout is not None
            for raw in process.stdout:
                self._log(job, raw.decode("utf-8", "replace").rstrip("\n"))
            code = process.wait()
            if timer:
                timer.cancel()
            reason = job.stop_reason
            if reason == "cancel":
                self._set(job, "CANCELED", "canceled by the user")
                return
            if reason == "kill":
                self._set(job, "ERROR", "the machine running the job was lost")
                return
            if reason == "timeout":
                self._set(job, "ERROR", f"timed out after {timeout}s")
                return
            if code == 0:
                self._set(job, "COMPLETED")
                return
            self._log(job, f"===== attempt {attempt} exited with code {code} =====")
        self._set(job, "ERROR", f"exited with code {code} after {attempts} attempt(s)")

    def _stop(self, job: FakeJob, reason: str, sig: int) -> None:
        with job.changed:
            if job.stage in TERMINAL:
                return
            job.stop_reason = job.stop_reason or reason
            process = job.process
        if process is None:
            self._set(job, "CANCELED" if reason == "cancel" else "ERROR", reason)
            return
        _signal_tree(process.pid, sig)
        if sig != signal.SIGKILL:
            threading.Timer(10.0, _signal_tree, args=(process.pid, signal.SIGKILL)).start()


def _signal_tree(pid: int, sig: int) -> None:
    """Signal a process and every descendant (a launched model server may sit in its own group)."""
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return
    for proc in procs:
        try:
            proc.send_signal(sig)
        except psutil.NoSuchProcess:
            pass


def hub_files_text(hub: FakeHub, repo_id: str, repo_type: str = "dataset") -> str:
    """Every file of a repo, decoded leniently, joined (to search for leaked values)."""
    return "\n".join(f"{name}\n{data.decode('utf-8', 'replace')}" for name, data in hub.files(repo_id, repo_type).items())

