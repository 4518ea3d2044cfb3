"""Slurm: one ``sbatch --array`` job whose task ids are the shards (Slurm 22.05 and later).

Commands (man pages of Slurm 22.05, https://slurm.schedmd.com/man_index.html): ``sinfo -h -o
'%P|%l'`` (partitions and their time limits, checked before submitting), ``scontrol show config``
(``MaxArraySize``, ``KillWait``), ``sbatch --parsable SCRIPT`` (the array job id), ``squeue -h -r
-t all -j IDS`` (task states), ``scancel ID_TASK...``. The tasks run on the cluster's shared file
system, so INPUT and OUT may be local paths there, and each task's log is a file
(``--output=LOGS/LAUNCH/%A_%a.log``) that ``llm-ocr jobs logs`` reads.

The script (:mod:`llm_ocr.launchers.slurm.script`) is written under the log folder and kept: a user
can read it, resubmit it, or write their own from it. Task ``i`` of the array is shard ``i``
(``--array=0-15%4``; a relaunch of the unfinished shards is ``--array=3,7``), told the shard count
in ``LLM_OCR_NUM_SHARDS``. Each task is its own entry in the launch record (``ARRAYJOB_SHARD``),
so ``jobs cancel --shard 3`` cancels just that task.

The environment the tasks run in: a virtualenv (``--venv``; by default the one running the
launcher, which a cluster's shared file system makes visible to the nodes), ``module load`` lines
(``--module``), raw shell lines (``--setup``), or a container image through the pyxis plugin
(``--image`` -> ``srun --container-image``, https://github.com/NVIDIA/pyxis). sbatch copies the
launching environment into the tasks (``--export=ALL``, its default), without this machine's
``LLM_OCR_*`` settings: secrets travel that way, never in the script.
"""

from __future__ import annotations

import logging
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, ClassVar

from fsspec.core import split_protocol
from pydantic import BaseModel, Field

from llm_ocr.container.shard_index import NUM_SHARDS_ENV, format_ranges
from llm_ocr.costs import Hardware
from llm_ocr.launchers.core.adapter import TERMINAL_PHASES, JobState, PlatformOptions, Submission
from llm_ocr.launchers.core.files import LOCAL_PROTOCOLS
from llm_ocr.launchers.core.spec import LAUNCH_LABEL, LaunchError, LaunchRequest, PlannedJob, ShardSpec, Target
from llm_ocr.launchers.slurm.script import BatchScript, parse_slurm_time, render, slurm_time
from llm_ocr.launchers.slurm.state import SQUEUE_FORMAT, read_records, record_state, squeue_states

log = logging.getLogger("llm_ocr")

#: Seconds a Slurm command may take (slurmctld answers in well under a second when healthy).
COMMAND_TIMEOUT_S = 60
#: ``--signal=B:USR1@S`` default: the task stops and requeues itself S seconds before its limit.
REQUEUE_BEFORE_S = 300
#: Seconds llm-ocr lets pages in flight finish after a SIGTERM when KillWait is unknown.
DEFAULT_GRACE_S = 10
_LOG_POLL_S = 2.0
#: sbatch's input variables (sbatch(1), "INPUT ENVIRONMENT VARIABLES") that would override the
#: script's own directive of the same option.
_SBATCH_ENV = {"--partition": "SBATCH_PARTITION", "--account": "SBATCH_ACCOUNT", "--qos": "SBATCH_QOS",
               "--time": "SBATCH_TIMELIMIT", "--gpus": "SBATCH_GPUS", "--gres": "SBATCH_GRES",
               "--job-name": "SBATCH_JOB_NAME", "--requeue": "SBATCH_NO_REQUEUE", "--signal": "SBATCH_SIGNAL",
               "--open-mode": "SBATCH_OPEN_MODE", "--array": "SBATCH_ARRAY_INX", "--mem": "SBATCH_MEM_PER_NODE",
               "--cpus-per-task": "SBATCH_CPUS_PER_TASK", "--chdir": "SBATCH_CHDIR"}


