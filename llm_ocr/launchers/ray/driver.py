"""The driver of a Ray launch: a queue of shards over K actors, each running the plain ``llm-ocr``.

``llm-ocr launch ray`` submits this file as a Ray Job (``python llm_ocr_ray_driver.py plan.json``, both in
the job's ``working_dir``): it runs on the cluster's head node in the cluster's own Python, which
needs only ``ray``, never llm-ocr (this module imports nothing from llm-ocr, and its actor class is
pickled by value with it). The driver

1. starts K actors (:class:`ShardRunner`): ``num_gpus`` each (one GPU by default, so one actor per
   GPU), with Ray's ``max_restarts``: an actor whose process or node dies is restarted by Ray;
2. hands the shards out in order as actors free up (a queue of N shards over K actors; nothing
   more clever than that);
3. in each actor, runs ``llm-ocr STAGE ... --output OUT`` for shard ``i`` as a subprocess
   (``LLM_OCR_NUM_SHARDS`` / ``LLM_OCR_SHARD_INDEX``), with its own managed server: quarantine,
   parts, markers and resume are exactly those of any other run;
4. re-queues the shard of an actor that died (``ray.exceptions.RayActorError``), or whose
   ``llm-ocr`` crashed (any exit status but 0, 1: some pages failed, 127: no llm-ocr), while the
   shard has attempts left; it goes to the next actor that frees up, or to the restarted one;
5. pulls each running shard's output lines from its actor and prints them as ``[shard I] LINE``,
   with one event line per shard event (``llm-ocr-ray {...}``: start, exit, lost, retry, failed):
   the job's log is every shard's log, and ``llm-ocr jobs status|logs`` read their states and
   lines from it through the Ray Jobs API.

A shard is only handed out again once its previous ``llm-ocr`` cannot write any more: the child
gets SIGKILL when its actor's process dies (``PR_SET_PDEATHSIG``; Ray itself kills a worker's
children only when the worker exits cleanly: "Lifetimes of a User-Spawn Process",
https://docs.ray.io/en/latest/ray-core/user-spawn-processes.html); and the shard of a run that
failed with ``RayActorError`` moves on only once its actor answers again: restarted (a new process)
or, if it was only unreachable, after its ``llm-ocr`` was killed. ``ray job stop`` sends the driver
SIGTERM: it stops handing out shards, sends SIGTERM to every running ``llm-ocr`` (which finishes
the pages in flight and keeps its parts), waits for them, and exits; the job's runtime_env sets
``RAY_JOB_STOP_WAIT_TIME_S`` so Ray waits that long before its SIGKILL.

Secrets never travel with the job (its runtime_env, entrypoint and metadata are shown by the
dashboard and ``ray job list``): ``node_secrets`` are only names of variables the nodes already
have (exported before ``ray start``, or a Kubernetes Secret in a KubeRay pod's env); the actors
inherit them from their raylet and check each is set before a shard starts.
"""

from __future__ import annotations

import collections
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Any

#: The prefix of the driver's event lines in the job's log (one JSON object after it).
EVENT_PREFIX = "llm-ocr-ray "
#: Exit statuses after which a shard is not run again: 0 every page done, 1 done but some pages
#: failed (a relaunch with --retry-errors redoes them), 127 no llm-ocr (a retry would not help).
FINAL_CODES = (0, 1, 127)
#: Lines of a shard's output an actor keeps until the driver takes them.
_BUFFERED_LINES = 20_000
#: Seconds between the driver's polls of the running shards' output.
_POLL_S = 1.0

# Run with the actor's Python between the actor and llm-ocr: it asks the kernel for SIGKILL when
# the actor's thread that started it exits (the actor's process dying), then becomes llm-ocr.
_WRAPPER = (
    "import ctypes,os,signal,sys\n"
    "try:\n"
    " ctypes.CDLL(None,use_errno=True).prctl(1,signal.SIGKILL)\n"  # PR_SET_PDEATHSIG
    "except (OSError,AttributeError):\n"
    " pass\n"
    "if os.getppid()!=int(sys.argv[1]):\n"  # the actor died before the prctl: nobody to serve
    " os._exit(137)\n"
    "os.execvp(sys.argv[2],sys.argv[2:])\n"
)


def event_line(kind: str, **fields: Any) -> str:
    """One event of the job's log: ``llm-ocr-ray {"event": KIND, "time": T, ...}``."""
    return EVENT_PREFIX + json.dumps({"event": kind, "time": round(time.time(), 3), **fields}, sort_keys=True)


