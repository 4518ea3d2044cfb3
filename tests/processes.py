"""Find every process a test started, wherever it ended up, by an environment marker.

A process whose parent dies is re-parented (to init or a subreaper), so looking among the
descendants of the CLI's pid after the CLI is gone finds nothing, orphans included. An
environment variable is inherited by every process the CLI starts, their children, and
``exec``-ed programs alike, and stays readable in ``/proc/PID/environ`` after re-parenting or a
new session: the test marks the CLI's environment with a fresh value and looks for it.
"""

from __future__ import annotations

import os
import time
import uuid

import psutil

#: The variable a test sets in the environment of the CLI it starts.
MARK_VARIABLE = "LLM_OCR_TEST_PROCESS_MARK"


def new_mark() -> dict[str, str]:
    """A fresh marker for one CLI run, as environment entries to add to its ``env``."""
    return {MARK_VARIABLE: uuid.uuid4().hex}


def marked(mark: dict[str, str]) -> list[str]:
    """``"PID command line"`` of every live (non-zombie) process carrying ``mark``, this one excluded."""
    value = mark[MARK_VARIABLE]
    found = []
    for proc in psutil.process_iter(["pid", "status", "cmdline"]):
        try:
            if proc.pid == os.getpid() or proc.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            if proc.environ().get(MARK_VARIABLE) == value:
                found.append(f"{proc.pid} {' '.join(proc.info['cmdline'] or [])[:200]}")
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue  # gone meanwhile, or another user's (never one of ours)
    return found


def wait_until_none_marked(mark: dict[str, str], timeout: float) -> list[str]:
    """Poll until no process carries ``mark`` or ``timeout`` passes; return what is still left."""
    deadline = time.monotonic() + timeout
    while (left := marked(mark)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


def kill_marked(mark: dict[str, str]) -> None:
    """SIGKILL whatever still carries ``mark`` (clean-up after a failed test)."""
    value = mark[MARK_VARIABLE]
    for proc in psutil.process_iter():
        try:
            if proc.pid != os.getpid() and proc.environ().get(MARK_VARIABLE) == value:
                proc.kill()
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
