"""What a fake platform's "container" is on this machine (shared by the three fakes).

A job's command runs as a local subprocess in a folder of its own, with:

- ``PATH``: ``tests/fakes/jobs_bin`` (``python3``, the tests' interpreter standing for the image's,
  whose packages stand for the image's; and ``uv``, :mod:`tests.fakes.fake_uv`), then
  ``tests/fakes`` (the fake ``vllm``, the image's vLLM: the simulated DeepSeek-OCR server);
  ``llm-ocr`` is on neither: a job finds it only in the venv its bootstrap installs the shipped
  wheel into, as in the cloud;
- ``HOME`` and ``TMPDIR`` (where the bootstrap puts its venv) in that folder;
- ``LLM_OCR_TEST_VENVS_DIR``: the run's folder of installed venvs (:data:`VENVS`), one per wheel,
  which the fake ``uv`` links a job's venv to instead of installing the same wheel again for every
  job (a job whose variable is empty installs its own: the bootstrap's install, end to end);
- the mounts (a volume, SageMaker's ``/opt/ml``) materialised in that folder: :func:`map_words`
  rewrites the command words under a mount path to the local folder, as the container's view
  of its filesystem would resolve them.
"""

from __future__ import annotations

import os
import signal
import sys
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

import psutil

from tests.fixtures.run_folder import RunFolder

FAKES = Path(__file__).resolve().parent
JOBS_BIN = FAKES / "jobs_bin"
#: The run's installed venvs, shared by every job of every fake platform (tests/fakes/fake_uv.py).
VENVS = RunFolder("venvs")


def container_env(folder: Path) -> dict[str, str]:
    """The variables every fake container has (its folder made: ``home``, ``tmp``)."""
    for name in ("home", "tmp"):
        (folder / name).mkdir(parents=True, exist_ok=True)
    return {
        "PATH": os.pathsep.join([str(JOBS_BIN), str(FAKES), "/usr/local/bin", "/usr/bin", "/bin"]),
        "HOME": str(folder / "home"),
        "TMPDIR": str(folder / "tmp"),
        "LANG": "C.UTF-8",
        "LLM_OCR_TEST_PYTHON": sys.executable,
        VENVS.variable: str(VENVS.folder()),
    }


def map_words(words: Sequence[str], mounts: dict[str, str]) -> list[str]:
    """``words`` with every word that starts with a mount path (container side) pointing at the
    local folder holding that mount's files instead."""
    mapped = []
    for word in words:
        for mount, local in sorted(mounts.items(), key=lambda item: -len(item[0])):
            root = mount.rstrip("/")
            if word == root or word.startswith(root + "/"):
                word = local.rstrip("/") + word[len(root):]
                break
        mapped.append(word)
    return mapped


def with_image(env: dict[str, str], image_env: dict[str, str]) -> dict[str, str]:
    """``env`` plus a prebuilt image's variables (``PATH``/``PYTHONPATH`` prepended)."""
    for key, value in image_env.items():
        env[key] = f"{value}{os.pathsep}{env[key]}" if key in ("PATH", "PYTHONPATH") and key in env else value
    return env


#: The variable that marks what one run of a container started (:class:`Descendants`).
MARK = "LLM_OCR_TEST_CONTAINER_RUN"


class Descendants:
    """Every process one run of a container started, found when its main process has ended by
    a value of its own in their environment (:meth:`marked`): orphans are re-parented when the
    main process exits, so they cannot be found from it afterwards, but they keep the
    environment they inherited (llm-ocr starts its model server with its own environment plus
    a few variables). One look through ``/proc`` at the end: sampling the process tree while
    the container ran cost each fake container a few percent of a core (a scan of every
    process on the machine five times a second) and could miss a process that lived less than
    a sample's interval."""

    def __init__(self) -> None:
        self.mark = uuid.uuid4().hex

    def marked(self, env: dict[str, str]) -> dict[str, str]:
        """``env`` with this run's mark: the main process's environment."""
        return {**env, MARK: self.mark}

    def kill(self) -> None:
        """SIGKILL every process that still carries the mark (none is this one)."""
        for pid in marked_pids(MARK, self.mark):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                continue  # gone meanwhile


def marked_pids(name: str, value: str) -> list[int]:
    """The processes (this one aside) whose environment holds ``name=value``: what a fake's
    containers started, re-parented orphans and processes in sessions of their own included. A
    zombie's environment reads empty: one is never listed (it runs nothing)."""
    wanted = f"{name}={value}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if wanted in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except (OSError, ValueError):
            continue  # gone, or not ours to read
    return found


def kill_marked(name: str, value: str, timeout: float = 60.0) -> None:
    """SIGKILL every process whose environment holds ``name=value`` and wait until each is gone,
    again until a look finds none: a process that forked as the first look ran leaves a child
    with the mark, found by the next. ``TimeoutError`` if some survive ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while pids := marked_pids(name, value):
        procs = []
        for pid in pids:
            try:
                proc = psutil.Process(pid)
                proc.send_signal(signal.SIGKILL)
                procs.append(proc)
            except psutil.NoSuchProcess:
                continue
        # Not psutil.wait_procs: it would reap a container's main process, this process's child,
        # under its Popen (whose exit code the fake reports). A killed process is gone or a zombie.
        while alive := [p for p in procs if _running(p)]:
            if time.monotonic() > deadline:
                raise TimeoutError(f"processes marked {name}={value} outlived SIGKILL: {[p.pid for p in alive]}")
            time.sleep(0.02)


def _running(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def process_tree(pid: int) -> list[psutil.Process]:
    """``pid`` and every process below it (none when it is gone)."""
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def kill_tree(pid: int, sig: int) -> None:
    """Send ``sig`` to ``pid`` and every process below it: a container stopped as a whole."""
    for proc in process_tree(pid):
        try:
            proc.send_signal(sig)
        except psutil.NoSuchProcess:
            pass