def shard_prefix(shard: int) -> str:
    """The prefix of shard ``shard``'s output lines in the job's log."""
    return f"[shard {shard}] "


class ShardRunner:
    """An actor that runs whole shards, one at a time, each as an ``llm-ocr`` subprocess.

    Threaded (``max_concurrency=3``): while :meth:`run` waits for the subprocess, the driver takes
    its output lines (:meth:`take_lines`) and can stop it (:meth:`stop`)."""

    def __init__(self, plan: dict[str, Any], number: int) -> None:
        self.plan = plan
        self.number = number
        self.lines: collections.deque[str] = collections.deque(maxlen=_BUFFERED_LINES)
        self.dropped = 0
        self.lock = threading.Lock()
        self.child: subprocess.Popen[bytes] | None = None
        self.stopping = False
        self.timed_out = False
        self.shard: int | None = None

    def where(self) -> dict[str, Any]:
        """This actor's node, process and GPUs, and the shard it runs (``busy``), if any."""
        child = self.child
        return {"node": socket.gethostname(), "pid": os.getpid(), "gpus": os.environ.get("CUDA_VISIBLE_DEVICES", ""),
                "busy": self.shard if child is not None and child.poll() is None else None}

    def kill_child(self) -> None:
        """SIGKILL the running llm-ocr and wait for it (its shard is given to another actor)."""
        child = self.child
        if child is not None and child.poll() is None:
            child.kill()
            child.wait()

    def _program(self) -> list[str] | str:
        """How to start llm-ocr here, or why it cannot be."""
        venv = self.plan.get("venv")
        if venv:
            path = os.path.join(venv, "bin", "llm-ocr")
            if os.access(path, os.X_OK):
                return [path]
            return f"--venv {venv}: no bin/llm-ocr there on node {socket.gethostname()}"
        import importlib.util

        if importlib.util.find_spec("llm_ocr") is not None:
            return [sys.executable, "-m", "llm_ocr.cli"]
        found = shutil.which("llm-ocr")
        if found:
            return [found]
        return (f"llm-ocr is not installed on node {socket.gethostname()} (not importable by the Ray workers' Python "
                f"{sys.executable}, not on PATH): install it in the cluster's image or environment, or launch with "
                "--pip 'llm-ocr[EXTRAS]' (Ray installs it on each node) or --venv PATH (a virtualenv every node has)")

    def run(self, shard: int, attempt: int) -> dict[str, Any]:
        """Run shard ``shard`` to its end; its exit status, seconds and why it ended."""
        started = time.time()
        program = self._program()
        missing = [name for name in self.plan.get("node_secrets", []) if not os.environ.get(name)]
        problem = program if isinstance(program, str) else None
        if problem is None and missing:
            problem = (f"node secret {', '.join(missing)} is not set in the environment of the Ray workers on node "
                       f"{socket.gethostname()}: export it before `ray start` (on KubeRay: an env entry with "
                       "valueFrom.secretKeyRef in the pod templates)")
        if problem is not None:
            self._keep(f"llm-ocr ray: {problem}")
            return {"code": 127, "seconds": 0.0, "why": problem}
        assert not isinstance(program, str)
        env = dict(os.environ)
        env.update(self.plan["env"])
        env.update({"LLM_OCR_NUM_SHARDS": str(self.plan["num_shards"]), "LLM_OCR_SHARD_INDEX": str(shard)})
        cwd = self.plan.get("cwd")
        argv = [sys.executable, "-c", _WRAPPER, str(os.getpid()), *program, *self.plan["command"][1:]]
        with self.lock:
            self.stopping = False
            self.shard = shard
            self.child = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                                          cwd=cwd if cwd and os.path.isdir(cwd) else None)
        child = self.child
        why = ""
        timer = threading.Timer(float(self.plan["timeout_s"]), self._time_out)
        timer.daemon = True
        timer.start()
        try:
            assert child.stdout is not None
            for raw in child.stdout:
                self._keep(raw.decode(errors="replace").rstrip("\n"))
            code = child.wait()
        finally:
            timer.cancel()
        if self.stopping:
            why = "stopped"
        elif self.timed_out:
            why = f"timeout ({self.plan['timeout_s']} s)"
        self.timed_out = False
        return {"code": code if code >= 0 else 128 - code, "seconds": round(time.time() - started, 3), "why": why}

    def _keep(self, line: str) -> None:
        with self.lock:
            if len(self.lines) == self.lines.maxlen:
                self.dropped += 1
            self.lines.append(line)

    def _time_out(self) -> None:
        self.timed_out = True
        self._signal(signal.SIGTERM, then_kill=True)

    def _signal(self, sig: int, *, then_kill: bool = False) -> None:
        child = self.child
        if child is None or child.poll() is not None:
            return
        try:
            child.send_signal(sig)
        except ProcessLookupError:
            return
        if then_kill:  # llm-ocr's grace period for the pages in flight, then a little more
            grace = float(self.plan.get("grace_s", 30)) + 15.0
            threading.Timer(grace, _kill_if_running, (child,)).start()

    def take_lines(self) -> list[str]:
        """The output lines kept since the last call (with a note of any dropped)."""
        with self.lock:
            lines = list(self.lines)
            self.lines.clear()
            if self.dropped:
                lines.insert(0, f"llm-ocr ray: {self.dropped} line(s) of output dropped (the driver fell behind)")
                self.dropped = 0
        return lines

    def stop(self) -> bool:
        """Ask the running llm-ocr to stop (SIGTERM: it finishes the pages in flight, keeps its parts)."""
        with self.lock:
            self.stopping = True
        self._signal(signal.SIGTERM, then_kill=True)
        return True