class SlurmOptions(PlatformOptions):
    """Slurm: ``llm-ocr launch slurm`` options (``llm_ocr.launch`` keywords)."""

    partition: str | None = Field(None, description="Partition (default: the cluster's default partition).")
    account: str | None = Field(None, description="Account to charge (sbatch --account).")
    qos: str | None = Field(None, description="Quality of service (sbatch --qos).")
    gpus_per_task: int | None = Field(
        None, ge=0, description="GPUs per shard task (sbatch --gpus; default 1, 0 for assemble and --endpoint runs).",
    )
    gpu_type: str | None = Field(None, description="GPU type as the cluster names it in its GRES (--gpus=TYPE:N), "
                                 "e.g. a100.", json_schema_extra={"metavar": "TYPE"})
    gres: str | None = Field(None, description="Generic resources instead of --gpus, e.g. gpu:a100:1 (sbatch --gres).")
    cpus_per_task: int | None = Field(None, ge=1, description="CPUs per task (default: the partition's).")
    mem: str | None = Field(None, description="Memory per task, e.g. 64G (sbatch --mem; default: the partition's).")
    parallelism: int | None = Field(None, ge=1,
                                    description="Tasks running at once, the array's throttle (default: all).")
    venv: str | None = Field(None, description="Virtualenv the tasks activate (default: the one running this launcher, "
                             "unless --image is given).", json_schema_extra={"metavar": "PATH"})
    module: list[str] = Field(
        default_factory=list, description="Environment module each task loads (module load NAME).",
        json_schema_extra={"metavar": "NAME", "repeat": True},
    )
    setup: list[str] = Field(
        default_factory=list, description="Shell line each task runs before llm-ocr, e.g. "
        "'source ~/miniforge3/bin/activate ocr'.", json_schema_extra={"metavar": "LINE", "repeat": True},
    )
    container_mounts: str | None = Field(None, description="With --image: pyxis --container-mounts (default: OUT, the "
                                         "local INPUTs and the log folder, each at its own path).")
    requeue_before: int = Field(
        REQUEUE_BEFORE_S, ge=0, description="Seconds before its time limit a task stops, keeps its parts and requeues "
        "itself to resume (sbatch --signal=B:USR1@S; 0: never).",
    )
    log_dir: str | None = Field(
        None, description="Folder for the script, task logs and task records, shared with the nodes (default: "
        "OUT/_state/slurm when OUT is a local path).", json_schema_extra={"metavar": "DIR"},
    )
    job_name: str | None = Field(None, description="Job name (default: llm-ocr-STAGE).")
    sbatch_option: list[str] = Field(default_factory=list, description="Any other sbatch option for the script, e.g. "
                                     "--constraint=h100.", json_schema_extra={"metavar": "OPTION", "repeat": True})


