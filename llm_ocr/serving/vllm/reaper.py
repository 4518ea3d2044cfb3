"""Take a model server's whole process group down when llm-ocr dies, even by SIGKILL.

:class:`~llm_ocr.serving.vllm.process.ManagedServer` starts the server in its own session (so ``killpg``
reaches vLLM's EngineCore and workers) and stops it in order on every exit it sees. A SIGKILL
(the OOM killer, ``kill -9``, a container runtime's last resort) gives it no chance: the
server, re-parented to init, would keep holding the GPU and the port. So beside each server it
starts this tiny watcher (standard library only, run as a script)::

    python reaper.py PARENT_PID PGID GRACE_SECONDS

It polls its parent pid. When the parent is gone (re-parenting changes ``getppid()``), it sends
the server's group SIGTERM (vLLM shuts its engine down on it), waits up to ``GRACE_SECONDS``,
then SIGKILLs what is left. It exits on its own once the group is gone, and ``ManagedServer``
kills it when it stops the server itself.

Why not ``PR_SET_PDEATHSIG`` on the server: the kernel would signal only the server's own
process, not the EngineCore and worker processes vLLM starts, and it fires when the *thread*
that started the server exits, not the process. Polling ``getppid()`` is portable and needs
neither ``ctypes`` nor a ``preexec_fn`` in a threaded parent.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

#: How often the watcher checks its parent and the group (seconds): the delay before cleanup.
POLL_S = 0.25


def group_exists(pgid: int) -> bool:
    """Whether process group ``pgid`` has any member (zombies count: they are members until reaped)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def signal_group(pgid: int, sig: int) -> None:
    """Send ``sig`` to process group ``pgid``, if it still exists."""
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def watch(parent: int, pgid: int, grace: float) -> int:
    """Wait for ``parent`` to die, then end process group ``pgid``; return an exit code."""
    while os.getppid() == parent:
        if not group_exists(pgid):
            return 0  # the server was stopped normally: nothing to guard any more
        time.sleep(POLL_S)
    signal_group(pgid, signal.SIGTERM)
    signal_group(pgid, signal.SIGCONT)  # a stopped process acts on SIGTERM only once continued
    deadline = time.monotonic() + grace
    # Zombies count as members until init reaps them: at worst this waits out the grace period.
    while group_exists(pgid) and time.monotonic() < deadline:
        time.sleep(POLL_S)
    signal_group(pgid, signal.SIGKILL)
    return 0


def start(pgid: int, grace: float) -> subprocess.Popen[bytes]:
    """Start the watcher for server process group ``pgid`` (our child; stop it with ``kill()``)."""
    return subprocess.Popen(  # our own interpreter running this file
        # -I -S: the standard library only, no site-packages to import, no user environment.
        [sys.executable, "-I", "-S", os.path.abspath(__file__), str(os.getpid()), str(pgid), str(grace)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        # Its own session: not in the server's group (stop() waits for that group to empty), and
        # out of our terminal's reach, so a Ctrl-C meant for llm-ocr does not stop the guard.
        start_new_session=True,
    )


if __name__ == "__main__":
    sys.exit(watch(int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])))