class Driver:
    """The queue of shards over the actors (see the module docstring)."""

    def __init__(self, plan: dict[str, Any]) -> None:
        self.plan = plan
        self.queue: collections.deque[int] = collections.deque(plan["shards"])
        self.attempts: dict[int, int] = dict.fromkeys(plan["shards"], 0)
        self.done: list[int] = []
        self.failed: list[int] = []
        #: SIGTERM came (``ray job stop``): no shard starts any more.
        self.stop_requested = False
        #: The running shards were told to stop.
        self.stop_sent = False

    def actor_count(self, resources: dict[str, float]) -> int:
        """K: ``actors`` if given, else one per GPU (per ``cpus_per_actor`` CPUs for CPU-only
        actors) the cluster has now, at least one, at most one per shard."""
        plan = self.plan
        if plan.get("actors"):
            wanted = int(plan["actors"])
        elif plan["gpus_per_actor"]:
            wanted = int(resources.get("GPU", 0) // plan["gpus_per_actor"])
        else:
            wanted = int(resources.get("CPU", 1) // max(plan["cpus_per_actor"], 1e-9))
        return max(1, min(wanted, len(plan["shards"])))

    def main(self) -> int:
        """Run every shard of the plan; 0 when each ended with status 0 or 1."""
        import ray
        from ray.exceptions import GetTimeoutError, RayActorError

        ray.init()
        signal.signal(signal.SIGTERM, self._on_term)  # after ray.init, which sets its own
        plan = self.plan
        options: dict[str, Any] = {"num_cpus": plan["cpus_per_actor"], "num_gpus": plan["gpus_per_actor"],
                                   "max_restarts": plan["actor_restarts"], "max_task_retries": 0,
                                   "max_concurrency": 3}
        if plan.get("accelerator_type"):
            options["accelerator_type"] = plan["accelerator_type"]
        if plan.get("resources"):
            options["resources"] = plan["resources"]
        runner: Any = ray.remote(ShardRunner).options(**options)
        resources = ray.cluster_resources()
        count = self.actor_count(resources)
        actors: list[Any] = [runner.remote(plan, number) for number in range(count)]
        _emit(event_line("launch", actors=count, shards=plan["shards"], cluster={k: resources.get(k, 0) for k in
                                                                                 ("CPU", "GPU")}, **options))
        idle = list(range(count))
        running: dict[Any, tuple[int, int]] = {}  # run ref -> (actor number, shard)
        # A shard whose run failed with RayActorError (its actor died, is restarting, or could not
        # be reached) moves on only once the actor answers again: a restarted actor is a new
        # process whose llm-ocr died with the old one; one that was only unreachable still has its
        # llm-ocr, which is killed first. A call sent while Ray restarts an actor fails ("The actor
        # was restarted"), so the ping is retried by Ray until the actor is back, or dead for good.
        waking: dict[Any, tuple[int, int]] = {}  # ping ref -> (actor number, shard it lost)
        while True:
            while self.queue and idle and not self.stop_requested:
                number, shard = idle.pop(0), self.queue.popleft()
                self.attempts[shard] += 1
                running[actors[number].run.remote(shard, self.attempts[shard])] = (number, shard)
                _emit(event_line("start", shard=shard, attempt=self.attempts[shard], actor=number,
                                 node_secrets=plan.get("node_secrets", [])))
            if not running and not waking:
                break
            ready, _ = ray.wait([*running, *waking], num_returns=1, timeout=_POLL_S)
            if self.stop_requested and not self.stop_sent:
                self._stop_all(actors, running)
            for ref, (number, shard) in list(running.items()):
                if ref not in ready:
                    self._print(ray, actors[number], shard, (GetTimeoutError, RayActorError))
            for ref in ready:
                if ref in waking:
                    number, shard = waking.pop(ref)
                    try:
                        answer = ray.get(ref)
                    except RayActorError as exc:  # dead for good (out of restarts)
                        _emit(event_line("actor-retired", actor=number, why=_first_line(exc)))
                    else:
                        if answer.get("busy") is not None:  # only unreachable: its llm-ocr still runs
                            ray.get(actors[number].kill_child.remote())
                        _emit(event_line("actor-back", actor=number, **answer))
                        idle.append(number)
                    self._again(shard, f"actor {number} died or became unreachable")
                    continue
                number, shard = running.pop(ref)
                try:
                    result = ray.get(ref)
                except RayActorError as exc:
                    _emit(event_line("lost", shard=shard, attempt=self.attempts[shard],
                                     why=f"actor {number} died or became unreachable: {_first_line(exc)}"))
                    waking[actors[number].where.options(max_task_retries=-1).remote()] = (number, shard)
                    continue
                self._print(ray, actors[number], shard, (GetTimeoutError, RayActorError))
                idle.append(number)
                self._ended(shard, result)
        for shard in list(self.queue):
            self.failed.append(shard)
            if self.stop_requested:
                _emit(event_line("stopped", shard=shard, why="the launch was stopped before this shard ran"))
            else:
                _emit(event_line("failed", shard=shard, why="no actor left to run it; relaunch to run it"))
        _emit(event_line("end", done=sorted(self.done), failed=sorted(self.failed),
                         stopped=bool(self.stop_requested)))
        return 3 if self.stop_requested else (0 if not self.failed else 1)

    def _on_term(self, signum: int, frame: Any) -> None:
        self.stop_requested = True

    def _stop_all(self, actors: list[Any], running: dict[Any, tuple[int, int]]) -> None:
        _emit(event_line("stop", shards=sorted(shard for _, shard in running.values())))
        for number, _ in running.values():
            actors[number].stop.remote()
        self.stop_sent = True

    def _print(self, ray: Any, actor: Any, shard: int, errors: tuple[type[BaseException], ...]) -> None:
        try:
            lines = ray.get(actor.take_lines.remote(), timeout=5)
        except errors:
            return  # a dead actor's lines are gone; its run's error says so
        prefix = shard_prefix(shard)
        if lines:
            _emit("\n".join(prefix + line for line in lines))

    def _ended(self, shard: int, result: dict[str, Any]) -> None:
        code = int(result["code"])
        _emit(event_line("exit", shard=shard, attempt=self.attempts[shard], code=code, seconds=result["seconds"],
                         why=result.get("why", "")))
        if code in FINAL_CODES or result.get("why") == "stopped" or self.stop_requested:
            (self.done if code in (0, 1) else self.failed).append(shard)
            return
        self._again(shard, result.get("why") or f"exit status {code}")

    def _again(self, shard: int, why: str) -> None:
        if self.stop_requested:
            self.failed.append(shard)
            _emit(event_line("stopped", shard=shard, why=f"the launch was stopped after: {why}"))
        elif self.attempts[shard] < self.plan["attempts"]:
            _emit(event_line("retry", shard=shard, attempt=self.attempts[shard], why=why))
            self.queue.appendleft(shard)
        else:
            self.failed.append(shard)
            _emit(event_line("failed", shard=shard, why=f"attempt {self.attempts[shard]} of {self.plan['attempts']}: "
                                                        f"{why}; relaunch to resume"))


def _kill_if_running(child: subprocess.Popen[bytes]) -> None:
    if child.poll() is None:
        child.kill()


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _emit(text: str) -> None:
    print(text, flush=True)


def main(argv: list[str] | None = None) -> int:
    """``python llm_ocr_ray_driver.py PLAN.json``."""
    args = sys.argv[1:] if argv is None else argv
    with open(args[0]) as handle:
        plan = json.load(handle)
    return Driver(plan).main()


if __name__ == "__main__":
    sys.exit(main())