class Slurm:
    """The Slurm adapter (see the module docstring)."""

    name: ClassVar[str] = "slurm"
    shard_env: ClassVar[bool] = False
    hardware_option: ClassVar[str] = "gpu_type"
    options: ClassVar[type[BaseModel]] = SlurmOptions
    #: The tasks see this machine's files (a cluster's shared file system): INPUT and OUT may be paths.
    shared_filesystem: ClassVar[bool] = True

    def __init__(self, **options: Any) -> None:
        """``options``: :class:`SlurmOptions` fields."""
        self.given = SlurmOptions.model_validate(options)

    @classmethod
    def from_record(cls, info: dict[str, Any]) -> Slurm:
        """An adapter following the tasks of a launch record (its log folder holds their logs and records)."""
        return cls(log_dir=info.get("log_dir"))

    # -- planning -------------------------------------------------------------------------------

    def resolve(self, request: LaunchRequest) -> Target:
        """The GPUs, the environment set-up and the log folder; online, the partition's time limit
        and the cluster's array size and kill wait. Submits nothing."""
        given = self.given
        if given.wheel:
            raise LaunchError("--wheel: Slurm tasks run the llm-ocr of the environment they set up; install the wheel "
                              "there (pip install WHEEL in the --venv) or give an --image that has it")
        notes: list[str] = []
        config: dict[str, str] = {}
        max_time: int | None = None
        if request.offline:
            notes.append("offline: not checked: that sbatch works here, the partition and its time limit, "
                         "the cluster's MaxArraySize and KillWait")
        else:
            if shutil.which("sbatch") is None:
                raise LaunchError("sbatch is not on PATH: launch from a Slurm login node (slurm-client installed and "
                                  "configured, or SLURM_CONF set)")
            config = _config()
            max_time = _partition_time_limit(given.partition)
            largest = request.num_shards - 1
            limit = config.get("MaxArraySize", "").split()[0] if config.get("MaxArraySize") else ""
            if limit.isdigit() and largest >= int(limit):
                raise LaunchError(f"--num-shards {request.num_shards}: this cluster's MaxArraySize is {limit}, so "
                                  f"array task ids stop at {int(limit) - 1}; use at most {limit} shards")
        gpus = _gpu_count(given, request.needs_model)
        hardware = Hardware(_hardware_name(given, gpus), gpus, None, None, True, given.gpu_type or "")
        log_root = self._log_root(request)
        kill_wait = config.get("KillWait", "").split(" ")[0]  # "30 sec"
        # KillWait is how long Slurm waits between SIGTERM and SIGKILL: llm-ocr's grace for the
        # pages in flight must end in time to write the last part.
        grace = max(1, min(30, int(kill_wait) // 2)) if kill_wait.isdigit() else DEFAULT_GRACE_S
        setup, venv = self._setup(request)
        if venv:
            notes.append(f"the tasks run llm-ocr from the virtualenv {venv}")
        info = {"log_dir": str(log_root), "partition": given.partition, "account": given.account, "qos": given.qos,
                "cluster": config.get("ClusterName")}
        private = {"setup": setup, "log_root": log_root, "cwd": os.getcwd(), "mounts": _mounts(request, log_root)}
        env = {NUM_SHARDS_ENV: str(request.num_shards), "LLM_OCR_GRACE_PERIOD": str(grace)}
        return Target(hardware, request.image or "", [], {}, info, private, notes, max_time, env)

    def _log_root(self, request: LaunchRequest) -> Path:
        if self.given.log_dir:
            return Path(self.given.log_dir).expanduser().absolute()
        protocol, path = split_protocol(request.output)
        if protocol not in LOCAL_PROTOCOLS:
            raise LaunchError(f"the task logs need a folder this machine and the nodes share, and OUT {request.output} "
                              "is not one: pass --log-dir DIR (e.g. on your home or project file system)")
        return Path(path).expanduser().absolute() / "_state" / "slurm"

    def _setup(self, request: LaunchRequest) -> tuple[list[str], str | None]:
        """The script's environment lines, and the virtualenv they activate (if any)."""
        given = self.given
        lines = [f"module load {shlex.quote(name)}" for name in given.module]
        venv = given.venv
        if venv is None and not request.image and sys.prefix != sys.base_prefix:
            venv = sys.prefix  # the launcher's own: on a shared file system the nodes see it too
        if venv:
            root = Path(venv).expanduser().absolute()
            if not (root / "bin" / "activate").is_file():
                raise LaunchError(f"--venv {venv}: no bin/activate there; give the folder of a virtualenv with llm-ocr")
            if not (root / "bin" / "llm-ocr").exists():
                raise LaunchError(f"--venv {venv}: it has no bin/llm-ocr; pip install llm-ocr into it first")
            lines.append(f"source {shlex.quote(str(root / 'bin' / 'activate'))}")
            venv = str(root)
        lines += list(given.setup)
        return lines, venv

    def plan_jobs(self, specs: Sequence[ShardSpec], target: Target) -> list[PlannedJob]:
        """One array job for every shard to launch: the script, and the sbatch command that submits it."""
        first = specs[0]
        shards = [spec.shard_index for spec in specs]
        launch_id = first.labels[LAUNCH_LABEL]
        folder = target.private["log_root"] / launch_id
        text = render(self._script(first, shards, folder, target))
        path = folder / f"{first.name.rsplit('-', 3)[0]}.sbatch"
        body = {"argv": ["sbatch", "--parsable", str(path)], "script_path": str(path), "script": text}
        return [PlannedJob(shards, body, list(specs))]

    def _script(self, spec: ShardSpec, shards: list[int], folder: Path, target: Target) -> BatchScript:
        given = self.given
        array = format_ranges(shards) + (f"%{given.parallelism}" if given.parallelism else "")
        directives: list[tuple[str, str | None]] = [
            ("--job-name", given.job_name or spec.name.rsplit("-", 3)[0]),
            ("--array", array),
        ]
        gpus = target.hardware.gpus
        if given.gres:
            directives.append(("--gres", given.gres))
        elif gpus:
            directives.append(("--gpus", f"{given.gpu_type}:{gpus}" if given.gpu_type else str(gpus)))
        for flag, value in (("--cpus-per-task", given.cpus_per_task), ("--mem", given.mem),
                            ("--partition", given.partition), ("--account", given.account), ("--qos", given.qos)):
            if value is not None:
                directives.append((flag, str(value)))
        directives += [
            ("--time", slurm_time(spec.timeout_s)),
            ("--output", str(folder / "%A_%a.log")),
            ("--open-mode", "append"),
            ("--requeue", None),
        ]
        if given.requeue_before:
            directives.append(("--signal", f"B:USR1@{min(given.requeue_before, spec.timeout_s // 2)}"))
        directives.append(("--chdir", target.private["cwd"]))
        directives += [(option, None) for option in given.sbatch_option]
        command = list(spec.command)
        if spec.image:
            mounts = given.container_mounts or target.private["mounts"]
            command = ["srun", "--ntasks=1", f"--container-image={spec.image}", f"--container-mounts={mounts}",
                       f"--container-workdir={target.private['cwd']}", *command]
        header = [f"Written by `llm-ocr launch slurm` (launch {spec.labels[LAUNCH_LABEL]}): {len(shards)} of",
                  f"{spec.num_shards} shard(s), array task i running shard i. Resubmit with: sbatch THIS_FILE"]
        return BatchScript(directives, target.private["setup"], spec.env, command, str(folder / "tasks"),
                           spec.attempts, header)

    # -- side effects ---------------------------------------------------------------------------

    def deliver(self, target: Target) -> None:
        """Nothing to upload: the tasks run the code of the environment they set up."""

    def submit(self, jobs: Sequence[PlannedJob], target: Target) -> Iterator[Submission]:
        """Write the script beside the task logs and submit it with ``sbatch --parsable``."""
        for planned in jobs:
            path = Path(planned.body["script_path"])
            (path.parent / "tasks").mkdir(parents=True, exist_ok=True)  # Slurm does not create --output's folder
            path.write_text(planned.body["script"])
            done = _run(planned.body["argv"], env=_submit_env(planned.body["script"]))
            if done.returncode != 0:
                raise LaunchError(f"sbatch refused the job: {_said(done)} (script: {path})")
            array_id = done.stdout.strip().split(";")[0]
            if not array_id.isdigit():
                raise LaunchError(f"sbatch answered {done.stdout.strip()!r}, not a job id (script: {path})")
            log.info("submitted job array %s: %s", array_id, path)
            for spec in planned.specs:
                job_id = f"{array_id}_{spec.shard_index}"
                follow = f"tail -f {path.parent / (job_id + '.log')}"
                yield Submission(job_id, [spec.shard_index], spec.name, "", follow)

    # -- following ------------------------------------------------------------------------------

    def states(self, jobs: Sequence[dict[str, Any]]) -> dict[str, JobState]:
        """Each task's state from ``squeue``, else from its task records."""
        ids = [job["job_id"] for job in jobs]
        known = _squeue(sorted({i.split("_")[0] for i in ids}))
        found = {}
        for job in jobs:
            job_id = job["job_id"]
            state = known.get(job_id)
            if state is None:
                state = record_state(job_id, read_records(self._folder(job) / "tasks" / f"{job['shards'][0]}.jsonl"))
            found[job_id] = state
        return found

    def shard_phase(self, state: JobState, shard: int) -> JobState:
        """A task runs one shard: its own state."""
        return state

    def _folder(self, job: dict[str, Any]) -> Path:
        if not self.given.log_dir:
            raise LaunchError("the launch record names no Slurm log folder")
        return Path(self.given.log_dir) / str(job["launch_id"])

    def logs(self, job: dict[str, Any], shard: int, *, follow: bool = False, tail: int | None = None) -> Iterator[str]:
        """The task's log file (``follow``: until the task ends)."""
        path = self._folder(job) / f"{job['job_id']}.log"
        if not path.exists() and not follow:
            phase = self.states([job])[job["job_id"]]
            raise LaunchError(f"no log yet for shard {shard} ({path}): the task is {phase.raw or phase.phase}")
        return self._lines(path, job, follow=follow, tail=tail)

    def _lines(self, path: Path, job: dict[str, Any], *, follow: bool, tail: int | None) -> Iterator[str]:
        position = 0
        if path.exists():
            lines = path.read_text(errors="replace").splitlines()
            yield from lines[-tail:] if tail is not None else lines
            position = path.stat().st_size
        while follow:
            ended = self.states([job])[job["job_id"]].phase in TERMINAL_PHASES
            if path.exists() and path.stat().st_size > position:
                with path.open("rb") as handle:
                    handle.seek(position)
                    chunk = handle.read()
                # Only whole lines: the rest is read with the next chunk.
                whole = chunk[: chunk.rfind(b"\n") + 1] if not ended else chunk
                position += len(whole)
                yield from whole.decode(errors="replace").splitlines()
            if ended:
                return
            time.sleep(_LOG_POLL_S)

    def cancel(self, jobs: Sequence[dict[str, Any]]) -> list[str]:
        """``scancel`` the tasks (their processes get SIGTERM, then SIGKILL after the cluster's KillWait)."""
        ids = [job["job_id"] for job in jobs]
        done = _run(["scancel", *ids])
        if done.returncode != 0:
            raise LaunchError(f"scancel failed: {_said(done)}")
        return ids


# ------------------------------------------------------------------------------------------------


def _run(argv: Sequence[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(list(argv), capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S, env=env)
    except FileNotFoundError as exc:
        raise LaunchError(f"{argv[0]} is not on PATH: run this on a Slurm login node") from exc
    except subprocess.TimeoutExpired as exc:
        raise LaunchError(f"{shlex.join(argv)} did not answer within {COMMAND_TIMEOUT_S}s: is slurmctld up?") from exc


def _said(done: subprocess.CompletedProcess[str]) -> str:
    text = (done.stderr or done.stdout).strip()
    return " / ".join(line.strip() for line in text.splitlines() if line.strip()) or f"exit status {done.returncode}"


def _config() -> dict[str, str]:
    """``scontrol show config`` as a dict (``KillWait`` -> ``30 sec``...)."""
    done = _run(["scontrol", "show", "config"])
    if done.returncode != 0:
        raise LaunchError(f"cannot reach Slurm (scontrol show config): {_said(done)}")
    config = {}
    for line in done.stdout.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            config[key.strip()] = value.strip()
    return config


def _partition_time_limit(partition: str | None) -> int | None:
    """The time limit of ``partition`` (default: the cluster's default partition), None if unlimited;
    :class:`LaunchError` naming the partitions when it does not exist."""
    done = _run(["sinfo", "-h", "-o", "%P|%l"])
    if done.returncode != 0:
        raise LaunchError(f"cannot list the partitions (sinfo): {_said(done)}")
    limits: dict[str, str] = {}
    default = None
    for line in done.stdout.splitlines():
        name, _, limit = line.strip().partition("|")
        if name.endswith("*"):
            name = default = name[:-1]
        limits.setdefault(name, limit)
    wanted = partition or default
    if wanted is None:
        return None
    if wanted not in limits:
        listed = ", ".join(sorted(limits)) or "none"
        raise LaunchError(f"--partition {wanted}: no such partition here (sinfo lists {listed})")
    return parse_slurm_time(limits[wanted])


def _gpu_count(given: SlurmOptions, needs_model: bool) -> int:
    if given.gres:
        match = re.fullmatch(r"gpu(?::[^:,]+)?(?::(\d+))?", given.gres.strip())
        if match is None:
            raise LaunchError(f"--gres {given.gres}: write gpu:N or gpu:TYPE:N (one GPU resource)")
        return int(match.group(1) or 1)
    if given.gpus_per_task is not None:
        return given.gpus_per_task
    return 1 if needs_model else 0


def _hardware_name(given: SlurmOptions, gpus: int) -> str:
    if not gpus:
        return "cpu"
    return f"{gpus}x {given.gpu_type or 'GPU'}" + (f" ({given.partition})" if given.partition else "")


def _mounts(request: LaunchRequest, log_root: Path) -> str:
    """pyxis ``--container-mounts``: the local folders a task reads and writes (OUT, the INPUTs,
    the log folder, the working directory), each at its own path."""
    folders = {str(log_root), os.getcwd()}
    for url in (request.output, *request.inputs):
        protocol, path = split_protocol(url)
        if protocol in LOCAL_PROTOCOLS:
            local = Path(path).expanduser().absolute()
            folders.add(str(local.parent if local.is_file() else local))
    # A folder inside another one is mounted with it.
    kept = [f for f in sorted(folders) if not any(f != o and f.startswith(o.rstrip("/") + "/") for o in folders)]
    return ",".join(f"{folder}:{folder}" for folder in kept)


def _submit_env(script: str) -> dict[str, str]:
    """The environment sbatch copies into the tasks: this one, without this machine's llm-ocr
    settings (the script sets the jobs' own) and without sbatch variables that would override a
    directive the script gives."""
    overridden = {var for flag, var in _SBATCH_ENV.items() if f"#SBATCH {flag}" in script}
    return {k: v for k, v in os.environ.items() if not k.startswith("LLM_OCR_") and k not in overridden}


def _squeue(array_ids: Sequence[str]) -> dict[str, JobState]:
    """The tasks of ``array_ids`` that ``squeue`` still knows. An id slurmctld has forgotten makes
    squeue fail for the whole list, so on that error each id is asked alone."""
    if not array_ids:
        return {}
    done = _run(["squeue", "-h", "-r", "-t", "all", "-j", ",".join(array_ids), "-o", SQUEUE_FORMAT])
    if done.returncode == 0:
        return squeue_states(done.stdout)
    if "Invalid job id" not in _said(done):
        raise LaunchError(f"squeue failed: {_said(done)}")
    if len(array_ids) == 1:
        return {}
    found: dict[str, JobState] = {}
    for array_id in array_ids:
        found.update(_squeue([array_id]))
    return found
